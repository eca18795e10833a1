/*
 * Fine-grained parallel-for: allot_pool_parallel_for against OpenMP.
 *
 * Usage: pfor MODE N GRAIN REPS
 *   MODE  allot        allot_pool_parallel_for(pool, 0, N, GRAIN, ...) from
 *                      main(), a thread outside the pool
 *         allot-inside the same, from a task on the pool (the loop's caller
 *                      is a worker: no hand-off to the pool and back)
 *         allot-static allot_pool_parallel_for_static from main()
 *         allot-static-inside  the same, from a task on the pool
 *         omp-static   #pragma omp parallel for schedule(static)
 *         omp-dynamic  #pragma omp parallel for schedule(dynamic, GRAIN)
 *         seq          a plain loop
 *         workers      print the allot pool's worker count and exit
 *   N     iterations of the body per loop
 *   GRAIN most iterations per piece (allot, allot-inside, omp-dynamic)
 *   REPS  timed loops (after REPS/10 + 10 untimed ones)
 *
 * The body is one multiply-add on a double: the loop costs are what is
 * measured. Prints "median_ns p10_ns p90_ns threads" for one loop.
 * OpenMP runs with libgomp's defaults except the team size, which
 * benches/pfor.rs sets (OMP_NUM_THREADS) to the allot pool's worker count.
 * Built by benches/pfor.rs with gcc -O2 -fopenmp against liballot.so.
 */
#define _POSIX_C_SOURCE 200809L

#include <allot.h>
#include <omp.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double *x;

static void body(size_t lo, size_t hi, void *arg) {
    (void)arg;
    for (size_t i = lo; i < hi; i++) x[i] = x[i] * 0.999 + 1.0;
}

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

static void die(const char *what, int rc) {
    fprintf(stderr, "pfor: %s: %s (%s)\n", what, allot_strerror(rc), allot_last_error());
    exit(1);
}

struct timing {
    allot_pool_t pool;
    int is_static;
    size_t n, grain;
    int warm, reps;
    long long *t;
    int rc;
};

/* The timed loops of mode allot-inside, run as a task on the pool. */
static void timed_loops(void *arg) {
    struct timing *tm = arg;
    for (int r = -tm->warm; r < tm->reps && tm->rc == ALLOT_OK; r++) {
        long long t0 = now_ns();
        tm->rc = tm->is_static
                     ? allot_pool_parallel_for_static(tm->pool, 0, tm->n, body, NULL)
                     : allot_pool_parallel_for(tm->pool, 0, tm->n, tm->grain, body, NULL);
        long long t1 = now_ns();
        if (r >= 0) tm->t[r] = t1 - t0;
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pfor MODE N GRAIN REPS\n");
        return 2;
    }
    const char *mode = argv[1];
    int inside = strcmp(mode, "allot-inside") == 0 || strcmp(mode, "allot-static-inside") == 0;
    int allot_static =
        strcmp(mode, "allot-static") == 0 || strcmp(mode, "allot-static-inside") == 0;
    int is_allot =
        strcmp(mode, "allot") == 0 || strcmp(mode, "workers") == 0 || inside || allot_static;
    allot_pool_t pool = {0};
    uint32_t workers = 0;
    if (is_allot) {
        allot_cell_t cell;
        int rc = allot_cell_standalone(&cell);
        if (rc) die("allot_cell_standalone", rc);
        if ((rc = allot_pool_new(cell, &pool))) die("allot_pool_new", rc);
        allot_cell_free(cell);
        if ((rc = allot_pool_workers(pool, &workers))) die("allot_pool_workers", rc);
        if (strcmp(mode, "workers") == 0) {
            printf("%" PRIu32 "\n", workers);
            return 0;
        }
    }
    if (argc < 5) {
        fprintf(stderr, "usage: pfor MODE N GRAIN REPS\n");
        return 2;
    }
    size_t n = strtoull(argv[2], NULL, 10);
    size_t grain = strtoull(argv[3], NULL, 10);
    int reps = atoi(argv[4]);
    int warm = reps / 10 + 10;
    int omp_static = strcmp(mode, "omp-static") == 0;
    int omp_dynamic = strcmp(mode, "omp-dynamic") == 0;
    int seq = strcmp(mode, "seq") == 0;
    if (!is_allot && !omp_static && !omp_dynamic && !seq) {
        fprintf(stderr, "pfor: unknown mode %s\n", mode);
        return 2;
    }
    if (n == 0 || grain == 0 || reps <= 0) {
        fprintf(stderr, "pfor: N, GRAIN and REPS must be positive\n");
        return 2;
    }
    x = malloc(n * sizeof *x);
    long long *t = malloc((size_t)reps * sizeof *t);
    if (!x || !t) return 1;
    for (size_t i = 0; i < n; i++) x[i] = (double)i;
    int threads = is_allot ? (int)workers : seq ? 1 : omp_get_max_threads();

    if (inside) {
        struct timing tm = {pool, allot_static, n, grain, warm, reps, t, ALLOT_OK};
        allot_task_t task;
        int rc = allot_pool_spawn(pool, timed_loops, &tm, &task);
        if (rc) die("allot_pool_spawn", rc);
        if ((rc = allot_task_join(task))) die("allot_task_join", rc);
        if (tm.rc) die("allot_pool_parallel_for", tm.rc);
    }
    for (int r = -warm; r < reps && !inside; r++) { /* allot-inside timed above */
        long long t0 = now_ns();
        if (is_allot) {
            int rc = allot_static ? allot_pool_parallel_for_static(pool, 0, n, body, NULL)
                                  : allot_pool_parallel_for(pool, 0, n, grain, body, NULL);
            if (rc) die("allot_pool_parallel_for", rc);
        } else if (omp_static) {
#pragma omp parallel for schedule(static)
            for (size_t i = 0; i < n; i++) x[i] = x[i] * 0.999 + 1.0;
        } else if (omp_dynamic) {
#pragma omp parallel for schedule(dynamic, grain)
            for (size_t i = 0; i < n; i++) x[i] = x[i] * 0.999 + 1.0;
        } else {
            body(0, n, NULL);
        }
        long long t1 = now_ns();
        if (r >= 0) t[r] = t1 - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    /* Keep the result observable so the loops are not optimised away. */
    double check = 0;
    for (size_t i = 0; i < n; i += n / 16 + 1) check += x[i];
    printf("%lld %lld %lld %d %g\n", t[reps / 2], t[reps / 10], t[reps * 9 / 10], threads,
           check);
    if (is_allot) allot_pool_free(pool);
    free(t);
    free(x);
    return 0;
}
