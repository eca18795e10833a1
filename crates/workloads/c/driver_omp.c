/*
 * driver_omp.c — the OpenMP build of the workloads: par.h implemented with
 * one `#pragma omp parallel for` per par_for call, and the program
 *
 *     allot-omp-workload <kernel> [scale]
 *
 * which runs one kernel (scale 1.0 by default) and prints one line
 *
 *     workload=<kernel> variant=omp threads=<n> seconds=<wall> answer=<16 hex> regions=<n>
 *
 * where threads is omp_get_max_threads() and regions the number of par_for
 * calls (parallel regions). Exit status 0 on success, 2 on bad arguments,
 * 1 if the kernel fails. Compiled with the libgomp defaults: nothing here
 * sets a thread count, wait policy or spin count.
 */
#define _POSIX_C_SOURCE 200809L

#include "kernels.h"
#include "par.h"

#include <errno.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static enum wl_schedule schedule = WL_STATIC;
static long regions;

void par_for(long n, long grain, par_body body, void *ctx)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    long chunks = par_chunks(n, grain);
    regions++;
    if (schedule == WL_DYNAMIC) {
#pragma omp parallel for schedule(dynamic)
        for (long c = 0; c < chunks; c++) {
            long lo = c * grain;
            body(lo, lo + grain < n ? lo + grain : n, ctx);
        }
    } else {
#pragma omp parallel for schedule(static)
        for (long c = 0; c < chunks; c++) {
            long lo = c * grain;
            body(lo, lo + grain < n ? lo + grain : n, ctx);
        }
    }
}

int par_workers(void)
{
    return omp_get_max_threads();
}

struct kernel {
    const char *name;
    int (*run)(double, uint64_t *);
    enum wl_schedule schedule;
};

#define WL_ENTRY(name, sched) {#name, wl_##name, sched},
static const struct kernel kernels[] = {WL_KERNELS(WL_ENTRY)};
#define NKERNELS (sizeof kernels / sizeof kernels[0])

static void usage(FILE *f)
{
    fprintf(f, "usage: allot-omp-workload <kernel> [scale]\n  kernels:");
    for (size_t i = 0; i < NKERNELS; i++)
        fprintf(f, " %s", kernels[i].name);
    fprintf(f, "\n  scale: a number in (0, %g], default 1\n", WL_MAX_SCALE);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        usage(stdout);
        return 0;
    }
    if (argc < 2 || argc > 3) {
        usage(stderr);
        return 2;
    }
    const struct kernel *k = NULL;
    for (size_t i = 0; i < NKERNELS; i++)
        if (!strcmp(argv[1], kernels[i].name))
            k = &kernels[i];
    if (!k) {
        fprintf(stderr, "allot-omp-workload: unknown kernel '%s'\n", argv[1]);
        usage(stderr);
        return 2;
    }
    double scale = 1.0;
    if (argc == 3) {
        char *end;
        errno = 0;
        scale = strtod(argv[2], &end);
        if (errno || end == argv[2] || *end || !(scale > 0.0) || !(scale <= WL_MAX_SCALE)) {
            fprintf(stderr, "allot-omp-workload: bad scale '%s': want a number in (0, %g]\n",
                    argv[2], WL_MAX_SCALE);
            return 2;
        }
    }
    schedule = k->schedule;
    uint64_t answer = 0;
    double t0 = now();
    int rc = k->run(scale, &answer);
    double t1 = now();
    if (rc != WL_OK) {
        fprintf(stderr, "allot-omp-workload: kernel %s failed: %s\n", k->name,
                rc == WL_ENOMEM ? "out of memory" : rc == WL_EINVAL ? "bad scale" : "self-check failed");
        return 1;
    }
    printf("workload=%s variant=omp threads=%d seconds=%.6f answer=%016llx regions=%ld\n", k->name,
           omp_get_max_threads(), t1 - t0, (unsigned long long)answer, regions);
    return 0;
}
