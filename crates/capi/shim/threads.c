/*
 * threads.c: threads created and blocked inside `require` blocks, through
 * liballot's hooks. Part of liballot_shim.so (see shim.h).
 */

#include "shim.h"

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
    /* Optional (a liballot older than the shim lacks them; then the
     * wrappers of blocking.c forward without hooks, or give back on every
     * kind of wait without the last two). */
    int (*holds)(void);
    int (*try_block)(void);
    int (*releases)(int);
    void (*block_for)(int);
};

/* Written once by the constructor, before the program's threads exist. */
static struct rq_hooks g_rq;
int g_rq_on;

typedef int (*create_fn)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
typedef int (*join_fn)(pthread_t, void **);
typedef int (*cond_wait_fn)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*cond_timedwait_fn)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
typedef int (*cond_clockwait_fn)(pthread_cond_t *, pthread_mutex_t *, clockid_t,
                                 const struct timespec *);

enum real_sym {
    R_CREATE,
    R_JOIN,
    R_COND_WAIT,
    R_COND_TIMEDWAIT,
    R_COND_CLOCKWAIT,
    R_GETAFFINITY,
    R_MUTEX_LOCK,
    R_COUNT
};
static void *g_real[R_COUNT];
static const char *const real_name[R_COUNT] = {
    "pthread_create",         "pthread_join",           "pthread_cond_wait",
    "pthread_cond_timedwait", "pthread_cond_clockwait", "sched_getaffinity",
    "pthread_mutex_lock"};
/* The version to forward to where libc keeps an older one beside it. */
static const char *const real_version[R_COUNT] = {NULL, NULL, "GLIBC_2.3.2", "GLIBC_2.3.2",
                                                  NULL, "GLIBC_2.3.4", NULL};

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

/* The real pthread_create, for the shim's own threads (follow.c). */
int real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                        void *arg)
{
    return ((create_fn)real_fn(R_CREATE))(thread, attr, start, arg);
}

/* Looks the hooks up through `handle`: all of them, or none. The hooks are
 * written before `g_rq_on` is set (release); the wrappers read `g_rq_on`
 * with acquire, so a liballot found after threads exist (dlopen'ed by
 * Python's ctypes, found by follow.c's scan) is safe to use at once. */
static void rq_lookup(void *handle)
{
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
        *slot[i] = dlsym(handle, name[i]);
        if (*slot[i] == NULL)
            return;
    }
    h.holds = (int (*)(void))dlsym(handle, "allot_rq_holds");
    h.try_block = (int (*)(void))dlsym(handle, "allot_rq_try_block");
    h.releases = (int (*)(int))dlsym(handle, "allot_rq_releases");
    h.block_for = (void (*)(int))dlsym(handle, "allot_rq_block_for");
    /* Two threads may find liballot at once (two scans, or two copies):
     * the first complete set is the one used. */
    static int claimed;
    if (__atomic_exchange_n(&claimed, 1, __ATOMIC_ACQ_REL))
        return;
    g_rq = h;
    __atomic_store_n(&g_rq_on, 1, __ATOMIC_RELEASE);
}

/* Looks the hooks up (constructor): all of them, or none. */
void rq_init(void)
{
    for (int s = 0; s < R_COUNT; s++)
        if (__atomic_load_n(&g_real[s], __ATOMIC_RELAXED) == NULL)
            real_slow((enum real_sym)s);
    rq_lookup(RTLD_DEFAULT);
}

/* A newly loaded object (follow.c's scan): liballot, if the hooks are not
 * on yet. */
void rq_try_object(void *handle)
{
    if (!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE))
        rq_lookup(handle);
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

/* glibc's sched_getaffinity (entry.c wraps it). */
int real_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *mask)
{
    typedef int (*getaffinity_fn)(pid_t, size_t, cpu_set_t *);
    return ((getaffinity_fn)real_fn(R_GETAFFINITY))(pid, size, mask);
}

/* pthread_create, and when the kernel refused the binding in `attr`, the
 * binding carried into the grant (bind.c). */
static inline int create_bound(create_fn real, pthread_t *thread, const pthread_attr_t *attr,
                               void *(*start)(void *), void *arg)
{
    int rc = real(thread, attr, start, arg);
    if (UNLIKELY(rc == EINVAL))
        rc = bind_retry_create(real, thread, attr, start, arg);
    return rc;
}

/* pthread_create inside or outside a require block (entry.c wraps it). */
int rq_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                      void *arg)
{
    create_fn real = (create_fn)real_fn(R_CREATE);
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
        return create_bound(real, thread, attr, start, arg);
    int saved = errno;
    void *ctx = g_rq.spawn_prepare();
    if (ctx == NULL) {
        errno = saved;
        return create_bound(real, thread, attr, start, arg);
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
    int rc = create_bound(real, thread, attr, rq_trampoline, s);
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
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
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

/* After a wait that returned with `m` locked (a condition wait, a
 * contended lock): retake the allocation, without holding `m` while
 * waiting for it when it cannot be retaken at once. */
void rq_after_wait(pthread_mutex_t *m)
{
    int saved = errno;
    if (!g_rq.try_unblock()) {
        pthread_mutex_unlock(m);
        g_rq.unblock();
        /* The real lock: blocking.c's wrapper would give back again. */
        ((int (*)(pthread_mutex_t *))real_fn(R_MUTEX_LOCK))(m);
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
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
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
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
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
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
        return real(cond, mutex, clock, abstime);
    rq_before_wait();
    int rc = real(cond, mutex, clock, abstime);
    rq_after_wait(mutex);
    return rc;
}


/* For blocking.c: whether the calling thread gives its allocation back
 * during a wait of `kind` (thread-local reads in liballot), and the hooks
 * around such a wait. */
int rq_releases(int kind)
{
    if (LIKELY(!__atomic_load_n(&g_rq_on, __ATOMIC_ACQUIRE)))
        return 0;
    int saved = errno;
    int r = g_rq.releases != NULL ? g_rq.releases(kind) : g_rq.holds != NULL ? g_rq.holds() : 0;
    errno = saved;
    return r;
}

void rq_block_for(int kind)
{
    int saved = errno;
    if (g_rq.block_for != NULL)
        g_rq.block_for(kind);
    else
        g_rq.block();
    errno = saved;
}

void rq_unblock(void)
{
    int saved = errno;
    g_rq.unblock();
    errno = saved;
}

int rq_try_block(void)
{
    if (g_rq.try_block == NULL)
        return 0;
    int saved = errno;
    int b = g_rq.try_block();
    errno = saved;
    return b;
}
