/*
 * pricing — coarse data-parallel option pricing (ars Table 1:
 * data-parallel, coarse; the blackscholes / swaptions class).
 *
 * A synthetic portfolio of PR_OPTIONS European options is priced in closed
 * form (Black–Scholes) under PR_SCENARIOS market scenarios per pass (spot
 * and volatility shocks), over a number of passes proportional to the
 * scale. One par_for per pass, PR_CHUNKS chunks of equal work: a few large
 * parallel regions (tens of milliseconds each) and almost no sharing.
 *
 * Answer: per pass, every chunk's value sum and delta sum (each summed
 * sequentially inside its chunk) folded in chunk order, then a sample of
 * the last pass's prices.
 */
#include "par.h"
#include "wl.h"

#include <stdlib.h>

#define PR_OPTIONS (1L << 18)      /* portfolio size (~12 MB of inputs) */
#define PR_CHUNKS 64L              /* chunks per pass */
#define PR_GRAIN (PR_OPTIONS / PR_CHUNKS)
#define PR_SCENARIOS 8             /* scenarios priced per option per pass */
#define PR_PASSES_PER_SCALE 48.0   /* passes at scale 1 (calibrated) */

struct portfolio {
    double *spot, *strike, *rate, *vol, *expiry, *price;
    unsigned char *put;
    long pass;
    double *value_sum; /* [PR_CHUNKS] */
    double *delta_sum; /* [PR_CHUNKS] */
};

/* Standard normal cumulative distribution. */
static double cnd(double x)
{
    return 0.5 * erfc(-x * 0.70710678118654752440); /* 1/sqrt(2) */
}

/* Price and delta of one European option. */
static double black_scholes(double s, double k, double r, double v, double t, int put, double *delta)
{
    double sqt = sqrt(t);
    double d1 = (log(s / k) + (r + 0.5 * v * v) * t) / (v * sqt);
    double d2 = d1 - v * sqt;
    double disc = k * exp(-r * t);
    if (put) {
        *delta = cnd(d1) - 1.0;
        return disc * cnd(-d2) - s * cnd(-d1);
    }
    *delta = cnd(d1);
    return s * cnd(d1) - disc * cnd(d2);
}

static void generate(long lo, long hi, void *ctx)
{
    struct portfolio *p = ctx;
    for (long i = lo; i < hi; i++) {
        uint64_t s = wl_stream(WL_SEED, 1, (uint64_t)i);
        double spot = 50.0 + 100.0 * wl_unit(&s);
        p->spot[i] = spot;
        p->strike[i] = spot * (0.7 + 0.6 * wl_unit(&s));
        p->rate[i] = 0.005 + 0.055 * wl_unit(&s);
        p->vol[i] = 0.05 + 0.6 * wl_unit(&s);
        p->expiry[i] = 0.1 + 2.9 * wl_unit(&s);
        p->put[i] = (unsigned char)(wl_next(&s) & 1);
    }
}

static void price_chunk(long lo, long hi, void *ctx)
{
    struct portfolio *p = ctx;
    long c = par_chunk(lo, PR_GRAIN);
    double value = 0.0, delta_total = 0.0;
    for (long i = lo; i < hi; i++) {
        double last = 0.0;
        for (int sc = 0; sc < PR_SCENARIOS; sc++) {
            /* Scenario shocks depend on the pass and the scenario only. */
            long k = p->pass * PR_SCENARIOS + sc;
            double spot_shock = 1.0 + 0.01 * (double)(k % 21 - 10);
            double vol_shock = 1.0 + 0.05 * (double)(k % 7);
            double delta;
            last = black_scholes(p->spot[i] * spot_shock, p->strike[i], p->rate[i],
                                 p->vol[i] * vol_shock, p->expiry[i], p->put[i], &delta);
            value += last;
            delta_total += delta;
        }
        p->price[i] = last;
    }
    p->value_sum[c] = value;
    p->delta_sum[c] = delta_total;
}

int wl_pricing(double scale, uint64_t *answer)
{
    long passes = wl_count(scale, PR_PASSES_PER_SCALE);
    if (passes == 0)
        return WL_EINVAL;
    struct portfolio p = {0};
    p.spot = malloc(PR_OPTIONS * sizeof(double));
    p.strike = malloc(PR_OPTIONS * sizeof(double));
    p.rate = malloc(PR_OPTIONS * sizeof(double));
    p.vol = malloc(PR_OPTIONS * sizeof(double));
    p.expiry = malloc(PR_OPTIONS * sizeof(double));
    p.price = malloc(PR_OPTIONS * sizeof(double));
    p.put = malloc(PR_OPTIONS);
    p.value_sum = malloc(PR_CHUNKS * sizeof(double));
    p.delta_sum = malloc(PR_CHUNKS * sizeof(double));
    int rc = WL_ENOMEM;
    if (!p.spot || !p.strike || !p.rate || !p.vol || !p.expiry || !p.price || !p.put ||
        !p.value_sum || !p.delta_sum)
        goto out;

    par_for(PR_OPTIONS, PR_GRAIN, generate, &p);
    uint64_t h = wl_fold(0, (uint64_t)passes);
    for (p.pass = 0; p.pass < passes; p.pass++) {
        par_for(PR_OPTIONS, PR_GRAIN, price_chunk, &p);
        for (long c = 0; c < PR_CHUNKS; c++) {
            h = wl_fold(h, wl_bits(p.value_sum[c]));
            h = wl_fold(h, wl_bits(p.delta_sum[c]));
        }
    }
    for (long i = 0; i < PR_OPTIONS; i += 4099)
        h = wl_fold(h, wl_bits(p.price[i]));
    *answer = h;
    rc = WL_OK;
out:
    free(p.spot);
    free(p.strike);
    free(p.rate);
    free(p.vol);
    free(p.expiry);
    free(p.price);
    free(p.put);
    free(p.value_sum);
    free(p.delta_sum);
    return rc;
}
