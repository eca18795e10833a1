/* follow_probe LIB GETTER TYPE SECONDS: a program whose BLAS is loaded late.
 *
 * Loads LIB with dlopen(RTLD_NOW | RTLD_LOCAL), as Python loads the BLAS of
 * an extension module, then for SECONDS prints `t NS N OTHERS ICV` every
 * 5 ms, where NS is CLOCK_MONOTONIC, N the library's own thread count
 * (GETTER, which returns an int, or an int64 when TYPE is i64), OTHERS the
 * CPU time in ns that the process's threads other than this one have used
 * so far (/proc/self/task/TID/schedstat), and ICV this thread's
 * omp_get_max_threads() (-1 without an OpenMP runtime). Between prints it
 * calls a small dgemm_ when the library has one, so that the library is in
 * use while its count changes. (128 × 128: OpenBLAS's kernels for AVX-512
 * CPUs (SkylakeX, Cooperlake) run products under about 10^6 multiply-adds
 * on the calling thread alone, without a parallel region.) Ends with `done ANSWER` (a checksum),
 * after SECONDS or once the file named by $STOP_FILE exists.
 * With PROBE_FIRST set, that library is loaded first, and kept. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

typedef void (*dgemm_fn)(const char *, const char *, const int *, const int *, const int *,
                         const double *, const double *, const int *, const double *,
                         const int *, const double *, double *, const int *);

static long long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* CPU time (ns) of the process's threads but the calling one. */
static long long others_ns(void)
{
    long long sum = 0;
    pid_t self = (pid_t)syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == self)
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/self/task/%s/schedstat", e->d_name);
        FILE *f = fopen(path, "r");
        long long run = 0;
        if (f != NULL) {
            if (fscanf(f, "%lld", &run) != 1)
                run = 0;
            fclose(f);
        }
        sum += run;
    }
    closedir(d);
    return sum;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: follow_probe LIB GETTER int|i64 SECONDS\n");
        return 2;
    }
    /* PROBE_FIRST: a library to load before LIB (and keep loaded). */
    const char *first = getenv("PROBE_FIRST");
    if (first != NULL && dlopen(first, RTLD_NOW | RTLD_LOCAL) == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", first, dlerror());
        return 1;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void *get = dlsym(h, argv[2]);
    if (get == NULL) {
        fprintf(stderr, "no %s in %s\n", argv[2], argv[1]);
        return 1;
    }
    int i64 = strcmp(argv[3], "i64") == 0;
    dgemm_fn dgemm = (dgemm_fn)dlsym(h, "dgemm_");
    enum { N = 128 };
    static double a[N * N], b[N * N], c[N * N];
    for (int i = 0; i < N * N; i++) {
        a[i] = (double)(i % 7) / 7.0;
        b[i] = (double)(i % 5) / 5.0;
    }
    const int n = N;
    const double one = 1.0, zero = 0.0;
    double answer = 0.0;
    long long end = now_ns() + (long long)(atof(argv[4]) * 1e9);
    long long next = 0;
    const char *stop = getenv("STOP_FILE");
    while (now_ns() < end) {
        if (dgemm != NULL) {
            dgemm("N", "N", &n, &n, &n, &one, a, &n, b, &n, &zero, c, &n);
            answer += c[N + 1];
        }
        long long t = now_ns();
        if (t >= next) {
            long long threads = i64 ? ((int64_t(*)(void))get)() : ((int (*)(void))get)();
            int (*icv)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "omp_get_max_threads");
            printf("t %lld %lld %lld %d\n", t, threads, others_ns(), icv ? icv() : -1);
            fflush(stdout);
            next = t + 5000000LL;
            if (stop != NULL && access(stop, F_OK) == 0)
                break;
        }
    }
    printf("done %.3f\n", answer);
    return 0;
}
