/* What the require test programs share (require.c, require_threads.c):
 * their check and the calling thread's CPUs. */
#ifndef ALLOT_TEST_REQUIRE_UTIL_H
#define ALLOT_TEST_REQUIRE_UTIL_H

#include <allot.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

/* A failed check prints the file, line and liballot's last error and
 * exits 1. */
#define CHECK(c)                                                               \
    do {                                                                       \
        if (!(c)) {                                                            \
            fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n",      \
                    __FILE__, __LINE__, #c, allot_last_error());               \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

/* The CPUs this thread may run on: writes up to `max` of them to `cpus`
 * and returns how many there are. */
static inline int affinity(int *cpus, int max)
{
    cpu_set_t set;
    CHECK(sched_getaffinity(0, sizeof set, &set) == 0);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            if (n < max)
                cpus[n] = c;
            n++;
        }
    return n;
}

#endif
