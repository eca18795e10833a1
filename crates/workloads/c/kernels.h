/*
 * kernels.h — the kernel table: name, entry point and the OpenMP schedule
 * its loops use in the OpenMP build (driver_omp.c). The Rust side keeps
 * the same list in src/kernel.rs (a test checks that the two agree).
 *
 * Schedules are what a typical OpenMP programmer would write for each loop:
 * the default `static` for equal-cost chunks; `dynamic` where chunk costs
 * vary (pipeline: duplicate blocks cost nothing to compress, and blocks
 * compress at different speeds).
 */
#ifndef ALLOT_WL_KERNELS_H
#define ALLOT_WL_KERNELS_H

#include "wl.h"

enum wl_schedule { WL_STATIC, WL_DYNAMIC };

/* X(name, schedule) */
#define WL_KERNELS(X)           \
    X(pricing, WL_STATIC)       \
    X(stencil, WL_STATIC)       \
    X(pipeline, WL_DYNAMIC)     \
    X(anneal, WL_STATIC)        \
    X(cluster, WL_STATIC)

#endif
