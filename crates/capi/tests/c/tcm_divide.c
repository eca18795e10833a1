/* The division of a cell's threads among permits (tcm/divide.c), rule by
 * rule. Built and run by tests/tcm.rs; exits non-zero at the first
 * failed check, saying which. */
#include "../../tcm/divide.h"

#include <stdio.h>
#include <stdlib.h>

static int failed;

static void expect(const char *what, const struct claim *c, size_t n, uint32_t budget,
                   const uint32_t *want)
{
    uint32_t out[16];
    tcm_divide(budget, c, n, out);
    for (size_t i = 0; i < n; i++)
        if (out[i] != want[i]) {
            printf("FAIL %s: permit %zu got %u, expected %u\n", what, i, out[i], want[i]);
            failed = 1;
        }
}

int main(void)
{
    /* TBB (workers 0..3, its caller works too) beside OpenMP (1..4). */
    struct claim tbb_omp[] = {{0, 3, 0, 0, 1, 0}, {1, 4, 0, 0, 0, 0}};
    expect("4 threads: the caller and the OpenMP primary, then one each in turn", tbb_omp, 2, 4,
           (uint32_t[]){1, 2});
    expect("2 threads: minimums only", tbb_omp, 2, 2, (uint32_t[]){0, 1});
    expect("1 thread: minimums even beyond the budget", tbb_omp, 2, 1, (uint32_t[]){0, 1});
    expect("16 threads: never past a maximum", tbb_omp, 2, 16, (uint32_t[]){3, 4});
    /* A running rigid permit keeps what it holds. */
    struct claim fixed[] = {{1, 4, 1, 3, 0, 0}, {1, 4, 0, 0, 0, 0}};
    expect("a fixed permit keeps 3 of 4; the other its minimum", fixed, 2, 4,
           (uint32_t[]){3, 1});
    /* One fixed below its share: the other still stops at its own (2 of
     * 4), so the next division of the first gives it its share back. */
    struct claim below[] = {{1, 4, 1, 1, 0, 0}, {1, 4, 0, 0, 0, 0}};
    expect("a fixed permit below its share; the other at its target", below, 2, 4,
           (uint32_t[]){1, 2});
    struct claim after[] = {{1, 4, 0, 0, 0, 0}, {1, 4, 1, 2, 0, 0}};
    expect("...and divided again, the first gets its share", after, 2, 4, (uint32_t[]){2, 2});
    /* OpenMP inside TBB: each team's primary is a TBB thread already
     * counted, so a team at its minimum costs nothing. */
    struct claim nested[] = {{0, 1, 0, 0, 1, 0}, {1, 2, 0, 0, -1, 0}, {1, 2, 0, 0, -1, 0}};
    expect("nested on 2: TBB's worker first, the teams stay serial", nested, 3, 2,
           (uint32_t[]){1, 1, 1});
    expect("nested on 4: then one more thread for each team", nested, 3, 4, (uint32_t[]){1, 2, 2});
    /* Nested teams come after every other permit: their arena's threads
     * are their primaries, and cutting it down to grow them runs fewer
     * items at once. */
    struct claim arena8[9] = {{0, 15, 0, 0, 1, 0}};
    for (int i = 1; i < 9; i++)
        arena8[i] = (struct claim){1, 16, 0, 0, -1, 0};
    expect("16 for an arena of 16 and 8 teams: the arena keeps 15, the teams 1", arena8, 9, 16,
           (uint32_t[]){15, 1, 1, 1, 1, 1, 1, 1, 1});
    /* ...and with one thread each lent by the arena (min 2, cost 0). */
    for (int i = 1; i < 9; i++)
        arena8[i] = (struct claim){2, 16, 0, 0, -2, 0};
    expect("lent: each team gets its thread whatever the budget", arena8, 9, 16,
           (uint32_t[]){15, 2, 2, 2, 2, 2, 2, 2, 2});
    struct claim beside_nested[] = {{0, 3, 0, 0, 1, 0}, {1, 4, 0, 0, -1, 0}, {1, 4, 0, 0, 0, 0}};
    expect("a permit beside fills before a nested team", beside_nested, 3, 8,
           (uint32_t[]){3, 1, 4});
    expect("...and the nested team takes what is left", beside_nested, 3, 9,
           (uint32_t[]){3, 2, 4});
    /* What an arena lends: the threads of a round without a team, evenly,
     * never more than are left now. */
    struct {
        uint32_t threads, teams, lent_out, waiting, want;
        const char *what;
    } lend[] = {
        {16, 0, 0, 1, 0, "no round known: nothing"},
        {16, 8, 0, 1, 1, "8 teams on 16 threads: one more each"},
        {16, 8, 7, 1, 1, "the eighth team gets the last"},
        {16, 8, 8, 1, 0, "all lent: nothing"},
        {16, 16, 0, 1, 0, "every thread hosts a team: nothing"},
        {16, 20, 0, 1, 0, "more teams than threads: nothing"},
        {16, 1, 0, 1, 15, "one team: all the others"},
        {16, 1, 0, 3, 5, "a wrong guess: what is left, split among the waiting"},
        {16, 4, 9, 1, 3, "4 teams: 3 each, while 3 are left"},
        {16, 4, 10, 1, 2, "...2 when 2 are left"},
        {2, 1, 0, 1, 1, "2 CPUs, one item: the other thread"},
        {2, 2, 0, 1, 0, "2 CPUs, two items: nothing"},
    };
    for (size_t i = 0; i < sizeof lend / sizeof lend[0]; i++) {
        uint32_t got = tcm_lent(lend[i].threads, lend[i].teams, lend[i].lent_out, lend[i].waiting);
        if (got != lend[i].want) {
            printf("FAIL lent, %s: got %u, expected %u\n", lend[i].what, got, lend[i].want);
            failed = 1;
        }
    }
    /* Priorities: the higher fills to its maximum first. */
    struct claim prio[] = {{0, 8, 0, 0, 0, 1}, {0, 2, 0, 0, 0, 5}};
    expect("higher priority first", prio, 2, 4, (uint32_t[]){2, 2});
    /* Equal priorities share in turn, in request order. */
    struct claim turn[] = {{0, 8, 0, 0, 0, 0}, {0, 8, 0, 0, 0, 0}, {0, 8, 0, 0, 0, 0}};
    expect("in turn", turn, 3, 7, (uint32_t[]){3, 2, 2});
    /* No permit: nothing to do, and no write. */
    expect("none", turn, 0, 7, (uint32_t[]){0});
    if (!failed)
        printf("ok\n");
    return failed;
}
