/*
 * ctor_nested: a library whose constructor runs OpenMP regions, so they run
 * inside dlopen(), while the loader lock is held by the thread that opened
 * it. The outer region's team thread 1 (not the primary thread) opens a
 * nested region through an entry point the primary thread never used
 * (GOMP_parallel_loop_*dynamic under gcc; __kmpc_push_num_threads under
 * clang, the outer region having no num_threads clause), so any lookup a
 * shim does for it happens on a team thread while the primary thread,
 * holding the loader lock, waits for the team at the region's end. Run it
 * with OMP_NUM_THREADS=2 (or more).
 *
 * Built with -fPIC -shared -DAS_LIBRARY for dlopen_driver, which then
 * calls teamsize_main(): it prints "outer N inner M sum S" from the
 * constructor's regions (S is 4950 when the nested loop did all its work).
 */
#include <omp.h>
#include <stdio.h>

static int g_outer, g_inner;
static long g_sum;

__attribute__((constructor)) static void run_in_constructor(void)
{
    omp_set_max_active_levels(2);
#pragma omp parallel
    {
        if (omp_get_thread_num() == 0)
            g_outer = omp_get_num_threads();
        if (omp_get_thread_num() == 1) {
            /* No reduction clause: gcc then emits the combined entry point. */
#pragma omp parallel for schedule(dynamic, 3) num_threads(2)
            for (long i = 0; i < 100; i++) {
                __atomic_fetch_add(&g_sum, i, __ATOMIC_RELAXED);
                int n = omp_get_num_threads();
                int cur = __atomic_load_n(&g_inner, __ATOMIC_RELAXED);
                while (n > cur && !__atomic_compare_exchange_n(&g_inner, &cur, n, 0,
                                                               __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
                }
            }
        }
    }
}

__attribute__((visibility("default"))) int teamsize_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("outer %d inner %d sum %ld\n", g_outer, g_inner, g_sum);
    return 0;
}
