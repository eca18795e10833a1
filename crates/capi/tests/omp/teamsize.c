/*
 * teamsize: an ordinary OpenMP program that reports the team of every
 * parallel region it runs. Used by the shim's tests (crates/capi/tests).
 *
 *     teamsize MODE DURATION_MS PERIOD_US
 *
 * Runs regions for DURATION_MS, sleeping PERIOD_US between them, or until
 * the file named by $STOP_FILE exists (looked for after each region). MODE:
 *   parallel   #pragma omp parallel
 *   ntN        #pragma omp parallel num_threads(N)
 *   all        cycles through every construct below (and, when built with
 *              -DLEGACY_GOMP, libgomp's GOMP_1.0 entry points called directly)
 *   once       every construct once, no sleeping
 *
 * Output, one line each:
 *   max M                         omp_get_max_threads() at start
 *   r NAME T0 T1 TEAM OK          a region: CLOCK_MONOTONIC ns before and
 *                                 after it, its team size, 1 if its work was
 *                                 complete and every thread number fit a
 *                                 buffer sized by omp_get_max_threads() (or by N,
 *                                 for ntN with N larger)
 *   done N                        N regions
 *
 * Built with -DAS_LIBRARY it has no main() but exports teamsize_main(), for
 * a driver that loads it with dlopen(RTLD_LOCAL).
 */
#define _GNU_SOURCE
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N 1000L

static int g_max;        /* omp_get_max_threads() at start: buffer size */
static int *g_slots;     /* one per thread, as programs size such buffers */

struct acc {
    int team;  /* omp_get_num_threads() seen inside */
    int bad;   /* a thread number outside the buffer */
    long sum;  /* iterations done */
};

static void note(struct acc *a)
{
    int t = omp_get_thread_num();
    int n = omp_get_num_threads();
    if (t >= g_max) {
        __atomic_store_n(&a->bad, 1, __ATOMIC_RELAXED);
    } else {
        g_slots[t]++;
    }
    int cur = __atomic_load_n(&a->team, __ATOMIC_RELAXED);
    while (n > cur && !__atomic_compare_exchange_n(&a->team, &cur, n, 0, __ATOMIC_RELAXED,
                                                   __ATOMIC_RELAXED)) {
    }
}

static void add(struct acc *a, long i) { __atomic_fetch_add(&a->sum, i, __ATOMIC_RELAXED); }

static const long expected_sum = N * (N - 1) / 2;

static int r_parallel(struct acc *a)
{
#pragma omp parallel
    note(a);
    return 1;
}

static int g_nt;

static int r_num_threads(struct acc *a)
{
#pragma omp parallel num_threads(g_nt)
    note(a);
    return 1;
}

#define PRAGMA(x) _Pragma(#x)
#define LOOP(fname, ...)                                                       \
    static int fname(struct acc *a)                                            \
    {                                                                          \
        PRAGMA(omp parallel for schedule(__VA_ARGS__))                         \
        for (long i = 0; i < N; i++) {                                         \
            note(a);                                                           \
            add(a, i);                                                         \
        }                                                                      \
        return a->sum == expected_sum;                                         \
    }
LOOP(r_static, static)
LOOP(r_dynamic, dynamic, 7)
LOOP(r_monotonic_dynamic, monotonic : dynamic, 7)
LOOP(r_guided, guided, 3)
LOOP(r_monotonic_guided, monotonic : guided, 3)
LOOP(r_runtime, runtime)
LOOP(r_monotonic_runtime, monotonic : runtime)
LOOP(r_nonmonotonic_runtime, nonmonotonic : runtime)

static int r_sections(struct acc *a)
{
    int done[3] = {0, 0, 0};
#pragma omp parallel sections
    {
#pragma omp section
        {
            note(a);
            done[0] = 1;
        }
#pragma omp section
        {
            note(a);
            done[1] = 1;
        }
#pragma omp section
        {
            note(a);
            done[2] = 1;
        }
    }
    return done[0] && done[1] && done[2];
}

static int r_task_reduction(struct acc *a)
{
    long s = 0;
#pragma omp parallel reduction(task, + : s)
    {
        note(a);
#pragma omp single
        for (long i = 0; i < N; i += 100) {
#pragma omp task in_reduction(+ : s)
            s += i;
        }
    }
    long want = 0;
    for (long i = 0; i < N; i += 100)
        want += i;
    return s == want;
}

/* A region that uses 20 locals: clang passes each to the outlined function
 * as its own argument of __kmpc_fork_call, beyond the six in registers. */
static int r_many_args(struct acc *a)
{
    long v0 = 0, v1 = 1, v2 = 2, v3 = 3, v4 = 4, v5 = 5, v6 = 6, v7 = 7, v8 = 8, v9 = 9;
    long v10 = 10, v11 = 11, v12 = 12, v13 = 13, v14 = 14, v15 = 15, v16 = 16, v17 = 17;
    long v18 = 18, v19 = 19;
#pragma omp parallel
    {
        note(a);
        if (omp_get_thread_num() == 0)
            add(a, v0 + v1 + v2 + v3 + v4 + v5 + v6 + v7 + v8 + v9 + v10 + v11 + v12 + v13 + v14 +
                       v15 + v16 + v17 + v18 + v19);
    }
    return a->sum == 190;
}

#ifdef LEGACY_GOMP
/* libgomp's GOMP_1.0 entry points, as gcc before 4.9 emitted them. */
void GOMP_parallel_start(void (*)(void *), void *, unsigned);
void GOMP_parallel_end(void);
void GOMP_parallel_sections_start(void (*)(void *), void *, unsigned, unsigned);
unsigned GOMP_sections_next(void);
void GOMP_sections_end_nowait(void);
void GOMP_parallel_loop_static_start(void (*)(void *), void *, unsigned, long, long, long, long);
void GOMP_parallel_loop_dynamic_start(void (*)(void *), void *, unsigned, long, long, long, long);
void GOMP_parallel_loop_guided_start(void (*)(void *), void *, unsigned, long, long, long, long);
void GOMP_parallel_loop_runtime_start(void (*)(void *), void *, unsigned, long, long, long);
void GOMP_parallel_loop_static(void (*)(void *), void *, unsigned, long, long, long, long,
                               unsigned);
_Bool GOMP_loop_runtime_next(long *, long *);
void GOMP_loop_end_nowait(void);

static void legacy_body(void *p) { note(p); }

static void legacy_sections(void *p)
{
    struct acc *a = p;
    for (unsigned s = GOMP_sections_next(); s != 0; s = GOMP_sections_next()) {
        note(a);
        add(a, s);
    }
    GOMP_sections_end_nowait();
}

/* The work share's schedule decides what the runtime-schedule "next" does. */
static void legacy_loop(void *p)
{
    struct acc *a = p;
    long s, e;
    note(a);
    while (GOMP_loop_runtime_next(&s, &e))
        for (long i = s; i < e; i++)
            add(a, i);
    GOMP_loop_end_nowait();
}

static int r_legacy_parallel(struct acc *a)
{
    GOMP_parallel_start(legacy_body, a, 0);
    legacy_body(a);
    GOMP_parallel_end();
    return 1;
}

static int r_legacy_sections(struct acc *a)
{
    GOMP_parallel_sections_start(legacy_sections, a, 0, 4);
    legacy_sections(a);
    GOMP_parallel_end();
    return a->sum == 1 + 2 + 3 + 4;
}

#define LEGACY_LOOP(fname, call)                                                                   \
    static int fname(struct acc *a)                                                                \
    {                                                                                              \
        call;                                                                                      \
        legacy_loop(a);                                                                            \
        GOMP_parallel_end();                                                                       \
        return a->sum == expected_sum;                                                             \
    }
LEGACY_LOOP(r_legacy_static, GOMP_parallel_loop_static_start(legacy_loop, a, 0, 0, N, 1, 5))
LEGACY_LOOP(r_legacy_dynamic, GOMP_parallel_loop_dynamic_start(legacy_loop, a, 0, 0, N, 1, 5))
LEGACY_LOOP(r_legacy_guided, GOMP_parallel_loop_guided_start(legacy_loop, a, 0, 0, N, 1, 5))
LEGACY_LOOP(r_legacy_runtime, GOMP_parallel_loop_runtime_start(legacy_loop, a, 0, 0, N, 1))

/* The combined static loop, which gcc 12 does not emit (it inlines static
 * schedules) but libgomp exports; it joins the team itself. */
static int r_loop_static(struct acc *a)
{
    GOMP_parallel_loop_static(legacy_loop, a, 0, 0, N, 1, 5, 0);
    return a->sum == expected_sum;
}
#endif

struct construct {
    const char *name;
    int (*run)(struct acc *);
};

static const struct construct all[] = {
    {"parallel", r_parallel},
    {"static", r_static},
    {"dynamic", r_dynamic},
    {"monotonic_dynamic", r_monotonic_dynamic},
    {"guided", r_guided},
    {"monotonic_guided", r_monotonic_guided},
    {"runtime", r_runtime},
    {"monotonic_runtime", r_monotonic_runtime},
    {"nonmonotonic_runtime", r_nonmonotonic_runtime},
    {"sections", r_sections},
    {"task_reduction", r_task_reduction},
    {"many_args", r_many_args},
#ifdef LEGACY_GOMP
    {"legacy_parallel", r_legacy_parallel},
    {"legacy_sections", r_legacy_sections},
    {"legacy_static", r_legacy_static},
    {"legacy_dynamic", r_legacy_dynamic},
    {"legacy_guided", r_legacy_guided},
    {"legacy_runtime", r_legacy_runtime},
    {"loop_static", r_loop_static},
#endif
};
#define NALL (sizeof all / sizeof all[0])

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void run_one(const struct construct *c)
{
    struct acc a = {0, 0, 0};
    long long t0 = now_ns();
    int ok = c->run(&a);
    long long t1 = now_ns();
    printf("r %s %lld %lld %d %d\n", c->name, t0, t1, a.team, ok && !a.bad);
}

#ifdef AS_LIBRARY
__attribute__((visibility("default"))) int teamsize_main(int argc, char **argv)
#else
int main(int argc, char **argv)
#endif
{
    if (argc != 4) {
        fprintf(stderr, "usage: teamsize MODE DURATION_MS PERIOD_US\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *mode = argv[1];
    long long duration = atoll(argv[2]) * 1000000LL;
    long period_us = atol(argv[3]);
    g_max = omp_get_max_threads();
    printf("max %d\n", g_max);

    const struct construct parallel = {"parallel", r_parallel};
    const struct construct nt = {"num_threads", r_num_threads};
    const struct construct *fixed = NULL;
    if (strcmp(mode, "parallel") == 0) {
        fixed = &parallel;
    } else if (strncmp(mode, "nt", 2) == 0) {
        g_nt = atoi(mode + 2);
        fixed = &nt;
        if (g_nt > g_max) /* an explicit request may exceed the default */
            g_max = g_nt;
    } else if (strcmp(mode, "all") != 0 && strcmp(mode, "once") != 0) {
        fprintf(stderr, "teamsize: unknown mode %s\n", mode);
        return 2;
    }
    g_slots = calloc((size_t)g_max, sizeof *g_slots);

    if (strcmp(mode, "once") == 0) {
        for (size_t i = 0; i < NALL; i++)
            run_one(&all[i]);
        printf("done %zu\n", NALL);
        return 0;
    }
    long long end = now_ns() + duration;
    long regions = 0;
    struct timespec pause = {period_us / 1000000, (period_us % 1000000) * 1000};
    const char *stop = getenv("STOP_FILE");
    while (now_ns() < end && !(stop && access(stop, F_OK) == 0)) {
        run_one(fixed ? fixed : &all[regions % (long)NALL]);
        regions++;
        nanosleep(&pause, NULL);
    }
    printf("done %ld\n", regions);
    return 0;
}
