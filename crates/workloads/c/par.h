/*
 * par.h — the parallel interface every workload kernel is written against.
 *
 * Two drivers implement it: driver_omp.c (an OpenMP `parallel for` per
 * call, built into the allot-omp-workload program) and the Rust crate
 * (src/par.rs: allot's work-stealing pool). The kernel sources are the same
 * files in both programs.
 *
 * Contract of par_for, which both drivers keep and the kernels rely on:
 *
 *  - The chunks are fixed by (n, grain) alone: chunk k (0 <= k <
 *    ceil(n / grain)) is [k * grain, min((k + 1) * grain, n)). A kernel may
 *    therefore use `lo / grain` as the chunk's index (see par_chunk).
 *  - body(lo, hi, ctx) is called exactly once per chunk, in any order and
 *    possibly concurrently, on any thread. Chunks must write disjoint data.
 *  - par_for returns once every call has returned; their writes are then
 *    visible to the caller.
 *  - n <= 0 calls nothing; grain < 1 is taken as 1.
 *
 * Answers must not depend on the number of workers or on the schedule:
 * kernels never read a thread id, keep per-chunk results in arrays indexed
 * by chunk, and combine them in chunk order after par_for returns.
 */
#ifndef ALLOT_WL_PAR_H
#define ALLOT_WL_PAR_H

typedef void (*par_body)(long lo, long hi, void *ctx);

/* Runs body over [0, n) in chunks of grain, in parallel; returns when all
 * chunks are done. */
void par_for(long n, long grain, par_body body, void *ctx);

/* The current worker count. For sizing only (never for indexing data or for
 * anything that could change an answer). */
int par_workers(void);

/* Number of chunks par_for(n, grain, ...) makes. */
static inline long par_chunks(long n, long grain)
{
    if (n <= 0)
        return 0;
    if (grain < 1)
        grain = 1;
    return (n + grain - 1) / grain;
}

/* Index of the chunk that starts at lo. */
static inline long par_chunk(long lo, long grain)
{
    return grain < 1 ? lo : lo / grain;
}

#endif
