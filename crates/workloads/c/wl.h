/*
 * wl.h — what the workload kernels share: the entry points, status codes,
 * deterministic random streams and the checksum fold.
 *
 * Randomness: every random choice comes from a splitmix64 stream seeded by
 * values that name the item it is for (the kernel's seed, a round or batch
 * number, a chunk or item index) — never by a thread or a clock — so a
 * kernel makes the same choices however its chunks are scheduled.
 */
#ifndef ALLOT_WL_WL_H
#define ALLOT_WL_WL_H

#include <math.h>
#include <stdint.h>
#include <string.h>

/* Status codes of the wl_* entry points. */
enum {
    WL_OK = 0,
    WL_EINVAL = 1, /* scale not finite or outside (0, WL_MAX_SCALE] */
    WL_ENOMEM = 2, /* an allocation failed */
    WL_ECHECK = 3  /* a self-check failed (a bug) */
};

/* Largest scale accepted; keeps every size computation far from overflow. */
#define WL_MAX_SCALE 1000.0

/* Every kernel's base seed ("allot-wl"). */
#define WL_SEED UINT64_C(0x616c6c6f742d776c)

/* The kernels. Each does a whole run at `scale` (1.0 ≈ 2–4 s on two CPUs;
 * work grows linearly) and stores a checksum of its result in *answer.
 * Returns WL_OK or another WL_* code. */
int wl_pricing(double scale, uint64_t *answer);
int wl_stencil(double scale, uint64_t *answer);
int wl_pipeline(double scale, uint64_t *answer);
int wl_anneal(double scale, uint64_t *answer);
int wl_cluster(double scale, uint64_t *answer);

/* splitmix64 finaliser: a bijective 64-bit mix. */
static inline uint64_t wl_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* The next value of the splitmix64 stream in *s. */
static inline uint64_t wl_next(uint64_t *s)
{
    *s += UINT64_C(0x9e3779b97f4a7c15);
    return wl_mix(*s);
}

/* The initial state of the stream named by (seed, a, b). */
static inline uint64_t wl_stream(uint64_t seed, uint64_t a, uint64_t b)
{
    return wl_mix(seed ^ wl_mix(a + UINT64_C(0x632be59bd9b4e019) * wl_mix(b + 1)));
}

/* Uniform double in [0, 1). */
static inline double wl_unit(uint64_t *s)
{
    return (double)(wl_next(s) >> 11) * 0x1p-53;
}

__extension__ typedef unsigned __int128 wl_u128; /* a GCC/Clang extension */

/* Uniform integer in [0, n), n > 0 (multiply-shift; bias below n / 2^64). */
static inline uint64_t wl_below(uint64_t *s, uint64_t n)
{
    return (uint64_t)(((wl_u128)wl_next(s) * n) >> 64);
}

/* Folds v into the running checksum h; the order of folds matters. */
static inline uint64_t wl_fold(uint64_t h, uint64_t v)
{
    return wl_mix(h ^ wl_mix(v + UINT64_C(0x2545f4914f6cdd1d))) + UINT64_C(0x9e3779b97f4a7c15);
}

/* The bits of a double, for folding exact floating-point results. */
static inline uint64_t wl_bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

/* round(scale * per_unit), at least 1: the number of steps, rounds or
 * batches a kernel runs at `scale`. Returns 0 for a scale outside
 * (0, WL_MAX_SCALE] (the caller answers WL_EINVAL). */
static inline long wl_count(double scale, double per_unit)
{
    if (!(scale > 0.0) || !(scale <= WL_MAX_SCALE))
        return 0;
    long n = (long)llround(scale * per_unit);
    return n < 1 ? 1 : n;
}

#endif
