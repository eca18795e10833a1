// follow_tbb SECONDS: how many threads oneTBB really runs at once.
//
// Rounds of a parallel_for whose body spins for 200 us; each round prints
// `t NS PEAK`, PEAK being the most bodies that ran at the same moment (the
// parallelism oneTBB actually used, which a global_control on
// max_allowed_parallelism limits). Ends with `done`, after SECONDS or once
// the file named by $STOP_FILE exists.
#include <oneapi/tbb/parallel_for.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <unistd.h>

static long long now_ns()
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: follow_tbb SECONDS\n");
        return 2;
    }
    long long end = now_ns() + (long long)(std::atof(argv[1]) * 1e9);
    const char *stop = std::getenv("STOP_FILE");
    std::atomic<int> inside{0}, peak{0};
    while (now_ns() < end && !(stop != nullptr && access(stop, F_OK) == 0)) {
        long long t0 = now_ns();
        peak = 0;
        tbb::parallel_for(0, 32, [&](int) {
            int n = ++inside;
            int p = peak.load();
            while (n > p && !peak.compare_exchange_weak(p, n)) {
            }
            long long until = now_ns() + 200000;
            while (now_ns() < until) {
            }
            --inside;
        });
        std::printf("t %lld %d\n", t0, peak.load());
        std::fflush(stdout);
    }
    std::printf("done\n");
    return 0;
}
