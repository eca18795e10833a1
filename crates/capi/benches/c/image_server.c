/*
 * An image-blurring server under a Poisson stream of requests: allot's
 * require case study (see docs/benchmarks.md, "Image server").
 *
 *   image_server calibrate [OPTIONS]
 *   image_server fixed N RATE [OPTIONS]
 *   image_server fair RATE [OPTIONS]        (built with -DIMAGE_SERVER_ALLOT)
 *   image_server numa RATE [OPTIONS]        (the same)
 *
 * OPTIONS: --burst SECONDS (3), --seed S (1), --width W (1024),
 *          --height H (768), --radius R (3), --passes P (2),
 *          --trace PATH (one line per request, below)
 *
 * A generator thread draws exponential inter-arrival times for RATE
 * requests per second over the burst and, at each arrival, starts a fresh
 * handler thread. The handler blurs its own copy of one synthetic RGB image
 * (P passes of a separable box blur of radius R, each direction a
 * `#pragma omp parallel for` over rows):
 *
 *   fixed N  omp_set_num_threads(N), nothing else: plain libgomp, every
 *            request runs N threads whatever the load.
 *   fair     allot_require(&c, allot_fair_cores()) { omp_set_num_threads(
 *            c.ncores); blur }: the free cores shared among the requests
 *            waiting now (at least one each), waiting while none is free.
 *   numa     the same with allot_fair_numa(): a NUMA node of its own for
 *            each request while there are nodes enough, else that share
 *            of cores within one node (the paper's second policy).
 *
 * The bench runs `fair` with liballot's preload shim: the team's threads
 * are then made through the shim's pthread_create, share the request's
 * block, and are placed one per granted core.
 *
 * Why a fresh thread per request: a require block sets the affinity of the
 * thread that enters it, and libgomp creates a team's threads from the
 * primary thread (they inherit its affinity) the first time that thread
 * opens a region, then keeps and reuses them. A team reused by a later
 * request would keep the CPUs of an earlier grant. A new thread has no
 * team yet, so its team is created inside the block, on the granted CPUs,
 * and goes away when the thread ends. The fixed variants use the same
 * thread per request, so thread and team creation cost the same in all.
 *
 * Latency runs from a request's scheduled arrival to the end of its blur
 * (CLOCK_MONOTONIC), so a late generator counts against the server as a
 * client would see it. After the burst the program waits for every request
 * and prints one line:
 *
 *   result rate=R variant=V requests=N mean_ms= p50_ms= p95_ms= max_ms=
 *          wait_ms= cores= span_s= checksum=
 *
 * wait_ms: mean time from arrival to the start of the blur (in `fair`, the
 * wait for cores); cores: mean team size; span_s: first arrival to last
 * completion; checksum: a hash of the output image (every request blurs
 * the same input, so all must produce the same image, whatever their team
 * size: a mismatch is an error, exit status 1).
 *
 * --trace PATH writes, per request in arrival order, "arrival start done
 * cores cpu" (CLOCK_MONOTONIC seconds, shared by every process of a
 * machine; cpu: the CPU time of the request's own thread),
 * so the requests of several processes can be put on one time line:
 * scripts/bench-image-servers.sh uses it to count the CPU time that idled
 * while a request waited.
 *
 * `calibrate` times one request alone, with 1 and with 2 threads (median of
 * 7 after a warm-up, each on a fresh thread like a real request), and
 * prints: calibrate service1_ms= service2_ms= ... checksum=
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef IMAGE_SERVER_ALLOT
#include <allot.h>
#endif

struct params {
    int width, height, radius, passes;
    double burst_s;
    uint64_t seed;
    const char *trace; /* --trace PATH, or NULL */
};

static struct params g_p = {1024, 768, 3, 2, 3.0, 1, NULL};
static uint8_t *g_src; /* the shared input image, read-only after start */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void sleep_until(double t)
{
    struct timespec ts;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
}

/* splitmix64: a small, seedable generator for inputs and arrivals. */
static uint64_t next_u64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *s)
{
    return ((double)(next_u64(s) >> 11) + 0.5) * 0x1.0p-53; /* in (0, 1) */
}

/* ------------------------------------------------------------------------ */
/* The filter                                                               */
/* ------------------------------------------------------------------------ */

static inline int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* Box blur of radius r along each row of an interleaved RGB image. */
static void blur_rows(const uint8_t *in, uint8_t *out, int w, int h, int r, uint32_t mul)
{
    const int stride = 3 * w;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        const uint8_t *row = in + (size_t)y * (size_t)stride;
        uint8_t *dst = out + (size_t)y * (size_t)stride;
        for (int x = 0; x < w; x++) {
            uint32_t acc[3] = {0, 0, 0};
            if (x >= r && x + r < w) {
                const uint8_t *p = row + 3 * (x - r);
                for (int k = 0; k < 3 * (2 * r + 1); k += 3) {
                    acc[0] += p[k];
                    acc[1] += p[k + 1];
                    acc[2] += p[k + 2];
                }
            } else {
                for (int k = -r; k <= r; k++) {
                    const uint8_t *p = row + 3 * clampi(x + k, 0, w - 1);
                    acc[0] += p[0];
                    acc[1] += p[1];
                    acc[2] += p[2];
                }
            }
            for (int c = 0; c < 3; c++)
                dst[3 * x + c] = (uint8_t)((acc[c] * mul + 0x8000u) >> 16);
        }
    }
}

/* Box blur of radius r down each column: row y of `out` from rows y-r..y+r. */
static void blur_cols(const uint8_t *in, uint8_t *out, int w, int h, int r, uint32_t mul)
{
    const int stride = 3 * w;
#pragma omp parallel for schedule(static)
    for (int y = 0; y < h; y++) {
        uint32_t acc[3 * 4096];
        uint8_t *dst = out + (size_t)y * (size_t)stride;
        for (int x0 = 0; x0 < stride; x0 += 3 * 4096) {
            int n = stride - x0 < 3 * 4096 ? stride - x0 : 3 * 4096;
            memset(acc, 0, (size_t)n * sizeof acc[0]);
            for (int k = -r; k <= r; k++) {
                const uint8_t *src = in + (size_t)clampi(y + k, 0, h - 1) * (size_t)stride + x0;
                for (int i = 0; i < n; i++)
                    acc[i] += src[i];
            }
            for (int i = 0; i < n; i++)
                dst[x0 + i] = (uint8_t)((acc[i] * mul + 0x8000u) >> 16);
        }
    }
}

/* Blurs g_src with `threads` OpenMP threads; returns the output's checksum. */
static uint64_t blur_image(int threads)
{
    const int w = g_p.width, h = g_p.height, r = g_p.radius;
    const size_t bytes = (size_t)w * (size_t)h * 3;
    const uint32_t mul = (uint32_t)((65536u + (unsigned)(2 * r + 1) / 2) / (unsigned)(2 * r + 1));
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) {
        fprintf(stderr, "image_server: out of memory\n");
        exit(2);
    }
    omp_set_num_threads(threads);
    const uint8_t *in = g_src;
    for (int pass = 0; pass < g_p.passes; pass++) {
        blur_rows(in, b, w, h, r, mul);
        blur_cols(b, a, w, h, r, mul);
        in = a;
    }
    /* The checksum reads the whole output, in parallel like the filter. */
    const int stride = 3 * w;
    uint64_t sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (int y = 0; y < h; y++) {
        const uint8_t *row = a + (size_t)y * (size_t)stride;
        uint64_t rs = 0;
        for (int i = 0; i < stride; i++)
            rs += (uint64_t)row[i] * (uint64_t)(i + 1);
        sum += rs * (2 * (uint64_t)y + 1);
    }
    free(a);
    free(b);
    return sum;
}

static void make_source(void)
{
    const size_t bytes = (size_t)g_p.width * (size_t)g_p.height * 3;
    g_src = malloc(bytes);
    if (!g_src) {
        fprintf(stderr, "image_server: out of memory\n");
        exit(2);
    }
    uint64_t s = 42;
    for (int y = 0; y < g_p.height; y++)
        for (int x = 0; x < g_p.width; x++) {
            uint8_t *p = g_src + 3 * ((size_t)y * (size_t)g_p.width + (size_t)x);
            uint8_t noise = (uint8_t)(next_u64(&s) & 63);
            p[0] = (uint8_t)((x * 255) / g_p.width / 2 + noise);
            p[1] = (uint8_t)((y * 255) / g_p.height / 2 + noise);
            p[2] = (uint8_t)(((x ^ y) & 0x7f) + noise);
        }
}

/* ------------------------------------------------------------------------ */
/* Requests                                                                 */
/* ------------------------------------------------------------------------ */

enum variant { FIXED, FAIR, NUMA };

struct request {
    double arrival; /* scheduled arrival */
    double start;   /* blur started (in `fair`: cores granted) */
    double done;
    double cpu; /* CPU time of the handler thread, seconds */
    int cores;
    uint64_t checksum;
    pthread_t thread;
};

static enum variant g_variant;
static int g_fixed_n;

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *handle(void *arg)
{
    struct request *rq = arg;
    if (g_variant == FIXED) {
        rq->start = now_s();
        rq->cores = g_fixed_n;
        rq->checksum = blur_image(g_fixed_n);
        rq->done = now_s();
        rq->cpu = thread_cpu_s();
        return NULL;
    }
#ifdef IMAGE_SERVER_ALLOT
    allot_outcome_t c;
    allot_require(&c, g_variant == NUMA ? allot_fair_numa() : allot_fair_cores()) {
        rq->start = now_s();
        rq->cores = (int)c.ncores;
        rq->checksum = blur_image((int)c.ncores);
    }
    rq->done = now_s();
    rq->cpu = thread_cpu_s();
#endif
    return NULL;
}

static void start_thread(struct request *rq)
{
    int rc = pthread_create(&rq->thread, NULL, handle, rq);
    if (rc != 0) {
        fprintf(stderr, "image_server: pthread_create: %s\n", strerror(rc));
        exit(2);
    }
}

struct burst {
    struct request *reqs;
    size_t n;
    double t0;
};

static void *generate(void *arg)
{
    struct burst *b = arg;
    for (size_t i = 0; i < b->n; i++) {
        sleep_until(b->reqs[i].arrival);
        start_thread(&b->reqs[i]);
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Nearest-rank percentile of sorted v[0..n). */
static double percentile(const double *v, size_t n, double q)
{
    size_t rank = (size_t)ceil(q * (double)n);
    return v[rank == 0 ? 0 : rank - 1];
}

static int serve(double rate, const char *name)
{
    /* Arrivals: a Poisson process of `rate` over the burst, drawn up front
     * from the seed so every variant sees the same sequence. */
    uint64_t s = g_p.seed * 0x2545f4914f6cdd1dULL + 7;
    size_t cap = 64, n = 0;
    struct request *reqs = calloc(cap, sizeof *reqs);
    const double t0 = now_s() + 0.05;
    for (double t = -log(uniform01(&s)) / rate; t < g_p.burst_s; t += -log(uniform01(&s)) / rate) {
        if (n == cap) {
            cap *= 2;
            reqs = realloc(reqs, cap * sizeof *reqs);
            if (!reqs) {
                fprintf(stderr, "image_server: out of memory\n");
                return 2;
            }
        }
        memset(&reqs[n], 0, sizeof reqs[n]);
        reqs[n++].arrival = t0 + t;
    }
    struct burst b = {reqs, n, t0};
    pthread_t gen;
    if (pthread_create(&gen, NULL, generate, &b) != 0) {
        fprintf(stderr, "image_server: cannot start the generator\n");
        return 2;
    }
    pthread_join(gen, NULL);
    for (size_t i = 0; i < n; i++)
        pthread_join(reqs[i].thread, NULL);

    double *lat = malloc((n ? n : 1) * sizeof *lat);
    double sum = 0, wait = 0, cores = 0, last = t0;
    uint64_t checksum = 0;
    for (size_t i = 0; i < n; i++) {
        lat[i] = (reqs[i].done - reqs[i].arrival) * 1e3;
        sum += lat[i];
        wait += (reqs[i].start - reqs[i].arrival) * 1e3;
        cores += reqs[i].cores;
        if (reqs[i].done > last)
            last = reqs[i].done;
        if (i > 0 && reqs[i].checksum != reqs[0].checksum) {
            fprintf(stderr, "image_server: request %zu produced a different image\n", i);
            return 1;
        }
    }
    if (n)
        checksum = reqs[0].checksum;
    if (g_p.trace) {
        FILE *t = fopen(g_p.trace, "w");
        if (!t) {
            fprintf(stderr, "image_server: cannot write %s: %s\n", g_p.trace, strerror(errno));
            return 2;
        }
        for (size_t i = 0; i < n; i++)
            fprintf(t, "%.6f %.6f %.6f %d %.6f\n", reqs[i].arrival, reqs[i].start,
                    reqs[i].done, reqs[i].cores, reqs[i].cpu);
        if (fclose(t) != 0) {
            fprintf(stderr, "image_server: cannot write %s: %s\n", g_p.trace, strerror(errno));
            return 2;
        }
    }
    qsort(lat, n, sizeof *lat, cmp_double);
    double dn = n ? (double)n : 1.0;
    printf("result rate=%.3f variant=%s requests=%zu mean_ms=%.3f p50_ms=%.3f p95_ms=%.3f "
           "max_ms=%.3f wait_ms=%.3f cores=%.3f span_s=%.3f checksum=%016llx\n",
           rate, name, n, sum / dn, n ? percentile(lat, n, 0.50) : 0.0,
           n ? percentile(lat, n, 0.95) : 0.0, n ? lat[n - 1] : 0.0, wait / dn, cores / dn,
           n ? last - reqs[0].arrival : 0.0, (unsigned long long)checksum);
    free(lat);
    free(reqs);
    return 0;
}

/* One request alone, `threads` wide, on a fresh thread: median of 7. */
static double service_ms(int threads, uint64_t *checksum)
{
    enum { RUNS = 7 };
    double t[RUNS];
    g_variant = FIXED;
    g_fixed_n = threads;
    for (int i = -1; i < RUNS; i++) {
        struct request rq = {0};
        rq.arrival = now_s();
        start_thread(&rq);
        pthread_join(rq.thread, NULL);
        if (i >= 0)
            t[i] = (rq.done - rq.arrival) * 1e3;
        *checksum = rq.checksum;
    }
    qsort(t, RUNS, sizeof t[0], cmp_double);
    return t[RUNS / 2];
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: image_server calibrate [OPTIONS]\n"
            "       image_server fixed N RATE [OPTIONS]\n"
#ifdef IMAGE_SERVER_ALLOT
            "       image_server fair RATE [OPTIONS]\n"
            "       image_server numa RATE [OPTIONS]\n"
#endif
            "options: --burst SECONDS (3)  --seed S (1)  --width W (1024)  --height H (768)\n"
            "         --radius R (3)  --passes P (2)  --trace PATH\n");
}

static int parse_options(int argc, char **argv, int first)
{
    for (int i = first; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc) {
            fprintf(stderr, "image_server: %s needs a value\n", o);
            return -1;
        }
        const char *v = argv[++i];
        if (!strcmp(o, "--burst"))
            g_p.burst_s = atof(v);
        else if (!strcmp(o, "--seed"))
            g_p.seed = strtoull(v, NULL, 10);
        else if (!strcmp(o, "--width"))
            g_p.width = atoi(v);
        else if (!strcmp(o, "--height"))
            g_p.height = atoi(v);
        else if (!strcmp(o, "--radius"))
            g_p.radius = atoi(v);
        else if (!strcmp(o, "--passes"))
            g_p.passes = atoi(v);
        else if (!strcmp(o, "--trace"))
            g_p.trace = v;
        else {
            fprintf(stderr, "image_server: unknown option %s\n", o);
            return -1;
        }
    }
    if (g_p.width < 1 || g_p.height < 1 || g_p.width > 65536 || g_p.height > 65536 ||
        g_p.radius < 0 || g_p.radius > 1000 || g_p.passes < 1 || !(g_p.burst_s > 0)) {
        fprintf(stderr, "image_server: option out of range\n");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *mode = argv[1];
    if (!strcmp(mode, "calibrate")) {
        if (parse_options(argc, argv, 2))
            return 2;
        make_source();
        uint64_t c1 = 0, c2 = 0;
        double s1 = service_ms(1, &c1);
        double s2 = service_ms(2, &c2);
        printf("calibrate service1_ms=%.3f service2_ms=%.3f width=%d height=%d radius=%d "
               "passes=%d checksum=%016llx\n",
               s1, s2, g_p.width, g_p.height, g_p.radius, g_p.passes, (unsigned long long)c1);
        return c1 == c2 ? 0 : 1;
    }
    char name[32];
    double rate;
    int first;
    if (!strcmp(mode, "fixed") && argc >= 4) {
        g_variant = FIXED;
        g_fixed_n = atoi(argv[2]);
        rate = atof(argv[3]);
        first = 4;
        if (g_fixed_n < 1) {
            fprintf(stderr, "image_server: N must be at least 1\n");
            return 2;
        }
        snprintf(name, sizeof name, "fixed%d", g_fixed_n);
#ifdef IMAGE_SERVER_ALLOT
    } else if ((!strcmp(mode, "fair") || !strcmp(mode, "numa")) && argc >= 3) {
        g_variant = strcmp(mode, "fair") ? NUMA : FAIR;
        rate = atof(argv[2]);
        first = 3;
        snprintf(name, sizeof name, "%s", mode);
#endif
    } else {
        usage(stderr);
        return 2;
    }
    if (!(rate > 0)) {
        fprintf(stderr, "image_server: RATE must be positive\n");
        return 2;
    }
    if (parse_options(argc, argv, first))
        return 2;
    make_source();
    return serve(rate, name);
}
