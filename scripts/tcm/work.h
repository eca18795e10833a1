/* The unit of work of scripts/bench-tcm.sh's programs: arithmetic that
 * takes about a millisecond for n = 400000, touching no memory. */
#ifndef TCM_BENCH_WORK_H
#define TCM_BENCH_WORK_H

static inline double work(int n)
{
    double x = 0;
    for (int k = 1; k <= n; k++)
        x += 1.0 / k;
    return x;
}

#endif
