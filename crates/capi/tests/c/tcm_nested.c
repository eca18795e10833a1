/* A oneTBB loop with an Intel-OpenMP region in each item, as the two
 * runtimes call allot's libtcm.so.1 (the calls and their order follow a
 * trace of the real runtimes under ALLOT_SHIM_DEBUG=1). tests/tcm.rs runs
 * it with a grant page of 16 threads. Exits non-zero at the first failed
 * check, saying which.
 *
 * Each round, as oneTBB runs a parallel_for: the thread that entered the
 * arena asks for its workers again (0..15); a worker per item registers
 * with the arena and starts an OpenMP team from inside the item (a rigid
 * permit, 1..16, asked for the first time or activated again); the team
 * runs, and goes idle at the region's end (one of a single thread is left
 * active, as Intel's runtime does: it asks for another next time); when
 * every item is taken the arena is turned off.
 *
 * What it checks: a round that started 8 teams on the arena's 16 threads
 * lends the 8 threads that hosted none, one to each team of the next
 * rounds; the arena keeps its 15 workers throughout (it is not cut down to
 * grow its own teams); a round in which every thread hosted a team lends
 * nothing after it, nor do the next rounds until fewer teams run again;
 * nothing is lent before a round is known. */
#include "tcm_calls.h"

#include <pthread.h>

#define WORKERS 16

static tcm_client_id_t tbb, omp;
static tcm_permit_handle_t arena;
static pthread_barrier_t start_round, end_round;
static int items;   /* teams this round: workers 0..items-1 host one */
static int stop;
static uint32_t got[WORKERS]; /* each hosting worker's team this round */

static tcm_result_t quiet(tcm_permit_handle_t h, void *arg, tcm_callback_flags_t f)
{
    (void)h, (void)arg, (void)f;
    return TCM_RESULT_SUCCESS;
}

/* A oneTBB worker: in each round, if it hosts an item, starts its team. */
static void *worker(void *v)
{
    int me = (int)(long)v;
    tcm_permit_handle_t team = NULL;
    int team_idle = 0; /* its team went idle (kept for the next region) */
    uint32_t mine = 0;
    for (;;) {
        pthread_barrier_wait(&start_round);
        if (stop)
            return NULL;
        if (me < items) {
            CHECK(register_(arena) == TCM_RESULT_SUCCESS, "register with the arena");
            uint32_t c = 0;
            tcm_permit_t p = {&c, NULL, 1, 0, {0}};
            if (team != NULL && team_idle) {
                CHECK(activate_(team) == TCM_RESULT_SUCCESS, "activate the team");
                c = read_permit(team);
            } else {
                team = NULL; /* a team of one is left active and replaced */
                CHECK(request_(omp, ask(1, 16, 1), NULL, &team, &p) == TCM_RESULT_SUCCESS,
                      "request a team");
            }
            got[me] = mine = c;
        }
        pthread_barrier_wait(&end_round);
        /* The region ends once every item's team is counted. */
        if (me < items) {
            team_idle = mine > 1;
            if (team_idle)
                CHECK(idle_(team) == TCM_RESULT_SUCCESS, "idle the team");
        }
        pthread_barrier_wait(&end_round);
    }
}

/* One parallel_for of `n` items; returns the arena's workers. */
static uint32_t round_of(int n, uint32_t *teams)
{
    uint32_t c = 0;
    tcm_permit_t p = {&c, NULL, 1, 0, {0}};
    CHECK(request_(tbb, ask(0, 15, 0), NULL, &arena, &p) == TCM_RESULT_SUCCESS, "the arena");
    items = n;
    pthread_barrier_wait(&start_round);
    pthread_barrier_wait(&end_round);
    uint32_t during = read_permit(arena);
    CHECK(deactivate_(arena) == TCM_RESULT_SUCCESS, "every item taken: the arena off");
    memcpy(teams, got, sizeof got);
    memset(got, 0, sizeof got);
    pthread_barrier_wait(&end_round);
    return during < c ? during : c;
}

static void expect_teams(const char *what, const uint32_t *teams, int n, uint32_t lo, uint32_t hi,
                         uint32_t lent_most)
{
    uint32_t lent = 0;
    for (int i = 0; i < n; i++) {
        CHECK(teams[i] >= lo && teams[i] <= hi, "%s: team %d got %u, expected %u..%u", what, i,
              teams[i], lo, hi);
        lent += teams[i] - 1;
    }
    CHECK(lent <= lent_most, "%s: %u threads lent, at most %u", what, lent, lent_most);
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: tcm_nested LIBTCM");
    tcm_look(argv[1]);
    setenv("TCM_ENABLE", "1", 1);
    CHECK(connect_(quiet, &tbb) == TCM_RESULT_SUCCESS, "connect oneTBB");
    CHECK(connect_(NULL, &omp) == TCM_RESULT_SUCCESS, "connect OpenMP");
    /* oneTBB makes its arena first, asking for no worker, and the thread
     * that entered it registers. */
    uint32_t c = 0;
    tcm_permit_t p = {&c, NULL, 1, 0, {0}};
    CHECK(request_(tbb, ask(0, 0, 0), NULL, &arena, &p) == TCM_RESULT_SUCCESS, "the arena");
    CHECK(register_(arena) == TCM_RESULT_SUCCESS, "register the caller");

    pthread_barrier_init(&start_round, NULL, WORKERS + 1);
    pthread_barrier_init(&end_round, NULL, WORKERS + 1);
    pthread_t w[WORKERS];
    for (long i = 0; i < WORKERS; i++)
        CHECK(pthread_create(&w[i], NULL, worker, (void *)i) == 0, "pthread_create");

    uint32_t teams[WORKERS];
    uint32_t workers = round_of(8, teams);
    CHECK(workers == 15, "the arena alone: 15 workers, got %u", workers);
    expect_teams("round 1, nothing known yet", teams, 8, 1, 1, 0);
    for (int r = 2; r <= 4; r++) {
        workers = round_of(8, teams);
        CHECK(workers == 15, "round %d: the arena kept 15 workers, got %u", r, workers);
        expect_teams("8 teams on 16 threads: one lent to each", teams, 8, 2, 2, 8);
    }
    /* Every thread hosts a team: what it lends is bounded by what a round
     * of 8 left free; then nothing. */
    round_of(WORKERS, teams);
    expect_teams("16 teams after rounds of 8", teams, WORKERS, 1, 2, 8);
    round_of(WORKERS, teams);
    expect_teams("16 teams after a round of 16", teams, WORKERS, 1, 1, 0);
    round_of(8, teams);
    expect_teams("8 teams after a round of 16: nothing yet", teams, 8, 1, 1, 0);
    /* Fewer teams again: lending comes back as the rounds show it. */
    int back = 0;
    for (int r = 0; r < 10 && !back; r++) {
        round_of(8, teams);
        back = teams[0] == 2;
    }
    CHECK(back, "lending came back within 10 rounds of 8 teams");
    expect_teams("8 teams again", teams, 8, 2, 2, 8);

    stop = 1;
    pthread_barrier_wait(&start_round);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    printf("ok\n");
    return 0;
}
