/* An OpenMP program for the TCM tests (built against Intel's libiomp5):
 * parallel regions in which every thread works about 2 ms; after each it
 * prints "t NS TEAM": the monotonic time and the team's size. Runs until
 * killed, for argv[1] seconds, or until the file named by $STOP_FILE
 * exists. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 1e9;
    long long stop = now_ns() + (long long)(seconds * 1e9);
    const char *stop_file = getenv("STOP_FILE");
    while (now_ns() < stop && !(stop_file && access(stop_file, F_OK) == 0)) {
        int team = 0;
#pragma omp parallel
        {
            long long end = now_ns() + 2000000;
            while (now_ns() < end) {
            }
#pragma omp single
            team = omp_get_num_threads();
        }
        printf("t %lld %d\n", now_ns(), team);
        fflush(stdout);
    }
    return 0;
}
