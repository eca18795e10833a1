/*
 * bound: an OpenMP program with bound threads (run it with OMP_PROC_BIND
 * and OMP_PLACES) that does what its standard input says, one command a
 * line, so a test can change its CPUs between steps:
 *
 *     team N   a parallel region of N threads; each prints
 *              "thread T cpus LIST" (its affinity), then "done N"
 *     bind C   binds the calling thread to CPU C with sched_setaffinity;
 *              prints "bind RC cpus LIST" (RC 0, or the errno)
 *     procs    prints "procs N" (omp_get_num_procs) and "mask LIST" (the
 *              program's own pthread_getaffinity_np)
 *     quit     exits 0
 *
 * Prints "ready" before reading each command. The places are computed by
 * the runtime at start, from the CPUs the process had then.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <omp.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

static void cpus(char *out, size_t n)
{
    cpu_set_t s;
    out[0] = '\0';
    if (sched_getaffinity(0, sizeof s, &s) != 0) {
        snprintf(out, n, "?");
        return;
    }
    size_t len = 0;
    for (int c = 0; c < CPU_SETSIZE && len + 8 < n; c++)
        if (CPU_ISSET(c, &s))
            len += (size_t)snprintf(out + len, n - len, "%s%d", len ? "," : "", c);
}

int main(void)
{
    char line[64];
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (;;) {
        printf("ready\n");
        if (fgets(line, sizeof line, stdin) == NULL)
            return 1;
        int n;
        if (sscanf(line, "team %d", &n) == 1) {
#pragma omp parallel num_threads(n)
            {
                char list[256];
                cpus(list, sizeof list);
#pragma omp critical
                printf("thread %d cpus %s\n", omp_get_thread_num(), list);
            }
            printf("done %d\n", n);
        } else if (sscanf(line, "bind %d", &n) == 1) {
            cpu_set_t s;
            CPU_ZERO(&s);
            CPU_SET(n, &s);
            int rc = sched_setaffinity(0, sizeof s, &s) == 0 ? 0 : errno;
            char list[256];
            cpus(list, sizeof list);
            printf("bind %d cpus %s\n", rc, list);
        } else if (strncmp(line, "procs", 5) == 0) {
            cpu_set_t s;
            CPU_ZERO(&s);
            pthread_getaffinity_np(pthread_self(), sizeof s, &s);
            printf("procs %d\nmask", omp_get_num_procs());
            for (int c = 0; c < CPU_SETSIZE; c++)
                if (CPU_ISSET(c, &s))
                    printf(" %d", c);
            printf("\n");
        } else if (strncmp(line, "quit", 4) == 0) {
            return 0;
        }
    }
}
