/*
 * anneal — annealing-like placement with unstructured fine-grained sharing
 * (ars Table 1: unstructured, fine; the canneal class).
 *
 * AN_N elements are placed one per cell of an AN_SIDE x AN_SIDE grid. A
 * netlist of about 2 * AN_N wires (mostly short in a hidden layout the
 * initial random placement scrambles, some long) connects them; the cost is
 * the total Manhattan wire length. Each round, AN_CHUNKS chunks each
 * evaluate AN_MOVES candidate swaps (an element and whatever sits at a
 * random cell near it), reading the shared placement and netlist at random
 * (~28 MB, poor locality) and keeping the swaps the Metropolis rule accepts
 * at the round's temperature in a per-chunk buffer. The proposals are then
 * committed in chunk order, skipping any that touches an element already
 * moved this round. The temperature and the move window shrink
 * geometrically over the rounds.
 *
 * Answer: the initial and final wire lengths, each round's number of
 * committed swaps, and a hash of the final placement (per-chunk hashes
 * folded in chunk order). Wire lengths are integers, so exact.
 */
#include "par.h"
#include "wl.h"

#include <stdlib.h>
#ifdef WL_TRACE
#include <stdio.h>
#endif

#define AN_LOG_SIDE 10
#define AN_SIDE (1L << AN_LOG_SIDE)
#define AN_N (AN_SIDE * AN_SIDE)       /* elements = cells (1 Mi) */
#define AN_WIRES (2 * AN_N)            /* undirected wires */
#define AN_LOCAL_PCT 70                /* wires to a hidden-layout neighbour */
#define AN_REACH 2                     /* hidden-layout neighbourhood radius */
#define AN_CHUNKS 64L
#define AN_MOVES 512L                  /* candidate swaps per chunk per round */
#define AN_T0 40.0                     /* first round's temperature */
#define AN_T1 0.3                      /* last round's temperature */
#define AN_MIN_WINDOW 2L
#define AN_GRAIN (AN_N / AN_CHUNKS)    /* elements per chunk in reductions */
#define AN_ROUNDS_PER_SCALE 600.0      /* rounds at scale 1 (calibrated) */

struct netlist {
    int32_t *loc;   /* [AN_N] element -> cell */
    int32_t *grid;  /* [AN_N] cell -> element */
    int32_t *start; /* [AN_N + 1] CSR offsets */
    int32_t *adj;   /* [2 * AN_WIRES] neighbours */
    int32_t *wire;  /* [2 * AN_WIRES] wire ends while building */
    /* one round */
    long round;
    double temp;
    long window;
    int32_t *prop;  /* [AN_CHUNKS][AN_MOVES][2] accepted proposals */
    long *nprop;    /* [AN_CHUNKS] */
    /* reductions */
    int64_t *len;   /* [AN_CHUNKS] */
    uint64_t *hash; /* [AN_CHUNKS] */
};

static inline long dist(int32_t p, int32_t q)
{
    long dx = (long)(p & (AN_SIDE - 1)) - (long)(q & (AN_SIDE - 1));
    long dy = (long)(p >> AN_LOG_SIDE) - (long)(q >> AN_LOG_SIDE);
    return (dx < 0 ? -dx : dx) + (dy < 0 ? -dy : dy);
}

static long clamp(long v, long lo, long hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

static void make_wires(long lo, long hi, void *ctx)
{
    struct netlist *nl = ctx;
    for (long w = lo; w < hi; w++) {
        uint64_t s = wl_stream(WL_SEED, 6, (uint64_t)w);
        long u = (long)wl_below(&s, AN_N), v;
        if ((long)wl_below(&s, 100) < AN_LOCAL_PCT) {
            /* a neighbour in the hidden layout (ids row by row) */
            long x = clamp((u & (AN_SIDE - 1)) + (long)wl_below(&s, 2 * AN_REACH + 1) - AN_REACH, 0, AN_SIDE - 1);
            long y = clamp((u >> AN_LOG_SIDE) + (long)wl_below(&s, 2 * AN_REACH + 1) - AN_REACH, 0, AN_SIDE - 1);
            v = y * AN_SIDE + x;
        } else {
            v = (long)wl_below(&s, AN_N);
        }
        nl->wire[2 * w] = (int32_t)u;
        nl->wire[2 * w + 1] = (int32_t)v;
    }
}

/* Builds the CSR adjacency from the wire list (in wire order). */
static void build_adjacency(struct netlist *nl)
{
    memset(nl->start, 0, (AN_N + 1) * sizeof(int32_t));
    for (long k = 0; k < 2 * AN_WIRES; k++)
        nl->start[nl->wire[k] + 1]++;
    for (long e = 0; e < AN_N; e++)
        nl->start[e + 1] += nl->start[e];
    /* fill, using grid[] as each element's cursor */
    for (long e = 0; e < AN_N; e++)
        nl->grid[e] = nl->start[e];
    for (long w = 0; w < AN_WIRES; w++) {
        int32_t u = nl->wire[2 * w], v = nl->wire[2 * w + 1];
        nl->adj[nl->grid[u]++] = v;
        nl->adj[nl->grid[v]++] = u;
    }
}

/* Change in wire length if elements a (at cell pa) and b (at pb) swap. */
static long swap_delta(const struct netlist *nl, int32_t a, int32_t b, int32_t pa, int32_t pb)
{
    long d = 0;
    for (int32_t k = nl->start[a]; k < nl->start[a + 1]; k++) {
        int32_t n = nl->adj[k];
        if (n != b) {
            int32_t pn = nl->loc[n];
            d += dist(pb, pn) - dist(pa, pn);
        }
    }
    for (int32_t k = nl->start[b]; k < nl->start[b + 1]; k++) {
        int32_t n = nl->adj[k];
        if (n != a) {
            int32_t pn = nl->loc[n];
            d += dist(pa, pn) - dist(pb, pn);
        }
    }
    return d;
}

static void evaluate(long lo, long hi, void *ctx)
{
    struct netlist *nl = ctx;
    (void)hi;
    long c = par_chunk(lo, 1); /* grain 1: one chunk per index */
    uint64_t s = wl_stream(WL_SEED ^ 7, (uint64_t)nl->round, (uint64_t)c);
    int32_t *out = nl->prop + c * AN_MOVES * 2;
    long n = 0, w = nl->window;
    for (long m = 0; m < AN_MOVES; m++) {
        int32_t a = (int32_t)wl_below(&s, AN_N);
        int32_t pa = nl->loc[a];
        long x = clamp((pa & (AN_SIDE - 1)) + (long)wl_below(&s, (uint64_t)(2 * w + 1)) - w, 0, AN_SIDE - 1);
        long y = clamp((pa >> AN_LOG_SIDE) + (long)wl_below(&s, (uint64_t)(2 * w + 1)) - w, 0, AN_SIDE - 1);
        int32_t pb = (int32_t)(y * AN_SIDE + x);
        double u = wl_unit(&s);
        if (pb == pa)
            continue;
        int32_t b = nl->grid[pb];
        long d = swap_delta(nl, a, b, pa, pb);
        if (d <= 0 || u < exp(-(double)d / nl->temp)) {
            out[2 * n] = a;
            out[2 * n + 1] = b;
            n++;
        }
    }
    nl->nprop[c] = n;
}

static void measure(long lo, long hi, void *ctx)
{
    struct netlist *nl = ctx;
    int64_t len = 0;
    uint64_t h = 0;
    for (long e = lo; e < hi; e++) {
        int32_t pe = nl->loc[e];
        for (int32_t k = nl->start[e]; k < nl->start[e + 1]; k++)
            len += dist(pe, nl->loc[nl->adj[k]]);
        h = wl_fold(h, (uint64_t)pe);
    }
    long c = par_chunk(lo, AN_GRAIN);
    nl->len[c] = len;
    nl->hash[c] = h;
}

/* Total wire length (each wire counted from both ends, halved), and the
 * placement's hash folded into *h. */
static int64_t wire_length(struct netlist *nl, uint64_t *h)
{
    par_for(AN_N, AN_GRAIN, measure, nl);
    int64_t total = 0;
    for (long c = 0; c < AN_CHUNKS; c++) {
        total += nl->len[c];
        *h = wl_fold(*h, nl->hash[c]);
    }
    return total / 2;
}

int wl_anneal(double scale, uint64_t *answer)
{
    long rounds = wl_count(scale, AN_ROUNDS_PER_SCALE);
    if (rounds == 0)
        return WL_EINVAL;
    struct netlist nl = {0};
    nl.loc = malloc(AN_N * sizeof(int32_t));
    nl.grid = malloc(AN_N * sizeof(int32_t));
    nl.start = malloc((AN_N + 1) * sizeof(int32_t));
    nl.adj = malloc(2 * AN_WIRES * sizeof(int32_t));
    nl.wire = malloc(2 * AN_WIRES * sizeof(int32_t));
    nl.prop = malloc(AN_CHUNKS * AN_MOVES * 2 * sizeof(int32_t));
    nl.nprop = malloc(AN_CHUNKS * sizeof(long));
    nl.len = malloc(AN_CHUNKS * sizeof(int64_t));
    nl.hash = malloc(AN_CHUNKS * sizeof(uint64_t));
    int32_t *moved = calloc(AN_N, sizeof(int32_t)); /* round + 1 of the last move */
    int rc = WL_ENOMEM;
    if (!nl.loc || !nl.grid || !nl.start || !nl.adj || !nl.wire || !nl.prop || !nl.nprop ||
        !nl.len || !nl.hash || !moved)
        goto out;

    par_for(AN_WIRES, AN_WIRES / AN_CHUNKS, make_wires, &nl);
    build_adjacency(&nl);
    free(nl.wire);
    nl.wire = NULL;
    /* A random initial placement (Fisher–Yates). */
    for (long e = 0; e < AN_N; e++)
        nl.grid[e] = (int32_t)e;
    uint64_t s = wl_stream(WL_SEED, 8, 0);
    for (long e = AN_N - 1; e > 0; e--) {
        long k = (long)wl_below(&s, (uint64_t)e + 1);
        int32_t t = nl.grid[e];
        nl.grid[e] = nl.grid[k];
        nl.grid[k] = t;
    }
    for (long p = 0; p < AN_N; p++)
        nl.loc[nl.grid[p]] = (int32_t)p;

    uint64_t h = wl_fold(0, (uint64_t)rounds);
    int64_t initial = wire_length(&nl, &h);
    h = wl_fold(h, (uint64_t)initial);
    for (nl.round = 0; nl.round < rounds; nl.round++) {
        double f = rounds > 1 ? (double)nl.round / (double)(rounds - 1) : 1.0;
        nl.temp = AN_T0 * pow(AN_T1 / AN_T0, f);
        nl.window = AN_MIN_WINDOW + (long)((double)(AN_SIDE / 4) * pow(AN_T1 / AN_T0, 2.0 * f));
        par_for(AN_CHUNKS, 1, evaluate, &nl);
        long committed = 0;
        int32_t stamp = (int32_t)(nl.round + 1);
        for (long c = 0; c < AN_CHUNKS; c++) {
            const int32_t *p = nl.prop + c * AN_MOVES * 2;
            for (long k = 0; k < nl.nprop[c]; k++) {
                int32_t a = p[2 * k], b = p[2 * k + 1];
                if (moved[a] == stamp || moved[b] == stamp)
                    continue;
                int32_t pa = nl.loc[a], pb = nl.loc[b];
                nl.loc[a] = pb;
                nl.loc[b] = pa;
                nl.grid[pa] = b;
                nl.grid[pb] = a;
                moved[a] = moved[b] = stamp;
                committed++;
            }
        }
        h = wl_fold(h, (uint64_t)committed);
#ifdef WL_TRACE
        if (nl.round % 50 == 0)
            fprintf(stderr, "anneal: round %ld temp %.2f window %ld committed %ld\n", nl.round, nl.temp,
                    nl.window, committed);
#endif
    }
    int64_t final = wire_length(&nl, &h);
    h = wl_fold(h, (uint64_t)final);
#ifdef WL_TRACE
    fprintf(stderr, "anneal: wire length %lld -> %lld\n", (long long)initial, (long long)final);
#endif
    *answer = h;
    rc = WL_OK;
out:
    free(nl.loc);
    free(nl.grid);
    free(nl.start);
    free(nl.adj);
    free(nl.wire);
    free(nl.prop);
    free(nl.nprop);
    free(nl.len);
    free(nl.hash);
    free(moved);
    return rc;
}
