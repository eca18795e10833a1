/*
 * Concurrent hash joins of two kinds: allot's version of Poli-C's join
 * case study (see docs/benchmarks.md, "Hash joins").
 *
 *   join MODE [--joins J] [--r TUPLES] [--s TUPLES] [--threads T]
 *
 * J joins start at once, alternating between two algorithms, each joining
 * a relation R of TUPLES tuples with a relation S of --s tuples (8-byte
 * tuples: a 4-byte key and a 4-byte payload; every S key matches exactly
 * one R key). Each join runs its own team of pthreads.
 *
 *   radix        (cache-sensitive, "strong") partitions R and S by the low
 *                bits of the key into partitions whose hash tables fit in
 *                a core's cache, then builds and probes each partition;
 *   no-partition (cache-insensitive, "weak") builds one hash table over
 *                all of R and probes it with S: most probes miss the cache.
 *
 * MODE (the first four are what a user could do without allot):
 *   plain   every join at once with T threads (default: the CPUs this
 *           process may use), wherever the kernel puts them.
 *   single  every join at once with one thread each.
 *   serial  one join at a time (in order), T threads each.
 *   pairs   at most two joins at a time, whatever their kinds (a counting
 *           semaphore), T threads each: the concurrency allot's policy
 *           allows on one node, without its choice of who runs together.
 *   allot   (built with -DJOIN_ALLOT) every join enters
 *           allot_require(&c, allot_strong_numa_node()) (radix) or
 *           allot_weak_numa_node() (no-partition) and runs c.ncores
 *           threads: joins of the other kind never share its cores, and
 *           at most two joins share a core (the virtual kinds StrongCore
 *           and WeakCore, defined here with 2.0 per core).
 *
 * Prints one line per join and a summary:
 *   join id=K kind=radix|nopart start_s= end_s= mtuples_per_s= matches=
 *   result mode=M joins=J seconds=S mtuples_per_s=T radix_mtps=A nopart_mtps=B
 * Throughput counts R + S tuples per second of a join's own run (start to
 * end), summed over joins for the kind columns; `seconds` is the makespan
 * and `mtuples_per_s` all tuples over it. Each join checks that it found
 * |S| matches and that the payload sum is right (exit status 1 if not).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef JOIN_ALLOT
#include <allot.h>
#endif

typedef struct {
    uint32_t key, payload;
} tuple_t;

static size_t g_r = 1u << 21, g_s = 1u << 23;
static int g_threads;
static int g_allot __attribute__((unused)); /* allot mode (JOIN_ALLOT builds) */
static sem_t g_slots; /* joins that may run at once (serial, pairs) */
static int g_limited;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "join: out of memory\n");
        exit(2);
    }
    return p;
}

/* A join's relations and results, shared by its threads. */
struct join {
    int id, radix, threads;
    tuple_t *r, *s;
    uint64_t expect_sum;
    pthread_barrier_t barrier;
    /* no-partition: chained hash table over R */
    uint32_t *heads, *next, mask;
    /* radix: partitioned copies and partition offsets */
    tuple_t *rp, *sp;
    size_t *rhist, *shist; /* [thread][partition] write offsets */
    atomic_int next_part;
    atomic_ullong matches, sum;
    double start, end;
};

enum { RADIX_BITS = 10, PARTS = 1 << RADIX_BITS };

static inline uint32_t hash32(uint32_t k)
{
    return k * 2654435761u;
}

/* Relations: R's keys are a permutation of 1..|R| (with payload = key), S's
 * keys are drawn from them. */
static void make_relations(struct join *j)
{
    j->r = xmalloc(g_r * sizeof *j->r);
    j->s = xmalloc(g_s * sizeof *j->s);
    for (size_t i = 0; i < g_r; i++)
        j->r[i] = (tuple_t){(uint32_t)i + 1, (uint32_t)i + 1};
    uint64_t seed = (uint64_t)j->id * 1000003u + 17;
    for (size_t i = g_r - 1; i > 0; i--) {
        size_t k = mix(seed + i) % (i + 1);
        tuple_t t = j->r[i];
        j->r[i] = j->r[k];
        j->r[k] = t;
    }
    j->expect_sum = 0;
    for (size_t i = 0; i < g_s; i++) {
        uint32_t key = (uint32_t)(mix(seed * 7 + i) % g_r) + 1;
        j->s[i] = (tuple_t){key, (uint32_t)i};
        j->expect_sum += key;
    }
}

static void slice(size_t n, int parts, int t, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)t / (size_t)parts;
    *hi = n * (size_t)(t + 1) / (size_t)parts;
}

static void nopart_thread(struct join *j, int t)
{
    size_t lo, hi;
    slice(g_r, j->threads, t, &lo, &hi);
    for (size_t i = lo; i < hi; i++) {
        uint32_t b = hash32(j->r[i].key) & j->mask;
        uint32_t old = __atomic_load_n(&j->heads[b], __ATOMIC_RELAXED);
        do {
            j->next[i] = old;
        } while (!__atomic_compare_exchange_n(&j->heads[b], &old, (uint32_t)i + 1, 1,
                                              __ATOMIC_RELEASE, __ATOMIC_RELAXED));
    }
    pthread_barrier_wait(&j->barrier);
    slice(g_s, j->threads, t, &lo, &hi);
    uint64_t m = 0, sum = 0;
    for (size_t i = lo; i < hi; i++) {
        uint32_t k = j->s[i].key;
        for (uint32_t e = j->heads[hash32(k) & j->mask]; e; e = j->next[e - 1])
            if (j->r[e - 1].key == k) {
                m++;
                sum += j->r[e - 1].payload;
            }
    }
    atomic_fetch_add(&j->matches, m);
    atomic_fetch_add(&j->sum, sum);
}

/* Scatters rel[lo..hi) by partition into out, at this thread's offsets. */
static void scatter(const tuple_t *rel, size_t lo, size_t hi, tuple_t *out, size_t *off)
{
    for (size_t i = lo; i < hi; i++)
        out[off[rel[i].key & (PARTS - 1)]++] = rel[i];
}

static void count(const tuple_t *rel, size_t lo, size_t hi, size_t *hist)
{
    memset(hist, 0, PARTS * sizeof *hist);
    for (size_t i = lo; i < hi; i++)
        hist[rel[i].key & (PARTS - 1)]++;
}

/* Turns every thread's counts into its write offsets (thread 0 only). */
static void offsets(size_t *hist, int threads)
{
    size_t at = 0;
    for (int p = 0; p < PARTS; p++)
        for (int t = 0; t < threads; t++) {
            size_t c = hist[(size_t)t * PARTS + p];
            hist[(size_t)t * PARTS + p] = at;
            at += c;
        }
}

static void radix_thread(struct join *j, int t)
{
    size_t rlo, rhi, slo, shi;
    slice(g_r, j->threads, t, &rlo, &rhi);
    slice(g_s, j->threads, t, &slo, &shi);
    size_t *rh = j->rhist + (size_t)t * PARTS, *sh = j->shist + (size_t)t * PARTS;
    count(j->r, rlo, rhi, rh);
    count(j->s, slo, shi, sh);
    if (pthread_barrier_wait(&j->barrier) == PTHREAD_BARRIER_SERIAL_THREAD) {
        offsets(j->rhist, j->threads);
        offsets(j->shist, j->threads);
    }
    pthread_barrier_wait(&j->barrier);
    scatter(j->r, rlo, rhi, j->rp, rh);
    scatter(j->s, slo, shi, j->sp, sh);
    pthread_barrier_wait(&j->barrier);
    /* After the scatter, the last thread's offset for partition p is
     * where p ends, and p starts where p - 1 ends. */
    const size_t last = (size_t)(j->threads - 1) * PARTS;
    size_t cap = 0;
    uint32_t *heads = NULL, *next = NULL;
    uint64_t m = 0, sum = 0;
    for (int p; (p = atomic_fetch_add(&j->next_part, 1)) < PARTS;) {
        const size_t r0 = p ? j->rhist[last + p - 1] : 0, r1 = j->rhist[last + p];
        const size_t s0 = p ? j->shist[last + p - 1] : 0, s1 = j->shist[last + p];
        const size_t n = r1 - r0;
        size_t buckets = 1;
        while (buckets < n * 2)
            buckets <<= 1;
        if (buckets > cap || n > cap) {
            cap = buckets > n ? buckets : n;
            free(heads);
            free(next);
            heads = xmalloc(cap * sizeof *heads);
            next = xmalloc(cap * sizeof *next);
        }
        memset(heads, 0, buckets * sizeof *heads);
        const tuple_t *rp = j->rp + r0;
        const uint32_t mask = (uint32_t)(buckets - 1);
        for (size_t i = 0; i < n; i++) {
            uint32_t b = (hash32(rp[i].key) >> RADIX_BITS) & mask;
            next[i] = heads[b];
            heads[b] = (uint32_t)i + 1;
        }
        for (size_t i = s0; i < s1; i++) {
            uint32_t k = j->sp[i].key;
            for (uint32_t e = heads[(hash32(k) >> RADIX_BITS) & mask]; e; e = next[e - 1])
                if (rp[e - 1].key == k) {
                    m++;
                    sum += rp[e - 1].payload;
                }
        }
    }
    free(heads);
    free(next);
    atomic_fetch_add(&j->matches, m);
    atomic_fetch_add(&j->sum, sum);
}

struct worker {
    struct join *j;
    int t;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    if (w->j->radix)
        radix_thread(w->j, w->t);
    else
        nopart_thread(w->j, w->t);
    return NULL;
}

/* Runs join j with `threads` threads (created here: inside a require
 * block they share its CPUs). */
static void run_join(struct join *j, int threads)
{
    j->threads = threads;
    pthread_barrier_init(&j->barrier, NULL, (unsigned)threads);
    if (j->radix) {
        j->rp = xmalloc(g_r * sizeof *j->rp);
        j->sp = xmalloc(g_s * sizeof *j->sp);
        j->rhist = xmalloc((size_t)threads * PARTS * sizeof *j->rhist);
        j->shist = xmalloc((size_t)threads * PARTS * sizeof *j->shist);
    } else {
        size_t buckets = 1;
        while (buckets < g_r)
            buckets <<= 1;
        j->mask = (uint32_t)(buckets - 1);
        j->heads = calloc(buckets, sizeof *j->heads);
        j->next = xmalloc(g_r * sizeof *j->next);
        if (!j->heads) {
            fprintf(stderr, "join: out of memory\n");
            exit(2);
        }
    }
    pthread_t *t = xmalloc((size_t)threads * sizeof *t);
    struct worker *w = xmalloc((size_t)threads * sizeof *w);
    j->start = now_s();
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){j, i};
        if (pthread_create(&t[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "join: cannot start a thread\n");
            exit(2);
        }
    }
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    j->end = now_s();
    free(t);
    free(w);
    free(j->rp);
    free(j->sp);
    free(j->rhist);
    free(j->shist);
    free(j->heads);
    free(j->next);
    pthread_barrier_destroy(&j->barrier);
}

static void *join_main(void *arg)
{
    struct join *j = arg;
#ifdef JOIN_ALLOT
    if (g_allot) {
        allot_outcome_t c;
        allot_require(&c, j->radix ? allot_strong_numa_node() : allot_weak_numa_node()) {
            run_join(j, (int)c.ncores);
        }
        return NULL;
    }
#endif
    if (g_limited)
        while (sem_wait(&g_slots) != 0) {
        }
    run_join(j, g_threads);
    if (g_limited)
        sem_post(&g_slots);
    return NULL;
}

static int usable_cpus(void)
{
    cpu_set_t s;
    if (sched_getaffinity(0, sizeof s, &s) != 0)
        return 1;
    return CPU_COUNT(&s);
}

static long positive(const char *name, const char *v)
{
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 1 || x > 1L << 30) {
        fprintf(stderr, "join: %s must be a positive integer, not %s\n", name, v);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        fprintf(argc < 2 ? stderr : stdout,
                "usage: join plain|single|serial|pairs|allot [--joins J] [--r TUPLES] [--s TUPLES] [--threads T]\n");
        return argc < 2 ? 2 : 0;
    }
    int joins = 8;
    g_threads = usable_cpus();
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--joins"))
            joins = (int)positive("--joins", argv[i + 1]);
        else if (!strcmp(argv[i], "--r"))
            g_r = (size_t)positive("--r", argv[i + 1]);
        else if (!strcmp(argv[i], "--s"))
            g_s = (size_t)positive("--s", argv[i + 1]);
        else if (!strcmp(argv[i], "--threads"))
            g_threads = (int)positive("--threads", argv[i + 1]);
        else {
            fprintf(stderr, "join: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (!strcmp(argv[1], "plain")) {
    } else if (!strcmp(argv[1], "single")) {
        g_threads = 1;
    } else if (!strcmp(argv[1], "serial") || !strcmp(argv[1], "pairs")) {
        g_limited = 1;
        sem_init(&g_slots, 0, !strcmp(argv[1], "serial") ? 1 : 2);
    }
#ifdef JOIN_ALLOT
    else if (!strcmp(argv[1], "allot")) {
        g_allot = 1;
        /* Poli-C's bookkeeping kinds: one device per CPU, two joins each. */
        size_t cpus = (size_t)sysconf(_SC_NPROCESSORS_CONF);
        if (allot_kind_define("StrongCore", cpus, 2.0) != 0 ||
            allot_kind_define("WeakCore", cpus, 2.0) != 0) {
            fprintf(stderr, "join: cannot define the virtual kinds: %s\n", allot_last_error());
            return 2;
        }
    }
#endif
    else {
        fprintf(stderr, "join: unknown mode %s\n", argv[1]);
        return 2;
    }
    struct join *js = calloc((size_t)joins, sizeof *js);
    pthread_t *t = xmalloc((size_t)joins * sizeof *t);
    if (!js) {
        fprintf(stderr, "join: out of memory\n");
        return 2;
    }
    for (int i = 0; i < joins; i++) {
        js[i].id = i;
        js[i].radix = i % 2 == 0;
        make_relations(&js[i]);
    }
    const double t0 = now_s();
    for (int i = 0; i < joins; i++)
        if (pthread_create(&t[i], NULL, join_main, &js[i]) != 0) {
            fprintf(stderr, "join: cannot start a join\n");
            return 2;
        }
    int bad = 0;
    double end = t0, tput[2] = {0, 0};
    for (int i = 0; i < joins; i++) {
        pthread_join(t[i], NULL);
        struct join *j = &js[i];
        double secs = j->end - j->start, mtps = (double)(g_r + g_s) / secs * 1e-6;
        tput[j->radix] += mtps;
        if (j->end > end)
            end = j->end;
        printf("join id=%d kind=%s start_s=%.4f end_s=%.4f mtuples_per_s=%.2f matches=%llu\n",
               i, j->radix ? "radix" : "nopart", j->start - t0, j->end - t0, mtps,
               (unsigned long long)j->matches);
        if (j->matches != g_s || j->sum != j->expect_sum) {
            fprintf(stderr, "join: join %d found %llu matches (sum %llu), expected %zu (%llu)\n",
                    i, (unsigned long long)j->matches, (unsigned long long)j->sum, g_s,
                    (unsigned long long)j->expect_sum);
            bad = 1;
        }
    }
    const double secs = end - t0;
    printf("result mode=%s joins=%d seconds=%.4f mtuples_per_s=%.2f radix_mtps=%.2f "
           "nopart_mtps=%.2f\n",
           argv[1], joins, secs, (double)(g_r + g_s) * joins / secs * 1e-6, tput[1], tput[0]);
    return bad;
}
