// A fixed amount of oneTBB work for scripts/bench-tcm.sh: ROUNDS parallel
// loops of 64 tasks of about 1 ms of arithmetic each. Prints its wall time.
#include <tbb/parallel_for.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "work.h"

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 100;
    auto t0 = std::chrono::steady_clock::now();
    volatile double sink = 0;
    for (int r = 0; r < rounds; r++)
        tbb::parallel_for(0, 64, [&](int) { sink = sink + work(400000); });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("tbb %.3f s\n", s);
}
