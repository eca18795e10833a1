/*
 * threads: several POSIX threads start OpenMP regions at once, each its
 * own top-level team, so their first regions race through the shim's
 * lazy lookups. Built as a library (-DAS_LIBRARY) for dlopen_driver too.
 *
 *     threads THREADS REGIONS
 *
 * Prints "teams MIN MAX" over all regions and "sum OK" where OK is 1 if
 * every region's loop covered its iterations exactly.
 */
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long g_regions;
static int g_min = 1 << 30, g_max;
static int g_bad;

static void *worker(void *arg)
{
    (void)arg;
    for (long r = 0; r < g_regions; r++) {
        int team = 0;
        long sum = 0;
#pragma omp parallel for schedule(dynamic, 4) reduction(+ : sum)
        for (long i = 0; i < 100; i++) {
            sum += i;
            if (i % 4 == 0 && omp_get_thread_num() == 0)
                __atomic_store_n(&team, omp_get_num_threads(), __ATOMIC_RELAXED);
        }
        if (sum != 4950)
            __atomic_store_n(&g_bad, 1, __ATOMIC_RELAXED);
        int t = __atomic_load_n(&team, __ATOMIC_RELAXED);
        if (t == 0) /* thread 0 took no chunk: ask a plain region */
#pragma omp parallel
        {
#pragma omp master
            t = omp_get_num_threads();
        }
        int cur = __atomic_load_n(&g_max, __ATOMIC_RELAXED);
        while (t > cur &&
               !__atomic_compare_exchange_n(&g_max, &cur, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
        cur = __atomic_load_n(&g_min, __ATOMIC_RELAXED);
        while (t < cur &&
               !__atomic_compare_exchange_n(&g_min, &cur, t, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
        }
    }
    return NULL;
}

#ifdef AS_LIBRARY
__attribute__((visibility("default"))) int teamsize_main(int argc, char **argv)
#else
int main(int argc, char **argv)
#endif
{
    if (argc != 3) {
        fprintf(stderr, "usage: threads THREADS REGIONS\n");
        return 2;
    }
    int n = atoi(argv[1]);
    g_regions = atol(argv[2]);
    pthread_t t[64];
    if (n < 1 || n > 64)
        return 2;
    for (int i = 0; i < n; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    printf("teams %d %d\nsum %d\n", g_min, g_max, !g_bad);
    return 0;
}
