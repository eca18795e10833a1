/* omp_route.h: how a call of an OpenMP entry point reaches the runtime its
 * code is bound to (omp_route.c), shared by the entry points (omp.c).
 * Internal to liballot_shim.so, like shim.h. */
#ifndef ALLOT_OMP_ROUTE_H
#define ALLOT_OMP_ROUTE_H

#include "shim.h"

/* The entry points the shim interposes or calls, by index. */
enum sym {
    S_GOMP_PARALLEL,
    S_GOMP_PARALLEL_START,
    S_GOMP_PARALLEL_REDUCTIONS,
    S_GOMP_PARALLEL_SECTIONS,
    S_GOMP_PARALLEL_SECTIONS_START,
    S_GOMP_PARALLEL_LOOP_STATIC,
    S_GOMP_PARALLEL_LOOP_DYNAMIC,
    S_GOMP_PARALLEL_LOOP_GUIDED,
    S_GOMP_PARALLEL_LOOP_RUNTIME,
    S_GOMP_PARALLEL_LOOP_NONMONOTONIC_DYNAMIC,
    S_GOMP_PARALLEL_LOOP_NONMONOTONIC_GUIDED,
    S_GOMP_PARALLEL_LOOP_NONMONOTONIC_RUNTIME,
    S_GOMP_PARALLEL_LOOP_MAYBE_NONMONOTONIC_RUNTIME,
    S_GOMP_PARALLEL_LOOP_STATIC_START,
    S_GOMP_PARALLEL_LOOP_DYNAMIC_START,
    S_GOMP_PARALLEL_LOOP_GUIDED_START,
    S_GOMP_PARALLEL_LOOP_RUNTIME_START,
    S_OMP_GET_MAX_THREADS,
    S_OMP_SET_NUM_THREADS,
    S_KMPC_FORK_CALL,
    S_KMPC_FORK_TEAMS,
    S_KMPC_PUSH_NUM_THREADS,
    S_KMPC_SERIALIZED_PARALLEL,
    S_KMPC_END_SERIALIZED_PARALLEL,
    S_KMPC_GLOBAL_THREAD_NUM,
    /* Optional: newer libomp only (LLVM 20+; not in LLVM 14). A call of one
     * is routed like __kmpc_fork_call, and works on without it. */
    S_KMPC_PUSH_NUM_THREADS_STRICT,
    S_KMPC_PUSH_NUM_THREADS_LIST,
    S_KMPC_PUSH_NUM_THREADS_LIST_STRICT,
    S_KMPC_FORK_CALL_IF,
    S_COUNT
};
#define S_FIRST_OPTIONAL S_KMPC_PUSH_NUM_THREADS_STRICT

extern const char *const sym_name[S_COUNT];

/* Runtime families: which interface a caller speaks. A single library
 * (libomp) may provide both. */
enum family { FAM_GOMP, FAM_KMPC, FAM_COUNT };

/* One OpenMP runtime library: a dlopen(RTLD_NOLOAD) reference that keeps it
 * loaded, and all its functions, looked up together (invariant 3) before
 * `ready` is set. */
struct omp_rt {
    void *handle;
    int ready;
    void *fn[S_COUNT];
};

/* A fn[] entry for a symbol the runtime does not have. */
#define MISSING ((void *)1)

/* Per family: NULL until the first call, then the runtime in the global
 * scope, or &g_local if there is none and each caller's object decides. */
extern struct omp_rt *g_global[FAM_COUNT];
extern struct omp_rt g_local;

/* The runtime's function `s`, or NULL if it has none. Never looks up: the
 * runtime's functions were all looked up before it was handed out. */
static inline void *rt_fn(struct omp_rt *rt, enum sym s)
{
    void *f = __atomic_load_n(&rt->fn[s], __ATOMIC_ACQUIRE);
    return (uintptr_t)f > 1 ? f : NULL;
}

void *route_slow(enum family fam, enum sym s, const void *owner, struct omp_rt **rtp);

/* The real function for entry point `s` called from `owner`'s object (an
 * outlined function or location record); *rtp receives its runtime, or
 * NULL if the shim does not track it (the call then goes on uncapped).
 * NULL if there is no such function: an optional entry point the runtime
 * lacks, or one that no loaded library provides. */
static inline void *route(enum family fam, enum sym s, const void *owner, struct omp_rt **rtp)
{
    struct omp_rt *rt = __atomic_load_n(&g_global[fam], __ATOMIC_ACQUIRE);
    if (LIKELY(rt != NULL && rt != &g_local)) {
        void *f = __atomic_load_n(&rt->fn[s], __ATOMIC_ACQUIRE);
        if (LIKELY((uintptr_t)f > 1)) {
            *rtp = rt;
            return f;
        }
    }
    return route_slow(fam, s, owner, rtp);
}

/* route() for an entry point the call must reach. */
static inline void *route_need(enum family fam, enum sym s, const void *owner,
                               struct omp_rt **rtp)
{
    void *f = route(fam, s, owner, rtp);
    if (UNLIKELY(f == NULL))
        die("no loaded library provides", sym_name[s]);
    return f;
}

#endif
