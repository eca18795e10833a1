/*
 * How long a CPU given back in one process takes to reach a `require` that
 * waits for it in another: the cost, through the broker, of passing a freed
 * core from one request to the next (docs/benchmarks.md, "Passing a freed
 * core on"). Run by scripts/bench-handoff.sh with a broker of its own.
 *
 *   handoff [N]     N hand-overs (60)
 *
 * The holder (this process) enters allot_min_cores(2): every free CPU.
 * It tells the waiter (a child process, forked before either touches
 * liballot, so each has a runtime and a broker connection of its own),
 * which then enters allot_cores(1) and waits in the broker's line. After
 * 8 ms the holder stamps the time and leaves its block; the waiter stamps
 * the time it entered and sends it back. Prints the hand-over times in
 * microseconds (the smallest, the 10th, 50th and 90th percentile, and the
 * largest):
 *
 *   handoff n=N min_us= p10_us= p50_us= p90_us= max_us=
 *
 * A negative time would be a waiter let in while the holder still held
 * every CPU.
 *
 * The waiter waits 2 ms before it asks, so that it is in line (refused,
 * its watcher parked at the broker) when the holder leaves.
 */
#define _GNU_SOURCE
#include <allot.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void spin_s(double s)
{
    const double until = now_s() + s;
    while (now_s() < until)
        ;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t got = read(fd, p, len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return -1;
        p += got;
        len -= (size_t)got;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t put = write(fd, p, len);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        p += put;
        len -= (size_t)put;
    }
    return 0;
}

/* The waiter: for each round, waits for the holder's word, asks for one
 * core, and sends back when it entered. */
static int waiter(int n, int go, int back)
{
    for (int i = 0; i < n; i++) {
        char c;
        if (read_all(go, &c, 1))
            return 1;
        spin_s(0.002);
        double entered = 0;
        allot_outcome_t o;
        allot_require(&o, allot_cores(1)) { entered = now_s(); }
        if (write_all(back, &entered, sizeof entered))
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 60;
    if (n < 1) {
        fprintf(stderr, "handoff: N must be at least 1\n");
        return 2;
    }
    int go[2], back[2];
    if (pipe(go) || pipe(back)) {
        fprintf(stderr, "handoff: pipe: %s\n", strerror(errno));
        return 2;
    }
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "handoff: fork: %s\n", strerror(errno));
        return 2;
    }
    if (child == 0)
        _exit(waiter(n, go[0], back[1]));
    double *us = malloc((size_t)n * sizeof *us);
    if (!us) {
        fprintf(stderr, "handoff: out of memory\n");
        return 2;
    }
    int failed = 0;
    for (int i = 0; i < n && !failed; i++) {
        double left = 0;
        allot_outcome_t o;
        allot_require(&o, allot_min_cores(2))
        {
            failed = write_all(go[1], "x", 1);
            spin_s(0.008);
            left = now_s();
        }
        double entered;
        if (failed || read_all(back[0], &entered, sizeof entered)) {
            failed = 1;
            break;
        }
        us[i] = (entered - left) * 1e6;
        usleep(3000);
    }
    close(go[1]);
    int status = 0;
    waitpid(child, &status, 0);
    if (failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "handoff: the waiter failed\n");
        return 1;
    }
    qsort(us, (size_t)n, sizeof *us, cmp_double);
    printf("handoff n=%d min_us=%.0f p10_us=%.0f p50_us=%.0f p90_us=%.0f max_us=%.0f\n", n, us[0],
           us[n / 10], us[n / 2], us[(n * 9) / 10], us[n - 1]);
    free(us);
    return 0;
}
