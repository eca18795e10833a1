/*
 * cluster — streaming clustering (ars Table 1: data-parallel, medium; the
 * streamcluster class).
 *
 * Points in CL_D dimensions arrive in batches of CL_BATCH, drawn from a
 * mixture of CL_SOURCES drifting Gaussian sources that switch on and off
 * over time. The kernel keeps up to CL_KMAX weighted centers. Per batch:
 *
 *   1. generate (parallel): the batch's points;
 *   2. CL_ITERS times: assign (parallel) every point to its nearest open
 *      center, each chunk accumulating per-center coordinate sums and
 *      counts, its cost and its farthest point; then update (in order):
 *      combine the chunks' partials in chunk order and move each center to
 *      the weighted mean of its history and its new points;
 *   3. commit the weights (with decay), close centers whose weight fell
 *      below CL_CLOSE of the total, and, while the batch's mean cost
 *      (squared distance to the nearest center) exceeds the facility cost
 *      CL_FACILITY, open one at the batch's farthest point.
 *
 * Three parallel regions of a few milliseconds per batch, with a small
 * sequential step between them.
 *
 * Answer: per batch the number of centers and the cost; at the end every
 * center's coordinates and weight.
 */
#include "par.h"
#include "wl.h"

#include <stdlib.h>
#ifdef WL_TRACE
#include <stdio.h>
#endif

#define CL_D 16                       /* dimensions */
#define CL_BATCH 8192L                /* points per batch */
#define CL_GRAIN 256L                 /* points per chunk */
#define CL_CHUNKS (CL_BATCH / CL_GRAIN)
#define CL_SOURCES 40                 /* mixture components */
#define CL_ALWAYS 10                  /* components that never switch off */
#define CL_KMAX 48                    /* most open centers */
#define CL_KINIT 8                    /* centers opened on the first batch */
#define CL_ITERS 2                    /* assignment passes per batch */
#define CL_DECAY 0.9                  /* weight kept from batch to batch */
#define CL_CLOSE 0.002                /* close below this share of the weight */
#define CL_FACILITY 300.0             /* open while the mean cost exceeds this */
#define CL_BATCHES_PER_SCALE 1250.0   /* batches at scale 1 (calibrated) */

struct source {
    double base[CL_D], drift[CL_D];
    double sd;
    long period, phase, on; /* active while (b + phase) % period < on */
};

struct partial {
    double sum[CL_KMAX][CL_D];
    long count[CL_KMAX];
    double cost;
    double far_dist;
    long far_index;
};

struct stream {
    long batch;
    struct source src[CL_SOURCES];
    int active[CL_SOURCES];
    int nactive;
    double *points;            /* [CL_BATCH][CL_D] */
    /* the model */
    int k;
    double center[CL_KMAX][CL_D];
    double weight[CL_KMAX];
    double trial[CL_KMAX][CL_D]; /* centers used by this assignment pass */
    struct partial *part;      /* [CL_CHUNKS] */
};

static void generate(long lo, long hi, void *ctx)
{
    struct stream *st = ctx;
    for (long i = lo; i < hi; i++) {
        uint64_t s = wl_stream(WL_SEED, 9, (uint64_t)(st->batch * CL_BATCH + i));
        const struct source *src = &st->src[st->active[wl_below(&s, (uint64_t)st->nactive)]];
        double *p = st->points + i * CL_D;
        for (int d = 0; d < CL_D; d++) {
            /* roughly normal: a centred sum of three uniforms */
            double z = wl_unit(&s) + wl_unit(&s) + wl_unit(&s) - 1.5;
            p[d] = src->base[d] + src->drift[d] * (double)st->batch + 2.0 * src->sd * z;
        }
    }
}

static void assign(long lo, long hi, void *ctx)
{
    struct stream *st = ctx;
    struct partial *part = &st->part[par_chunk(lo, CL_GRAIN)];
    memset(part, 0, sizeof *part);
    part->far_index = -1;
    for (long i = lo; i < hi; i++) {
        const double *p = st->points + i * CL_D;
        int best = 0;
        double best_d = INFINITY;
        for (int k = 0; k < st->k; k++) {
            double d2 = 0.0;
            for (int d = 0; d < CL_D; d++) {
                double t = p[d] - st->trial[k][d];
                d2 += t * t;
            }
            if (d2 < best_d) {
                best_d = d2;
                best = k;
            }
        }
        for (int d = 0; d < CL_D; d++)
            part->sum[best][d] += p[d];
        part->count[best]++;
        part->cost += best_d;
        if (best_d > part->far_dist) {
            part->far_dist = best_d;
            part->far_index = i;
        }
    }
}

static void make_sources(struct stream *st)
{
    for (int c = 0; c < CL_SOURCES; c++) {
        struct source *src = &st->src[c];
        uint64_t s = wl_stream(WL_SEED, 10, (uint64_t)c);
        for (int d = 0; d < CL_D; d++) {
            src->base[d] = 100.0 * wl_unit(&s);
            src->drift[d] = 0.02 * (wl_unit(&s) - 0.5);
        }
        src->sd = 1.0 + 4.0 * wl_unit(&s);
        src->period = 60 + (long)wl_below(&s, 140);
        src->phase = (long)wl_below(&s, (uint64_t)src->period);
        src->on = c < CL_ALWAYS ? src->period : src->period * 7 / 10;
    }
}

/* Which sources emit points in batch b. */
static void choose_sources(struct stream *st)
{
    st->nactive = 0;
    for (int c = 0; c < CL_SOURCES; c++) {
        const struct source *src = &st->src[c];
        if ((st->batch + src->phase) % src->period < src->on)
            st->active[st->nactive++] = c;
    }
}

/* Removes center j, keeping the others in order. */
static void close_center(struct stream *st, int j)
{
    for (int k = j; k + 1 < st->k; k++) {
        memcpy(st->center[k], st->center[k + 1], sizeof st->center[k]);
        st->weight[k] = st->weight[k + 1];
    }
    st->k--;
}

int wl_cluster(double scale, uint64_t *answer)
{
    long batches = wl_count(scale, CL_BATCHES_PER_SCALE);
    if (batches == 0)
        return WL_EINVAL;
    struct stream *st = calloc(1, sizeof *st);
    double *points = malloc(CL_BATCH * CL_D * sizeof(double));
    struct partial *part = malloc(CL_CHUNKS * sizeof(struct partial));
    int rc = WL_ENOMEM;
    if (!st || !points || !part)
        goto out;
    st->points = points;
    st->part = part;
    make_sources(st);

    uint64_t h = wl_fold(0, (uint64_t)batches);
    for (st->batch = 0; st->batch < batches; st->batch++) {
        choose_sources(st);
        par_for(CL_BATCH, CL_GRAIN, generate, st);
        if (st->batch == 0) {
            for (int k = 0; k < CL_KINIT; k++) {
                memcpy(st->center[k], points + k * (CL_BATCH / CL_KINIT) * CL_D, sizeof st->center[k]);
                st->weight[k] = 1.0;
            }
            st->k = CL_KINIT;
        }
        double sum[CL_KMAX][CL_D];
        long count[CL_KMAX];
        double cost = 0.0, far_dist = 0.0;
        long far_index = -1;
        memcpy(st->trial, st->center, sizeof st->trial);
        for (int it = 0; it < CL_ITERS; it++) {
            par_for(CL_BATCH, CL_GRAIN, assign, st);
            memset(sum, 0, sizeof sum);
            memset(count, 0, sizeof count);
            cost = 0.0;
            far_dist = 0.0;
            far_index = -1;
            for (long c = 0; c < CL_CHUNKS; c++) {
                const struct partial *q = &part[c];
                for (int k = 0; k < st->k; k++) {
                    for (int d = 0; d < CL_D; d++)
                        sum[k][d] += q->sum[k][d];
                    count[k] += q->count[k];
                }
                cost += q->cost;
                if (q->far_dist > far_dist) {
                    far_dist = q->far_dist;
                    far_index = q->far_index;
                }
            }
            for (int k = 0; k < st->k; k++) {
                double w = st->weight[k], n = (double)count[k];
                for (int d = 0; d < CL_D; d++)
                    st->trial[k][d] = (w * st->center[k][d] + sum[k][d]) / (w + n);
            }
        }
        /* Commit, decay, close the starved, open at the farthest point. */
        double total = 0.0;
        for (int k = 0; k < st->k; k++) {
            memcpy(st->center[k], st->trial[k], sizeof st->center[k]);
            st->weight[k] = CL_DECAY * (st->weight[k] + (double)count[k]);
            total += st->weight[k];
        }
        for (int k = st->k - 1; k >= 0 && st->k > 1; k--)
            if (st->weight[k] < CL_CLOSE * total)
                close_center(st, k);
        double mean = cost / (double)CL_BATCH;
        if (st->k < CL_KMAX && far_index >= 0 && mean > CL_FACILITY) {
            memcpy(st->center[st->k], points + far_index * CL_D, sizeof st->center[st->k]);
            st->weight[st->k] = total / (double)st->k;
            st->k++;
        }
        h = wl_fold(h, (uint64_t)st->k);
        h = wl_fold(h, wl_bits(cost));
#ifdef WL_TRACE
        if (st->batch % 100 == 0)
            fprintf(stderr, "cluster: batch %ld sources %d centers %d mean cost %.1f\n", st->batch,
                    st->nactive, st->k, mean);
#endif
    }
    for (int k = 0; k < st->k; k++) {
        for (int d = 0; d < CL_D; d++)
            h = wl_fold(h, wl_bits(st->center[k][d]));
        h = wl_fold(h, wl_bits(st->weight[k]));
    }
    *answer = h;
    rc = WL_OK;
out:
    free(st);
    free(points);
    free(part);
    return rc;
}
