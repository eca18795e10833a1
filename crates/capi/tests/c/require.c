/*
 * require blocks from C: run by tests/c_require.rs, one scenario per
 * process (`require MODE [ARG]`). Prints "ok MODE" on success; a failed
 * check prints the line and exits 1. The scenarios that abort on purpose
 * print "line N" (the require expected in the message) first.
 *
 * Threads created inside blocks share them only through the preload shim's
 * pthread_create; the test runs those modes with the shim preloaded.
 */
#define _GNU_SOURCE
#include <allot.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "require_util.h"

static void say_line(int line)
{
    printf("line %d\n", line);
    fflush(stdout);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* CLOCK_MONOTONIC in seconds. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int g_cpus[CPU_SETSIZE];
static int g_ncpus;

/* ---- probes: what a thread outside every block sees ------------------- */

/* A policy that requests nothing and records what is available on device
 * 0 of the kind named by *arg. */
struct probe {
    const char *kind;
    double available;
};

static int probe_policy(allot_view_t *v, void *arg)
{
    struct probe *p = arg;
    allot_dev_t *d = allot_view_first(v, p->kind);
    p->available = d ? allot_dev_available(d) : -1.0;
    return ALLOT_POLICY_SUCCESS;
}

/* A helper thread started before any block (so it inherits none) that
 * probes on request. */
static sem_t g_probe_req, g_probe_done;
static struct probe g_probe;

static void *prober(void *arg)
{
    (void)arg;
    for (;;) {
        sem_wait(&g_probe_req);
        if (g_probe.kind == NULL)
            return NULL;
        allot_require(allot_policy("probe", probe_policy, &g_probe)) {
        }
        sem_post(&g_probe_done);
    }
}

static pthread_t g_prober;

static void prober_start(void)
{
    sem_init(&g_probe_req, 0, 0);
    sem_init(&g_probe_done, 0, 0);
    CHECK(pthread_create(&g_prober, NULL, prober, NULL) == 0);
}

static double probe(const char *kind)
{
    g_probe.kind = kind;
    sem_post(&g_probe_req);
    sem_wait(&g_probe_done);
    return g_probe.available;
}

static void prober_stop(void)
{
    g_probe.kind = NULL;
    sem_post(&g_probe_req);
    CHECK(pthread_join(g_prober, NULL) == 0);
}

/* ---- Figure 1: threads never exceed the granted CPUs ------------------- */

#define FIG1_PER_CPU 3
static int g_k;
static int g_running, g_peak, g_done;
static int g_owner[CPU_SETSIZE];
static int g_granted[CPU_SETSIZE];
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

static void *fig1_thread(void *arg)
{
    int me = (int)(long)arg + 1;
    /* Its naps stand for work, and its lock is held for a moment: it keeps
     * its core through both (by default a sleep and a contended lock give
     * the core to the next thread, as in Poli-C). */
    CHECK(allot_release_on(0, NULL) == ALLOT_OK);
    allot_outcome_t c;
    allot_require(&c, allot_cores(1)) {
        int mine[4];
        int n = affinity(mine, 4);
        CHECK(n == 1);
        CHECK(c.ncores == 1 && ALLOT_CPU_ISSET((unsigned)mine[0], c.cpus));
        CHECK(g_granted[mine[0]]);
        pthread_mutex_lock(&g_lock);
        g_running++;
        if (g_running > g_peak)
            g_peak = g_running;
        CHECK(g_owner[mine[0]] == 0); /* alone on its CPU */
        g_owner[mine[0]] = me;
        pthread_mutex_unlock(&g_lock);
        for (int i = 0; i < 20; i++) {
            CHECK(sched_getcpu() == mine[0]);
            CHECK(g_owner[mine[0]] == me);
            sleep_ms(1);
        }
        pthread_mutex_lock(&g_lock);
        g_owner[mine[0]] = 0;
        g_running--;
        g_done++;
        pthread_mutex_unlock(&g_lock);
    }
    return NULL;
}

static void figure_1(int k)
{
    CHECK(k >= 1 && k <= g_ncpus);
    g_k = k;
    /* The first k CPUs, the others forbidden. */
    allot_req_t reqs[CPU_SETSIZE];
    for (int i = 0; i < g_ncpus; i++) {
        reqs[i] = allot_cpu(g_cpus[i], i < k ? 1.0 : 0.0);
        g_granted[g_cpus[i]] = i < k;
    }
    static allot_site_t site = ALLOT_SITE_INIT;
    allot_scope_t s = ALLOT_SCOPE_INIT;
    CHECK(allot_require_enter(&s, &site, reqs, (size_t)g_ncpus, 0) == ALLOT_OK);
    int mine[CPU_SETSIZE];
    CHECK(affinity(mine, CPU_SETSIZE) == k);
    pthread_t t[CPU_SETSIZE * FIG1_PER_CPU];
    int n = k * FIG1_PER_CPU;
    for (int i = 0; i < n; i++)
        CHECK(pthread_create(&t[i], NULL, fig1_thread, (void *)(long)i) == 0);
    /* Blocked in the joins, the parent lends its CPUs to the children. */
    for (int i = 0; i < n; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(affinity(mine, CPU_SETSIZE) == k);
    allot_require_leave(&s);
    CHECK(g_done == n);
    CHECK(g_peak >= 1 && g_peak <= k);
    CHECK(affinity(mine, CPU_SETSIZE) == g_ncpus);
    printf("peak %d of %d threads on %d CPUs\n", g_peak, n, k);
}

/* ---- Figure 6(c): an unmodified libgomp team ---------------------------- */

#ifdef _OPENMP
#define REGIONS 3
struct seen {
    int team, tid, cpu, ncpus;
};
static struct seen g_seen[REGIONS][16];
static int g_team_n;

static void omp_calc(int region)
{
#pragma omp parallel
    {
        int me = omp_get_thread_num();
        int mine[4];
        int n = affinity(mine, 4);
        if (me < 16) {
            g_seen[region][me].team = omp_get_num_threads();
            g_seen[region][me].tid = gettid();
            g_seen[region][me].cpu = mine[0];
            g_seen[region][me].ncpus = n;
        }
        /* Some work, so the threads overlap. */
        volatile double x = 0;
        for (int i = 0; i < 2000000; i++)
            x += i * 0.5;
    }
}

static void *do_part(void *arg)
{
    int cnt = *(int *)arg;
    allot_require(allot_before_spawn(allot_cores((uint32_t)cnt))) {
        omp_set_num_threads(cnt);
        allot_require(allot_after_spawn(allot_private(allot_cores(1))),
                      allot_for_child(allot_cores(1))) {
            for (int r = 0; r < REGIONS; r++)
                omp_calc(r);
        }
    }
    return NULL;
}

static void figure_6c(void)
{
    allot_outcome_t c;
    allot_require(&c, allot_min_cores(1)) {
        CHECK((int)c.ncores == g_ncpus);
        g_team_n = (int)c.ncores;
        pthread_t t;
        CHECK(pthread_create(&t, NULL, do_part, &g_team_n) == 0);
        CHECK(pthread_join(t, NULL) == 0);
    }
    for (int r = 0; r < REGIONS; r++) {
        for (int i = 0; i < g_team_n; i++) {
            struct seen *s = &g_seen[r][i];
            printf("region %d thread %d: tid %d, %d CPU(s), cpu %d\n", r, i, s->tid, s->ncpus,
                   s->cpu);
            CHECK(s->team == g_team_n);
            CHECK(s->ncpus == 1); /* each team thread alone on one CPU */
            for (int j = 0; j < i; j++)
                CHECK(g_seen[r][j].cpu != s->cpu); /* all distinct */
        }
    }
}
#endif

/* ---- errors ------------------------------------------------------------ */

static void errors(void)
{
    int rc = -1;
    int ran = 0;
    allot_require_try(&rc, allot_kind("gpu", 0, 1.0)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_UNKNOWN && !ran);
    CHECK(strstr(allot_last_error(), "unknown resource kind \"gpu\"") != NULL);
    CHECK(strstr(allot_last_error(), "require.c:") != NULL);
    allot_require_try(&rc, allot_named_policy("no_such_policy", NULL)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_UNKNOWN && !ran);
    CHECK(strstr(allot_last_error(), "no policy named \"no_such_policy\"") != NULL);
    allot_require_try(&rc, allot_cpu(100000, 1.0)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_UNKNOWN && !ran);
    CHECK(strstr(allot_last_error(), "has no device") != NULL);
    allot_require_try(&rc, allot_cpu(g_cpus[0], 2.0)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_INVALID && !ran);
    allot_require_try(&rc, allot_cpu_share(g_cpus[0], 1.5)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_INVALID && !ran);
    allot_require_try(&rc, allot_cores(100000)) { ran = 1; }
    CHECK(rc == ALLOT_ERR_NEVER && !ran);
    allot_req_t bad = allot_cores(1);
    bad.timing = 42;
    allot_require_try(&rc, bad) { ran = 1; }
    CHECK(rc == ALLOT_ERR_INVALID && !ran);
    CHECK(allot_require_enter(NULL, NULL, NULL, 0, 0) == ALLOT_ERR_INVALID);
    CHECK(allot_kind_define(NULL, 1, 1.0) == ALLOT_ERR_INVALID);
    CHECK(allot_kind_define("Zero", 0, 1.0) == ALLOT_ERR_INVALID);
    CHECK(allot_policy_define("fair_cores", probe_policy) == ALLOT_ERR_INVALID);
    CHECK(strcmp(allot_strerror(ALLOT_ERR_UNKNOWN), allot_strerror(-1)) != 0);
    /* And a good one afterwards. */
    allot_require_try(&rc, allot_cpu(g_cpus[0], 1.0)) { ran = 1; }
    CHECK(rc == ALLOT_OK && ran);
}

/* Each of these aborts; the test reads stderr. */
static void abort_unknown(void)
{
    say_line(__LINE__); allot_require(allot_kind("gpu", 0, 1.0)) {
        CHECK(0);
    }
}

static void abort_nested_larger(void)
{
    allot_require(allot_kind("Token", 0, 0.5)) {
        say_line(__LINE__); allot_require(allot_kind("Token", 0, 0.75)) {
            CHECK(0);
        }
    }
}

static void abort_double_exit(void)
{
    say_line(__LINE__); static allot_site_t site = ALLOT_SITE_INIT;
    allot_scope_t s = ALLOT_SCOPE_INIT;
    allot_req_t r = allot_kind("Token", 0, 1.0);
    CHECK(allot_require_enter(&s, &site, &r, 1, 0) == ALLOT_OK);
    allot_require_leave(&s);
    allot_require_leave(&s);
}

static allot_scope_t g_scope = ALLOT_SCOPE_INIT;

static void *leave_it(void *arg)
{
    (void)arg;
    allot_require_leave(&g_scope);
    return NULL;
}

static void abort_other_thread(void)
{
    say_line(__LINE__); static allot_site_t site = ALLOT_SITE_INIT;
    allot_req_t r = allot_kind("Token", 0, 1.0);
    CHECK(allot_require_enter(&g_scope, &site, &r, 1, 0) == ALLOT_OK);
    pthread_t t;
    CHECK(pthread_create(&t, NULL, leave_it, NULL) == 0);
    pthread_join(t, NULL);
}

static void abort_out_of_order(void)
{
    say_line(__LINE__); static allot_site_t outer = ALLOT_SITE_INIT;
    static allot_site_t inner = ALLOT_SITE_INIT;
    allot_scope_t a = ALLOT_SCOPE_INIT, b = ALLOT_SCOPE_INIT;
    allot_req_t r = allot_kind("Token", 0, 1.0);
    CHECK(allot_require_enter(&a, &outer, &r, 1, 0) == ALLOT_OK);
    CHECK(allot_require_enter(&b, &inner, &r, 1, 0) == ALLOT_OK);
    allot_require_leave(&a);
}

static int nested_policy(allot_view_t *v, void *arg)
{
    (void)v;
    (void)arg;
    say_line(__LINE__); allot_require(allot_cores(1)) {
    }
    return ALLOT_POLICY_SUCCESS;
}

static void abort_in_policy(void)
{
    allot_require(allot_policy("nested", nested_policy, NULL)) {
    }
}

/* ---- every way out of a block releases it ------------------------------ */

static int g_in;

/* Checks, inside a block holding Token 0 and CPU 0 alone. */
static void inside(void)
{
    int mine[CPU_SETSIZE];
    CHECK(affinity(mine, CPU_SETSIZE) == 1 && mine[0] == g_cpus[0]);
    CHECK(probe("Token") == 0.0);
    g_in++;
}

static void released(void)
{
    int mine[CPU_SETSIZE];
    CHECK(affinity(mine, CPU_SETSIZE) == g_ncpus);
    CHECK(probe("Token") == 1.0);
}

#define HOLD allot_kind("Token", 0, 1.0), allot_cpu(g_cpus[0], 1.0), allot_cpu(g_cpus[1], 0.0)

static int leave_by_return(void)
{
    allot_require(HOLD) {
        inside();
        return 7;
    }
    return 0;
}

static void exits(void)
{
    CHECK(g_ncpus >= 2);
    released();
    allot_require(HOLD) { inside(); } /* fall-through */
    released();
    for (int i = 0; i < 3; i++) {
        allot_require(HOLD) {
            inside();
            break; /* leaves the require block, not the loop */
        }
        released();
    }
    for (int i = 0; i < 2; i++) {
        allot_require(HOLD) {
            inside();
            continue;
        }
    }
    released();
    CHECK(leave_by_return() == 7);
    released();
    allot_require(HOLD) {
        inside();
        goto out;
    }
    CHECK(0);
out:
    released();
    /* Nested blocks left by one goto: inner first, then outer. */
    allot_require(allot_kind("Token", 0, 1.0)) {
        allot_require(allot_cpu(g_cpus[0], 1.0), allot_cpu(g_cpus[1], 0.0)) {
            goto out2;
        }
    }
    CHECK(0);
out2:
    released();
    CHECK(g_in == 8);
}

/* ---- a policy written in C, and shares --------------------------------- */

struct want {
    int n;
    int runs;
    sem_t failed;
};

static int n_free_cpus(allot_view_t *v, void *arg)
{
    struct want *w = arg;
    int got = 0;
    w->runs++;
    CHECK(allot_view_count(v, "cpu") == (size_t)g_ncpus);
    CHECK(allot_view_dev(v, "cpu", "nope") == NULL);
    CHECK(allot_view_max_available(v, "cpu") != NULL);
    CHECK(allot_view_min_waiters(v, "cpu") != NULL);
    CHECK(allot_view_total_waiters(v) < 1000);
    /* res_iter: every kind once, "cpu" first, each with its devices. */
    size_t kinds = 0;
    ALLOT_FOR_EACH_KIND(v, k) {
        if (kinds == 0) CHECK(strcmp(k, "cpu") == 0);
        CHECK(allot_view_count(v, k) > 0);
        kinds++;
    }
    CHECK(kinds >= 1);
    CHECK(allot_view_kind(v, kinds) == NULL);
    ALLOT_FOR_EACH_DEV(v, "cpu", d) {
        CHECK(strcmp(allot_dev_kind(d), "cpu") == 0);
        CHECK(allot_dev_max(d) == 1.0);
        CHECK(allot_view_dev(v, "cpu", allot_dev_name(d)) == d);
        if (got < w->n && allot_dev_available(d) >= 1) {
            allot_dev_request(d, 1);
            got++;
        } else {
            allot_dev_request(d, 0);
        }
    }
    if (got < w->n) {
        sem_post(&w->failed);
        return ALLOT_POLICY_FAILURE;
    }
    return ALLOT_POLICY_SUCCESS;
}

static int private_seen = -1;

static int record_ownership(allot_view_t *v, void *arg)
{
    (void)arg;
    private_seen = allot_view_ownership(v);
    return ALLOT_POLICY_SUCCESS;
}

static struct want g_b;

static void *wants_cpu0(void *arg)
{
    (void)arg;
    allot_outcome_t o;
    allot_require(&o, allot_named_policy("n_free_cpus", &g_b)) {
        CHECK(o.ncores == 1);
    }
    return NULL;
}

static void c_policy(void)
{
    struct want w;
    memset(&w, 0, sizeof w);
    w.n = 1;
    sem_init(&w.failed, 0, 0);
    allot_outcome_t o;
    allot_require(&o, allot_policy("n_free_cpus", n_free_cpus, &w)) {
        int mine[CPU_SETSIZE];
        CHECK(o.ncores == 1 && affinity(mine, CPU_SETSIZE) == 1);
        CHECK(ALLOT_CPU_ISSET((unsigned)mine[0], o.cpus));
    }
    CHECK(w.runs == 1);
    allot_require(allot_private(allot_policy("own", record_ownership, NULL))) {
    }
    CHECK(private_seen == ALLOT_OWN_PRIVATE);

    /* A policy that cannot be met runs again when availability changes:
     * B, created inside a block holding every CPU, shares it; its nested
     * policy finds nothing available while the parent runs there, and
     * runs again, successfully, once the parent has left. */
    CHECK(allot_policy_define("n_free_cpus", n_free_cpus) == ALLOT_OK);
    g_b.n = 1;
    sem_init(&g_b.failed, 0, 0);
    allot_req_t all[CPU_SETSIZE];
    for (int i = 0; i < g_ncpus; i++)
        all[i] = allot_cpu(g_cpus[i], 1.0);
    pthread_t b;
    static allot_site_t site = ALLOT_SITE_INIT;
    allot_scope_t s = ALLOT_SCOPE_INIT;
    CHECK(allot_require_enter(&s, &site, all, (size_t)g_ncpus, 0) == ALLOT_OK);
    CHECK(pthread_create(&b, NULL, wants_cpu0, NULL) == 0);
    /* Polled, keeping the block's CPUs through the naps: a sleep, like
     * sem_wait, would give them back for the wait, and B's policy would
     * find them. */
    uint32_t was;
    CHECK(allot_release_on(0, &was) == ALLOT_OK);
    while (sem_trywait(&g_b.failed) != 0)
        sleep_ms(1);
    CHECK(allot_release_on(was, NULL) == ALLOT_OK);
    allot_require_leave(&s);
    CHECK(pthread_join(b, NULL) == 0);
    CHECK(g_b.runs >= 2);
    printf("policy ran %d times\n", g_b.runs);

    /* Shares: half of what the enclosing block holds. */
    allot_require(allot_kind("Token", 0, 0.8)) {
        struct probe p = {"Token", -1};
        allot_require(allot_kind_share("Token", 0, 0.5)) {
            allot_require(allot_policy("probe", probe_policy, &p)) {
            }
            CHECK(p.available > 0.4 - 1e-9 && p.available < 0.4 + 1e-9);
        }
    }
}

/* ---- virtual kinds ------------------------------------------------------ */

static int g_holders, g_holders_peak;

static void *take_strong(void *arg)
{
    (void)arg;
    allot_require(allot_kind("StrongCore", 0, 1.0)) {
        pthread_mutex_lock(&g_lock);
        if (++g_holders > g_holders_peak)
            g_holders_peak = g_holders;
        pthread_mutex_unlock(&g_lock);
        sleep_ms(20);
        pthread_mutex_lock(&g_lock);
        g_holders--;
        pthread_mutex_unlock(&g_lock);
    }
    return NULL;
}

static void virtual_kind(void)
{
    int max_cpu = g_cpus[g_ncpus - 1] + 1;
    CHECK(allot_kind_define("StrongCore", (size_t)max_cpu, 2.0) == ALLOT_OK);
    CHECK(allot_kind_define("StrongCore", (size_t)max_cpu, 2.0) == ALLOT_OK);
    CHECK(allot_kind_define("StrongCore", 3, 5.0) == ALLOT_ERR_INVALID);
    CHECK(allot_kind_define("WeakCore", (size_t)max_cpu, 2.0) == ALLOT_OK);
    pthread_t t[6];
    for (int i = 0; i < 6; i++)
        CHECK(pthread_create(&t[i], NULL, take_strong, NULL) == 0);
    for (int i = 0; i < 6; i++)
        CHECK(pthread_join(t[i], NULL) == 0);
    CHECK(g_holders_peak >= 1 && g_holders_peak <= 2); /* a counter of 2 */
    printf("at most %d holders of 2\n", g_holders_peak);
    allot_outcome_t o;
    allot_require(&o, allot_strong_numa_node()) {
        CHECK(o.nnodes == 1 && (int)o.ncores >= 1);
    }
    allot_require(&o, allot_constrained(1, 1, ALLOT_DOMAIN_NUMA)) {
        CHECK(o.ncores == 1 && o.nnodes == 1);
    }
}

/* ---- a kind of the program's own (allot_kind_register) ---------------- */

static uint64_t g_link_bytes;
static double g_link_seen[2];
static int g_link_calls;
static double g_link_rates[2][2];
static int g_link_looks;

static int link_probe(void *arg, size_t dev, uint64_t *get1, uint64_t *get2)
{
    (void)arg;
    if (dev != 0)
        return 1; /* only device "a" is measured */
    *get1 = __atomic_load_n(&g_link_bytes, __ATOMIC_RELAXED);
    *get2 = 0;
    return 0;
}

static int link_restrict(void *arg, const double *amounts, size_t n)
{
    (void)arg;
    CHECK(n == 2);
    g_link_seen[0] = amounts[0];
    g_link_seen[1] = amounts[1];
    g_link_calls++;
    return 0;
}

static int link_peek(allot_view_t *v, void *arg)
{
    (void)arg;
    int i = 0;
    ALLOT_FOR_EACH_DEV(v, "Link", d) {
        if (i < 2)
            g_link_rates[g_link_looks][i++] = allot_dev_rate(d);
    }
    g_link_looks++;
    return ALLOT_POLICY_SUCCESS;
}

/* A kind registered from C: bad definitions refused; a policy sees the
 * rate its probe measures (none on the first look, none for the device
 * it does not measure); a per-device request reaches restrict_thread with
 * the thread's holdings (NaN where it holds nothing). */
static void user_kind(void)
{
    allot_kind_dev_t devs[2] = {{"a", 0.0, 1.0}, {"b", 0.0, 1.0}};
    allot_kind_ops_t ops = {link_probe, link_restrict, NULL, NULL};
    CHECK(allot_kind_register("Link", devs, 2, &ops) == ALLOT_OK);
    CHECK(allot_kind_register("Link", devs, 2, &ops) == ALLOT_ERR_INVALID);
    allot_kind_dev_t bad[1] = {{"x", 0.0, -1.0}};
    CHECK(allot_kind_register("Bad", bad, 1, &ops) == ALLOT_ERR_INVALID);
    CHECK(allot_kind_register("NoOps", devs, 2, NULL) == ALLOT_ERR_INVALID);
    /* Each look bracketed by clock reads: its probe ran between them. */
    double a = now_s();
    allot_require(allot_policy("peek", link_peek, NULL)) {
    }
    double b = now_s();
    __atomic_fetch_add(&g_link_bytes, 5000000, __ATOMIC_RELAXED); /* 5 MB */
    sleep_ms(100);
    double c = now_s();
    allot_require(allot_policy("peek", link_peek, NULL)) {
    }
    double d = now_s();
    CHECK(g_link_looks == 2);
    CHECK(g_link_rates[0][0] == -1.0 && g_link_rates[0][1] == -1.0);
    /* 5 MB over the time between the probes: between c - b and d - a,
     * however long the machine kept this thread waiting. */
    CHECK(g_link_rates[1][0] >= 5e6 / (d - a) * 0.999 &&
          g_link_rates[1][0] <= 5e6 / (c - b) * 1.001);
    CHECK(g_link_rates[1][1] == -1.0);
    double in_a = 0.0, in_b = 0.0;
    allot_require(allot_kind_dev("Link", "a", 1.0)) {
        CHECK(g_link_calls >= 1 && g_link_seen[0] == 1.0 && isnan(g_link_seen[1]));
        in_a = g_link_seen[0];
        in_b = g_link_seen[1];
    }
    /* Leaving gives it back: restrict_thread again, nothing held. */
    CHECK(isnan(g_link_seen[0]) && isnan(g_link_seen[1]));
    printf("Link: rate %.0f B/s after 5 MB in 0.1 s; restrict saw a=%g b=%g, then a=%g\n",
           g_link_rates[1][0], in_a, in_b, g_link_seen[0]);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_ncpus = affinity(g_cpus, CPU_SETSIZE);
    const char *mode = argc > 1 ? argv[1] : "";
    CHECK(allot_kind_define("Token", 1, 1.0) == ALLOT_OK);
    prober_start();
    if (strcmp(mode, "fig1") == 0)
        figure_1(argc > 2 ? atoi(argv[2]) : g_ncpus);
#ifdef _OPENMP
    else if (strcmp(mode, "fig6c") == 0)
        figure_6c();
#endif
    else if (strcmp(mode, "errors") == 0)
        errors();
    else if (strcmp(mode, "abort_unknown") == 0)
        abort_unknown();
    else if (strcmp(mode, "abort_nested_larger") == 0)
        abort_nested_larger();
    else if (strcmp(mode, "abort_double_exit") == 0)
        abort_double_exit();
    else if (strcmp(mode, "abort_other_thread") == 0)
        abort_other_thread();
    else if (strcmp(mode, "abort_out_of_order") == 0)
        abort_out_of_order();
    else if (strcmp(mode, "abort_in_policy") == 0)
        abort_in_policy();
    else if (strcmp(mode, "exits") == 0)
        exits();
    else if (strcmp(mode, "policy") == 0)
        c_policy();
    else if (strcmp(mode, "virtual") == 0)
        virtual_kind();
    else if (strcmp(mode, "user_kind") == 0)
        user_kind();
    else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    prober_stop();
    printf("ok %s\n", mode);
    return 0;
}
