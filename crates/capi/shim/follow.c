/*
 * follow.c: libraries whose thread count is a setting, kept at the grant.
 *
 * OpenMP teams are capped where they start (omp.c). Other parallel
 * libraries keep a count they were told, and use it for every call until
 * told otherwise: OpenBLAS (its pthreads build), BLIS, MKL (its global
 * setting) and oneTBB (a global_control on max_allowed_parallelism). For
 * those, a thread of the shim's, the *follower*, sleeps on the grant page's
 * futex and, whenever the grant's thread count changes, calls each
 * library's own setter with it (what threadpoolctl does from Python between
 * calls).
 *
 * Finding them. Every loaded object is looked at once: dlopen(its name,
 * RTLD_NOLOAD) and dlsym on that handle for the setters below, so that each
 * copy a process holds is found, also a private (RTLD_LOCAL) copy a Python
 * extension module vendors, under the prefixed and suffixed names of the
 * 64-bit-integer builds wheels ship (scipy_openblas_set_num_threads64_).
 * A setter is kept once per defining object (dladdr1), however many
 * objects' dependencies lead to it. The shim does not interpose dlopen
 * (glibc resolves a dlopen'ed name against the *caller's* RUNPATH, which a
 * wrapper would change to its own); instead, libraries are looked for
 *
 *  - in the constructor (libraries the program is linked with),
 *  - when the program creates a thread or asks for its CPUs
 *    (pthread_create, sched_getaffinity; threads.c) after new objects were
 *    loaded: a BLAS or TBB library sizes its pool from its CPUs and starts
 *    its threads when it starts, so one dlopen'ed late (numpy imported by
 *    Python) is found as it starts — also when it starts on one CPU and so
 *    creates no thread — and set to the grant before it runs a call;
 *  - by the follower every RESCAN_MS while it runs.
 *
 * The same scans find liballot loaded late (a plugin linked with it): its
 * require hooks (threads.c) are on from the first thread created after, in
 * a cell or not.
 *
 * Invariants:
 *
 *  1. Between calls. A setter is what the program itself would call
 *     between calls. OpenBLAS reads its count at the start of each call, so
 *     a call in progress keeps the split it started with; a larger count
 *     creates threads under OpenBLAS's own lock. A library just found is
 *     set only once no dlopen is in progress (loader_quiet): never while
 *     its constructor is still initializing it.
 *  2. OpenMP builds size their own teams. An OpenBLAS whose parallelism is
 *     OpenMP (openblas_get_parallel() == 2) splits each call into as many
 *     parts as omp_get_max_threads() says and starts a team for them, whose
 *     threads then wait for each other's parts: a team capped below the
 *     split would never finish. Its setter would only change the calling
 *     thread's OpenMP setting (the follower's). So such a library is
 *     marked (sizes_own_teams): its teams are never capped (omp.c), and
 *     omp_get_max_threads() called from it answers min(its setting, the
 *     grant), which it reads at the start of every call. A sequential
 *     build (0) has nothing to follow.
 *  3. No thread without a library. The follower is started only when a
 *     followable library is found: `sh`, `make` and compilers under
 *     `allot run` never get one.
 *  4. The follower is invisible to the program: it blocks every signal,
 *     is created with the real pthread_create (no require hooks), and is
 *     started again in a child that forks.
 *  5. Lock order: the loader's lock, then `g_lock`, never the reverse.
 *     Libraries are looked for without `g_lock` (dlopen and dlsym take the
 *     loader's lock, which a thread inside dlopen holds while it scans
 *     from a constructor), and merged into the list under it; setters are
 *     called without it (a setter may load libraries itself: oneTBB loads
 *     its allocator).
 */

#include "shim.h"

#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>

/* How often the follower looks for libraries loaded since (ms). */
#define RESCAN_MS 200
#define MAX_LIBS 16

enum kind {
    K_OPENBLAS, /* void set(int) */
    K_BLIS,     /* void set(int64_t) */
    K_MKL,      /* void set(int) */
    K_TBB,      /* r1::create(global_control&) / r1::destroy */
};

static const char *const kind_name[] = {"openblas", "blis", "mkl", "onetbb"};

/* One setter, in the object that defines it. */
struct lib {
    enum kind kind;
    const void *object; /* link_map of the defining object: the identity */
    void *handle;       /* a reference that keeps it loaded */
    void *set;          /* the setter (for TBB: r1::create) */
    void *unset;        /* TBB: r1::destroy */
};

/* oneTBB's d1::global_control (oneapi/tbb/global_control.h): the ABI the
 * r1 functions take by reference. Two, used in turn, so that a new limit is
 * in place before the old one is withdrawn. */
struct tbb_global_control {
    size_t value;
    intptr_t reserved;
    int param; /* 0: max_allowed_parallelism */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct lib g_libs[MAX_LIBS];
static int g_nlibs;
static unsigned long long g_seen_adds; /* dl_iterate_phdr's load count at the last scan */
static int g_follower;                 /* started */
static struct tbb_global_control g_tbb[2];
static int g_tbb_active = -1;
static unsigned g_applied; /* the count last set */

/* The names each kind may go by: plain, then the wheels' prefixed and
 * suffixed 64-bit-integer builds. */
static const char *const openblas_set[] = {"openblas_set_num_threads",
                                           "openblas_set_num_threads64_",
                                           "scipy_openblas_set_num_threads64_",
                                           "scipy_openblas_set_num_threads"};
static const char *const openblas_parallel[] = {"openblas_get_parallel",
                                                "openblas_get_parallel64_",
                                                "scipy_openblas_get_parallel64_",
                                                "scipy_openblas_get_parallel"};

/* ------------------------------------------------------------------------ */
/* Finding the libraries                                                    */
/* ------------------------------------------------------------------------ */

static int adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof info->dlpi_adds)
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the first object tells */
}

/* How many objects were ever loaded (cheap: stops at the first object). */
static unsigned long long loaded_count(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(adds_cb, &adds);
    return adds;
}

#define MAX_NAMES 512
struct names {
    char *name[MAX_NAMES];
    int n;
};

static int names_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    struct names *ns = arg;
    if (ns->n < MAX_NAMES && info->dlpi_name != NULL && info->dlpi_name[0] != '\0')
        ns->name[ns->n++] = strdup(info->dlpi_name);
    return 0;
}

static int known(const void *object, enum kind kind)
{
    for (int i = 0; i < g_nlibs; i++)
        if (g_libs[i].object == object && g_libs[i].kind == kind)
            return 1;
    return 0;
}

/* Setters a look found, before they are merged into g_libs. */
#define MAX_FOUND 32
struct found {
    int n;
    struct lib lib[MAX_FOUND];
    const char *file[MAX_FOUND];
};

/* Adds `set` to `f` with a reference of its own on the object that
 * defines it (no lock held: this may take the loader lock). */
static void found_add(struct found *f, enum kind kind, void *set, void *unset)
{
    const void *object = object_of(set);
    if (object == NULL || f->n == MAX_FOUND)
        return;
    for (int i = 0; i < f->n; i++)
        if (f->lib[i].object == object && f->lib[i].kind == kind)
            return; /* reached again through another object's dependencies */
    Dl_info info;
    void *ref = NULL;
    if (dladdr(set, &info) != 0 && info.dli_fname != NULL)
        ref = dlopen(info.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    f->file[f->n] = ref != NULL ? info.dli_fname : "?";
    f->lib[f->n++] = (struct lib){kind, object, ref, set, unset};
}

/* Merges what a look found into g_libs (under g_lock, which is never held
 * while the loader lock is taken: a thread inside dlopen may scan too).
 * Leaves in `f` only the references to drop. */
static void merge(struct found *f)
{
    pthread_mutex_lock(&g_lock);
    int keep = 0;
    for (int i = 0; i < f->n; i++) {
        struct lib *l = &f->lib[i];
        if (known(l->object, l->kind)) {
            f->lib[keep++] = *l; /* already known: drop this reference */
            continue;
        }
        if (g_nlibs == MAX_LIBS) {
            note(NOTE_FOLLOW, "more than %d followable libraries; %s left as is", MAX_LIBS,
                 kind_name[l->kind]);
            f->lib[keep++] = *l;
            continue;
        }
        g_libs[g_nlibs] = *l;
        __atomic_store_n(&g_nlibs, g_nlibs + 1, __ATOMIC_RELEASE); /* read by scan() */
        if (UNLIKELY(g_debug))
            say("follow: %s in %s", kind_name[l->kind], f->file[i]);
    }
    f->n = keep;
    pthread_mutex_unlock(&g_lock);
}

static void *first_of(void *handle, const char *const *names, size_t n, size_t *which)
{
    for (size_t i = 0; i < n; i++) {
        void *f = dlsym(handle, names[i]);
        if (f != NULL) {
            if (which != NULL)
                *which = i;
            return f;
        }
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* OpenMP libraries that size their own teams                               */
/* ------------------------------------------------------------------------ */

/* Objects classified by sizes_own_teams(), keyed by link map (open
 * addressing, never removed; a key is stored only with a reference the
 * shim keeps, as in omp_route.c). `whole` is 0 until classified, then
 * 1 (needs whole teams) or 2 (does not). */
#define WHOLE_SLOTS 128
static struct {
    const void *obj;
    int whole;
} g_whole[WHOLE_SLOTS];
static int g_any_whole; /* set once one is classified whole */

static int whole_slot(const void *obj, int create)
{
    uintptr_t h = ((uintptr_t)obj >> 4) * 0x9E3779B97F4A7C15u;
    for (unsigned i = 0; i < WHOLE_SLOTS; i++) {
        unsigned k = (unsigned)((h + i) % WHOLE_SLOTS);
        const void *cur = __atomic_load_n(&g_whole[k].obj, __ATOMIC_ACQUIRE);
        if (cur == obj)
            return (int)k;
        if (cur == NULL) {
            if (!create)
                return -1;
            const void *expected = NULL;
            if (__atomic_compare_exchange_n(&g_whole[k].obj, &expected, obj, 0,
                                            __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
                expected == obj)
                return (int)k;
        }
    }
    return -1;
}

/* An OpenBLAS built on OpenMP, in `handle`, defined by `obj` itself. */
static int is_openmp_openblas(void *handle, const struct link_map *obj)
{
    size_t n = sizeof openblas_parallel / sizeof *openblas_parallel;
    for (size_t i = 0; i < n; i++) {
        int (*parallel)(void) = (int (*)(void))dlsym(handle, openblas_parallel[i]);
        if (parallel != NULL && object_of((void *)parallel) == obj)
            return parallel() == 2;
    }
    return 0;
}

/* Classifies the object `obj` once (may take the loader lock). */
static int whole_teams_classify(const void *objp)
{
    const struct link_map *obj = objp;
    if (obj == NULL)
        return 0;
    int k = whole_slot(obj, 0);
    int v = k >= 0 ? __atomic_load_n(&g_whole[k].whole, __ATOMIC_ACQUIRE) : 0;
    if (v != 0)
        return v == 1;
    int main_program = obj->l_name == NULL || obj->l_name[0] == '\0';
    void *handle = main_program ? dlopen(NULL, RTLD_LAZY) : open_object(obj);
    if (handle == NULL)
        return 0; /* not cached: asked again next time */
    int whole = is_openmp_openblas(handle, obj);
    k = whole_slot(obj, 1);
    if (k < 0 || __atomic_exchange_n(&g_whole[k].whole, whole ? 1 : 2, __ATOMIC_ACQ_REL) != 0)
        dlclose(handle); /* the slot's first classifier keeps its reference */
    if (whole)
        __atomic_store_n(&g_any_whole, 1, __ATOMIC_RELEASE);
    if (whole && UNLIKELY(g_debug))
        say("follow: openblas is an OpenMP build in %s; it reads the grant from "
            "omp_get_max_threads() and its teams are left whole",
            main_program ? "the program" : obj->l_name);
    return whole;
}

int sizes_own_teams(const void *code)
{
    return whole_teams_classify(object_of(code));
}

int sizes_own_teams_known(const void *code)
{
    if (!__atomic_load_n(&g_any_whole, __ATOMIC_ACQUIRE))
        return 0;
    const void *obj = object_of(code);
    int k = obj != NULL ? whole_slot(obj, 0) : -1;
    return k >= 0 && __atomic_load_n(&g_whole[k].whole, __ATOMIC_ACQUIRE) == 1;
}

/* Looks for setters through `handle` (an object and its dependencies). */
static void look_in(void *handle, struct found *f)
{
    rq_try_object(handle);
    size_t which = 0;
    void *set = first_of(handle, openblas_set, sizeof openblas_set / sizeof *openblas_set, &which);
    if (set != NULL) {
        /* The parallel query with the same decoration as the setter. */
        int (*parallel)(void) = (int (*)(void))dlsym(handle, openblas_parallel[which]);
        int mode = parallel != NULL ? parallel() : 1;
        if (mode == 1)
            found_add(f, K_OPENBLAS, set, NULL);
        /* A sequential build (0) has nothing to follow. An OpenMP build (2)
         * is classified by its first region instead (sizes_own_teams):
         * after its initialization has read omp_get_max_threads() as the
         * most threads it will ever use. */
    }
    void *blis = dlsym(handle, "bli_thread_set_num_threads");
    if (blis != NULL)
        found_add(f, K_BLIS, blis, NULL);
    static const char *const mkl[] = {"MKL_Set_Num_Threads", "mkl_set_num_threads"};
    void *mk = first_of(handle, mkl, 2, NULL);
    if (mk != NULL)
        found_add(f, K_MKL, mk, NULL);
    void *create = dlsym(handle, "_ZN3tbb6detail2r16createERNS0_2d114global_controlE");
    void *destroy = dlsym(handle, "_ZN3tbb6detail2r17destroyERNS0_2d114global_controlE");
    if (create != NULL && destroy != NULL)
        found_add(f, K_TBB, create, destroy);
}

/* Looks at every loaded object if any was loaded since the last look.
 * Returns the number of followable libraries known. The looking is done
 * without g_lock (it takes the loader lock); two threads may look at once,
 * and merge() keeps one of each. */
static int scan(void)
{
    unsigned long long adds = loaded_count();
    if (adds == 0 || adds != __atomic_load_n(&g_seen_adds, __ATOMIC_ACQUIRE)) {
        struct names ns = {.n = 0};
        dl_iterate_phdr(names_cb, &ns);
        struct found f = {.n = 0};
        void *main = dlopen(NULL, RTLD_LAZY);
        if (main != NULL) {
            look_in(main, &f);
            dlclose(main);
        }
        for (int i = 0; i < ns.n; i++) {
            void *h = dlopen(ns.name[i], RTLD_NOLOAD | RTLD_LAZY);
            if (h != NULL) {
                look_in(h, &f);
                dlclose(h);
            }
            free(ns.name[i]);
        }
        merge(&f);
        for (int i = 0; i < f.n; i++)
            if (f.lib[i].handle != NULL)
                dlclose(f.lib[i].handle);
        /* Never back to an older count another scan has passed. */
        unsigned long long seen = __atomic_load_n(&g_seen_adds, __ATOMIC_RELAXED);
        while (seen < adds && !__atomic_compare_exchange_n(&g_seen_adds, &seen, adds, 1,
                                                           __ATOMIC_RELEASE, __ATOMIC_RELAXED))
            ;
    }
    return __atomic_load_n(&g_nlibs, __ATOMIC_ACQUIRE);
}

/* ------------------------------------------------------------------------ */
/* Setting the count                                                        */
/* ------------------------------------------------------------------------ */

/* Sets every known library to `n` threads (g_lock not held: see 5.). */
static void apply(unsigned n, int only_new_from)
{
    struct lib libs[MAX_LIBS];
    pthread_mutex_lock(&g_lock);
    int count = g_nlibs;
    memcpy(libs, g_libs, sizeof libs);
    pthread_mutex_unlock(&g_lock);
    for (int i = only_new_from; i < count; i++) {
        switch (libs[i].kind) {
        case K_OPENBLAS:
        case K_MKL:
            ((void (*)(int))libs[i].set)((int)n);
            break;
        case K_BLIS:
            ((void (*)(int64_t))libs[i].set)((int64_t)n);
            break;
        case K_TBB: {
            /* The new limit first, then withdraw the old one. */
            int next = g_tbb_active == 0 ? 1 : 0;
            g_tbb[next] = (struct tbb_global_control){.value = n, .reserved = 0, .param = 0};
            ((void (*)(void *))libs[i].set)(&g_tbb[next]);
            if (g_tbb_active >= 0)
                ((void (*)(void *))libs[i].unset)(&g_tbb[g_tbb_active]);
            g_tbb_active = next;
            break;
        }
        }
    }
}

static long futex_wait(const uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    return syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* Returns once no dlopen is in progress. A library is often found while
 * its own constructor runs (its pool starting, or asking for its CPUs),
 * inside the dlopen that loads it; setting its count then would race with
 * its initialization. dlopen holds the loader lock until the constructors
 * it runs have returned, and so does this call while it waits for it. */
static void loader_quiet(void)
{
    void *h = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
    if (h != NULL)
        dlclose(h);
}

static void *follower(void *arg)
{
    (void)arg;
    const struct grant_page *p = __atomic_load_n(&g_page, __ATOMIC_ACQUIRE);
    int applied_to = 0; /* libraries already set to g_applied */
    for (;;) {
        uint32_t seen = __atomic_load_n(&p->futex, __ATOMIC_ACQUIRE);
        int n = scan();
        unsigned t = grant_threads();
        if (t != 0 && (t != g_applied || n > applied_to)) {
            if (n > applied_to)
                loader_quiet();
            if (UNLIKELY(g_debug))
                say("follow: %u thread%s", t, t == 1 ? "" : "s");
            /* A new count for all; the same count for those found since. */
            apply(t, t != g_applied ? 0 : applied_to);
            g_applied = t;
            applied_to = n;
        }
        futex_wait(&p->futex, seen, RESCAN_MS);
    }
    return NULL;
}

/* Starts the follower (once per process; again in a forked child). */
static void start_follower(void)
{
    if (__atomic_exchange_n(&g_follower, 1, __ATOMIC_ACQ_REL))
        return;
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the follower */
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int rc = real_pthread_create(&t, &attr, follower, NULL);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        __atomic_store_n(&g_follower, 0, __ATOMIC_RELEASE);
        note(NOTE_FOLLOW, "cannot start the follower thread (%d); libraries keep their count",
             rc);
        return;
    }
    pthread_setname_np(t, "allot-follow");
}

static void after_fork_in_child(void)
{
    /* The follower did not survive the fork; the libraries did. */
    __atomic_store_n(&g_follower, 0, __ATOMIC_RELAXED);
    g_applied = 0;
    if (g_nlibs > 0)
        start_follower();
}

void follow_init(void)
{
    pthread_atfork(NULL, NULL, after_fork_in_child);
    if (scan() > 0)
        start_follower();
}

void follow_rescan(void)
{
    /* Outside a cell only liballot is looked for (its require blocks need
     * no cell), and only until it is found. */
    int active = shim_active();
    if (!active && __atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE))
        return;
    if (loaded_count() == __atomic_load_n(&g_seen_adds, __ATOMIC_RELAXED))
        return;
    int saved = errno;
    if (scan() > 0 && active)
        start_follower();
    errno = saved;
}
