/* A fixed amount of OpenMP work for scripts/bench-tcm.sh: ROUNDS
 * regions, each a loop of 64 iterations of about 1 ms of arithmetic
 * (static schedule: a region ends with a barrier). Prints its wall time. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "work.h"

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    double t0 = omp_get_wtime();
    double sink = 0;
    for (int r = 0; r < rounds; r++) {
#pragma omp parallel for schedule(static) reduction(+ : sink)
        for (int i = 0; i < 64; i++)
            sink += work(400000);
    }
    printf("omp %.3f s (%g)\n", omp_get_wtime() - t0, sink > 0 ? 1.0 : 0.0);
    return 0;
}
