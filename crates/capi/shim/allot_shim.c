/*
 * allot_shim.c: an LD_PRELOAD shim that keeps the OpenMP teams of an
 * unmodified program within its cell's grant.
 *
 * `allot run` hands the program its cell's grant page as an inherited file
 * descriptor (ALLOT_GRANT_FD). This library maps that page once, in its
 * constructor, and interposes the entry points through which compiled
 * OpenMP code starts a parallel region: GOMP_parallel* (GNU libgomp, also
 * provided by LLVM libomp for gcc-compiled code) and __kmpc_fork_call with
 * its companions (LLVM libomp, x86-64 only). Before a region starts it
 * reads the grant's `threads` and, when the team would be larger, asks the
 * runtime for a smaller one. The design note is crates/capi/SHIM.md.
 *
 * Invariants
 *
 *  1. Shrink only. The team size passed on is never larger than what the
 *     program asked for: min(num_threads, grant) for an explicit request,
 *     min(nthreads-var, grant) for the default one, and the request itself
 *     whenever the grant is not smaller. `allot run` sets OMP_NUM_THREADS to
 *     the cell's maximum, so omp_get_max_threads() stays an upper bound on
 *     every team: buffers sized by it are never overrun. To the program the
 *     shim looks like dynamic adjustment (OMP_DYNAMIC) choosing smaller teams.
 *     A `strict` request, which dynamic adjustment may not shrink either, is
 *     passed on unchanged.
 *
 *  2. Inert outside a cell. Without a valid page every interposed function
 *     forwards to the real one; the only added work is finding the real
 *     function (two loads, cached) and one predictable branch on `g_page`.
 *     The constructor looks up no OpenMP symbol, so programs that never use
 *     OpenMP (ls, sh, python3, make) never need an OpenMP runtime. (It does
 *     look up libc's pthread functions and liballot's require hooks, which
 *     the pthread wrappers further down use; without liballot they forward
 *     after one branch.)
 *
 *  3. No locks of our own. `g_page` is written once, in the constructor,
 *     before the program runs. Grant reads follow the page's seqlock
 *     (docs/protocol.md) with __atomic builtins. The caches of runtimes and
 *     their functions are filled with compare-and-swap; a race only repeats
 *     an idempotent lookup. The loader's lookups (dlsym, dlopen) take its
 *     lock, so a runtime's functions are all looked up at once, by the
 *     thread that first meets the runtime, before any team of it exists:
 *     team threads find them cached and never wait for the loader lock,
 *     which the primary thread may hold (regions run by a constructor
 *     during dlopen) while it waits for them at the region's end.
 *
 *  4. The right runtime. A program may hold several OpenMP runtimes: one
 *     in the global scope (linked by the executable), or private copies
 *     loaded with RTLD_LOCAL by Python extension modules (wheels vendor
 *     their own libgomp). Because the shim is preloaded, every region of
 *     every one of them comes through here, and each must reach the
 *     runtime its own code is bound to: a region started in one runtime
 *     whose body asks another for omp_get_thread_num() computes garbage.
 *     When a runtime is in the global scope, the code is bound to it, and
 *     dlsym(RTLD_NEXT) finds it. Otherwise the region's outlined function
 *     (or its source-location record, for __kmpc calls) lies in the object
 *     that compiled it; we look the symbol up in that object's own
 *     dependencies. The shim holds a reference (dlopen) to every runtime
 *     and every calling object it remembers, so cached pointers cannot
 *     dangle and a cached object's address cannot be reused by another.
 *
 *  5. Never fatal for the shim's own reasons. A runtime or caller the shim
 *     cannot track (more runtimes than its table holds, a library it cannot
 *     take a reference to) has its regions forwarded uncapped, with a note
 *     under ALLOT_SHIM_DEBUG=1. The shim stops a program only where the
 *     loader would have: an entry point that no loaded library provides.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

/* ------------------------------------------------------------------------ */
/* The grant page: grant_page.h, checked against the Rust definition.       */
/* ------------------------------------------------------------------------ */

#include "grant_page.h"

#define PAGE_MAGIC ALLOT_PAGE_MAGIC
#define PAGE_VERSION ALLOT_PAGE_VERSION
#define PAGE_BYTES ALLOT_PAGE_BYTES

/* Seqlock attempts before a read gives up. A publish is a few dozen stores;
 * running out means the writer was descheduled (or died) mid-publish, and
 * the region then runs uncapped rather than wait. */
#define SEQ_TRIES 256

/* The cell's page, or NULL when the shim is inert. Written once by the
 * constructor, before any thread of the program exists. */
static const struct grant_page *g_page;
static int g_debug;

/* An odd `seq` that a read gave up on without seeing it move: the page's
 * writer stopped in the middle of a publish (a broker killed, or stopped,
 * between its two stores to `seq`). Reads that find `seq` still at this
 * value return at once instead of waiting again; any publish moves `seq`
 * (a new writer first rounds it up to even), so the next read after one
 * is normal. 0, an even value, means none. */
static uint64_t g_stuck_seq;

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

static inline int shim_active(void)
{
    return __atomic_load_n(&g_page, __ATOMIC_RELAXED) != NULL;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* grant_threads() after a first attempt that found `seq` at `first` and
 * failed: retries up to SEQ_TRIES times. */
static __attribute__((noinline)) unsigned grant_threads_slow(const struct grant_page *p,
                                                             uint64_t first)
{
    if ((first & 1) && first == __atomic_load_n(&g_stuck_seq, __ATOMIC_RELAXED))
        return 0; /* still stuck where a read gave up before: do not wait again */
    int moved = 0;
    for (int i = 0; i < SEQ_TRIES; i++) {
        uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
        moved |= s1 != first;
        if (s1 & 1) {
            CPU_RELAX();
            continue;
        }
        uint32_t t = __atomic_load_n(&p->threads, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1)
            return t ? t : 1;
    }
    if ((first & 1) && !moved) {
        __atomic_store_n(&g_stuck_seq, first, __ATOMIC_RELAXED);
        if (UNLIKELY(g_debug))
            say("grant page left mid-publish by its writer (seq %llu); regions run uncapped "
                "until it is published again",
                (unsigned long long)first);
    }
    return 0;
}

/* The grant's recommended thread count (>= 1), or 0 if no consistent read
 * could be had. Reader side of the seqlock: seq (acquire), retry if odd,
 * the field, acquire fence, seq again, retry if it moved. */
static inline unsigned grant_threads(void)
{
    const struct grant_page *p = __atomic_load_n(&g_page, __ATOMIC_RELAXED);
    uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
    if (LIKELY(!(s1 & 1))) {
        uint32_t t = __atomic_load_n(&p->threads, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (LIKELY(__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1))
            return t ? t : 1;
    }
    return grant_threads_slow(p, s1);
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

static void say(const char *fmt, ...)
{
    char line[256];
    int off = snprintf(line, sizeof line, "allot-shim[%ld]: ", (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + off, sizeof line - (size_t)off - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)off + (size_t)n;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

/* Things the shim cannot handle and works around; each is told once, with
 * ALLOT_SHIM_DEBUG=1. */
enum note {
    NOTE_TOO_MANY_RUNTIMES,
    NOTE_CANNOT_OPEN,
    NOTE_OLD_RUNTIME,
    NOTE_LONG_LIST,
    NOTE_COUNT
};
static int g_noted[NOTE_COUNT];

static void note(enum note which, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void note(enum note which, const char *fmt, ...)
{
    if (!g_debug || __atomic_exchange_n(&g_noted[which], 1, __ATOMIC_RELAXED))
        return;
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= 0)
        say("%s", text);
}

/* For what the loader itself would have refused: a call to an entry point
 * that no loaded library provides (the program could not have bound it
 * without the shim). Never for the shim's own limits (invariant 5). */
static void die(const char *what, const char *name) __attribute__((noreturn));

static void die(const char *what, const char *name)
{
    say("%s %s; the program cannot continue", what, name);
    abort();
}

/* ------------------------------------------------------------------------ */
/* Finding the real functions                                               */
/* ------------------------------------------------------------------------ */

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

static const char *const sym_name[S_COUNT] = {
    [S_GOMP_PARALLEL] = "GOMP_parallel",
    [S_GOMP_PARALLEL_START] = "GOMP_parallel_start",
    [S_GOMP_PARALLEL_REDUCTIONS] = "GOMP_parallel_reductions",
    [S_GOMP_PARALLEL_SECTIONS] = "GOMP_parallel_sections",
    [S_GOMP_PARALLEL_SECTIONS_START] = "GOMP_parallel_sections_start",
    [S_GOMP_PARALLEL_LOOP_STATIC] = "GOMP_parallel_loop_static",
    [S_GOMP_PARALLEL_LOOP_DYNAMIC] = "GOMP_parallel_loop_dynamic",
    [S_GOMP_PARALLEL_LOOP_GUIDED] = "GOMP_parallel_loop_guided",
    [S_GOMP_PARALLEL_LOOP_RUNTIME] = "GOMP_parallel_loop_runtime",
    [S_GOMP_PARALLEL_LOOP_NONMONOTONIC_DYNAMIC] = "GOMP_parallel_loop_nonmonotonic_dynamic",
    [S_GOMP_PARALLEL_LOOP_NONMONOTONIC_GUIDED] = "GOMP_parallel_loop_nonmonotonic_guided",
    [S_GOMP_PARALLEL_LOOP_NONMONOTONIC_RUNTIME] = "GOMP_parallel_loop_nonmonotonic_runtime",
    [S_GOMP_PARALLEL_LOOP_MAYBE_NONMONOTONIC_RUNTIME] =
        "GOMP_parallel_loop_maybe_nonmonotonic_runtime",
    [S_GOMP_PARALLEL_LOOP_STATIC_START] = "GOMP_parallel_loop_static_start",
    [S_GOMP_PARALLEL_LOOP_DYNAMIC_START] = "GOMP_parallel_loop_dynamic_start",
    [S_GOMP_PARALLEL_LOOP_GUIDED_START] = "GOMP_parallel_loop_guided_start",
    [S_GOMP_PARALLEL_LOOP_RUNTIME_START] = "GOMP_parallel_loop_runtime_start",
    [S_OMP_GET_MAX_THREADS] = "omp_get_max_threads",
    [S_KMPC_FORK_CALL] = "__kmpc_fork_call",
    [S_KMPC_FORK_TEAMS] = "__kmpc_fork_teams",
    [S_KMPC_PUSH_NUM_THREADS] = "__kmpc_push_num_threads",
    [S_KMPC_SERIALIZED_PARALLEL] = "__kmpc_serialized_parallel",
    [S_KMPC_END_SERIALIZED_PARALLEL] = "__kmpc_end_serialized_parallel",
    [S_KMPC_GLOBAL_THREAD_NUM] = "__kmpc_global_thread_num",
    [S_KMPC_PUSH_NUM_THREADS_STRICT] = "__kmpc_push_num_threads_strict",
    [S_KMPC_PUSH_NUM_THREADS_LIST] = "__kmpc_push_num_threads_list",
    [S_KMPC_PUSH_NUM_THREADS_LIST_STRICT] = "__kmpc_push_num_threads_list_strict",
    [S_KMPC_FORK_CALL_IF] = "__kmpc_fork_call_if",
};

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

#define MAX_RUNTIMES 16
static struct omp_rt g_runtimes[MAX_RUNTIMES];

/* Per family: NULL until the first call, then the runtime in the global
 * scope, or &g_local if there is none and each caller's object decides. */
static struct omp_rt *g_global[FAM_COUNT];
static struct omp_rt g_local;

/* Objects whose regions were routed by their own dependencies (see 4. in
 * the header), keyed by link map; open addressing, never removed. A key is
 * stored only together with a reference to the object that the shim keeps
 * (or for the main program, which is never unloaded), so no other object
 * can come to live at a key's address. */
#define OWNER_SLOTS 256
struct owner {
    struct link_map *obj;
    struct omp_rt *rt[FAM_COUNT];
};
static struct owner g_owners[OWNER_SLOTS];

static struct link_map *object_of(const void *addr)
{
    struct dl_find_object r;
    if (addr == NULL || _dl_find_object((void *)addr, &r) != 0)
        return NULL;
    return r.dlfo_link_map;
}

static int is_self(const void *addr)
{
    static const char anchor = 0;
    struct link_map *obj = object_of(addr);
    return obj != NULL && obj == object_of(&anchor);
}

/* The main program: the only object without a name. */
static int is_main(const struct link_map *obj)
{
    return obj != NULL && (obj->l_name == NULL || obj->l_name[0] == '\0');
}

/* A reference to the loaded object `obj`, or NULL: for the main program
 * (which has no name to open), or when its name leads to another object
 * than `obj` (one in another link-map namespace, see dlmopen) or to none. */
static void *open_object(const struct link_map *obj)
{
    if (obj == NULL || is_main(obj))
        return NULL;
    void *handle = dlopen(obj->l_name, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL)
        return NULL;
    struct link_map *opened = NULL;
    if (dlinfo(handle, RTLD_DI_LINKMAP, &opened) != 0 || opened != obj) {
        dlclose(handle);
        return NULL;
    }
    return handle;
}

/* `name` in `handle`'s scope, unless that finds the shim itself. */
static void *lookup(void *handle, const char *name)
{
    void *p = dlsym(handle, name);
    return p != NULL && !is_self(p) ? p : NULL;
}

/* Looks up every function of `rt` not looked up yet, then marks it ready. */
static void resolve_all(struct omp_rt *rt)
{
    if (__atomic_load_n(&rt->ready, __ATOMIC_ACQUIRE))
        return;
    for (int s = 0; s < S_COUNT; s++) {
        if (__atomic_load_n(&rt->fn[s], __ATOMIC_ACQUIRE) != NULL)
            continue;
        void *f = lookup(rt->handle, sym_name[s]);
        __atomic_store_n(&rt->fn[s], f ? f : MISSING, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&rt->ready, 1, __ATOMIC_RELEASE);
}

/* The runtime whose library defines `fn`, with all its functions looked
 * up; NULL if the shim cannot track it (invariant 5). */
static struct omp_rt *runtime_of(void *fn)
{
    void *handle = open_object(object_of(fn));
    if (handle == NULL) {
        note(NOTE_CANNOT_OPEN,
             "cannot take a reference to the OpenMP runtime at %p; its regions run uncapped", fn);
        return NULL;
    }
    for (int i = 0; i < MAX_RUNTIMES; i++) {
        struct omp_rt *rt = &g_runtimes[i];
        void *cur = __atomic_load_n(&rt->handle, __ATOMIC_ACQUIRE);
        if (cur == NULL) {
            void *expected = NULL;
            if (__atomic_compare_exchange_n(&rt->handle, &expected, handle, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
                resolve_all(rt); /* the slot keeps `handle` */
                return rt;
            }
            cur = expected;
        }
        /* dlopen returns the same handle for the same object; the slot
         * already holds a reference. */
        if (cur == handle) {
            dlclose(handle);
            resolve_all(rt); /* in case its first finder is still at it */
            return rt;
        }
    }
    dlclose(handle);
    note(NOTE_TOO_MANY_RUNTIMES,
         "more than %d OpenMP runtimes loaded; the regions of the others run uncapped",
         MAX_RUNTIMES);
    return NULL;
}

/* The runtime's function `s`, or NULL if it has none. Never looks up: the
 * runtime's functions were all looked up before it was handed out. */
static inline void *rt_fn(struct omp_rt *rt, enum sym s)
{
    void *f = __atomic_load_n(&rt->fn[s], __ATOMIC_ACQUIRE);
    return (uintptr_t)f > 1 ? f : NULL;
}

/* The cache slot of `obj`, or NULL if it has none. */
static struct owner *owner_find(struct link_map *obj)
{
    uintptr_t h = ((uintptr_t)obj >> 4) * 0x9E3779B97F4A7C15u;
    for (unsigned i = 0; i < OWNER_SLOTS; i++) {
        struct owner *o = &g_owners[(h + i) % OWNER_SLOTS];
        struct link_map *cur = __atomic_load_n(&o->obj, __ATOMIC_ACQUIRE);
        if (cur == obj)
            return o;
        if (cur == NULL)
            return NULL;
    }
    return NULL;
}

/* Remembers that `obj`'s calls of family `fam` go to `rt`. Returns 1 if
 * this call created `obj`'s slot, which then owns the caller's reference
 * to `obj`; 0 if the slot existed (another thread's reference keeps `obj`)
 * or the table is full. */
static int owner_remember(struct link_map *obj, enum family fam, struct omp_rt *rt)
{
    uintptr_t h = ((uintptr_t)obj >> 4) * 0x9E3779B97F4A7C15u;
    for (unsigned i = 0; i < OWNER_SLOTS; i++) {
        struct owner *o = &g_owners[(h + i) % OWNER_SLOTS];
        struct link_map *cur = __atomic_load_n(&o->obj, __ATOMIC_ACQUIRE);
        int created = 0;
        if (cur == NULL) {
            struct link_map *expected = NULL;
            created = __atomic_compare_exchange_n(&o->obj, &expected, obj, 0, __ATOMIC_ACQ_REL,
                                                  __ATOMIC_ACQUIRE);
            cur = created ? obj : expected;
        }
        if (cur == obj) {
            __atomic_store_n(&o->rt[fam], rt, __ATOMIC_RELEASE);
            return created;
        }
    }
    return 0; /* full: resolved again on every call */
}

/* Names of loaded objects, copied by dl_iterate_phdr's callback (the names
 * belong to the loader and may be freed by a dlclose once it returns; and
 * the callback holds a loader lock, so no dlopen inside it). A batch holds
 * the names of objects `skip` onwards that fit in `buf`. */
#define NAME_BATCH_BYTES 4096
struct name_batch {
    int skip, seen, taken;
    size_t len;
    char buf[NAME_BATCH_BYTES];
};

static int collect_names(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct name_batch *b = arg;
    if (b->seen++ < b->skip)
        return 0;
    const char *name = info->dlpi_name != NULL ? info->dlpi_name : "";
    size_t need = strlen(name) + 1;
    if (need > sizeof b->buf) { /* cannot be a name dlopen takes */
        b->taken++;
        return 0;
    }
    if (b->len + need > sizeof b->buf)
        return 1; /* full: the next batch starts here */
    memcpy(b->buf + b->len, name, need);
    b->len += need;
    b->taken++;
    return 0;
}

/* Last resort for a caller in no loaded object: `name` from the first
 * loaded library (in load order) that provides it. *hold receives a
 * reference to that library, for the caller to drop. */
static void *any_loaded(const char *name, void **hold)
{
    struct name_batch b;
    for (int skip = 0;; skip += b.taken) {
        b.skip = skip;
        b.seen = b.taken = 0;
        b.len = 0;
        dl_iterate_phdr(collect_names, &b);
        for (size_t off = 0; off < b.len; off += strlen(b.buf + off) + 1) {
            const char *object = b.buf + off;
            if (object[0] == '\0')
                continue;
            void *handle = dlopen(object, RTLD_LAZY | RTLD_NOLOAD);
            if (handle == NULL)
                continue;
            void *found = lookup(handle, name);
            if (found != NULL) {
                *hold = handle;
                return found;
            }
            dlclose(handle);
        }
        if (b.taken == 0)
            return NULL;
    }
}

/* `name` for code in `owner`'s object, the way the loader binds it: from
 * the object's own dependencies, else the global scope, else (code in no
 * object) any loaded library. *hold: a reference to drop, or NULL. */
static void *find_for(const void *owner, const char *name, void **hold)
{
    void *handle = open_object(object_of(owner));
    void *real = handle ? lookup(handle, name) : NULL;
    if (real == NULL)
        real = dlsym(RTLD_NEXT, name);
    if (real == NULL) {
        if (handle != NULL)
            dlclose(handle);
        return any_loaded(name, hold);
    }
    *hold = handle;
    return real;
}

/* No runtime in the global scope: the runtime of the object `owner` lies
 * in, found through the entry point `probe`. NULL if there is none, or if
 * the shim cannot track it; then *probe_fn is the real `probe` (or NULL). */
static struct omp_rt *runtime_for_owner(enum family fam, enum sym probe, const void *owner,
                                        void **probe_fn)
{
    struct link_map *obj = object_of(owner);
    struct owner *slot = obj ? owner_find(obj) : NULL;
    if (slot != NULL) {
        struct omp_rt *rt = __atomic_load_n(&slot->rt[fam], __ATOMIC_ACQUIRE);
        if (LIKELY(rt != NULL))
            return rt;
    }
    void *handle = open_object(obj);
    void *real = handle ? lookup(handle, sym_name[probe]) : NULL;
    void *hold = NULL;
    if (real == NULL) /* not among its dependencies: it relies on a global one */
        real = dlsym(RTLD_NEXT, sym_name[probe]);
    if (real == NULL) /* e.g. JIT-compiled code, in no object at all */
        real = any_loaded(sym_name[probe], &hold);
    struct omp_rt *rt = real ? runtime_of(real) : NULL;
    if (hold != NULL)
        dlclose(hold); /* runtime_of() took its own reference */
    /* Cache only what the shim holds a reference to (invariant 4). */
    int kept = rt != NULL && obj != NULL && (handle != NULL || is_main(obj)) &&
               owner_remember(obj, fam, rt);
    if (handle != NULL && !kept)
        dlclose(handle); /* the caller's own references keep both loaded */
    if (rt == NULL)
        *probe_fn = real;
    return rt;
}

/* The runtime for entry point `probe` called from `owner`'s object; NULL
 * as for runtime_for_owner(). */
static struct omp_rt *runtime_for(enum family fam, enum sym probe, const void *owner,
                                  void **probe_fn)
{
    struct omp_rt *rt = __atomic_load_n(&g_global[fam], __ATOMIC_ACQUIRE);
    if (rt == NULL) {
        void *real = dlsym(RTLD_NEXT, sym_name[probe]);
        if (real != NULL) {
            rt = runtime_of(real);
            if (rt == NULL) { /* untracked: decided again on the next call */
                *probe_fn = real;
                return NULL;
            }
        } else {
            rt = &g_local;
        }
        __atomic_store_n(&g_global[fam], rt, __ATOMIC_RELEASE);
    }
    if (rt != &g_local)
        return rt;
    return runtime_for_owner(fam, probe, owner, probe_fn);
}

/* `name` from the library that defines `fn` (an untracked runtime). */
static void *sibling(void *fn, const char *name)
{
    void *handle = open_object(object_of(fn));
    if (handle == NULL)
        return NULL;
    void *f = lookup(handle, name);
    dlclose(handle); /* the caller's references keep it loaded */
    return f;
}

static __attribute__((noinline)) void *route_slow(enum family fam, enum sym s,
                                                  const void *owner, struct omp_rt **rtp)
{
    /* An optional entry point is routed by one every runtime has. */
    int optional = s >= S_FIRST_OPTIONAL;
    enum sym probe = optional ? S_KMPC_FORK_CALL : s;
    void *probe_fn = NULL;
    struct omp_rt *rt = runtime_for(fam, probe, owner, &probe_fn);
    void *f;
    if (rt != NULL)
        f = rt_fn(rt, s);
    else if (s == probe)
        f = probe_fn;
    else
        f = probe_fn ? sibling(probe_fn, sym_name[s]) : NULL;
    if (f == NULL && !optional) {
        /* The runtime lacks this entry point: forward it to the library
         * that provides it, as the loader would have bound the call. */
        void *hold = NULL;
        f = find_for(owner, sym_name[s], &hold);
        rt = f ? runtime_of(f) : NULL;
        if (hold != NULL)
            dlclose(hold);
    }
    *rtp = rt;
    return f;
}

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

/* ------------------------------------------------------------------------ */
/* The team-size rule                                                       */
/* ------------------------------------------------------------------------ */

/* The team size to request instead of `requested` (0 = the default,
 * nthreads-var), for a region entering through `entry`. Returns
 * `requested` unchanged unless the grant is smaller than the team it
 * stands for; never returns a larger number (invariant 1). */
static unsigned cap_team(struct omp_rt *rt, unsigned requested, enum sym entry)
{
    if (requested == 1 || rt == NULL)
        return requested;
    unsigned grant = grant_threads();
    if (grant == 0)
        return requested;
    unsigned want = requested;
    if (want == 0) {
        int (*max_threads)(void) = (int (*)(void))rt_fn(rt, S_OMP_GET_MAX_THREADS);
        int m = max_threads ? max_threads() : 0;
        if (m <= 0)
            return requested;
        want = (unsigned)m;
    }
    if (grant >= want)
        return requested;
    if (UNLIKELY(g_debug))
        say("%s: team of %u capped to the grant's %u", sym_name[entry], want, grant);
    return grant;
}

/* ------------------------------------------------------------------------ */
/* GNU libgomp entry points (signatures: libgomp's libgomp_g.h)             */
/* ------------------------------------------------------------------------ */

typedef void (*gomp_fn)(void *);

/* The real entry points' types. */
typedef void (*parallel_fn)(gomp_fn, void *, unsigned, unsigned);
typedef void (*parallel_start_fn)(gomp_fn, void *, unsigned);
typedef unsigned (*parallel_reductions_fn)(gomp_fn, void *, unsigned, unsigned);
typedef void (*sections_fn)(gomp_fn, void *, unsigned, unsigned, unsigned);
typedef void (*sections_start_fn)(gomp_fn, void *, unsigned, unsigned);
/* Combined loops: (fn, data, num_threads, start, end, incr, chunk_size, flags). */
typedef void (*loop_fn)(gomp_fn, void *, unsigned, long, long, long, long, unsigned);
/* Runtime schedule: no chunk size. */
typedef void (*loop_runtime_fn)(gomp_fn, void *, unsigned, long, long, long, unsigned);
/* The GOMP_1.0 split form (the team runs until GOMP_parallel_end): no flags. */
typedef void (*loop_start_fn)(gomp_fn, void *, unsigned, long, long, long, long);
typedef void (*loop_runtime_start_fn)(gomp_fn, void *, unsigned, long, long, long);

/* Declares `real`, the function entry point `s` forwards to, and caps
 * `num_threads` when in a cell. The outlined `fn` locates the caller. */
#define GOMP_PROLOGUE(s, type)                                                 \
    struct omp_rt *rt;                                                         \
    type real = (type)route_need(FAM_GOMP, (s), (const void *)fn, &rt);        \
    if (UNLIKELY(shim_active()))                                               \
    num_threads = cap_team(rt, num_threads, (s))

EXPORT void GOMP_parallel(gomp_fn fn, void *data, unsigned num_threads, unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL, parallel_fn);
    real(fn, data, num_threads, flags);
}

EXPORT void GOMP_parallel_start(gomp_fn fn, void *data, unsigned num_threads)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_START, parallel_start_fn);
    real(fn, data, num_threads);
}

EXPORT unsigned GOMP_parallel_reductions(gomp_fn fn, void *data, unsigned num_threads,
                                         unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_REDUCTIONS, parallel_reductions_fn);
    return real(fn, data, num_threads, flags);
}

EXPORT void GOMP_parallel_sections(gomp_fn fn, void *data, unsigned num_threads, unsigned count,
                                   unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_SECTIONS, sections_fn);
    real(fn, data, num_threads, count, flags);
}

EXPORT void GOMP_parallel_sections_start(gomp_fn fn, void *data, unsigned num_threads,
                                         unsigned count)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_SECTIONS_START, sections_start_fn);
    real(fn, data, num_threads, count);
}

#define GOMP_LOOP(name, s)                                                     \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, long chunk_size, unsigned flags)     \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_fn);                                             \
        real(fn, data, num_threads, start, end, incr, chunk_size, flags);      \
    }
GOMP_LOOP(GOMP_parallel_loop_static, S_GOMP_PARALLEL_LOOP_STATIC)
GOMP_LOOP(GOMP_parallel_loop_dynamic, S_GOMP_PARALLEL_LOOP_DYNAMIC)
GOMP_LOOP(GOMP_parallel_loop_guided, S_GOMP_PARALLEL_LOOP_GUIDED)
GOMP_LOOP(GOMP_parallel_loop_nonmonotonic_dynamic, S_GOMP_PARALLEL_LOOP_NONMONOTONIC_DYNAMIC)
GOMP_LOOP(GOMP_parallel_loop_nonmonotonic_guided, S_GOMP_PARALLEL_LOOP_NONMONOTONIC_GUIDED)

#define GOMP_LOOP_RUNTIME(name, s)                                             \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, unsigned flags)                      \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_runtime_fn);                                     \
        real(fn, data, num_threads, start, end, incr, flags);                  \
    }
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_runtime, S_GOMP_PARALLEL_LOOP_RUNTIME)
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_nonmonotonic_runtime,
                  S_GOMP_PARALLEL_LOOP_NONMONOTONIC_RUNTIME)
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_maybe_nonmonotonic_runtime,
                  S_GOMP_PARALLEL_LOOP_MAYBE_NONMONOTONIC_RUNTIME)

#define GOMP_LOOP_START(name, s)                                               \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, long chunk_size)                     \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_start_fn);                                       \
        real(fn, data, num_threads, start, end, incr, chunk_size);             \
    }
GOMP_LOOP_START(GOMP_parallel_loop_static_start, S_GOMP_PARALLEL_LOOP_STATIC_START)
GOMP_LOOP_START(GOMP_parallel_loop_dynamic_start, S_GOMP_PARALLEL_LOOP_DYNAMIC_START)
GOMP_LOOP_START(GOMP_parallel_loop_guided_start, S_GOMP_PARALLEL_LOOP_GUIDED_START)

EXPORT void GOMP_parallel_loop_runtime_start(gomp_fn fn, void *data, unsigned num_threads,
                                             long start, long end, long incr)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_LOOP_RUNTIME_START, loop_runtime_start_fn);
    real(fn, data, num_threads, start, end, incr);
}

/* ------------------------------------------------------------------------ */
/* LLVM libomp entry points (x86-64 only)                                   */
/* ------------------------------------------------------------------------ */
#if defined(__x86_64__)

/*
 * clang lowers `#pragma omp parallel` to
 *
 *     [__kmpc_push_num_threads(loc, gtid, n);]   only with num_threads(n)
 *     if (cond) __kmpc_fork_call(loc, argc, microtask, arg1, ..., argN);
 *     else      __kmpc_serialized_parallel(loc, gtid); ...
 *
 * Newer LLVM (OpenMPIRBuilder, flang) also pushes with
 * __kmpc_push_num_threads_strict (num_threads(strict: n)) and the _list
 * forms (a count per nesting level, num_threads(n1, n2, ...)), and forks
 * with __kmpc_fork_call_if (the if clause evaluated by the runtime); a host
 * `teams` construct forks with __kmpc_fork_teams.
 *
 * A pushed value is for the next fork on the same thread, whichever entry
 * point that is. An explicit request is capped where it is pushed (unless
 * strict), and the thread remembers it pushed (t_pushed) so that the fork
 * that consumes the value does not replace it with the default cap, which
 * could be larger; every fork entry point clears the mark. A fork without
 * a pushed value pushes min(grant, omp_get_max_threads()) itself, when
 * that is smaller.
 */
static __thread int t_pushed __attribute__((tls_model("initial-exec")));

typedef void (*kmpc_micro)(int32_t *, int32_t *, ...);
typedef void (*push_fn)(void *, int32_t, int32_t);
typedef void (*push_strict_fn)(void *, int32_t, int32_t, int, const char *);
typedef void (*push_list_fn)(void *, int32_t, uint32_t, int32_t *);
typedef void (*push_list_strict_fn)(void *, int32_t, uint32_t, int32_t *, int, const char *);
typedef void (*serialized_fn)(void *, int32_t);
typedef int32_t (*gtid_fn)(void *);
typedef void (*fork_fn)(void *, int32_t, kmpc_micro, ...);
typedef void (*fork_if_fn)(void *, int32_t, kmpc_micro, int32_t, void *);

EXPORT void __kmpc_push_num_threads(void *loc, int32_t gtid, int32_t num_threads)
{
    struct omp_rt *rt;
    push_fn real = (push_fn)route_need(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS, loc, &rt);
    if (UNLIKELY(shim_active())) {
        t_pushed = 1;
        if (num_threads > 1)
            num_threads = (int32_t)cap_team(rt, (unsigned)num_threads, S_KMPC_PUSH_NUM_THREADS);
    }
    real(loc, gtid, num_threads);
}

/* A push for a runtime that lacks the newer entry point `missing` (the
 * caller found it through the shim, which exports it): the plain push of
 * the first level's count, which is how libomp implements them, less the
 * strictness or the inner levels. */
static void push_plain(void *loc, int32_t gtid, int32_t num_threads, enum sym missing)
{
    note(NOTE_OLD_RUNTIME,
         "the OpenMP runtime predates %s (and maybe others); the shim stands in for them",
         sym_name[missing]);
    struct omp_rt *rt;
    push_fn push = (push_fn)route_need(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS, loc, &rt);
    push(loc, gtid, num_threads);
}

/* num_threads(strict: n): the program requires exactly n threads (the
 * runtime reports an error otherwise), which dynamic adjustment may not
 * change either, so it is passed on unchanged; the mark keeps the fork
 * from applying the default cap. */
EXPORT void __kmpc_push_num_threads_strict(void *loc, int32_t gtid, int32_t num_threads,
                                           int severity, const char *message)
{
    struct omp_rt *rt;
    push_strict_fn real =
        (push_strict_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_STRICT, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 1;
    if (LIKELY(real != NULL))
        real(loc, gtid, num_threads, severity, message);
    else
        push_plain(loc, gtid, num_threads, S_KMPC_PUSH_NUM_THREADS_STRICT);
}

/* Nesting levels of a capped num_threads list the shim copies; a longer
 * list is passed on uncapped. */
#define MAX_LEVELS 8
static __thread int32_t t_levels[MAX_LEVELS] __attribute__((tls_model("initial-exec")));

/* `list` with its first level (the team about to be forked) capped; the
 * inner levels are the teams of nested regions, capped when those fork.
 * The program's array is never written: a changed list is a per-thread
 * copy, valid until this thread's next capped list (libomp copies the list
 * into its own thread state when it is pushed). */
static int32_t *cap_levels(struct omp_rt *rt, uint32_t len, int32_t *list)
{
    if (list == NULL || len == 0 || list[0] <= 1)
        return list;
    int32_t first = (int32_t)cap_team(rt, (unsigned)list[0], S_KMPC_PUSH_NUM_THREADS_LIST);
    if (first == list[0])
        return list;
    if (len > MAX_LEVELS) {
        note(NOTE_LONG_LIST, "num_threads list of %u levels (the shim copies %d): passed on uncapped",
             len, MAX_LEVELS);
        return list;
    }
    memcpy(t_levels, list, len * sizeof *list);
    t_levels[0] = first;
    return t_levels;
}

EXPORT void __kmpc_push_num_threads_list(void *loc, int32_t gtid, uint32_t list_length,
                                         int32_t *num_threads_list)
{
    struct omp_rt *rt;
    push_list_fn real = (push_list_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_LIST, loc, &rt);
    int32_t *list = num_threads_list;
    if (UNLIKELY(shim_active())) {
        t_pushed = 1;
        list = cap_levels(rt, list_length, list);
    }
    if (LIKELY(real != NULL))
        real(loc, gtid, list_length, list);
    else if (list != NULL && list_length > 0)
        push_plain(loc, gtid, list[0], S_KMPC_PUSH_NUM_THREADS_LIST);
}

/* A strict list: passed on unchanged, as a strict single count. */
EXPORT void __kmpc_push_num_threads_list_strict(void *loc, int32_t gtid, uint32_t list_length,
                                                int32_t *num_threads_list, int severity,
                                                const char *message)
{
    struct omp_rt *rt;
    push_list_strict_fn real =
        (push_list_strict_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_LIST_STRICT, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 1;
    if (LIKELY(real != NULL))
        real(loc, gtid, list_length, num_threads_list, severity, message);
    else if (num_threads_list != NULL && list_length > 0)
        push_plain(loc, gtid, num_threads_list[0], S_KMPC_PUSH_NUM_THREADS_LIST_STRICT);
}

EXPORT void __kmpc_serialized_parallel(void *loc, int32_t gtid)
{
    struct omp_rt *rt;
    serialized_fn real = (serialized_fn)route_need(FAM_KMPC, S_KMPC_SERIALIZED_PARALLEL, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 0; /* the pushed value (if any) was for this region */
    real(loc, gtid);
}

/* The default cap, for a fork with nothing pushed: pushes
 * min(grant, omp_get_max_threads()) when that is smaller. */
static void push_default_cap(struct omp_rt *rt, void *loc, enum sym entry)
{
    if (rt == NULL)
        return;
    gtid_fn gtid = (gtid_fn)rt_fn(rt, S_KMPC_GLOBAL_THREAD_NUM);
    push_fn push = (push_fn)rt_fn(rt, S_KMPC_PUSH_NUM_THREADS);
    if (gtid == NULL || push == NULL)
        return;
    unsigned n = cap_team(rt, 0, entry);
    if (n != 0)
        push(loc, gtid(loc), (int32_t)n);
}

/* Called by the __kmpc_fork_call trampoline below with the fork's first
 * three arguments; returns the real __kmpc_fork_call to jump to. */
__attribute__((visibility("hidden"), used)) void *allot_kmpc_fork_prepare(void *loc, int32_t argc,
                                                                         void *microtask);

void *allot_kmpc_fork_prepare(void *loc, int32_t argc, void *microtask)
{
    (void)argc;
    struct omp_rt *rt;
    void *real = route_need(FAM_KMPC, S_KMPC_FORK_CALL, microtask, &rt);
    if (LIKELY(!shim_active()))
        return real;
    if (t_pushed) {
        t_pushed = 0;
        return real;
    }
    push_default_cap(rt, loc, S_KMPC_FORK_CALL);
    return real;
}

/* The same for __kmpc_fork_teams: a pass-through that clears the mark (the
 * teams construct replaces any pushed value with its league size; teams
 * are not capped). */
__attribute__((visibility("hidden"), used)) void *
allot_kmpc_fork_teams_prepare(void *loc, int32_t argc, void *microtask);

void *allot_kmpc_fork_teams_prepare(void *loc, int32_t argc, void *microtask)
{
    (void)loc;
    (void)argc;
    struct omp_rt *rt;
    void *real = route_need(FAM_KMPC, S_KMPC_FORK_TEAMS, microtask, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 0;
    return real;
}

/* __kmpc_fork_call_if for a runtime that predates it: what libomp's own
 * does, through entry points every libomp has. */
static __attribute__((noinline)) void fork_call_if_standin(void *loc, int32_t argc,
                                                           kmpc_micro microtask, int32_t cond,
                                                           void *args)
{
    note(NOTE_OLD_RUNTIME,
         "the OpenMP runtime predates %s (and maybe others); the shim stands in for them",
         sym_name[S_KMPC_FORK_CALL_IF]);
    if (cond) {
        fork_fn fork = (fork_fn)allot_kmpc_fork_prepare(loc, argc, (void *)microtask);
        if (args != NULL)
            fork(loc, argc, microtask, args);
        else
            fork(loc, argc, microtask);
        return;
    }
    struct omp_rt *rt;
    const void *owner = (const void *)microtask;
    gtid_fn gtid_of = (gtid_fn)route_need(FAM_KMPC, S_KMPC_GLOBAL_THREAD_NUM, owner, &rt);
    serialized_fn begin =
        (serialized_fn)route_need(FAM_KMPC, S_KMPC_SERIALIZED_PARALLEL, owner, &rt);
    serialized_fn end =
        (serialized_fn)route_need(FAM_KMPC, S_KMPC_END_SERIALIZED_PARALLEL, owner, &rt);
    int32_t gtid = gtid_of(loc);
    if (shim_active())
        t_pushed = 0;
    begin(loc, gtid);
    int32_t bound_tid = 0;
    if (args != NULL)
        microtask(&gtid, &bound_tid, args);
    else
        microtask(&gtid, &bound_tid);
    end(loc, gtid);
}

/* If `cond`, a fork like __kmpc_fork_call's (the default cap applies unless
 * a value was pushed); if not, the pushed value (if any) is dropped with the
 * serialized region. The mark stays set while the runtime runs the call, in
 * case its fork goes through __kmpc_fork_call (and so through the shim),
 * and is cleared once it returns. */
EXPORT void __kmpc_fork_call_if(void *loc, int32_t argc, kmpc_micro microtask, int32_t cond,
                                void *args)
{
    struct omp_rt *rt;
    fork_if_fn real =
        (fork_if_fn)route(FAM_KMPC, S_KMPC_FORK_CALL_IF, (const void *)microtask, &rt);
    if (UNLIKELY(real == NULL)) {
        fork_call_if_standin(loc, argc, microtask, cond, args);
        return;
    }
    int active = shim_active();
    if (UNLIKELY(active)) {
        if (!cond) {
            t_pushed = 0;
        } else if (!t_pushed) {
            push_default_cap(rt, loc, S_KMPC_FORK_CALL_IF);
            t_pushed = 1;
        }
    }
    real(loc, argc, microtask, cond, args);
    if (UNLIKELY(active))
        t_pushed = 0;
}

/*
 * __kmpc_fork_call(ident_t *loc, kmp_int32 argc, kmpc_micro microtask, ...)
 * passes `argc` pointer-sized arguments on to the microtask, and so does
 * __kmpc_fork_teams. C cannot forward a variable argument list, so their
 * interposers are trampolines: each saves the argument registers (and %al,
 * the vector-register count of a variadic call), asks its prepare function
 * for the real function (which may push a smaller team first), restores the
 * registers and jumps to it. The stack, with any arguments beyond the
 * sixth, is untouched, so every argc is forwarded exactly. The varargs are
 * pointers, so no argument travels in a vector register. Seven pushes after
 * the return address leave %rsp 16-byte aligned for the call.
 */
#define KMPC_TRAMPOLINE(name, prepare)                                         \
    __asm__(".text\n"                                                          \
            ".globl " #name "\n"                                               \
            ".type " #name ", @function\n"                                     \
            ".p2align 4\n" #name ":\n"                                         \
            "  .cfi_startproc\n"                                               \
            "  endbr64\n"                                                      \
            "  pushq %rdi\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rsi\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rdx\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rcx\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %r8\n"                                                    \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %r9\n"                                                    \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rax\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  call " #prepare "\n"                                            \
            "  movq %rax, %r11\n"                                              \
            "  popq %rax\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %r9\n"                                                     \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %r8\n"                                                     \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rcx\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rdx\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rsi\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rdi\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  jmp *%r11\n"                                                    \
            "  .cfi_endproc\n"                                                 \
            ".size " #name ", .-" #name "\n")

KMPC_TRAMPOLINE(__kmpc_fork_call, allot_kmpc_fork_prepare);
KMPC_TRAMPOLINE(__kmpc_fork_teams, allot_kmpc_fork_teams_prepare);

#endif /* __x86_64__ */

/* ------------------------------------------------------------------------ */
/* require blocks: threads created and blocked inside them                  */
/* ------------------------------------------------------------------------ */

/*
 * When the program has liballot loaded (linked, or loaded before this
 * constructor ran), its allot_rq_* hooks make threads created inside a
 * `require` block share the block's allocation and make its spawn-timed
 * requests (BeforeSpawn, AfterSpawn, ForChild, ForDescendants), and make
 * threads blocked in pthread_join or a condition wait give their allocation
 * back meanwhile (Poli-C §2.3, §2.7, §5.3). This is how the team threads
 * libgomp creates, which the program never sees, get their own CPUs.
 *
 *  - The hooks are looked up once, in the constructor, with
 *    dlsym(RTLD_DEFAULT): all eight or none. Without them (no liballot)
 *    every wrapper below forwards after one predictable branch on
 *    `g_rq_on`. The real functions are looked up in the constructor too
 *    (or on first use, for a call made by another library's constructor
 *    before ours), so no wrapper calls dlsym on a hot path or a team thread.
 *  - Hooks never call back into these wrappers' hooks: liballot marks the
 *    threads that are inside it, and its hooks do nothing there (its
 *    runtime creates a watcher thread, and Rust's locks are futexes, not
 *    pthread condition variables). The wrappers preserve errno.
 *  - pthread_create wraps the start routine in a trampoline that calls
 *    child_start first and child_exit last, through pthread_cleanup_push so
 *    that pthread_exit and cancellation release too. A failed create, or no
 *    memory for the trampoline's argument, cancels the prepared context.
 *  - A condition wait retakes the allocation without waiting while it holds
 *    the mutex (try_unblock); if it cannot, it unlocks the mutex, waits for
 *    the allocation, and locks again: to the caller this is a spurious
 *    wake-up, which every condition wait must already tolerate.
 *  - Versions (glibc 2.36, x86-64): pthread_create and pthread_join are
 *    @@GLIBC_2.34, pthread_cond_wait and pthread_cond_timedwait
 *    @@GLIBC_2.3.2 (@GLIBC_2.2.5 is the pre-2003 condition variable layout,
 *    not supported: such binaries would reach the new implementation),
 *    pthread_cond_clockwait @@GLIBC_2.34. The wrappers are unversioned,
 *    which the loader accepts for any versioned reference; they forward to
 *    those default versions.
 */

struct rq_hooks {
    void *(*spawn_prepare)(void);
    void (*spawn_done)(void);
    void (*spawn_cancel)(void *);
    void *(*child_start)(void *);
    void (*child_exit)(void *);
    void (*block)(void);
    int (*try_unblock)(void);
    void (*unblock)(void);
};

/* Written once by the constructor, before the program's threads exist. */
static struct rq_hooks g_rq;
static int g_rq_on;

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*join_fn)(pthread_t, void **);
typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cond_clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                                 const struct timespec *);

enum real_sym { R_CREATE, R_JOIN, R_COND_WAIT, R_COND_TIMEDWAIT, R_COND_CLOCKWAIT, R_COUNT };
static void *g_real[R_COUNT];
static const char *const real_name[R_COUNT] = {"pthread_create", "pthread_join",
                                               "pthread_cond_wait", "pthread_cond_timedwait",
                                               "pthread_cond_clockwait"};
/* The version to forward to where libc keeps an older one beside it. */
static const char *const real_version[R_COUNT] = {NULL, NULL, "GLIBC_2.3.2", "GLIBC_2.3.2",
                                                  NULL};

static __attribute__((noinline)) void *real_slow(enum real_sym s)
{
    void *f = NULL;
    if (real_version[s] != NULL)
        f = dlvsym(RTLD_NEXT, real_name[s], real_version[s]);
    if (f == NULL)
        f = dlsym(RTLD_NEXT, real_name[s]);
    if (f == NULL)
        die("no library provides", real_name[s]);
    __atomic_store_n(&g_real[s], f, __ATOMIC_RELEASE);
    return f;
}

static inline void *real_fn(enum real_sym s)
{
    void *f = __atomic_load_n(&g_real[s], __ATOMIC_ACQUIRE);
    return LIKELY(f != NULL) ? f : real_slow(s);
}

/* Looks the hooks up (constructor): all of them, or none. */
static void rq_init(void)
{
    for (int s = 0; s < R_COUNT; s++)
        if (__atomic_load_n(&g_real[s], __ATOMIC_RELAXED) == NULL)
            real_slow((enum real_sym)s);
    struct rq_hooks h;
    void **slot[] = {(void **)&h.spawn_prepare, (void **)&h.spawn_done,
                     (void **)&h.spawn_cancel,  (void **)&h.child_start,
                     (void **)&h.child_exit,    (void **)&h.block,
                     (void **)&h.try_unblock,   (void **)&h.unblock};
    static const char *const name[] = {
        "allot_rq_spawn_prepare", "allot_rq_spawn_done", "allot_rq_spawn_cancel",
        "allot_rq_child_start",   "allot_rq_child_exit", "allot_rq_block",
        "allot_rq_try_unblock",   "allot_rq_unblock"};
    _Static_assert(sizeof slot / sizeof slot[0] == sizeof name / sizeof name[0], "hooks");
    for (size_t i = 0; i < sizeof name / sizeof name[0]; i++) {
        *slot[i] = dlsym(RTLD_DEFAULT, name[i]);
        if (*slot[i] == NULL)
            return;
    }
    g_rq = h;
    __atomic_store_n(&g_rq_on, 1, __ATOMIC_RELEASE);
}

struct rq_start {
    void *(*fn)(void *);
    void *arg;
    void *ctx;
};

static void rq_child_exit(void *guard)
{
    int saved = errno;
    g_rq.child_exit(guard);
    errno = saved;
}

static void *rq_trampoline(void *p)
{
    struct rq_start *s = p;
    void *(*fn)(void *) = s->fn;
    void *arg = s->arg;
    void *guard = g_rq.child_start(s->ctx);
    free(p);
    void *volatile ret = NULL;
    errno = 0;
    pthread_cleanup_push(rq_child_exit, guard);
    ret = fn(arg);
    pthread_cleanup_pop(1);
    return ret;
}

EXPORT int pthread_create(pthread_t *restrict thread, const pthread_attr_t *restrict attr,
                          void *(*start)(void *), void *restrict arg)
{
    create_fn real = (create_fn)real_fn(R_CREATE);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_RELAXED)))
        return real(thread, attr, start, arg);
    int saved = errno;
    void *ctx = g_rq.spawn_prepare();
    if (ctx == NULL) {
        errno = saved;
        return real(thread, attr, start, arg);
    }
    struct rq_start *s = malloc(sizeof *s);
    if (s == NULL) {
        g_rq.spawn_cancel(ctx);
        errno = saved;
        return EAGAIN;
    }
    s->fn = start;
    s->arg = arg;
    s->ctx = ctx;
    int rc = real(thread, attr, rq_trampoline, s);
    if (rc != 0) {
        free(s);
        g_rq.spawn_cancel(ctx);
    } else {
        g_rq.spawn_done();
    }
    errno = saved;
    return rc;
}

EXPORT int pthread_join(pthread_t thread, void **ret)
{
    join_fn real = (join_fn)real_fn(R_JOIN);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_RELAXED)))
        return real(thread, ret);
    int saved = errno;
    g_rq.block();
    errno = saved;
    int rc = real(thread, ret);
    saved = errno;
    g_rq.unblock();
    errno = saved;
    return rc;
}

/* After a condition wait returned with `m` locked: retake the allocation. */
static void rq_after_wait(pthread_mutex_t *m)
{
    int saved = errno;
    if (!g_rq.try_unblock()) {
        pthread_mutex_unlock(m);
        g_rq.unblock();
        pthread_mutex_lock(m);
    }
    errno = saved;
}

static void rq_before_wait(void)
{
    int saved = errno;
    g_rq.block();
    errno = saved;
}

EXPORT int pthread_cond_wait(pthread_cond_t *restrict cond, pthread_mutex_t *restrict mutex)
{
    cond_wait_fn real = (cond_wait_fn)real_fn(R_COND_WAIT);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_RELAXED)))
        return real(cond, mutex);
    rq_before_wait();
    int rc = real(cond, mutex);
    rq_after_wait(mutex);
    return rc;
}

EXPORT int pthread_cond_timedwait(pthread_cond_t *restrict cond, pthread_mutex_t *restrict mutex,
                                  const struct timespec *restrict abstime)
{
    cond_timedwait_fn real = (cond_timedwait_fn)real_fn(R_COND_TIMEDWAIT);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_RELAXED)))
        return real(cond, mutex, abstime);
    rq_before_wait();
    int rc = real(cond, mutex, abstime);
    rq_after_wait(mutex);
    return rc;
}

EXPORT int pthread_cond_clockwait(pthread_cond_t *restrict cond, pthread_mutex_t *restrict mutex,
                                  clockid_t clock, const struct timespec *restrict abstime)
{
    cond_clockwait_fn real = (cond_clockwait_fn)real_fn(R_COND_CLOCKWAIT);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_RELAXED)))
        return real(cond, mutex, clock, abstime);
    rq_before_wait();
    int rc = real(cond, mutex, clock, abstime);
    rq_after_wait(mutex);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                 */
/* ------------------------------------------------------------------------ */

/* Maps the page named by ALLOT_GRANT_FD, or says why not. */
static const struct grant_page *map_page(const char *var, const char **why)
{
    if (var == NULL || var[0] == '\0') {
        *why = "ALLOT_GRANT_FD is not set";
        return NULL;
    }
    char *end = NULL;
    errno = 0;
    long fd = strtol(var, &end, 10);
    if (errno != 0 || end == var || *end != '\0' || fd < 0 || fd > INT_MAX) {
        *why = "ALLOT_GRANT_FD is not a descriptor number";
        return NULL;
    }
    struct stat st;
    if (fstat((int)fd, &st) != 0) {
        *why = "ALLOT_GRANT_FD is not open";
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)PAGE_BYTES) {
        *why = "ALLOT_GRANT_FD is not a grant page (wrong type or size)";
        return NULL;
    }
    /* A page sealed against shrinking can never fault (SIGBUS) under us. */
    int seals = fcntl((int)fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why = "ALLOT_GRANT_FD is not a sealed grant page";
        return NULL;
    }
    void *m = mmap(NULL, PAGE_BYTES, PROT_READ, MAP_SHARED, (int)fd, 0);
    if (m == MAP_FAILED) {
        *why = "cannot map ALLOT_GRANT_FD";
        return NULL;
    }
    const struct grant_page *p = m;
    if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != PAGE_MAGIC ||
        __atomic_load_n(&p->version, __ATOMIC_RELAXED) != PAGE_VERSION ||
        __atomic_load_n(&p->size, __ATOMIC_RELAXED) != PAGE_BYTES) {
        munmap(m, PAGE_BYTES);
        *why = "ALLOT_GRANT_FD is not an allot grant page of this page version";
        return NULL;
    }
    return p;
}

__attribute__((constructor)) static void shim_init(void)
{
    int saved = errno;
    const char *dbg = getenv(ALLOT_ENV_SHIM_DEBUG);
    g_debug = dbg != NULL && dbg[0] == '1' && dbg[1] == '\0';
    const char *why = NULL;
    const struct grant_page *p = map_page(getenv(ALLOT_ENV_GRANT_FD), &why);
    __atomic_store_n(&g_page, p, __ATOMIC_RELEASE);
    rq_init();
    if (g_debug) {
        if (p != NULL)
            say("active: cell %llu, grant %u threads",
                (unsigned long long)__atomic_load_n(&p->cell, __ATOMIC_RELAXED),
                grant_threads());
        else
            say("inert: %s", why);
        if (g_rq_on)
            say("require hooks: liballot found; threads follow require blocks");
    }
    errno = saved;
}
