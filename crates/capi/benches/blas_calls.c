/* blas_calls LIB CALLS SIZE: the time of one BLAS call, the per-call cost
 * of following the grant shows in.
 *
 * Loads LIB with dlopen(RTLD_NOW | RTLD_LOCAL), as Python loads numpy's
 * BLAS, then times CALLS calls of dgemm_ on SIZE x SIZE matrices and
 * prints `ns_per_call N` (the loop only, after one warm-up call). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef void (*dgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const double *, const double *, const int *, const double *,
                         const int *, const double *, double *, const int *);

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: blas_calls LIB CALLS SIZE\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    dgemm_fn dgemm = h ? (dgemm_fn)dlsym(h, "dgemm_") : NULL;
    if (dgemm == NULL) {
        fprintf(stderr, "no dgemm_ in %s: %s\n", argv[1], dlerror());
        return 1;
    }
    long calls = atol(argv[2]);
    int n = atoi(argv[3]);
    double *a = malloc(sizeof(double) * n * n), *b = malloc(sizeof(double) * n * n),
           *c = malloc(sizeof(double) * n * n);
    for (int i = 0; i < n * n; i++) {
        a[i] = (double)(i % 7) / 7.0;
        b[i] = (double)(i % 5) / 5.0;
    }
    const double one = 1.0, zero = 0.0;
    dgemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    double t = now();
    for (long k = 0; k < calls; k++)
        dgemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
    t = now() - t;
    printf("ns_per_call %.1f\n", t * 1e9 / (double)calls);
    return c[1] < 0.0; /* keeps the products */
}
