/*
 * fine_grained: REGIONS tiny parallel regions back to back, the worst case
 * for a per-region cost such as the shim's. Prints the loop's time.
 *
 *     fine_grained REGIONS
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
    long regions = argc > 1 ? atol(argv[1]) : 100000;
    long sink = 0;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    for (long i = 0; i < regions; i++) {
#pragma omp parallel
        {
            if (omp_get_thread_num() == 0)
                sink++;
        }
    }
    clock_gettime(CLOCK_MONOTONIC, &b);
    double s = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("%ld regions in %.3f s (%.2f us each), sink %ld\n", regions, s, s * 1e6 / (double)regions,
           sink);
    return sink == regions ? 0 : 1;
}
