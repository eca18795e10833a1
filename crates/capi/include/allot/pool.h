/*
 * allot/pool.h — pools and tasks: work-stealing pools that follow a cell's grant.
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_POOL_H
#define ALLOT_POOL_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/pool.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Pools and tasks                                                           */
/* ------------------------------------------------------------------------ */

/* Starts a pool following `cell`'s grant: one worker per granted CPU (at
 * most the grant's `threads`, at most the machine's CPU count), each pinned
 * to its CPU; workers come and go as the grant changes, between tasks, and
 * no task is lost. `cell` = {0} uses the process's automatic cell (as
 * allot_cell_auto("liballot")). The pool holds its own reference to the
 * cell: the cell handle may be freed at once. Several pools may share a
 * cell; each then runs up to one worker per granted CPU.
 *
 * Contexts: any thread, also inside callbacks (a nested pool). Blocks until
 *   the workers run (milliseconds).
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE (cell is neither
 *   {0} nor a live cell); ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (no thread could
 *   be started, or too many live pools).
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_new(allot_cell_t cell, allot_pool_t *out);

/* As allot_pool_new, with the thread policy named by `policy` (NULL: the
 * defaults, ALLOT_POOL_POLICY when set): "KIND[:OPTION=VALUE,...]" with KIND
 * local-lifo (alias lifo), local-fifo, global-fifo (alias fifo) or
 * global-lifo, and options levels=1..3, victims=random|round-robin,
 * place=local|round-robin|random|least-loaded, quantum=N(us|ms|s)
 * (docs/protocol.md).
 *
 * Contexts: as allot_pool_new.
 * Errors: as allot_pool_new; ALLOT_ERR_INVALID also for a policy that does
 *   not parse (the message lists what would).
 * Undefined behaviour: `policy` not NUL-terminated. */
int allot_pool_new_policy(allot_cell_t cell, const char *policy, allot_pool_t *out);

/* The number of workers active now (it follows the grant, so it may change
 * between two calls).
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_workers(allot_pool_t pool, uint32_t *out);

/* What one worker of a pool has done since the pool started (the Rust
 * runtime's WorkerStats). Counters only grow; each is exact for its worker,
 * but the fields are not read at one instant. */
typedef struct {
    uint32_t worker;           /* the worker's slot, 0 .. slots - 1 */
    int32_t cpu;               /* the CPU it serves now, -1 if none */
    uint64_t tasks_run;        /* tasks it ran */
    uint64_t tasks_created;    /* tasks created while running on it */
    uint64_t tasks_stolen;     /* tasks it took from others' or shared queues */
    uint64_t sleeps;           /* times it parked (no work, or no CPU) */
    uint64_t ns_asleep;        /* time parked, the sleep in progress included */
    uint64_t ns_awake;         /* time since the pool started, not parked */
    uint64_t retirements;      /* times its CPU was revoked */
    uint64_t queue_high_water; /* most tasks its own queues held at once (sampled) */
    uint64_t yields;           /* quanta used up: another ready task ran nested */
    uint64_t tasks_migrated;   /* of tasks_stolen, those taken from a retired worker */
    uint64_t tasks_suspended;  /* tasks created suspended while running on it */
    uint64_t tasks_resumed;    /* resumed or timed tasks it ran */
} allot_worker_stats_t;

/* The number of worker slots of the pool (the most workers it can run; a
 * slot's worker may be retired), i.e. the valid `worker` indices below.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_slots(allot_pool_t pool, uint32_t *out);

/* Writes worker `worker`'s statistics to *out. Cheap (a few loads); the
 * workers are not stopped or slowed.
 *
 * Contexts: any thread, also inside callbacks. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL, or worker >= the slot count);
 *   ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_worker_stats(allot_pool_t pool, uint32_t worker, allot_worker_stats_t *out);

/* Queues fn(arg) to run once on a worker of the pool, and returns a task
 * handle to wait for it with allot_task_join (or drop with
 * allot_task_detach). Inside a callback of the same pool the task goes to
 * the calling worker's own queue (cheap, and stolen by idle workers).
 *
 * Contexts: any thread, also inside callbacks. Does not block (beyond a
 *   short lock and, if workers sleep, a wake-up system call).
 * Errors: ALLOT_ERR_INVALID (fn or out NULL); ALLOT_ERR_HANDLE;
 *   ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (16777215 unjoined tasks).
 * Undefined behaviour: `fn` not a function of this type; `arg` not usable by
 *   `fn` on another thread, or freed before the task ran; a callback that
 *   leaves by longjmp (a C++ exception aborts). */
int allot_pool_spawn(allot_pool_t pool, void (*fn)(void *), void *arg,
                     allot_task_t *out);

/* Task priorities for allot_pool_spawn_with. Policies with priority levels
 * (all shipped ones by default) run higher priorities first; a task's
 * allot_pool_join halves inherit its priority. */
#define ALLOT_PRIORITY_LOW 0
#define ALLOT_PRIORITY_NORMAL 1
#define ALLOT_PRIORITY_HIGH 2

/* As allot_pool_spawn, with a priority (ALLOT_PRIORITY_*) and the worker
 * slot that should run the task (0 .. allot_pool_slots - 1), or -1 for
 * wherever the pool's policy places it. A task given a worker runs on it
 * while that worker holds a CPU; once it retires, another worker runs it.
 *
 * Contexts: any thread, also inside callbacks. Does not block (as
 *   allot_pool_spawn).
 * Errors: as allot_pool_spawn; ALLOT_ERR_INVALID also for a priority other
 *   than 0, 1, 2 or a worker < -1 or >= the slot count.
 * Undefined behaviour: as allot_pool_spawn. */
int allot_pool_spawn_with(allot_pool_t pool, void (*fn)(void *), void *arg,
                          int priority, int worker, allot_task_t *out);

/* Inside a task of a pool with a quantum: if the task has run longer than
 * its quantum and a task of its priority or higher is ready, runs that task
 * here, nested, and returns 1; else returns 0 at once. A pool has a quantum
 * when its policy string sets one ("local-lifo:quantum=2ms", through
 * allot_pool_new_policy or ALLOT_POOL_POLICY); without one this returns 0.
 * Safe to call anywhere (0 outside a task).
 *
 * Contexts: any thread. Does not block beyond the task it may run. */
int allot_yield(void);

/* Suspended and timed tasks. A suspended task exists, with its task handle,
 * but sits in no queue and holds no worker until it is resumed: a task that
 * must wait for something makes its continuation this way, hands the
 * resumer to whatever it waits for, and returns, freeing its worker.
 *
 * allot_pool_spawn_suspended makes fn(arg) such a task, with a priority and
 * worker as allot_pool_spawn_with, and writes its resumer and its task
 * handle. Nothing runs until allot_resume(*resumer); allot_resumer_cancel
 * (or freeing the pool first) cancels it instead: fn never runs, and
 * allot_task_join on it returns ALLOT_ERR_CANCELLED.
 *
 * Contexts: any thread, also inside callbacks. Does not block.
 * Errors: as allot_pool_spawn_with; ALLOT_ERR_INVALID also for resumer or
 *   task NULL; ALLOT_ERR_OS (too many live resumers).
 * Undefined behaviour: as allot_pool_spawn. */
int allot_pool_spawn_suspended(allot_pool_t pool, void (*fn)(void *), void *arg,
                               int priority, int worker,
                               allot_resumer_t *resumer, allot_task_t *task);

/* Queues the suspended task (as allot_pool_spawn_with would now) and spends
 * the resumer: a second allot_resume returns ALLOT_ERR_HANDLE, so a task is
 * resumed at most once.
 *
 * Contexts: any thread, also inside callbacks. Does not block (beyond a
 *   short lock and, if workers sleep, a wake-up system call).
 * Errors: ALLOT_ERR_HANDLE (spent, stale or never issued);
 *   ALLOT_ERR_CANCELLED (the pool was freed meanwhile: the task was
 *   cancelled; the resumer is spent); ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_resume(allot_resumer_t resumer);

/* Cancels the suspended task (fn never runs; joining it returns
 * ALLOT_ERR_CANCELLED) and spends the resumer.
 *
 * Contexts: any thread, also inside callbacks. Does not block.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_resumer_cancel(allot_resumer_t resumer);

/* Runs fn(arg) once delay_ns nanoseconds have passed, queued then as
 * allot_pool_spawn_with would queue it; until then it holds no worker (the
 * pool's timer thread resumes it, to within its wake-up latency: tens of
 * microseconds). Freeing the pool first cancels it (ALLOT_ERR_CANCELLED
 * from allot_task_join).
 *
 * Contexts: any thread, also inside callbacks. Does not block.
 * Errors: as allot_pool_spawn_with.
 * Undefined behaviour: as allot_pool_spawn. */
int allot_pool_spawn_after(allot_pool_t pool, uint64_t delay_ns, void (*fn)(void *),
                           void *arg, int priority, int worker, allot_task_t *out);

/* The pool's suspended tasks neither resumed nor cancelled yet (timed ones
 * not yet due included).
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_suspended(allot_pool_t pool, uint64_t *out);

/* Waits until the task has run, then spends the handle (a second join, or a
 * join after allot_task_detach, returns ALLOT_ERR_HANDLE). Inside a callback
 * of the task's pool the worker runs other tasks while it waits. The task's
 * pool may already be freed: its tasks ran before the workers stopped.
 *
 * Contexts: any thread, also inside callbacks; blocks until the task ran.
 *   Inside the task itself it returns ALLOT_ERR_INVALID instead of waiting
 *   forever; wait cycles between tasks (A joins B, B joins A) deadlock.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_INVALID (the task joins itself);
 *   ALLOT_ERR_SHUTDOWN; ALLOT_ERR_CANCELLED (a suspended task that was
 *   cancelled; the handle is spent); ALLOT_ERR_INTERNAL (a panic inside
 *   allot while running the task; the handle is spent).
 * Undefined behaviour: none. */
int allot_task_join(allot_task_t task);

/* Spends the task handle without waiting; the task still runs once.
 *
 * Contexts: any thread, also inside callbacks (the task itself too). Does
 *   not block.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_task_detach(allot_task_t task);

/* Calls body(lo, hi, arg) on disjoint sub-ranges [lo, hi) covering
 * [begin, end), each at most `grain` long (grain 0: about 8 pieces per
 * worker), in parallel on the pool's workers, and returns when all of them
 * returned. The range is split in halves into tasks adaptively: about two
 * tasks per worker, each calling body on its pieces in ascending order,
 * and split further only where a worker went idle and stole (CAPI.md,
 * "Benchmark: fine-grained parallel-for"); across tasks the pieces run in
 * no particular order.
 * begin == end calls nothing.
 *
 * Contexts: any thread, also inside callbacks (nested loops on the same
 *   pool run on the calling worker's fast path). Blocks until the loop is
 *   done; the calling thread, if it is not a worker of the pool, only waits.
 * Errors: ALLOT_ERR_INVALID (body NULL; begin > end); ALLOT_ERR_HANDLE;
 *   ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `body` not a function of this type; `body` not safe
 *   to run concurrently with itself on `arg`; a body that leaves by longjmp
 *   (a C++ exception aborts). */
int allot_pool_parallel_for(allot_pool_t pool, size_t begin, size_t end,
                            size_t grain,
                            void (*body)(size_t lo, size_t hi, void *arg),
                            void *arg);

/* OpenMP's schedule(static): calls body(lo, hi, arg) once per block of
 * [begin, end) cut into as many contiguous blocks as the pool has active
 * workers (fewer when the range is shorter; lengths differ by at most
 * one, the longer blocks first), in parallel, and returns when all of them
 * returned. No balancing beyond one block per worker: for bodies whose
 * cost per index is even, or that want one call per worker. begin == end
 * calls nothing.
 *
 * Contexts, errors and undefined behaviour: as allot_pool_parallel_for. */
int allot_pool_parallel_for_static(allot_pool_t pool, size_t begin, size_t end,
                                   void (*body)(size_t lo, size_t hi, void *arg),
                                   void *arg);

/* Runs a(a_arg) and b(b_arg), in parallel when a worker is free, and returns
 * when both returned. Inside a callback of the same pool this is fork/join
 * without allocation: recursive divide and conquer (e.g. fib) calls it from
 * inside `a` and `b`.
 *
 * Contexts: any thread, also inside callbacks. Blocks until both ran.
 * Errors: ALLOT_ERR_INVALID (a or b NULL); ALLOT_ERR_HANDLE;
 *   ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: `a` or `b` not a function of this type, or not safe
 *   to run on another thread with its argument; a callback that leaves by
 *   longjmp (a C++ exception aborts). */
int allot_pool_join(allot_pool_t pool, void (*a)(void *), void *a_arg,
                    void (*b)(void *), void *b_arg);

/* Frees the pool: new calls with the handle fail at once; the call waits
 * for calls on the pool in progress in other threads to return, lets every
 * queued task finish, then stops and joins the workers. Handles of tasks
 * spawned on it stay valid (join or detach them). A pool built on a
 * registered cell releases the cell here if the cell's handle was freed.
 *
 * Contexts: any thread outside the pool's callbacks. Blocks until the
 *   queued work is done. Inside a callback of this pool it returns
 *   ALLOT_ERR_INVALID (the pool would wait for the caller); inside a
 *   callback of another pool it works, but deadlocks if the work it waits
 *   for itself waits for that other pool.
 * Errors: ALLOT_ERR_HANDLE (also on a second free); ALLOT_ERR_INVALID
 *   (called from a callback of this pool; the pool stays valid);
 *   ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_pool_free(allot_pool_t pool);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_POOL_H */
