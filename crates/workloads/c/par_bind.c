/*
 * par_bind.c — par.h for the kernels built as a shared object that allot's
 * runtime loads (the crate's src/lib.rs: KernelLib).
 *
 * The object cannot call into the program that loads it by name, so the
 * program hands it the two functions with wl_bind() right after loading,
 * before any kernel runs; par_for and par_workers forward to them. A
 * kernel run before wl_bind (a bug) stops the process with a message
 * rather than computing with no pool.
 *
 * WL_BIND_VERSION changes whenever the table changes; the loader checks it.
 */
#include "par.h"

#include <stdio.h>
#include <stdlib.h>

#define WL_BIND_VERSION 1

struct par_ops {
    void (*par_for)(long n, long grain, par_body body, void *ctx);
    int (*par_workers)(void);
};

static struct par_ops ops;

int wl_bind_version(void)
{
    return WL_BIND_VERSION;
}

void wl_bind(const struct par_ops *given)
{
    ops = *given;
}

static void unbound(void)
{
    fputs("allot workload kernels: par_for called before wl_bind\n", stderr);
    abort();
}

void par_for(long n, long grain, par_body body, void *ctx)
{
    if (!ops.par_for)
        unbound();
    ops.par_for(n, grain, body, ctx);
}

int par_workers(void)
{
    if (!ops.par_workers)
        unbound();
    return ops.par_workers();
}
