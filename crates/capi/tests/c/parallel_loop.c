/*
 * A pure-C test of liballot through its installed header and library.
 *
 * Built and run by tests/c_abi.rs with -std=c11 -Wall -Wextra -Werror and
 * AddressSanitizer + UndefinedBehaviorSanitizer. Exits 0 when every check
 * passes; prints each failed check to stderr and exits 1 otherwise.
 */
#define _POSIX_C_SOURCE 200809L

#include <allot.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures;

#define CHECK(cond)                                                        \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",  \
                    __FILE__, __LINE__, #cond, allot_last_error());        \
            failures++;                                                    \
        }                                                                  \
    } while (0)

/* A call that must succeed; stops the test if it does not. */
#define MUST(call)                                                         \
    do {                                                                   \
        int rc_ = (call);                                                  \
        if (rc_ != ALLOT_OK) {                                             \
            fprintf(stderr, "%s:%d: %s returned %d (%s): %s\n", __FILE__,  \
                    __LINE__, #call, rc_, allot_strerror(rc_),             \
                    allot_last_error());                                   \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

/* The header's types have the sizes the library was built with. */
_Static_assert(sizeof(allot_cell_t) == 8, "allot_cell_t");
_Static_assert(sizeof(allot_spec_t) == 20, "allot_spec_t");
_Static_assert(sizeof(allot_grant_t) == 280, "allot_grant_t");

/* ---- parallel sum --------------------------------------------------- */

enum { N = 1000000 };

struct sum {
    const uint32_t *values;
    _Atomic uint64_t total;
    _Atomic uint64_t covered; /* indices visited, to catch overlaps */
};

static void sum_body(size_t lo, size_t hi, void *arg) {
    struct sum *s = arg;
    uint64_t local = 0;
    for (size_t i = lo; i < hi; i++) local += s->values[i];
    atomic_fetch_add(&s->total, local);
    atomic_fetch_add(&s->covered, hi - lo);
}

static void test_parallel_sum(allot_pool_t pool) {
    uint32_t *values = malloc(N * sizeof *values);
    CHECK(values != NULL);
    if (!values) return;
    uint64_t expected = 0;
    for (size_t i = 0; i < N; i++) {
        values[i] = (uint32_t)(i * 2654435761u >> 7);
        expected += values[i];
    }
    const size_t grains[] = {0, 1, 64, 1000, 4096, N, 2 * N};
    for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
        struct sum s = {.values = values};
        MUST(allot_pool_parallel_for(pool, 0, N, grains[g], sum_body, &s));
        CHECK(atomic_load(&s.total) == expected);
        CHECK(atomic_load(&s.covered) == N);
    }
    /* The static schedule: one block per worker. */
    struct sum st = {.values = values};
    MUST(allot_pool_parallel_for_static(pool, 0, N, sum_body, &st));
    CHECK(atomic_load(&st.total) == expected);
    CHECK(atomic_load(&st.covered) == N);
    CHECK(allot_pool_parallel_for_static(pool, 6, 5, sum_body, &st) == ALLOT_ERR_INVALID);
    /* An empty range calls nothing; a reversed one is refused. */
    struct sum s = {.values = values};
    MUST(allot_pool_parallel_for(pool, 5, 5, 1, sum_body, &s));
    CHECK(atomic_load(&s.covered) == 0);
    CHECK(allot_pool_parallel_for(pool, 6, 5, 1, sum_body, &s) == ALLOT_ERR_INVALID);
    CHECK(allot_pool_parallel_for(pool, 0, 5, 1, NULL, &s) == ALLOT_ERR_INVALID);
    free(values);
}

/* ---- spawn / join --------------------------------------------------- */

enum { TASKS = 1000 };

static _Atomic int runs[TASKS];

static void count_run(void *arg) {
    atomic_fetch_add(&runs[(size_t)(uintptr_t)arg], 1);
}

static void test_spawn_join(allot_pool_t pool) {
    static allot_task_t tasks[TASKS];
    for (size_t i = 0; i < TASKS; i++)
        MUST(allot_pool_spawn(pool, count_run, (void *)(uintptr_t)i, &tasks[i]));
    for (size_t i = 0; i < TASKS; i++) MUST(allot_task_join(tasks[i]));
    int once = 1;
    for (size_t i = 0; i < TASKS; i++) once &= atomic_load(&runs[i]) == 1;
    CHECK(once);
    /* A joined handle is spent. */
    CHECK(allot_task_join(tasks[0]) == ALLOT_ERR_HANDLE);
    CHECK(allot_task_detach(tasks[1]) == ALLOT_ERR_HANDLE);
    /* A detached task still runs. */
    allot_task_t t;
    atomic_store(&runs[0], 0);
    MUST(allot_pool_spawn(pool, count_run, (void *)(uintptr_t)0, &t));
    MUST(allot_task_detach(t));
    CHECK(allot_task_join(t) == ALLOT_ERR_HANDLE);
    /* Spawn a joinable task after it: the pool runs both; wait for both. */
    atomic_store(&runs[1], 0);
    MUST(allot_pool_spawn(pool, count_run, (void *)(uintptr_t)1, &t));
    MUST(allot_task_join(t));
    for (int ms = 0; atomic_load(&runs[0]) == 0 && ms < 10000; ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    CHECK(atomic_load(&runs[0]) == 1);
    CHECK(atomic_load(&runs[1]) == 1);
}

/* ---- fork/join recursion -------------------------------------------- */

struct fib {
    allot_pool_t pool;
    unsigned n;
    uint64_t result;
};

static uint64_t fib_seq(unsigned n) { return n < 2 ? n : fib_seq(n - 1) + fib_seq(n - 2); }

static void fib_task(void *arg) {
    struct fib *f = arg;
    if (f->n < 12) {
        f->result = fib_seq(f->n);
        return;
    }
    struct fib a = {f->pool, f->n - 1, 0}, b = {f->pool, f->n - 2, 0};
    int rc = allot_pool_join(f->pool, fib_task, &a, fib_task, &b);
    f->result = rc == ALLOT_OK ? a.result + b.result : UINT64_MAX;
}

static void test_fib(allot_pool_t pool) {
    struct fib f = {pool, 27, 0};
    fib_task(&f); /* from outside the pool: the first join enters it */
    CHECK(f.result == fib_seq(27));
}

/* ---- calls that would wait for themselves ---------------------------- */

struct inside {
    allot_pool_t pool;
    allot_task_t self;
    _Atomic int ready;
    int free_rc, shutdown_rc, self_join_rc;
};

static void inside_task(void *arg) {
    struct inside *in = arg;
    while (!atomic_load(&in->ready)) {
    }
    in->free_rc = allot_pool_free(in->pool);
    in->shutdown_rc = allot_shutdown();
    in->self_join_rc = allot_task_join(in->self);
}

static void test_refusals(allot_pool_t pool) {
    struct inside in = {.pool = pool};
    MUST(allot_pool_spawn(pool, inside_task, &in, &in.self));
    atomic_store(&in.ready, 1);
    MUST(allot_task_join(in.self));
    CHECK(in.free_rc == ALLOT_ERR_INVALID);
    CHECK(in.shutdown_rc == ALLOT_ERR_INVALID);
    CHECK(in.self_join_rc == ALLOT_ERR_INVALID);
    uint32_t w = 0;
    MUST(allot_pool_workers(pool, &w)); /* the pool survived */
    CHECK(w >= 1);
}

/* ---- misuse ---------------------------------------------------------- */

static void nop(void *arg) { (void)arg; }

/* ---- suspended and timed tasks ------------------------------------- */

/* A task that suspends itself: it makes its continuation and hands the
 * resumer out through its argument, then returns. */
struct halves {
    allot_pool_t pool;
    allot_resumer_t resumer;
    allot_task_t second;
    _Atomic int second_ran;
};

static void second_half(void *arg) { ((struct halves *)arg)->second_ran += 1; }

static void first_half(void *arg) {
    struct halves *h = arg;
    MUST(allot_pool_spawn_suspended(h->pool, second_half, h, ALLOT_PRIORITY_HIGH, -1,
                                    &h->resumer, &h->second));
}

static void test_suspend(allot_pool_t pool) {
    struct halves h = {.pool = pool};
    allot_task_t first;
    MUST(allot_pool_spawn(pool, first_half, &h, &first));
    MUST(allot_task_join(first));
    uint64_t waiting = 0;
    MUST(allot_pool_suspended(pool, &waiting));
    CHECK(waiting == 1);
    CHECK(h.second_ran == 0);
    MUST(allot_resume(h.resumer));
    CHECK(allot_resume(h.resumer) == ALLOT_ERR_HANDLE);
    MUST(allot_task_join(h.second));
    CHECK(h.second_ran == 1);

    allot_resumer_t r;
    allot_task_t t;
    MUST(allot_pool_spawn_suspended(pool, second_half, &h, ALLOT_PRIORITY_LOW, -1, &r, &t));
    MUST(allot_resumer_cancel(r));
    CHECK(allot_task_join(t) == ALLOT_ERR_CANCELLED);
    CHECK(h.second_ran == 1);

    MUST(allot_pool_spawn_after(pool, 2000000 /* 2 ms */, second_half, &h,
                                ALLOT_PRIORITY_NORMAL, -1, &t));
    MUST(allot_task_join(t));
    CHECK(h.second_ran == 2);
}

static void test_misuse(void) {
    allot_cell_t cell;
    allot_pool_t pool;
    allot_task_t task;
    allot_grant_t g;
    uint32_t w;

    /* NULL out pointers and arguments. */
    CHECK(allot_cell_standalone(NULL) == ALLOT_ERR_INVALID);
    CHECK(strstr(allot_last_error(), "allot_cell_standalone") != NULL);
    CHECK(allot_cell_auto(NULL, &cell) == ALLOT_ERR_INVALID);
    CHECK(allot_cell_auto("x", NULL) == ALLOT_ERR_INVALID);
    allot_spec_t spec = {0};
    CHECK(allot_cell_register("x", NULL, 0, &cell) == ALLOT_ERR_INVALID);
    spec.placement = 7;
    CHECK(allot_cell_register("x", &spec, 0, &cell) == ALLOT_ERR_INVALID);

    MUST(allot_cell_standalone(&cell));
    CHECK(allot_cell_grant(cell, NULL) == ALLOT_ERR_INVALID);
    CHECK(allot_pool_new(cell, NULL) == ALLOT_ERR_INVALID);
    MUST(allot_pool_new(cell, &pool));
    CHECK(allot_pool_workers(pool, NULL) == ALLOT_ERR_INVALID);
    CHECK(allot_pool_spawn(pool, NULL, NULL, &task) == ALLOT_ERR_INVALID);
    CHECK(allot_pool_spawn(pool, nop, NULL, NULL) == ALLOT_ERR_INVALID);
    CHECK(allot_pool_join(pool, nop, NULL, NULL, NULL) == ALLOT_ERR_INVALID);

    /* Wrong-type and made-up handles. */
    allot_cell_t as_cell = {pool.id};
    allot_pool_t as_pool = {cell.id};
    CHECK(allot_cell_grant(as_cell, &g) == ALLOT_ERR_HANDLE);
    CHECK(strstr(allot_last_error(), "allot_pool_t") != NULL);
    CHECK(allot_pool_workers(as_pool, &w) == ALLOT_ERR_HANDLE);
    CHECK(allot_cell_free(as_cell) == ALLOT_ERR_HANDLE);
    CHECK(allot_pool_free(as_pool) == ALLOT_ERR_HANDLE);
    CHECK(allot_pool_workers((allot_pool_t){0}, &w) == ALLOT_ERR_HANDLE);
    CHECK(allot_pool_workers((allot_pool_t){0x1234567890abcdefu}, &w) == ALLOT_ERR_HANDLE);
    CHECK(allot_task_join((allot_task_t){pool.id}) == ALLOT_ERR_HANDLE);

    /* Stale handles after free, and double free. */
    MUST(allot_pool_free(pool));
    CHECK(allot_pool_workers(pool, &w) == ALLOT_ERR_HANDLE);
    CHECK(allot_pool_spawn(pool, nop, NULL, &task) == ALLOT_ERR_HANDLE);
    CHECK(allot_pool_free(pool) == ALLOT_ERR_HANDLE);
    MUST(allot_cell_free(cell));
    CHECK(allot_cell_grant(cell, &g) == ALLOT_ERR_HANDLE);
    CHECK(allot_cell_free(cell) == ALLOT_ERR_HANDLE);
    CHECK(strstr(allot_last_error(), "stale") != NULL);

    /* A new object in the freed slot does not revive the old handle. */
    allot_cell_t again;
    MUST(allot_cell_standalone(&again));
    CHECK(again.id != cell.id);
    CHECK(allot_cell_grant(cell, &g) == ALLOT_ERR_HANDLE);
    MUST(allot_cell_free(again));
}

/* ---- strerror, cells ----------------------------------------------- */

static void test_strerror(void) {
    const char *seen[ALLOT_ERR_CLOSED + 1];
    for (int s = ALLOT_OK; s <= ALLOT_ERR_CLOSED; s++) {
        seen[s] = allot_strerror(s);
        CHECK(seen[s] != NULL && seen[s][0] != '\0');
        CHECK(strcmp(seen[s], allot_strerror(-1)) != 0);
        for (int t = 0; t < s; t++) CHECK(strcmp(seen[s], seen[t]) != 0);
    }
    CHECK(strcmp(allot_strerror(ALLOT_ERR_CLOSED + 1), allot_strerror(-1)) == 0);
    CHECK(strstr(allot_strerror(ALLOT_ERR_HANDLE), "handle") != NULL);
    CHECK(allot_abi_version() == ALLOT_ABI_VERSION);
}

static void test_cell(allot_cell_t cell) {
    allot_grant_t g;
    MUST(allot_cell_grant(cell, &g));
    CHECK(g.generation >= 1);
    CHECK(g.ncpus >= 1 && g.threads >= 1);
    unsigned bits = 0;
    for (int w = 0; w < 16; w++) bits += (unsigned)__builtin_popcountll(g.cpus[w]);
    CHECK(bits == g.ncpus);
    int first = -1;
    for (int c = 0; c < 1024 && first < 0; c++)
        if (ALLOT_CPU_ISSET(c, g.cpus)) first = c;
    CHECK(first >= 0);
    allot_grant_t h;
    CHECK(allot_cell_wait_change(cell, g.generation, 1000000, &h) == ALLOT_ERR_TIMEOUT);
    CHECK(h.generation == g.generation);
    MUST(allot_cell_wait_change(cell, g.generation + 1, -1, &h));
    int mode = -1;
    MUST(allot_cell_mode(cell, &mode));
    CHECK(mode == ALLOT_MODE_STANDALONE);
    MUST(allot_cell_report(cell, 1, 2, 3)); /* no broker: ignored */
}

int main(void) {
    test_strerror();

    allot_cell_t cell;
    MUST(allot_cell_standalone(&cell));
    test_cell(cell);
    allot_pool_t pool;
    MUST(allot_pool_new(cell, &pool));
    MUST(allot_cell_free(cell)); /* the pool keeps its own reference */
    uint32_t workers = 0;
    MUST(allot_pool_workers(pool, &workers));
    CHECK(workers >= 1);
    printf("workers: %" PRIu32 "\n", workers);

    test_parallel_sum(pool);
    test_spawn_join(pool);
    test_fib(pool);
    test_refusals(pool);
    test_suspend(pool);
    test_misuse();

    /* A pool on an automatic cell ({0}). */
    allot_pool_t auto_pool;
    MUST(allot_pool_new((allot_cell_t){0}, &auto_pool));
    struct fib f = {auto_pool, 20, 0};
    fib_task(&f);
    CHECK(f.result == fib_seq(20));

    MUST(allot_shutdown());
    CHECK(allot_pool_workers(pool, &workers) == ALLOT_ERR_SHUTDOWN);
    CHECK(allot_pool_free(auto_pool) == ALLOT_ERR_SHUTDOWN);
    CHECK(allot_cell_standalone(&cell) == ALLOT_ERR_SHUTDOWN);
    CHECK(allot_shutdown() == ALLOT_ERR_SHUTDOWN);

    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}
