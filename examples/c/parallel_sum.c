/*
 * parallel_sum: sums an array on an allot pool.
 *
 * The pool follows the program's cell: inside `allot run` it uses the CPUs
 * the broker granted (and follows the grant as it changes); with a broker
 * but no `allot run` it registers a best-effort cell; with no broker it uses
 * the CPUs the process may run on.
 *
 * Usage: parallel_sum [N]   (default 10000000)
 */
#include <allot.h>

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

struct job {
    const double *x;
    _Atomic uint64_t sum; /* the values are integers: exact in any order */
};

/* Called on disjoint sub-ranges [lo, hi), in parallel. */
static void add_range(size_t lo, size_t hi, void *arg) {
    struct job *job = arg;
    double local = 0;
    for (size_t i = lo; i < hi; i++) local += job->x[i];
    atomic_fetch_add(&job->sum, (uint64_t)local);
}

static int fail(const char *what, int status) {
    fprintf(stderr, "parallel_sum: %s: %s (%s)\n", what, allot_strerror(status),
            allot_last_error());
    return 1;
}

int main(int argc, char **argv) {
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 10000000;
    double *x = malloc(n * sizeof *x);
    if (x == NULL) {
        perror("malloc");
        return 1;
    }
    for (size_t i = 0; i < n; i++) x[i] = (double)(i % 1000);

    /* {0}: the cell allot_cell_auto("liballot") picks. */
    allot_pool_t pool;
    int rc = allot_pool_new((allot_cell_t){0}, &pool);
    if (rc != ALLOT_OK) return fail("allot_pool_new", rc);
    uint32_t workers = 0;
    allot_pool_workers(pool, &workers);

    struct job job = {.x = x};
    rc = allot_pool_parallel_for(pool, 0, n, 16384, add_range, &job);
    if (rc != ALLOT_OK) return fail("allot_pool_parallel_for", rc);

    uint64_t expected = 0;
    for (size_t i = 0; i < n; i++) expected += (uint64_t)x[i];
    uint64_t got = atomic_load(&job.sum);
    printf("sum of %zu values: %s (%" PRIu64 ", %" PRIu32 " workers)\n", n,
           got == expected ? "ok" : "WRONG", got, workers);

    allot_pool_free(pool);
    free(x);
    return got == expected ? 0 : 1;
}
