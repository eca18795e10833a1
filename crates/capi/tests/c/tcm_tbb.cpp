// A oneTBB program for the TCM tests: an arena of 4 (TBB may run 3 workers
// beside the main thread) runs rounds of 48 tasks of about a millisecond
// each, back to back, and after each round prints "t NS THREADS": the
// monotonic time and how many distinct threads ran the round's tasks. A
// worker leaves an arena whose allotment shrank when it runs out of work,
// that is between rounds (not in the middle of a parallel loop), so the
// rounds are short. Runs until killed, or for argv[1] seconds.
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <set>
#include <thread>

static long long now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1e9;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 4);
    tbb::task_arena arena(4);
    long long stop = now_ns() + (long long)(seconds * 1e9);
    while (now_ns() < stop) {
        std::mutex m;
        std::set<std::thread::id> ids;
        arena.execute([&] {
            tbb::parallel_for(0, 48, [&](int) {
                long long end = now_ns() + 1000000;
                while (now_ns() < end) {
                }
                std::lock_guard<std::mutex> g(m);
                ids.insert(std::this_thread::get_id());
            });
        });
        printf("t %lld %zu\n", now_ns(), ids.size());
        fflush(stdout);
    }
}
