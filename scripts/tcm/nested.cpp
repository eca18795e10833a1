// Nested parallelism for scripts/bench-tcm.sh: oneTBB outside, Intel
// OpenMP inside. `nested ROUNDS [ITEMS]`: ROUNDS parallel loops of ITEMS
// items (8 unless given); each item runs an OpenMP region of 16 iterations
// of about 1 ms (static schedule). Without coordination every TBB thread
// starts a full OpenMP team. Prints its wall time.
#include <omp.h>
#include <tbb/parallel_for.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "work.h"

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 40;
    int items = argc > 2 ? atoi(argv[2]) : 8;
    auto t0 = std::chrono::steady_clock::now();
    volatile double sink = 0;
    for (int r = 0; r < rounds; r++)
        tbb::parallel_for(0, items, [&](int) {
            double s = 0;
#pragma omp parallel for schedule(static) reduction(+ : s)
            for (int i = 0; i < 16; i++)
                s += work(400000);
            sink = sink + s;
        });
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    printf("nested %.3f s\n", s);
}
