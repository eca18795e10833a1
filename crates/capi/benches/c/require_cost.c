/*
 * Cost of entering and leaving a require block, against the system calls
 * a CPU-restricting block cannot avoid, measured in the same process.
 *
 *   require_cost ROUNDS ITERS
 *
 * Each round times ITERS back-to-back iterations of every configuration
 * (configurations interleaved round by round) and prints one line per
 * configuration: its median over the rounds, in ns per iteration.
 */
#define _GNU_SOURCE
#include <allot.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static cpu_set_t g_all, g_one;
static int g_cpu0, g_cpu1;

/* Baseline: what a block confining the thread to one CPU does to the OS,
 * once on entry and once on exit. */
static void baseline(void)
{
    sched_setaffinity(0, sizeof g_one, &g_one);
    sched_setaffinity(0, sizeof g_all, &g_all);
}

static void empty(void) {}

static void cores_1(void)
{
    allot_require(allot_cores(1)) {
    }
}

static void cpu_alone(void)
{
    allot_require(allot_cpu(g_cpu0, 1.0), allot_cpu(g_cpu1, 0.0)) {
    }
}

static void virtual_token(void)
{
    allot_require(allot_kind("Token", 0, 1.0)) {
    }
}

/* The same block without a call-site cache: looked up every time. */
static void virtual_token_uncached(void)
{
    allot_scope_t s = ALLOT_SCOPE_INIT;
    allot_req_t r = allot_kind("Token", 0, 1.0);
    if (allot_require_enter(&s, NULL, &r, 1, ALLOT_REQUIRE_ABORT) == ALLOT_OK)
        allot_require_leave(&s);
}

static void nested_token(void)
{
    allot_require(allot_kind("Token", 0, 1.0)) {
        allot_require(allot_kind("Token", 0, 0.5)) {
        }
    }
}

struct config {
    const char *name;
    void (*fn)(void);
};

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 21;
    int iters = argc > 2 ? atoi(argv[2]) : 20000;
    sched_getaffinity(0, sizeof g_all, &g_all);
    int n = 0;
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &g_all)) {
            if (n == 0)
                g_cpu0 = c;
            if (n == 1)
                g_cpu1 = c;
            n++;
        }
    if (n < 2) {
        fprintf(stderr, "needs 2 CPUs\n");
        return 2;
    }
    CPU_ZERO(&g_one);
    CPU_SET(g_cpu0, &g_one);
    if (allot_kind_define("Token", 1, 1.0) != ALLOT_OK) {
        fprintf(stderr, "%s\n", allot_last_error());
        return 1;
    }
    struct config configs[] = {
        {"empty loop", empty},
        {"sched_setaffinity x2 (baseline)", baseline},
        {"require(cores(1))", cores_1},
        {"require(cpu(a, 1), cpu(b, 0))", cpu_alone},
        {"require(kind(Token, 0, 1))", virtual_token},
        {"require(kind(Token, 0, 1)), no site cache", virtual_token_uncached},
        {"require(Token 1) { require(Token 0.5) }", nested_token},
    };
    enum { N = sizeof configs / sizeof configs[0] };
    double *samples[N];
    for (int c = 0; c < N; c++) {
        samples[c] = calloc((size_t)rounds, sizeof(double));
        for (int i = 0; i < iters / 10; i++) /* warm-up: caches, first entry */
            configs[c].fn();
    }
    for (int r = 0; r < rounds; r++)
        for (int c = 0; c < N; c++) {
            double t0 = now_ns();
            for (int i = 0; i < iters; i++)
                configs[c].fn();
            samples[c][r] = (now_ns() - t0) / iters;
        }
    for (int c = 0; c < N; c++) {
        qsort(samples[c], (size_t)rounds, sizeof(double), cmp);
        printf("%s\t%.1f\t%.1f\t%.1f\n", configs[c].name, samples[c][rounds / 2], samples[c][0],
               samples[c][rounds - 1]);
        free(samples[c]);
    }
    return 0;
}
