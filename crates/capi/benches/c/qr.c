/*
 * Tall-skinny QR decomposition with two levels of parallelism: allot's
 * version of Poli-C's QR case study (see docs/benchmarks.md, "QR
 * decomposition").
 *
 *   qr MODE [--blocks B] [--rows M] [--cols N] [--outer T] [--inner I]
 *
 * The matrix is B blocks of M x N doubles (column-major, a fixed
 * pseudo-random fill). Outer workers (T pthreads, as a task library would
 * run them) take blocks from a shared counter and factor each one with
 * Householder reflections; the update of the columns right of each
 * reflector is a `#pragma omp parallel for` (the inner level, as a BLAS
 * would run it), so every reflector ends in a barrier of the inner team.
 * The R factors of all blocks are then stacked and factored once more (the
 * tree's root), which gives the R of the whole matrix.
 *
 * MODE:
 *   baseline  T = I = the CPUs this process may use: what both libraries
 *             do by default (T x I threads on that many CPUs).
 *   byhand    T and I as given (--outer, --inner), chosen by the user.
 *   allot     (built with -DQR_ALLOT) T outer workers, each of which enters
 *             allot_require(&c, allot_numa_nodes(1)) once and factors
 *             blocks with c.ncores inner threads on that node's CPUs and
 *             memory until none is left; the root too.
 *
 * Prints one line:
 *   result mode=M outer=T inner=I seconds=S gflops=G checksum=C
 * seconds: from the first block to the root's R; checksum: a hash of |R|
 * (the absolute values do not depend on the team sizes: every column is
 * updated by one thread, in the same order).
 */
#define _GNU_SOURCE
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef QR_ALLOT
#include <allot.h>
#endif

static int g_blocks = 16, g_rows = 2048, g_cols = 192, g_outer, g_inner;
static double *g_r;         /* the blocks' R factors, stacked: (B*N) x N */
static atomic_int g_next;   /* next block to factor */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Factors the m x n column-major matrix a in place with `threads` inner
 * threads; writes its n x n upper-triangular R (column-major, leading
 * dimension ldr) at r. */
static void householder(double *a, int m, int n, int threads, double *r, int ldr)
{
    omp_set_num_threads(threads);
    for (int k = 0; k < n && k < m; k++) {
        double *v = a + (size_t)k * (size_t)m + k;
        const int len = m - k;
        double norm = 0;
        for (int i = 0; i < len; i++)
            norm += v[i] * v[i];
        norm = sqrt(norm);
        const double alpha = v[0] >= 0 ? -norm : norm;
        v[0] -= alpha;
        double vv = 0;
        for (int i = 0; i < len; i++)
            vv += v[i] * v[i];
        const double beta = vv > 0 ? 2.0 / vv : 0.0;
#pragma omp parallel for schedule(static)
        for (int j = k + 1; j < n; j++) {
            double *col = a + (size_t)j * (size_t)m + k;
            double s = 0;
            for (int i = 0; i < len; i++)
                s += v[i] * col[i];
            s *= beta;
            for (int i = 0; i < len; i++)
                col[i] -= s * v[i];
        }
        r[(size_t)k * (size_t)ldr + k] = alpha;
        for (int j = k + 1; j < n; j++)
            r[(size_t)j * (size_t)ldr + k] = a[(size_t)j * (size_t)m + k];
    }
}

/* Factors blocks until none is left, `threads` wide. */
static void factor_blocks(int threads)
{
    const size_t elems = (size_t)g_rows * (size_t)g_cols;
    double *a = malloc(elems * sizeof *a); /* first touched here: local */
    if (!a) {
        fprintf(stderr, "qr: out of memory\n");
        exit(2);
    }
    for (;;) {
        int b = atomic_fetch_add(&g_next, 1);
        if (b >= g_blocks)
            break;
        for (size_t i = 0; i < elems; i++)
            a[i] = (double)(mix((uint64_t)b * elems + i + 1) >> 11) * 0x1.0p-53 - 0.5;
        const int ldr = g_blocks * g_cols;
        householder(a, g_rows, g_cols, threads, g_r + (size_t)b * (size_t)g_cols, ldr);
    }
    free(a);
}

static void *outer_worker(void *arg)
{
    (void)arg;
#ifdef QR_ALLOT
    allot_outcome_t c;
    allot_require(&c, allot_numa_nodes(1)) {
        factor_blocks((int)c.ncores);
    }
#else
    factor_blocks(g_inner);
#endif
    return NULL;
}

/* The root: the stacked R factors, factored once more. */
static void factor_root(int threads, double *r)
{
    const int m = g_blocks * g_cols;
    householder(g_r, m, g_cols, threads, r, g_cols);
}

static int usable_cpus(void)
{
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0)
        return 1;
    return CPU_COUNT(&s);
}

static int positive(const char *name, const char *v)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > 1 << 20) {
        fprintf(stderr, "qr: %s must be a positive integer, not %s\n", name, v);
        exit(2);
    }
    return (int)x;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: qr baseline|byhand|allot [--blocks B] [--rows M] [--cols N] "
                "[--outer T] [--inner I]\n");
        return argc < 2 ? 2 : 0;
    }
    const char *mode = argv[1];
    const int cpus = usable_cpus();
    g_outer = g_inner = cpus;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--blocks"))
            g_blocks = positive("--blocks", argv[i + 1]);
        else if (!strcmp(argv[i], "--rows"))
            g_rows = positive("--rows", argv[i + 1]);
        else if (!strcmp(argv[i], "--cols"))
            g_cols = positive("--cols", argv[i + 1]);
        else if (!strcmp(argv[i], "--outer"))
            g_outer = positive("--outer", argv[i + 1]);
        else if (!strcmp(argv[i], "--inner"))
            g_inner = positive("--inner", argv[i + 1]);
        else {
            fprintf(stderr, "qr: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (g_rows < g_cols) {
        fprintf(stderr, "qr: a block needs at least as many rows as columns\n");
        return 2;
    }
    if (!strcmp(mode, "baseline")) {
        g_outer = g_inner = cpus;
    } else if (!strcmp(mode, "byhand")) {
    }
#ifdef QR_ALLOT
    else if (!strcmp(mode, "allot")) {
        g_inner = 0; /* from each grant */
    }
#endif
    else {
        fprintf(stderr, "qr: unknown mode %s\n", mode);
        return 2;
    }
    const size_t rsize = (size_t)g_blocks * (size_t)g_cols * (size_t)g_cols;
    g_r = calloc(rsize, sizeof *g_r);
    double *root = calloc((size_t)g_cols * (size_t)g_cols, sizeof *root);
    pthread_t *t = calloc((size_t)g_outer, sizeof *t);
    if (!g_r || !root || !t) {
        fprintf(stderr, "qr: out of memory\n");
        return 2;
    }
    const double t0 = now_s();
    for (int i = 0; i < g_outer; i++)
        if (pthread_create(&t[i], NULL, outer_worker, NULL) != 0) {
            fprintf(stderr, "qr: cannot start an outer worker\n");
            return 2;
        }
    for (int i = 0; i < g_outer; i++)
        pthread_join(t[i], NULL);
#ifdef QR_ALLOT
    if (!strcmp(mode, "allot")) {
        allot_outcome_t c;
        allot_require(&c, allot_numa_nodes(1)) {
            factor_root((int)c.ncores, root);
        }
    } else
#endif
        factor_root(g_inner, root);
    const double secs = now_s() - t0;
    uint64_t sum = 0;
    for (int j = 0; j < g_cols; j++)
        for (int i = 0; i <= j; i++)
            sum = sum * 31 + (uint64_t)llround(fabs(root[(size_t)j * (size_t)g_cols + i]) * 1e6);
    const double m = (double)g_rows, n = (double)g_cols;
    const double flops = (double)g_blocks * (2 * m * n * n - 2.0 / 3 * n * n * n) +
                         (2 * (double)g_blocks * n * n * n - 2.0 / 3 * n * n * n);
    printf("result mode=%s outer=%d inner=%d seconds=%.4f gflops=%.3f checksum=%016llx\n", mode,
           g_outer, g_inner, secs, flops / secs * 1e-9, (unsigned long long)sum);
    return 0;
}
