/*
 * bind.c: thread bindings kept inside the grant. Part of liballot_shim.so
 * (see shim.h).
 *
 * A program run with OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY has
 * its OpenMP runtime compute a list of places once, at start, from the
 * CPUs the process may use then, and bind every team thread to one of
 * them: the affinity is set on the thread's attributes before
 * pthread_create (libgomp), or by the thread itself with
 * pthread_setaffinity_np / sched_setaffinity. In a cell the CPUs move: a
 * grant shrinks when others arrive and may move to other CPUs. A binding
 * that names only CPUs the cell no longer has makes the kernel refuse it
 * (EINVAL), and libgomp treats a refused thread creation as fatal
 * ("Thread creation failed: Invalid argument").
 *
 * Rule: a binding the kernel accepts is never touched. Only when it is
 * refused with EINVAL, inside a cell, is it retried, in this order:
 *
 *   1. narrowed to the CPUs of the request on the page's grant (the CPUs
 *      the broker published);
 *   2. narrowed to the CPUs of the request the calling thread (or the
 *      target thread) may use now: the page is published after the cgroup
 *      is written, so for a moment the page may still name CPUs the kernel
 *      already took away, while a thread's own mask is always inside its
 *      cpuset;
 *   3. unbound: a mask of every CPU, which the kernel narrows to the
 *      cell's. The thread floats over the cell's CPUs, and the kernel's
 *      load balancer puts it where no other thread runs.
 *
 * Why a binding with no CPU in the grant floats rather than being pinned
 * to some CPU of the grant: the shim cannot know which of the grant's
 * CPUs the team's other threads are bound to (those whose bindings the
 * kernel accepted), so any fixed choice can put two spinning team threads
 * on one CPU while another stays idle, and a carried binding would outlive
 * the grant it was chosen for (on 16 CPUs, teams so pinned did not finish
 * in 14 s where their neighbours took 1.2 s). A floating thread's
 * requested mask is every CPU, so the kernel widens it with the cell when
 * the grant grows again, just as it does for a binding it accepted and
 * later had to override.
 *
 * bind_into is the one mapping: the CPUs of the request that are still
 * allowed, or nothing. Bound programs thus keep running when their cell
 * shrinks or moves, bound where their places are still theirs.
 *
 * Invariants: the fast path (the call succeeds) costs nothing but the
 * forwarding; the caller's attributes are restored before
 * pthread_create returns (only a creation that would have failed sees
 * them changed, and only for the duration of the retries); errno and the
 * error a call returns are those of the last attempt. Outside a cell (no
 * page) every error passes through unchanged.
 *
 * LLVM's libomp binds each thread itself with the raw system call
 * (syscall(SYS_sched_setaffinity), for KMP_AFFINITY and OMP_PROC_BIND) and
 * aborts on a refusal ("OMP: System error #22"): the shim's syscall()
 * (blocking.c) hands such a refusal to the same ladder.
 */

#include "shim.h"

#include <sys/syscall.h>

/* Masks up to 8192 CPUs: larger than any page (1024) and any runtime's
 * default set size. */
#define MASK_WORDS 128
#define MASK_BYTES (MASK_WORDS * sizeof(unsigned long))
#define WORD_BITS (8 * sizeof(unsigned long))

struct mask {
    unsigned long w[MASK_WORDS];
};

static int mask_count(const struct mask *m)
{
    int n = 0;
    for (int i = 0; i < MASK_WORDS; i++)
        n += __builtin_popcountl(m->w[i]);
    return n;
}

/* The n-th set CPU of `m` (0-based; n < mask_count(m)). */
static int mask_nth(const struct mask *m, int n)
{
    for (int i = 0; i < MASK_WORDS; i++) {
        int c = __builtin_popcountl(m->w[i]);
        if (n < c) {
            unsigned long w = m->w[i];
            while (n-- > 0)
                w &= w - 1;
            return i * (int)WORD_BITS + __builtin_ctzl(w);
        }
        n -= c;
    }
    return -1;
}

/* Copies `size` bytes of a kernel-format mask into `m`, zero-extended. */
static void mask_from(struct mask *m, const void *set, size_t size)
{
    memset(m, 0, sizeof *m);
    memcpy(m->w, set, size < MASK_BYTES ? size : MASK_BYTES);
}

/*
 * The binding `want` carried into `allowed` (the rule above): the CPUs of
 * `want` in `allowed`. Returns 0 when there are none, else 1.
 */
static int bind_into(const struct mask *want, const struct mask *allowed, struct mask *out)
{
    int any = 0;
    for (int i = 0; i < MASK_WORDS; i++) {
        out->w[i] = want->w[i] & allowed->w[i];
        any |= out->w[i] != 0;
    }
    return any;
}

/* The grant's CPUs from the page (seqlock read), 0 if none could be read. */
static int page_cpus(struct mask *m)
{
    const struct grant_page *p = __atomic_load_n(&g_page, __ATOMIC_RELAXED);
    if (p == NULL)
        return 0;
    enum { WORDS = sizeof p->cpus / sizeof p->cpus[0] };
    _Static_assert(WORDS * 64 <= MASK_WORDS * WORD_BITS, "the page's set fits a mask");
    for (int tries = 0; tries < 256; tries++) {
        uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
        if (s1 & 1) {
            CPU_RELAX();
            continue;
        }
        memset(m, 0, sizeof *m);
        for (int i = 0; i < WORDS; i++) {
            uint64_t w = __atomic_load_n(&p->cpus[i], __ATOMIC_RELAXED);
            m->w[i * 64 / WORD_BITS] |= (unsigned long)(w << ((i * 64) % WORD_BITS));
        }
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1)
            return mask_count(m) > 0;
    }
    return 0;
}

static void told(const struct mask *want, const struct mask *got, const char *how)
{
    static int said;
    if (!g_debug || __atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        return;
    if (got != NULL)
        say("a binding to CPU %d (%d CPUs) lies partly outside the cell; %s to CPU %d "
            "(%d CPUs) (told once)",
            mask_nth(want, 0), mask_count(want), how, mask_nth(got, 0), mask_count(got));
    else
        say("a binding to CPU %d (%d CPUs) lies outside the cell; %s (told once)",
            mask_nth(want, 0), mask_count(want), how);
}

/* ------------------------------------------------------------------------ */
/* The real functions                                                       */
/* ------------------------------------------------------------------------ */

typedef int (*setaff_fn)(pid_t, size_t, const cpu_set_t *);
typedef int (*getaff_fn)(pid_t, size_t, cpu_set_t *);
typedef int (*psetaff_fn)(pthread_t, size_t, const cpu_set_t *);
typedef int (*pgetaff_fn)(pthread_t, size_t, cpu_set_t *);

typedef long (*syscall_fn)(long, ...);

/* glibc's own syscall(), not the shim's wrapper (blocking.c), which hands
 * refusals here. */
enum { B_SET, B_GET, B_PSET, B_PGET, B_SYSCALL, B_COUNT };
static void *g_breal[B_COUNT];
static const char *const b_name[B_COUNT] = {"sched_setaffinity", "sched_getaffinity",
                                            "pthread_setaffinity_np", "pthread_getaffinity_np",
                                            "syscall"};

static void *breal(int s)
{
    void *f = __atomic_load_n(&g_breal[s], __ATOMIC_ACQUIRE);
    if (LIKELY(f != NULL))
        return f;
    /* glibc keeps pre-2.3.4 sched_*affinity beside the current ones. */
    if (s == B_SET || s == B_GET)
        f = dlvsym(RTLD_NEXT, b_name[s], "GLIBC_2.3.4");
    if (f == NULL)
        f = dlsym(RTLD_NEXT, b_name[s]);
    if (f == NULL)
        die("no library provides", b_name[s]);
    __atomic_store_n(&g_breal[s], f, __ATOMIC_RELEASE);
    return f;
}

/* Looks the real functions up (constructor), so no binding looks them up
 * while the loader's lock may be held. */
void bind_init(void)
{
    for (int s = 0; s < B_COUNT; s++)
        breal(s);
}

/* ------------------------------------------------------------------------ */
/* The ladder: one binding the kernel refused, carried into the grant        */
/* ------------------------------------------------------------------------ */

/*
 * One way of setting a binding, for the ladder below: `apply` sets `m`
 * (returns 0 or an errno value), `own` reads the CPUs the target may use
 * now (returns 0 on success).
 */
struct binder {
    int (*apply)(struct binder *b, const struct mask *m);
    int (*own)(struct binder *b, struct mask *m);
};

/*
 * After `want` was refused with EINVAL: the steps of the rule above.
 * Returns 0 once a carried binding was set, else the last attempt's error.
 * Only an EINVAL goes on to the next step: any other error is not the
 * binding's.
 */
static int carry(struct binder *b, const struct mask *want)
{
    struct mask allowed, to;
    int rc = EINVAL;
    if (page_cpus(&allowed) && bind_into(want, &allowed, &to)) {
        rc = b->apply(b, &to);
        if (rc == 0) {
            told(want, &to, "it was bound");
            return 0;
        }
    }
    if (rc == EINVAL && b->own(b, &allowed) == 0 && bind_into(want, &allowed, &to)) {
        rc = b->apply(b, &to);
        if (rc == 0) {
            told(want, &to, "it was bound (the CPUs it may use now)");
            return 0;
        }
    }
    if (rc == EINVAL) {
        /* Every CPU: the kernel leaves the cell's. */
        memset(&to, 0xff, sizeof to);
        rc = b->apply(b, &to);
        if (rc == 0)
            told(want, NULL, "it floats over the cell's CPUs");
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Thread creation with a binding in its attributes                         */
/* ------------------------------------------------------------------------ */

struct create_binder {
    struct binder b;
    int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
    pthread_t *thread;
    pthread_attr_t *attr;
    void *(*start)(void *);
    void *arg;
};

static int create_apply(struct binder *b, const struct mask *m)
{
    struct create_binder *c = (struct create_binder *)b;
    pthread_attr_setaffinity_np(c->attr, MASK_BYTES, (const cpu_set_t *)m->w);
    return c->create(c->thread, c->attr, c->start, c->arg);
}

/* The creator's CPUs: the new thread's cpuset is its creator's. */
static int create_own(struct binder *b, struct mask *m)
{
    (void)b;
    return ((getaff_fn)breal(B_GET))(0, MASK_BYTES, (cpu_set_t *)m->w);
}

/*
 * Called by pthread_create (threads.c) after `create` failed with EINVAL:
 * retries with the attributes' binding carried into the grant, then
 * unbound. Returns the last attempt's result (EINVAL again when
 * the failure was not the binding's).
 */
int bind_retry_create(int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                      pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                      void *arg)
{
    if (attr == NULL || !shim_active())
        return EINVAL;
    pthread_attr_t *a = (pthread_attr_t *)attr; /* restored below */
    struct mask want;
    if (pthread_attr_getaffinity_np(a, MASK_BYTES, (cpu_set_t *)want.w) != 0)
        return EINVAL;
    /* glibc reports "no binding" as every bit set. */
    int n = mask_count(&want);
    if (n == 0 || n == MASK_WORDS * (int)WORD_BITS)
        return EINVAL;

    struct create_binder c = {{create_apply, create_own}, create, thread, a, start, arg};
    int rc = carry(&c.b, &want);
    pthread_attr_setaffinity_np(a, MASK_BYTES, (cpu_set_t *)want.w);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Bindings set by the thread itself                                        */
/* ------------------------------------------------------------------------ */

/* sched_setaffinity, through glibc or the raw system call. */
struct task_binder {
    struct binder b;
    pid_t pid;
    int raw;
};

static int task_apply(struct binder *b, const struct mask *m)
{
    struct task_binder *t = (struct task_binder *)b;
    int rc = t->raw ? (int)((syscall_fn)breal(B_SYSCALL))(SYS_sched_setaffinity, (long)t->pid,
                                                          (long)MASK_BYTES, (long)m->w)
                    : ((setaff_fn)breal(B_SET))(t->pid, MASK_BYTES, (const cpu_set_t *)m->w);
    return rc == 0 ? 0 : errno;
}

static int task_own(struct binder *b, struct mask *m)
{
    struct task_binder *t = (struct task_binder *)b;
    return ((getaff_fn)breal(B_GET))(t->pid, MASK_BYTES, (cpu_set_t *)m->w);
}

/* Carries a refused sched_setaffinity; returns its result (0 or -1 with
 * errno EINVAL, as the refusal had). */
static int retry_task(pid_t pid, size_t size, const void *set, int raw)
{
    struct mask want;
    mask_from(&want, set, size);
    struct task_binder t = {{task_apply, task_own}, pid, raw};
    if (carry(&t.b, &want) == 0)
        return 0;
    errno = EINVAL;
    return -1;
}

EXPORT int sched_setaffinity(pid_t pid, size_t size, const cpu_set_t *set)
{
    int rc = ((setaff_fn)breal(B_SET))(pid, size, set);
    if (LIKELY(rc == 0) || errno != EINVAL || !shim_active())
        return rc;
    return retry_task(pid, size, set, 0);
}

/*
 * The raw system call, as LLVM's libomp binds its threads
 * (syscall(SYS_sched_setaffinity, ...), KMP_AFFINITY and OMP_PROC_BIND):
 * syscall() (blocking.c) calls this after the kernel refused with EINVAL.
 */
long bind_retry_raw(long pid, long size, long set)
{
    if (!shim_active())
        return -1;
    return retry_task((pid_t)pid, (size_t)size, (const void *)set, 1);
}

struct thread_binder {
    struct binder b;
    pthread_t thread;
};

static int thread_apply(struct binder *b, const struct mask *m)
{
    struct thread_binder *t = (struct thread_binder *)b;
    return ((psetaff_fn)breal(B_PSET))(t->thread, MASK_BYTES, (const cpu_set_t *)m->w);
}

static int thread_own(struct binder *b, struct mask *m)
{
    struct thread_binder *t = (struct thread_binder *)b;
    return ((pgetaff_fn)breal(B_PGET))(t->thread, MASK_BYTES, (cpu_set_t *)m->w);
}

EXPORT int pthread_setaffinity_np(pthread_t thread, size_t size, const cpu_set_t *set)
{
    int rc = ((psetaff_fn)breal(B_PSET))(thread, size, set);
    if (LIKELY(rc != EINVAL) || !shim_active())
        return rc;
    struct mask want;
    mask_from(&want, set, size);
    struct thread_binder t = {{thread_apply, thread_own}, thread};
    return carry(&t.b, &want) == 0 ? 0 : rc;
}

/* ------------------------------------------------------------------------ */
/* CPUs counted at start                                                    */
/* ------------------------------------------------------------------------ */

/*
 * libgomp counts the CPUs it may use once, when it starts
 * (pthread_getaffinity_np of the initial thread), and from then on, while
 * it manages more threads than that count, waits at every barrier by
 * sleeping almost at once instead of spinning ("throttled"). A program
 * started while its cell holds few CPUs (others started with it) would be
 * throttled for its whole run once its grant grows, although the shim
 * never gives a team more threads than the grant has CPUs. So when libgomp
 * asks for the initial thread's CPUs, the answer also holds the CPUs
 * `allot run` could use before the cell confined it (ALLOT_LAUNCH_CPUS:
 * the most the cell may ever be granted). Only libgomp's own question is
 * answered so (the caller's object is libgomp), only about the
 * calling thread, and only in a cell; everyone else gets the kernel's
 * answer. Places for OMP_PROC_BIND are then laid over those CPUs, and a
 * binding outside the grant is carried into it (above).
 *
 * This runs inside libgomp's constructor, before the shim's own: it reads
 * the environment itself and keeps no state.
 */

/* Parses a kernel CPU list ("0-3,8") into `m`; returns 0 on a bad list. */
static int parse_cpu_list(const char *s, struct mask *m)
{
    memset(m, 0, sizeof *m);
    while (*s) {
        char *end;
        unsigned long a = strtoul(s, &end, 10), b = a;
        if (end == s)
            return 0;
        s = end;
        if (*s == '-') {
            b = strtoul(s + 1, &end, 10);
            if (end == s + 1 || b < a)
                return 0;
            s = end;
        }
        if (b >= MASK_WORDS * WORD_BITS)
            return 0;
        for (unsigned long c = a; c <= b; c++)
            m->w[c / WORD_BITS] |= 1UL << (c % WORD_BITS);
        if (*s == ',')
            s++;
        else if (*s != '\0' && *s != '\n')
            return 0;
        else
            break;
    }
    return 1;
}

/* Whether `caller` lies in libgomp (its file name holds "gomp": libgomp.so.1,
 * or a wheel's vendored libgomp-HASH.so; the shim names no OpenMP runtime
 * whole, see src/shim.rs). */
static int called_from_libgomp(const void *caller)
{
    Dl_info info;
    if (dladdr(caller, &info) == 0 || info.dli_fname == NULL)
        return 0;
    const char *base = strrchr(info.dli_fname, '/');
    return strstr(base ? base + 1 : info.dli_fname, "gomp") != NULL;
}

typedef int (*pgetaff_real_fn)(pthread_t, size_t, cpu_set_t *);

EXPORT int pthread_getaffinity_np(pthread_t thread, size_t size, cpu_set_t *set)
{
    int rc = ((pgetaff_real_fn)breal(B_PGET))(thread, size, set);
    if (rc != 0 || !pthread_equal(thread, pthread_self()))
        return rc;
    const char *launch = getenv(ALLOT_ENV_LAUNCH_CPUS);
    if (launch == NULL || getenv(ALLOT_ENV_GRANT_FD) == NULL ||
        !called_from_libgomp(__builtin_return_address(0)))
        return rc;
    struct mask m;
    if (!parse_cpu_list(launch, &m))
        return rc;
    size_t words = size / sizeof(unsigned long);
    unsigned long *w = (unsigned long *)set;
    for (size_t i = 0; i < words && i < MASK_WORDS; i++)
        w[i] |= m.w[i];
    return rc;
}
