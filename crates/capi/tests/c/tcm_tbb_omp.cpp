// oneTBB outside, Intel OpenMP inside, for the TCM tests: an arena of 4
// runs rounds of a parallel loop of argv[1] items (one item per task).
// Every item first waits (at most 2 s) until all the loop's items are
// taken, so each is hosted by a thread of its own whatever the machine's
// speed, then runs an OpenMP region in which every thread works about
// 2 ms. After each region it prints "t NS TEAM": the monotonic time and
// the team's size. Runs until killed.
#include <omp.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <thread>

static long long now_ns()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    int items = argc > 1 ? atoi(argv[1]) : 2;
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, 4);
    tbb::task_arena arena(4);
    std::mutex m;
    std::atomic<int> taken{0};
    for (;;) {
        taken = 0;
        arena.execute([&] {
            tbb::parallel_for(
                tbb::blocked_range<int>(0, items, 1),
                [&](const tbb::blocked_range<int> &) {
                    taken.fetch_add(1);
                    long long until = now_ns() + 2000000000LL;
                    while (taken.load() < items && now_ns() < until)
                        std::this_thread::yield();
                    int team = 0;
#pragma omp parallel
                    {
                        long long end = now_ns() + 2000000;
                        while (now_ns() < end) {
                        }
#pragma omp single
                        team = omp_get_num_threads();
                    }
                    std::lock_guard<std::mutex> g(m);
                    printf("t %lld %d\n", now_ns(), team);
                    fflush(stdout);
                },
                tbb::simple_partitioner());
        });
    }
    return 0;
}
