/* A stand-in for MKL's threading control (MKL is not in Debian's main
 * archive): the two entry points the shim's follower and follow_probe use.
 * Like MKL's pool, it starts a thread when it is loaded. */
#include <pthread.h>

static int g_threads = 4;

void MKL_Set_Num_Threads(int n)
{
    __atomic_store_n(&g_threads, n, __ATOMIC_RELAXED);
}

int MKL_Get_Max_Threads(void)
{
    return __atomic_load_n(&g_threads, __ATOMIC_RELAXED);
}

static void *worker(void *arg)
{
    return arg;
}

__attribute__((constructor)) static void start_pool(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) == 0)
        pthread_join(t, NULL);
}
