/*
 * omp_route.c: finding, for each call of an OpenMP entry point, the real
 * function in the runtime the calling code is bound to (invariants 3, 4
 * and 5 of page.c's opening comment). The entry points themselves are in
 * omp.c. Part of liballot_shim.so (see shim.h).
 */

#include "omp_route.h"

const char *const sym_name[S_COUNT] = {
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
    [S_OMP_SET_NUM_THREADS] = "omp_set_num_threads",
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

#define MAX_RUNTIMES 16
static struct omp_rt g_runtimes[MAX_RUNTIMES];

struct omp_rt *g_global[FAM_COUNT];
struct omp_rt g_local;

/* Objects whose regions were routed by their own dependencies (invariant 4
 * in page.c), keyed by link map; open addressing, never removed. A key is
 * stored only together with a reference to the object that the shim keeps
 * (or for the main program, which is never unloaded), so no other object
 * can come to live at a key's address. */
#define OWNER_SLOTS 256
struct owner {
    struct link_map *obj;
    struct omp_rt *rt[FAM_COUNT];
};
static struct owner g_owners[OWNER_SLOTS];

struct link_map *object_of(const void *addr)
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
void *open_object(const struct link_map *obj)
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

__attribute__((noinline)) void *route_slow(enum family fam, enum sym s,
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


