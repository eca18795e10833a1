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
