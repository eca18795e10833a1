/*
 * stencil — fine-grained, barrier-synchronised iteration (ars Table 1:
 * data-parallel, fine; the fluidanimate class).
 *
 * Explicit heat diffusion (a 5-point Jacobi update) on a small ST_N x ST_N
 * plate held in two buffers of 0.5 MB, with a time-varying left edge and a
 * heater that moves across the plate. Every time step is one par_for over
 * the rows, ST_N / ST_GRAIN chunks of a few microseconds each, and steps
 * run back to back: tens of thousands of parallel regions of tens of
 * microseconds, each ending in a barrier. Under oversubscription a barrier
 * waits for the slowest (possibly descheduled) thread every few tens of
 * microseconds, which is where spinning OpenMP barriers collapse.
 *
 * Answer: every ST_CHECK steps the chunks also sum |new - old| over their
 * rows (the residual); those sums are folded in chunk order, then the
 * final plate's row sums and a sample of cells.
 */
#include "par.h"
#include "wl.h"

#include <stdlib.h>

#define ST_N 256L                     /* interior cells per side */
#define ST_W (ST_N + 2)               /* row length with the halo */
#define ST_GRAIN 8L                   /* rows per chunk */
#define ST_CHUNKS (ST_N / ST_GRAIN)
#define ST_CHECK 256L                 /* steps between residual checks */
#define ST_MOVE 2048L                 /* steps between heater moves */
#define ST_HEATER 12L                 /* heater side, cells */
#define ST_ALPHA 0.2                  /* diffusion number (stable below 0.25) */
#define ST_POWER 0.5                  /* heat added per heater cell and step */
#define ST_STEPS_PER_SCALE 65000.0    /* steps at scale 1 (calibrated) */

struct plate {
    const double *old;
    double *new;
    long heater_row, heater_col; /* top-left interior cell of the heater */
    int check;                   /* whether this step sums the residual */
    double *residual;            /* [ST_CHUNKS] */
};

static void step_chunk(long lo, long hi, void *ctx)
{
    struct plate *p = ctx;
    double res = 0.0;
    for (long r = lo; r < hi; r++) {
        long i = r + 1; /* row in the haloed array */
        const double *up = p->old + (i - 1) * ST_W;
        const double *mid = p->old + i * ST_W;
        const double *down = p->old + (i + 1) * ST_W;
        double *out = p->new + i * ST_W;
        for (long j = 1; j <= ST_N; j++)
            out[j] = mid[j] + ST_ALPHA * (up[j] + down[j] + mid[j - 1] + mid[j + 1] - 4.0 * mid[j]);
        if (r >= p->heater_row && r < p->heater_row + ST_HEATER)
            for (long j = p->heater_col + 1; j <= p->heater_col + ST_HEATER; j++)
                out[j] += ST_POWER;
        if (p->check)
            for (long j = 1; j <= ST_N; j++)
                res += fabs(out[j] - mid[j]);
    }
    if (p->check)
        p->residual[par_chunk(lo, ST_GRAIN)] = res;
}

static void row_sums(long lo, long hi, void *ctx)
{
    struct plate *p = ctx;
    double s = 0.0;
    for (long r = lo; r < hi; r++)
        for (long j = 1; j <= ST_N; j++)
            s += p->old[(r + 1) * ST_W + j];
    p->residual[par_chunk(lo, ST_GRAIN)] = s;
}

/* The left edge's temperature at step t, and the fixed edges. */
static void set_edges(double *g, long t)
{
    double left = 50.0 + 30.0 * sin((double)t * (1.0 / 700.0));
    for (long i = 0; i < ST_W; i++)
        g[i * ST_W] = left;
}

static void init_edges(double *g)
{
    for (long i = 0; i < ST_W * ST_W; i++)
        g[i] = 20.0;
    for (long j = 0; j < ST_W; j++) {
        g[j] = 100.0;                                   /* top */
        g[(ST_W - 1) * ST_W + j] = 0.0;                 /* bottom */
        g[j * ST_W + ST_W - 1] = 80.0 * (double)j / ST_W; /* right: a gradient */
    }
}

int wl_stencil(double scale, uint64_t *answer)
{
    long steps = wl_count(scale, ST_STEPS_PER_SCALE);
    if (steps == 0)
        return WL_EINVAL;
    double *a = malloc(ST_W * ST_W * sizeof(double));
    double *b = malloc(ST_W * ST_W * sizeof(double));
    double *residual = malloc(ST_CHUNKS * sizeof(double));
    int rc = WL_ENOMEM;
    if (!a || !b || !residual)
        goto out;
    init_edges(a);
    init_edges(b);

    struct plate p = {.old = a, .new = b, .residual = residual};
    uint64_t h = wl_fold(0, (uint64_t)steps);
    uint64_t heater = wl_stream(WL_SEED, 2, 0);
    for (long t = 0; t < steps; t++) {
        if (t % ST_MOVE == 0) {
            p.heater_row = (long)wl_below(&heater, ST_N - ST_HEATER);
            p.heater_col = (long)wl_below(&heater, ST_N - ST_HEATER);
        }
        p.check = (t + 1) % ST_CHECK == 0;
        set_edges(p.new, t);
        par_for(ST_N, ST_GRAIN, step_chunk, &p);
        if (p.check)
            for (long c = 0; c < ST_CHUNKS; c++)
                h = wl_fold(h, wl_bits(residual[c]));
        /* The new plate becomes the old one. */
        double *next = (double *)p.old;
        p.old = p.new;
        p.new = next;
    }
    par_for(ST_N, ST_GRAIN, row_sums, &p);
    for (long c = 0; c < ST_CHUNKS; c++)
        h = wl_fold(h, wl_bits(residual[c]));
    for (long i = 0; i < ST_W * ST_W; i += 997)
        h = wl_fold(h, wl_bits(p.old[i]));
    *answer = h;
    rc = WL_OK;
out:
    free(a);
    free(b);
    free(residual);
    return rc;
}
