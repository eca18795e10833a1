/* A stand-in for a BLAS whose constructor is slow and asks for its CPUs,
 * as OpenBLAS's does: loaded while the shim's follower runs, it makes the
 * follower look at the loaded objects while this constructor still holds
 * the loader's lock, and the constructor's own question (sched_getaffinity)
 * makes the loading thread look too. Exports BLIS's two threading entry
 * points. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdint.h>
#include <time.h>

static int64_t g_threads = 4;

void bli_thread_set_num_threads(int64_t n)
{
    __atomic_store_n(&g_threads, n, __ATOMIC_RELAXED);
}

int64_t bli_thread_get_num_threads(void)
{
    return __atomic_load_n(&g_threads, __ATOMIC_RELAXED);
}

__attribute__((constructor)) static void start(void)
{
    struct timespec t = {0, 450 * 1000 * 1000}; /* two of the follower's rescans */
    nanosleep(&t, NULL);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
}
