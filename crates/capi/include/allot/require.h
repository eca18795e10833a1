/*
 * allot/require.h — Poli-C's require blocks for C and C++: kinds, policies, outcomes.
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_REQUIRE_H
#define ALLOT_REQUIRE_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/require.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* require: a guarantee and a limit for a block of code                      */
/* ------------------------------------------------------------------------ */

/*
 * A `require` block holds resources while it runs: its requests are both
 * what the block is guaranteed and all it may use.
 *
 *     allot_outcome_t c;
 *     allot_require(&c, allot_cores(2)) {          // a policy; result in c
 *         run_with(c.ncores);
 *     }
 *     allot_require(allot_cpu(0, 1.0), allot_cpu(1, 0.0)) {  // per device
 *         ...                                        // CPU 0 only, alone
 *     }
 *
 * Entering waits until every request can be met at once; meanwhile the
 * thread gives back what it already holds (so two waiting threads never hold
 * what the other needs), and policies run again whenever availability
 * changes. A request nested in another block is carved out of the enclosing
 * block's allocation, on the same thread or in threads spawned inside it;
 * it may not ask for more than that allocation. Threads created inside a
 * block share its allocation for their whole life (also after the block is
 * left), and a thread blocked in pthread_join or a condition wait gives its
 * allocation back until it runs again (with the preload shim; see
 * "Thread hooks" below). Leaving a block releases what it acquired.
 *
 * Requests (each an allot_req_t value, made by the functions below):
 *
 *   allot_cpu(cpu, a)          utilisation a (0..1) of CPU `cpu`; 0 forbids it
 *   allot_cpu_share(cpu, s)    the fraction s (0..1) of what is available on
 *                              `cpu` in the enclosing allocation (the
 *                              paper's `50%` is allot_cpu_share(cpu, 0.5))
 *   allot_memory(node, bytes)  memory on NUMA node `node` (binds allocations)
 *   allot_io(dev, weight)      I/O weight 1..1000 on block device "maj:min"
 *   allot_kind(k, dev, a)      any kind by name, device by number
 *   allot_kind_dev(k, d, a)    any kind by name, device by name
 *   allot_kind_share(k, dev, s)
 *   allot_cores(n)             n whole CPUs, exclusive (others forbidden)
 *   allot_min_cores(n)         every free CPU, at least n
 *   allot_numa_nodes(n)        n whole NUMA nodes (CPUs and memory)
 *   allot_fair_cores()         free CPUs / (waiting threads + 1), at least 1
 *   allot_fair_numa()          the same, NUMA-aware
 *   allot_strong_numa_node(), allot_weak_numa_node()
 *                              the join case study: cache-sensitive and
 *                              -insensitive joins never share a core (needs
 *                              the virtual kinds StrongCore and WeakCore)
 *   allot_constrained(min, max, domain)
 *                              min..max exclusive CPUs, all in one
 *                              ALLOT_DOMAIN_ANY / _LLC / _NUMA
 *   allot_policy(name, fn, arg)    a policy written in C (see below)
 *   allot_named_policy(name, arg)  a policy defined with allot_policy_define,
 *                              or "fair_cores", "fair_numa",
 *                              "strong_numa_node", "weak_numa_node"
 *
 * Options wrap a request (several may be combined):
 *
 *   allot_default(r)   exclusive, shared with threads spawned in the block
 *   allot_private(r)   exclusive, not even shared with spawned threads
 *   allot_shared(r)    a limit without exclusivity: coexists with other
 *                      shared requests of the same device
 *   allot_before_spawn(r)  taken just before the first thread is created
 *                      in the block (nothing is taken if none is)
 *   allot_after_spawn(r)   taken just after the first thread is created
 *   allot_for_child(r)     made by each thread created in the block, as it
 *                      starts (nested in what it shares)
 *   allot_for_descendants(r)  made by every thread created in the block
 *                      and by the threads those create, and so on
 *
 * Spawn timings work for threads created through pthread_create when the
 * program runs with the preload shim (`allot run`, or LD_PRELOAD of
 * liballot_shim.so): that is how an OpenMP team is placed, Poli-C's
 * Figure 6(c):
 *
 *     allot_require(allot_before_spawn(allot_cores(n))) {
 *         omp_set_num_threads(n);
 *         allot_require(allot_after_spawn(allot_private(allot_cores(1))),
 *                       allot_for_child(allot_cores(1))) {
 *             #pragma omp parallel
 *             work();            // each team thread alone on its own CPU
 *         }
 *     }
 *
 * The statement: allot_require(...) and allot_require_try(&status, ...)
 * take 1 to 16 requests; an allot_outcome_t pointer among them (usually
 * first) receives what the block's policy obtained. The block is a `for`
 * statement whose variable is released by __attribute__((cleanup)): leaving
 * the block by falling through, `break`, `continue`, `return` or `goto`
 * releases it. Because it is a loop, `break` and `continue` inside the block
 * leave the require block itself, not a loop around it. longjmp out of a
 * block (and pthread_exit or cancellation in a program built without
 * -fexceptions) skips the release: undefined behaviour, as for any cleanup.
 * Needs GNU C (gcc or clang): the cleanup attribute, statement expressions
 * (marked __extension__, so -pedantic is quiet) and __COUNTER__. C++ uses the
 * class allot::require_scope (end of this header); the same macros work
 * there.
 *
 * Each call site keeps its prepared requests (kinds and devices looked up,
 * policies built) in a static allot_site_t, filled on first use under a lock
 * and reused while the requests' values stay the same, so entering a block
 * again costs no lookup and no allocation.
 *
 * Errors. Recoverable ones — an unknown kind, device or policy name
 * (ALLOT_ERR_UNKNOWN), an amount out of range or a malformed request
 * (ALLOT_ERR_INVALID), a policy no state of the machine can meet
 * (ALLOT_ERR_NEVER), a virtual kind the broker refuses (ALLOT_ERR_REFUSED)
 * — make allot_require print "file:line: ..." to stderr and abort, as
 * Poli-C does; allot_require_try stores the status instead, skips the
 * block, and allot_last_error() says what went wrong. Programming errors
 * abort in both forms, naming the file and line of the require: a nested
 * request larger than the enclosing allocation, a block left twice, left
 * out of order (an enclosing block before a nested one), or left on another
 * thread than the one that entered it, and a require inside a policy
 * function.
 *
 * Contexts: any thread. Entering blocks until the requests can be met
 * (unbounded). Requests take effect for the calling thread (its CPU
 * affinity, memory policy, I/O priority) and are undone on leaving.
 * allot_shutdown does not affect require blocks.
 */

/* What a policy obtained (Poli-C's `cores_t`): zero when no policy ran. */
typedef struct {
    uint32_t ncores;    /* cores obtained */
    uint32_t nnodes;    /* NUMA nodes obtained */
    uint64_t cpus[16];  /* which CPUs (ALLOT_CPU_ISSET(cpu, cpus)) */
    uint64_t nodes[16]; /* which NUMA nodes, by kernel id (ALLOT_CPU_ISSET) */
} allot_outcome_t;

/* A policy's view of every device (opaque), and one device in it. */
typedef struct allot_view allot_view_t;
typedef struct allot_dev allot_dev_t;

/* A policy written in C: reads the devices' availability through `view`,
 * writes requests on the devices it wants, and returns ALLOT_POLICY_SUCCESS,
 * or ALLOT_POLICY_FAILURE when it cannot be met now (the thread then waits
 * and the policy runs again when availability changes). */
typedef int (*allot_policy_fn)(allot_view_t *view, void *arg);
#define ALLOT_POLICY_FAILURE 0
#define ALLOT_POLICY_SUCCESS 1

/* Ownership (allot_req_t.own) and timing (allot_req_t.timing). */
#define ALLOT_OWN_DEFAULT 0
#define ALLOT_OWN_PRIVATE 1
#define ALLOT_OWN_SHARED 2
#define ALLOT_TIMING_NOW 0
#define ALLOT_TIMING_BEFORE_SPAWN 1
#define ALLOT_TIMING_AFTER_SPAWN 2
#define ALLOT_TIMING_FOR_CHILD 3
#define ALLOT_TIMING_FOR_DESCENDANTS 4

/* Where allot_constrained's CPUs must lie. */
#define ALLOT_DOMAIN_ANY 0
#define ALLOT_DOMAIN_LLC 1
#define ALLOT_DOMAIN_NUMA 2

/* allot_req_t.type (the request functions fill it in). */
#define ALLOT_REQ_DEVICE 1  /* kind `name`, device `dev` or `index`, `amount` */
#define ALLOT_REQ_SHARE 2   /* the same with `amount` a share (0..1) */
#define ALLOT_REQ_POLICY 3  /* built-in policy `policy` with n/min/max/domain */
#define ALLOT_REQ_CPOLICY 4 /* C policy `fn`(view, `arg`), named `name` */
#define ALLOT_REQ_NAMED 5   /* policy looked up by `name`, with `arg` */
#define ALLOT_REQ_BIND 6    /* `out` receives the block's outcome */

/* allot_req_t.policy for ALLOT_REQ_POLICY. */
#define ALLOT_P_CORES 1
#define ALLOT_P_MIN_CORES 2
#define ALLOT_P_NUMA_NODES 3
#define ALLOT_P_FAIR_CORES 4
#define ALLOT_P_FAIR_NUMA 5
#define ALLOT_P_STRONG_NUMA_NODE 6
#define ALLOT_P_WEAK_NUMA_NODE 7
#define ALLOT_P_CONSTRAINED 8

/* One request. Make them with the functions below; the fields are public so
 * that other languages can build them. Unused fields are zero. */
typedef struct {
    int type;              /* ALLOT_REQ_* */
    int own;               /* ALLOT_OWN_* */
    int timing;            /* ALLOT_TIMING_* */
    int policy;            /* ALLOT_P_* */
    const char *name;      /* kind or policy name */
    const char *dev;       /* device name; NULL: use `index` */
    int64_t index;         /* device number (a name first, else an index) */
    double amount;         /* amount, or share for ALLOT_REQ_SHARE */
    uint32_t n, min, max;  /* policy parameters */
    uint32_t domain;       /* ALLOT_DOMAIN_* */
    allot_policy_fn fn;    /* ALLOT_REQ_CPOLICY */
    void *arg;             /* passed to fn */
    allot_outcome_t *out;  /* ALLOT_REQ_BIND */
} allot_req_t;

/* A call site: its file and line (for messages) and liballot's cache of its
 * prepared requests. Must have static storage (the macros make one per call
 * site); initialise with ALLOT_SITE_INIT and never write it. */
typedef struct {
    const char *file;
    int line;
    void *cache; /* owned by liballot */
} allot_site_t;
#define ALLOT_SITE_INIT {__FILE__, __LINE__, 0}

/* An entered block. Opaque: zero-initialise (ALLOT_SCOPE_INIT), pass to
 * allot_require_enter, then allot_require_leave. */
typedef struct allot_scope {
    uint64_t opaque_[6];
    struct allot_scope *prev_;
    allot_site_t *site_;
    uint64_t tid_;
    int state_; /* 0 fresh, 1 entered, 2 left, 3 failed */
    int reserved_;
} allot_scope_t;
#define ALLOT_SCOPE_INIT {{0, 0, 0, 0, 0, 0}, 0, 0, 0, 0, 0}

/* allot_require_enter flags. */
#define ALLOT_REQUIRE_ABORT 1u /* abort on every error, as allot_require */

/* Enters a block: acquires reqs[0..n) (waiting until they can all be met
 * at once) for the calling thread and records it in *scope. BIND requests
 * receive the outcome. `site` may be NULL (no cache; messages name no
 * file).
 *
 * Contexts: any thread, not inside a policy function (abort). Blocks until
 *   the requests can be met.
 * Errors: ALLOT_ERR_INVALID (scope NULL; reqs NULL with n > 0; a malformed
 *   request: unknown type, option or domain, NULL name, amount not finite or
 *   out of the device's range, share outside 0..1; n above 64);
 *   ALLOT_ERR_UNKNOWN (no such kind, device or policy name);
 *   ALLOT_ERR_NEVER (a policy that cannot be met even on an idle machine).
 *   With ALLOT_REQUIRE_ABORT in `flags`, each of these prints the site and
 *   the reason to stderr and aborts instead. Always aborts: a nested request
 *   larger than its enclosing allocation; `scope` already entered.
 * Undefined behaviour: `site` without static storage or written by the
 *   program; strings in reqs not NUL-terminated; a C policy `fn` not of its
 *   type; `scope` moved or freed while entered. */
int allot_require_enter(allot_scope_t *scope, allot_site_t *site, const allot_req_t *reqs,
                        size_t n, unsigned flags);

/* Leaves a block entered with allot_require_enter: releases what it
 * acquired, restores the thread's previous allocation. A scope whose enter
 * failed, or never entered, is left without effect.
 *
 * Contexts: the thread that entered it, innermost block first.
 * Errors: none returned. Aborts (naming the block's file and line) if the
 *   scope was already left, is left on another thread, or is left while a
 *   block entered after it on this thread is still open.
 * Undefined behaviour: a pointer to anything but an allot_scope_t. */
void allot_require_leave(allot_scope_t *scope);

/* Kinds of waits. With the preload shim (`allot run`, or LD_PRELOAD of
 * liballot_shim.so), a thread inside a block that waits gives its
 * allocation back for the length of the wait if it releases on that kind
 * of wait, and retakes it after. */
#define ALLOT_WAIT_SYNC 1u  /* for another thread: joins, condition, semaphore
                               and futex waits, a contended mutex */
#define ALLOT_WAIT_SLEEP 2u /* nanosleep, clock_nanosleep, sleep, usleep */
#define ALLOT_WAIT_IO 4u    /* blocking reads of pipes, sockets and devices,
                               recv, accept, poll, select, epoll_wait */
/* Poli-C's rule and the default: every wait but I/O. A block waiting on a
 * socket keeps what it holds, exclusivity included. */
#define ALLOT_WAIT_PAPER (ALLOT_WAIT_SYNC | ALLOT_WAIT_SLEEP)

/* Chooses the kinds of waits (ALLOT_WAIT_* or'ed, 0 for none) during which
 * the calling thread gives its allocation back; stores the previous choice
 * in *previous unless it is NULL. A thread starts with the process's
 * default (ALLOT_RELEASE_ON: paper, all, none, or sync,sleep,io; else
 * ALLOT_WAIT_PAPER); one started inside a block takes its creator's.
 * Keeping an allocation through a wait for a thread that needs it
 * deadlocks: choose 0 only around waits that end by themselves.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (a bit that names no kind; nothing changes). */
int allot_release_on(uint32_t waits, uint32_t *previous);

/* How many times the calling thread gave its allocation back while
 * waiting. Read on entering a block and again later: a difference means
 * what the block held (an exclusive CPU, say) was someone else's for a
 * while.
 *
 * Contexts: any thread. Does not block. Errors: none. */
uint64_t allot_given_back(void);

/* Registers a virtual resource kind `name`: `count` devices named "0".."n-1"
 * of `max` each, that only count (Poli-C's StrongCore/WeakCore). With a
 * broker, every process of the machine shares the same counters. Defining
 * the same kind again with the same devices is fine.
 *
 * Contexts: any thread. Blocks for a round trip to the broker, if any.
 * Errors: ALLOT_ERR_INVALID (name NULL or not UTF-8; count 0 or above
 *   65536; max not finite and positive; the name exists with other devices);
 *   ALLOT_ERR_REFUSED (the broker refused the definition).
 * Undefined behaviour: `name` not NUL-terminated. */
int allot_kind_define(const char *name, size_t count, double max);

/* A device of a kind of the program's own (allot_kind_register). */
typedef struct {
    const char *name; /* NULL: its index, "0", "1", ... */
    double min;       /* left to threads that asked for nothing (0..max) */
    double max;       /* largest allocation, finite and above 0 */
} allot_kind_dev_t;

/* A kind's operations (Poli-C's), each NULL when the kind has none; `arg`
 * is passed to each. probe: the device's cumulative counters (get1, and
 * get2 or 0); 0 on success. Policies then see allot_dev_rate: Δget1 per
 * second between two looks at least 50 ms apart (Δget1/Δget2 when get2
 * counts). restrict_thread: the calling thread now holds amounts[i] of
 * device i (NaN: not constrained): make the OS honour it. throttle_thread:
 * limit the rate of thread `tid` (the caller) to what amounts allow. Both
 * return 0 on success; a failure leaves the holding accounted, not
 * enforced. They are called under liballot's lock, from any thread, for
 * the life of the process: they must not enter or leave a require block
 * and should return quickly. */
typedef struct {
    int (*probe)(void *arg, size_t dev, uint64_t *get1, uint64_t *get2);
    int (*restrict_thread)(void *arg, const double *amounts, size_t n);
    int (*throttle_thread)(void *arg, uint64_t tid, const double *amounts, size_t n);
    void *arg;
} allot_kind_ops_t;

/* Registers resource kind `name` with `n` devices and the operations
 * `*ops` (copied): requests (allot_kind_dev, allot_kind) and policies use it
 * exactly like the built-in kinds. With a broker the kind is the
 * machine's: its devices (and their minimums) are defined there, every
 * process registering the same definition shares them, and what one holds
 * exclusively no other holds; the operations run in each registering
 * process. Without a broker its devices are this process's. Rust:
 * Blocks::register_kind.
 *
 * Contexts: any thread, outside policy functions. Blocks for a round trip
 *   to the broker, if any.
 * Errors: ALLOT_ERR_INVALID (name or devs or ops NULL; n 0 or above 65536;
 *   a name not UTF-8; a maximum not finite and above 0 or a minimum
 *   outside 0..max; a kind of that name exists in this process);
 *   ALLOT_ERR_REFUSED (the broker refused it: another process defined the
 *   name with other devices).
 * Undefined behaviour: strings not NUL-terminated; devs shorter than n;
 *   functions not callable as declared. */
int allot_kind_register(const char *name, const allot_kind_dev_t *devs,
                        size_t n, const allot_kind_ops_t *ops);

/* Names a C policy, for allot_named_policy(name, arg). Defining a name
 * again replaces its function for blocks entered afterwards.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (name or fn NULL; name not UTF-8; a built-in
 *   policy's name).
 * Undefined behaviour: `name` not NUL-terminated; `fn` not of its type. */
int allot_policy_define(const char *name, allot_policy_fn fn);

/* The view a C policy receives. Policies run under liballot's lock: they
 * must be quick, must not block, and may call only the allot_view_* and
 * allot_dev_* functions (a require inside a policy aborts). They may run on
 * any thread that enters a block naming them, and again whenever
 * availability changes. Devices are valid until the policy returns.
 *
 * Every function below is called with the view (or a device of the view)
 * being run; other pointers abort with a message. */

/* Number of devices of `kind` (0 for an unknown kind). */
size_t allot_view_count(allot_view_t *view, const char *kind);
/* The first device of `kind`, then the next one of the same kind (NULL at
 * the end); see ALLOT_FOR_EACH_DEV. */
allot_dev_t *allot_view_first(allot_view_t *view, const char *kind);
allot_dev_t *allot_view_next(allot_view_t *view, allot_dev_t *dev);
/* Device `name` of `kind` (a name, else a decimal index), or NULL: the
 * paper's dev(r, d). */
allot_dev_t *allot_view_dev(allot_view_t *view, const char *kind, const char *name);
/* The device of `kind` with the most available / the fewest waiters. */
allot_dev_t *allot_view_max_available(allot_view_t *view, const char *kind);
allot_dev_t *allot_view_min_waiters(allot_view_t *view, const char *kind);
/* The i-th resource kind ("cpu", "memory", "io", a kind the program
 * registered), in registration order, or NULL past the last: the paper's
 * res_iter; see ALLOT_FOR_EACH_KIND. Valid until the policy returns. */
const char *allot_view_kind(allot_view_t *view, size_t i);
/* Threads waiting for resources (in every process, with a broker). */
uint32_t allot_view_total_waiters(allot_view_t *view);
/* The ownership the request was made with (ALLOT_OWN_*). */
int allot_view_ownership(allot_view_t *view);
/* The outcome the block receives. Left all zero, it is filled in after a
 * successful policy: CPUs with a request >= 1 (ncores) or > 0 (cpus),
 * memory nodes with a request > 0. */
allot_outcome_t *allot_view_outcome(allot_view_t *view);

/* A device's name ("3" for CPU 3, "node0", "8:0", "5" for a virtual one),
 * valid until the policy returns; its index in its kind; its kind. */
const char *allot_dev_name(const allot_dev_t *dev);
size_t allot_dev_index(const allot_dev_t *dev);
const char *allot_dev_kind(const allot_dev_t *dev);
/* Available to an exclusive request now; to a shared one; the device's
 * maximum; threads waiting for it. */
double allot_dev_available(const allot_dev_t *dev);
double allot_dev_shared_available(const allot_dev_t *dev);
double allot_dev_max(const allot_dev_t *dev);
/* The device's rate of use from its kind's probe (per second, see
 * allot_kind_ops_t), or -1 when its kind does not measure or before the
 * second look. */
double allot_dev_rate(const allot_dev_t *dev);
uint32_t allot_dev_waiters(const allot_dev_t *dev);
/* Requests `amount` of the device (0: forbid it) with ownership `own`
 * (ALLOT_OWN_*; the view's ownership unless set). Amounts outside 0..max
 * make the block abort as a programming error. */
void allot_dev_request(allot_dev_t *dev, double amount);
void allot_dev_set_ownership(allot_dev_t *dev, int own);

/* Iterates `d` over the devices of `kind`:
 *     ALLOT_FOR_EACH_DEV(view, "cpu", d) {
 *         if (allot_dev_available(d) >= 1) allot_dev_request(d, 1);
 *     }                                                              */
#define ALLOT_FOR_EACH_DEV(view, kind, d)                                      \
    for (allot_dev_t *d = allot_view_first((view), (kind)); d != 0;            \
         d = allot_view_next((view), d))

/* Iterates the name `k` over the resource kinds:
 *     ALLOT_FOR_EACH_KIND(view, k) {
 *         ALLOT_FOR_EACH_DEV(view, k, d) { ... }
 *     }                                                              */
#define ALLOT_FOR_EACH_KIND(view, k)                                           \
    for (size_t k##_i = 0, k##_go = 1; k##_go; k##_go = 0)                     \
        for (const char *k = allot_view_kind((view), 0); k != 0;               \
             k = allot_view_kind((view), ++k##_i))

/* ------------------------------------------------------------------------ */
/* Request constructors and the require statement                            */
/* ------------------------------------------------------------------------ */

static inline allot_req_t allot_req_new_(int type)
{
    allot_req_t r;
    memset(&r, 0, sizeof r);
    r.type = type;
    return r;
}
static inline allot_req_t allot_kind_dev(const char *kind, const char *dev, double amount)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_DEVICE);
    r.name = kind;
    r.dev = dev;
    r.amount = amount;
    return r;
}
static inline allot_req_t allot_kind(const char *kind, int64_t dev, double amount)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_DEVICE);
    r.name = kind;
    r.index = dev;
    r.amount = amount;
    return r;
}
static inline allot_req_t allot_kind_share(const char *kind, int64_t dev, double share)
{
    allot_req_t r = allot_kind(kind, dev, share);
    r.type = ALLOT_REQ_SHARE;
    return r;
}
static inline allot_req_t allot_cpu(int cpu, double amount)
{
    return allot_kind("cpu", cpu, amount);
}
static inline allot_req_t allot_cpu_share(int cpu, double share)
{
    return allot_kind_share("cpu", cpu, share);
}
/* NUMA node `node` by kernel id (for the memory kind a number is a node
 * id: the device named "node<id>"). */
static inline allot_req_t allot_memory(int node, double bytes)
{
    return allot_kind("memory", node, bytes);
}
static inline allot_req_t allot_io(const char *dev, double weight)
{
    return allot_kind_dev("io", dev, weight);
}
static inline allot_req_t allot_policy_req_(int policy, uint32_t n)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_POLICY);
    r.policy = policy;
    r.n = n;
    return r;
}
static inline allot_req_t allot_cores(uint32_t n) { return allot_policy_req_(ALLOT_P_CORES, n); }
static inline allot_req_t allot_min_cores(uint32_t n)
{
    return allot_policy_req_(ALLOT_P_MIN_CORES, n);
}
static inline allot_req_t allot_numa_nodes(uint32_t n)
{
    return allot_policy_req_(ALLOT_P_NUMA_NODES, n);
}
static inline allot_req_t allot_fair_cores(void) { return allot_policy_req_(ALLOT_P_FAIR_CORES, 0); }
static inline allot_req_t allot_fair_numa(void) { return allot_policy_req_(ALLOT_P_FAIR_NUMA, 0); }
static inline allot_req_t allot_strong_numa_node(void)
{
    return allot_policy_req_(ALLOT_P_STRONG_NUMA_NODE, 0);
}
static inline allot_req_t allot_weak_numa_node(void)
{
    return allot_policy_req_(ALLOT_P_WEAK_NUMA_NODE, 0);
}
static inline allot_req_t allot_constrained(uint32_t min, uint32_t max, int domain)
{
    allot_req_t r = allot_policy_req_(ALLOT_P_CONSTRAINED, 0);
    r.min = min;
    r.max = max;
    r.domain = (uint32_t)domain;
    return r;
}
static inline allot_req_t allot_policy(const char *name, allot_policy_fn fn, void *arg)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_CPOLICY);
    r.name = name;
    r.fn = fn;
    r.arg = arg;
    return r;
}
static inline allot_req_t allot_named_policy(const char *name, void *arg)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_NAMED);
    r.name = name;
    r.arg = arg;
    return r;
}
static inline allot_req_t allot_bind(allot_outcome_t *out)
{
    allot_req_t r = allot_req_new_(ALLOT_REQ_BIND);
    r.out = out;
    return r;
}
static inline allot_req_t allot_owned_(allot_req_t r, int own)
{
    r.own = own;
    return r;
}
static inline allot_req_t allot_timed_(allot_req_t r, int timing)
{
    r.timing = timing;
    return r;
}
static inline allot_req_t allot_default(allot_req_t r) { return allot_owned_(r, ALLOT_OWN_DEFAULT); }
static inline allot_req_t allot_private(allot_req_t r) { return allot_owned_(r, ALLOT_OWN_PRIVATE); }
static inline allot_req_t allot_shared(allot_req_t r) { return allot_owned_(r, ALLOT_OWN_SHARED); }
static inline allot_req_t allot_before_spawn(allot_req_t r)
{
    return allot_timed_(r, ALLOT_TIMING_BEFORE_SPAWN);
}
static inline allot_req_t allot_after_spawn(allot_req_t r)
{
    return allot_timed_(r, ALLOT_TIMING_AFTER_SPAWN);
}
static inline allot_req_t allot_for_child(allot_req_t r)
{
    return allot_timed_(r, ALLOT_TIMING_FOR_CHILD);
}
static inline allot_req_t allot_for_descendants(allot_req_t r)
{
    return allot_timed_(r, ALLOT_TIMING_FOR_DESCENDANTS);
}

/* The require statement's machinery (names ending in `_` are internal). */
static inline allot_req_t allot_arg_req_(allot_req_t r) { return r; }
static inline int allot_scope_fresh_(const allot_scope_t *s) { return s->state_ == 0; }
/* The site, after presetting *status (so it is written on every path). */
static inline allot_site_t *allot_site_status_(allot_site_t *site, int *status)
{
    if (status)
        *status = ALLOT_ERR_INVALID;
    return site;
}
static inline void allot_scope_cleanup_(allot_scope_t *s)
{
    if (s->state_ == 1)
        allot_require_leave(s);
}
static inline int allot_scope_enter_(allot_scope_t *s, const allot_req_t *reqs, size_t n,
                                     int *status)
{
    int rc = allot_require_enter(s, s->site_, reqs, n, status ? 0u : ALLOT_REQUIRE_ABORT);
    if (status)
        *status = rc;
    return rc == ALLOT_OK;
}

#define ALLOT_PASTE_(a, b) a##b
#define ALLOT_CAT_(a, b) ALLOT_PASTE_(a, b)
#define ALLOT_NARG_PICK_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, \
                         N, ...)                                                               \
    N
#define ALLOT_NARG_(...)                                                                     \
    ALLOT_NARG_PICK_(__VA_ARGS__, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define ALLOT_MAP_N1(f, a) f(a)
#define ALLOT_MAP_N2(f, a, ...) f(a), ALLOT_MAP_N1(f, __VA_ARGS__)
#define ALLOT_MAP_N3(f, a, ...) f(a), ALLOT_MAP_N2(f, __VA_ARGS__)
#define ALLOT_MAP_N4(f, a, ...) f(a), ALLOT_MAP_N3(f, __VA_ARGS__)
#define ALLOT_MAP_N5(f, a, ...) f(a), ALLOT_MAP_N4(f, __VA_ARGS__)
#define ALLOT_MAP_N6(f, a, ...) f(a), ALLOT_MAP_N5(f, __VA_ARGS__)
#define ALLOT_MAP_N7(f, a, ...) f(a), ALLOT_MAP_N6(f, __VA_ARGS__)
#define ALLOT_MAP_N8(f, a, ...) f(a), ALLOT_MAP_N7(f, __VA_ARGS__)
#define ALLOT_MAP_N9(f, a, ...) f(a), ALLOT_MAP_N8(f, __VA_ARGS__)
#define ALLOT_MAP_N10(f, a, ...) f(a), ALLOT_MAP_N9(f, __VA_ARGS__)
#define ALLOT_MAP_N11(f, a, ...) f(a), ALLOT_MAP_N10(f, __VA_ARGS__)
#define ALLOT_MAP_N12(f, a, ...) f(a), ALLOT_MAP_N11(f, __VA_ARGS__)
#define ALLOT_MAP_N13(f, a, ...) f(a), ALLOT_MAP_N12(f, __VA_ARGS__)
#define ALLOT_MAP_N14(f, a, ...) f(a), ALLOT_MAP_N13(f, __VA_ARGS__)
#define ALLOT_MAP_N15(f, a, ...) f(a), ALLOT_MAP_N14(f, __VA_ARGS__)
#define ALLOT_MAP_N16(f, a, ...) f(a), ALLOT_MAP_N15(f, __VA_ARGS__)
/* f(x) for each argument x (1 to 16 of them), separated by commas. */
#define ALLOT_MAP_(f, ...) ALLOT_CAT_(ALLOT_MAP_N, ALLOT_NARG_(__VA_ARGS__))(f, __VA_ARGS__)

#ifndef __cplusplus
/* An outcome pointer becomes a BIND request; a request stays itself. */
#define ALLOT_ARG_(x) _Generic((x), allot_outcome_t *: allot_bind, default: allot_arg_req_)(x)
/* The call site's static allot_site_t. */
#define ALLOT_SITE_()                                                          \
    __extension__({                                                            \
        static allot_site_t allot_site_ = ALLOT_SITE_INIT;                    \
        &allot_site_;                                                          \
    })
#define ALLOT_REQUIRE_(v, status, ...)                                                      \
    for (allot_scope_t v __attribute__((cleanup(allot_scope_cleanup_))) = {                 \
             .site_ = allot_site_status_(ALLOT_SITE_(), (status))};                         \
         allot_scope_fresh_(&v) &&                                                          \
         allot_scope_enter_(&v, (const allot_req_t[]){ALLOT_MAP_(ALLOT_ARG_, __VA_ARGS__)}, \
                            ALLOT_NARG_(__VA_ARGS__), (status));)
#define allot_require(...)                                                     \
    ALLOT_REQUIRE_(ALLOT_CAT_(allot_scope_, __COUNTER__), (int *)0, __VA_ARGS__)
#define allot_require_try(status, ...)                                         \
    ALLOT_REQUIRE_(ALLOT_CAT_(allot_scope_, __COUNTER__), (status), __VA_ARGS__)
#endif /* !__cplusplus */

#ifdef __cplusplus
} /* extern "C" */
#endif


/* ------------------------------------------------------------------------ */
/* C++: allot::require_scope, and the require statement                      */
/* ------------------------------------------------------------------------ */

#ifdef __cplusplus
#include <initializer_list>

namespace allot {

/* A require block as an RAII object: the constructor enters (waiting until
 * the requests can be met), the destructor leaves. Neither copyable nor
 * movable (liballot records its address while it is entered). Without a
 * `status` pointer every error aborts, as allot_require does; with one, a
 * recoverable error is stored there and entered() is false.
 *
 *     {
 *         allot_outcome_t c;
 *         allot::require_scope s{&c, {allot_cores(2)}};
 *         run_with(c.ncores);
 *     }   // left here, also by an exception or a return
 *
 * An exception thrown inside the block leaves it as it unwinds. */
class require_scope {
public:
    require_scope(std::initializer_list<allot_req_t> reqs, int *status = nullptr)
        : require_scope(nullptr, nullptr, reqs, status) {}
    require_scope(allot_outcome_t *out, std::initializer_list<allot_req_t> reqs,
                  int *status = nullptr)
        : require_scope(nullptr, out, reqs, status) {}
    /* With a call site (a static allot_site_t) for messages and caching. */
    require_scope(allot_site_t *site, allot_outcome_t *out, std::initializer_list<allot_req_t> reqs,
                  int *status = nullptr) {
        memset(&scope_, 0, sizeof scope_);
        allot_req_t all[17];
        size_t n = 0;
        if (out != nullptr)
            all[n++] = allot_bind(out);
        for (const allot_req_t &r : reqs)
            if (n < 17)
                all[n++] = r;
        /* More than 16 requests: the 17th slot is a malformed request, which
         * the library rejects. */
        if (reqs.size() + (out != nullptr) > 17)
            all[16] = allot_req_new_(0);
        int rc = allot_require_enter(&scope_, site, all, n, status ? 0u : ALLOT_REQUIRE_ABORT);
        if (status != nullptr)
            *status = rc;
    }
    ~require_scope() {
        if (scope_.state_ == 1)
            allot_require_leave(&scope_);
    }
    require_scope(const require_scope &) = delete;
    require_scope &operator=(const require_scope &) = delete;

    /* Whether the block was entered (false only after a stored error). */
    bool entered() const { return scope_.state_ == 1; }
    /* Leaves before the destructor would (aborts if already left). */
    void leave() { allot_require_leave(&scope_); }

    /* For the allot_require macros: true once, if entered. */
    bool once_() {
        bool first = !stepped_;
        stepped_ = true;
        return first && entered();
    }

private:
    allot_scope_t scope_;
    bool stepped_ = false;
};

inline allot_req_t arg_(allot_req_t r) { return r; }
inline allot_req_t arg_(allot_outcome_t *out) { return allot_bind(out); }

} /* namespace allot */

#define ALLOT_ARG_(x) ::allot::arg_(x)
#define ALLOT_SITE_()                                                          \
    ([]() -> allot_site_t * {                                                  \
        static allot_site_t allot_site_ = ALLOT_SITE_INIT;                    \
        return &allot_site_;                                                   \
    }())
#define ALLOT_REQUIRE_(v, status, ...)                                                    \
    for (::allot::require_scope v(ALLOT_SITE_(), nullptr,                                 \
                                  {ALLOT_MAP_(ALLOT_ARG_, __VA_ARGS__)}, (status));       \
         v.once_();)
#define allot_require(...) ALLOT_REQUIRE_(ALLOT_CAT_(allot_scope_, __COUNTER__), nullptr, __VA_ARGS__)
#define allot_require_try(status, ...)                                         \
    ALLOT_REQUIRE_(ALLOT_CAT_(allot_scope_, __COUNTER__), (status), __VA_ARGS__)
#endif /* __cplusplus */

/* ------------------------------------------------------------------------ */
/* Short names (define ALLOT_SHORT_NAMES before including this header)       */
/* ------------------------------------------------------------------------ */

/* Poli-C's spelling: require(&c, cores(2)) { ... },
 * require(AfterSpawn(Private(cores(1))), ForChild(cores(1))) { ... }.
 * Function-like macros, so only `name(` is affected; still, they take
 * common words: opt in per file. */
#ifdef ALLOT_SHORT_NAMES
#define require(...) allot_require(__VA_ARGS__)
#define require_try(...) allot_require_try(__VA_ARGS__)
#define cpu(...) allot_cpu(__VA_ARGS__)
#define cpu_share(...) allot_cpu_share(__VA_ARGS__)
#define memory(...) allot_memory(__VA_ARGS__)
#define io(...) allot_io(__VA_ARGS__)
#define kind(...) allot_kind(__VA_ARGS__)
#define kind_dev(...) allot_kind_dev(__VA_ARGS__)
#define kind_share(...) allot_kind_share(__VA_ARGS__)
#define cores(...) allot_cores(__VA_ARGS__)
#define min_cores(...) allot_min_cores(__VA_ARGS__)
#define numa_nodes(...) allot_numa_nodes(__VA_ARGS__)
#define fair_cores(...) allot_fair_cores(__VA_ARGS__)
#define fair_numa(...) allot_fair_numa(__VA_ARGS__)
#define strong_numa_node(...) allot_strong_numa_node(__VA_ARGS__)
#define weak_numa_node(...) allot_weak_numa_node(__VA_ARGS__)
#define constrained(...) allot_constrained(__VA_ARGS__)
#define policy(...) allot_policy(__VA_ARGS__)
#define named_policy(...) allot_named_policy(__VA_ARGS__)
#define Default(...) allot_default(__VA_ARGS__)
#define Private(...) allot_private(__VA_ARGS__)
#define Shared(...) allot_shared(__VA_ARGS__)
#define BeforeSpawn(...) allot_before_spawn(__VA_ARGS__)
#define AfterSpawn(...) allot_after_spawn(__VA_ARGS__)
#define ForChild(...) allot_for_child(__VA_ARGS__)
#define ForDescendants(...) allot_for_descendants(__VA_ARGS__)
#define dev_iter(view, kind_name, d) ALLOT_FOR_EACH_DEV(view, kind_name, d)
#define res_iter(view, k) ALLOT_FOR_EACH_KIND(view, k)
#endif /* ALLOT_SHORT_NAMES */

#endif /* ALLOT_REQUIRE_H */
