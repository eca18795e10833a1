/* A plugin linked with liballot, for a host that loads it with dlopen
 * (tests/c/late_host.c): in a block that gives each thread created in it
 * its own CPU, it creates one plain pthread per CPU, as a library the
 * plugin uses would, and checks that each ran on a single CPU. Those
 * threads get their CPU only if the shim found liballot's require hooks
 * after the program started. */
#define _GNU_SOURCE
#include <allot.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

struct seen {
    int ncpus, cpu;
};

static void *record(void *arg)
{
    struct seen *s = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return NULL;
    s->ncpus = CPU_COUNT(&set);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set)) {
            s->cpu = c;
            break;
        }
    return NULL;
}

/* 0 if every thread ran on exactly one CPU (the one it was given; without
 * the block it would have had all of the parent's); prints what each saw. */
int late_block(void)
{
    struct seen seen[64] = {{0, -1}};
    int n = 0, bad = 0;
    allot_outcome_t c;
    allot_require(&c, allot_min_cores(1)) {
        n = (int)c.ncores < 64 ? (int)c.ncores : 64;
        allot_require(allot_after_spawn(allot_private(allot_cores(1))),
                      allot_for_child(allot_cores(1))) {
            pthread_t t[64];
            for (int i = 0; i < n; i++)
                bad |= pthread_create(&t[i], NULL, record, &seen[i]) != 0;
            for (int i = 0; i < n; i++)
                bad |= pthread_join(t[i], NULL) != 0;
        }
    }
    for (int i = 0; i < n; i++) {
        printf("thread %d: %d CPU(s), cpu %d\n", i, seen[i].ncpus, seen[i].cpu);
        bad |= seen[i].ncpus != 1;
    }
    return n >= 1 && !bad ? 0 : 1;
}
