/*
 * allot.h — the C interface of allot (liballot).
 *
 * allot shares one Linux machine among parallel programs. A program holds a
 * *cell*: a grant of CPUs from the allot broker (or, with no broker, the
 * CPUs the process may use). A *pool* is a work-stealing thread pool whose
 * workers follow the cell's grant: one worker per granted CPU, pinned to it,
 * added and retired as the broker changes the grant.
 *
 *     allot_pool_t pool;
 *     if (allot_pool_new((allot_cell_t){0}, &pool) != ALLOT_OK) {
 *         fprintf(stderr, "allot: %s\n", allot_last_error());
 *         return 1;
 *     }
 *     allot_pool_parallel_for(pool, 0, n, 1024, body, &data);
 *     allot_pool_free(pool);
 *
 * Build: cc -std=c11 prog.c $(pkg-config --cflags --libs allot)
 * (install with scripts/install-liballot.sh PREFIX; see crates/capi/CAPI.md).
 *
 * Conventions, for every function below unless it says otherwise:
 *
 * - It returns an allot_status (as int). On failure allot_last_error()
 *   says what happened and what to do, and out-parameters are not written.
 * - Handles (allot_cell_t, allot_pool_t, allot_task_t) are plain values,
 *   copied freely. A handle is valid from the call that returns it until it
 *   is freed (or, for a task, joined or detached); using it afterwards
 *   returns ALLOT_ERR_HANDLE, never undefined behaviour. So does a handle of
 *   one type passed as another, a zeroed handle, or a made-up one. Handles
 *   mean nothing in another process.
 * - Every function may be called from any thread, concurrently, including
 *   from inside callbacks running on a pool, except where "Contexts" says
 *   otherwise.
 * - After fork(), the child may create and use new cells and pools, but not
 *   the pools it inherited: their worker threads exist only in the parent
 *   (calls on them may wait forever). Free nothing inherited either; exec,
 *   or just let the child exit.
 * - After allot_shutdown() every function returns ALLOT_ERR_SHUTDOWN, except
 *   allot_strerror, allot_last_error and allot_abi_version.
 * - Undefined behaviour is listed only where the library cannot detect the
 *   misuse. Pointers passed in must point to valid objects of the declared
 *   type (for out-parameters: writable, suitably aligned); a NULL pointer is
 *   always detected and returns ALLOT_ERR_INVALID.
 *
 * Callbacks (task functions, loop bodies) run on pool worker threads. They
 * may call any function of this header, with the exceptions under each
 * function's "Contexts". They must return normally: a callback that throws a
 * C++ exception makes the process abort; one that leaves by longjmp (or
 * siglongjmp, or pthread_exit / thread cancellation) is undefined behaviour.
 */
#ifndef ALLOT_H
#define ALLOT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface version this header describes; allot_abi_version() returns
 * the library's. They differ only if the header and the library come from
 * different installs. */
#define ALLOT_ABI_VERSION 1u

/* Status codes. Stable: values are never reused or renumbered. */
typedef enum {
    ALLOT_OK = 0,
    ALLOT_ERR_INVALID = 1,    /* null pointer, bad argument */
    ALLOT_ERR_HANDLE = 2,     /* stale, freed, foreign or wrong-type handle */
    ALLOT_ERR_SHUTDOWN = 3,   /* library shut down */
    ALLOT_ERR_NO_BROKER = 4,  /* no broker answers (or it lost the cell) */
    ALLOT_ERR_REFUSED = 5,    /* admission: not now */
    ALLOT_ERR_NEVER = 6,      /* can never be met on this machine */
    ALLOT_ERR_PERMISSION = 7, /* the broker does not allow it */
    ALLOT_ERR_TIMEOUT = 8,    /* a wait ended without the event */
    ALLOT_ERR_OS = 9,         /* the OS refused a resource (threads, handles) */
    ALLOT_ERR_INTERNAL = 10   /* a bug in allot; please report it */
} allot_status;

/* A cell: where the program's CPUs come from. */
typedef struct { uint64_t id; } allot_cell_t;
/* A pool of workers following a cell's grant. */
typedef struct { uint64_t id; } allot_pool_t;
/* A spawned task, to be joined (or detached) exactly once. */
typedef struct { uint64_t id; } allot_task_t;
/* Handle ids: bits 63..56 a type tag, 55..24 a generation, 23..0 a slot.
 * Id 0 is never a valid handle. The encoding is informative: compare and
 * copy handles, do not build them. */

/* What a cell asks the broker for. All zeros is a best-effort cell. */
typedef struct {
    uint32_t min;    /* CPUs guaranteed (0: best effort) */
    uint32_t max;    /* most CPUs (0: the whole machine) */
    uint32_t weight; /* share of contended CPUs, 1..10000 (0: 1) */
    int exclusive;   /* nonzero: CPUs of this cell alone (implies min >= 1) */
    int placement;   /* ALLOT_PLACEMENT_* */
} allot_spec_t;

#define ALLOT_PLACEMENT_ANY 0  /* anywhere (compact sets preferred) */
#define ALLOT_PLACEMENT_LLC 1  /* within one last-level cache when it fits */
#define ALLOT_PLACEMENT_NUMA 2 /* within one NUMA node when it fits */

/* A consistent copy of a cell's grant (never torn). */
typedef struct {
    uint64_t generation; /* grows with every change; never 0 */
    uint32_t threads;    /* recommended number of worker threads */
    uint32_t ncpus;      /* CPUs in `cpus` */
    uint32_t entitled;   /* CPUs the cell is entitled to (the rest is lent) */
    uint32_t flags;      /* ALLOT_GRANT_* bits */
    uint64_t cpus[16];   /* CPUs the cell may use: bit i of word w: CPU 64w+i */
    uint64_t lent[16];   /* the subset of `cpus` lent by other cells, for now */
} allot_grant_t;

#define ALLOT_GRANT_STACKED 1u  /* the cell time-shares its CPUs with others */
#define ALLOT_GRANT_RELEASED 2u /* the cell was released by the broker */

/* Whether CPU `cpu` is set in a grant bitmap (`cpus` or `lent`). */
#define ALLOT_CPU_ISSET(cpu, set) \
    ((cpu) < 1024 && (((set)[(cpu) / 64] >> ((cpu) % 64)) & 1u))

/* Where a cell's grant comes from (allot_cell_mode). */
#define ALLOT_MODE_REGISTERED 0 /* registered with the broker by this process */
#define ALLOT_MODE_JOINED 1     /* put in a cell by `allot run` */
#define ALLOT_MODE_STANDALONE 2 /* no broker: the CPUs the process may use */
#define ALLOT_MODE_MANUAL 3     /* grants published by the embedding program */

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* A static description of status code `status` (any int).
 *
 * Contexts: any thread, any time, also after allot_shutdown. Never blocks.
 * Errors: none. Returns "unknown allot status code" for codes not listed in
 *   allot_status. Never NULL. The string must not be freed or modified.
 * Undefined behaviour: none. */
const char *allot_strerror(int status);

/* The detail of this thread's most recent failed call ("function: what
 * happened and what to do"), or "" if no call on this thread failed yet.
 * Successful calls leave it unchanged, like errno.
 *
 * Contexts: any thread, any time, also after allot_shutdown. Never blocks.
 * Errors: none. Never NULL. The string belongs to the library; it stays
 *   valid until this thread's next failing allot call or the thread's exit.
 * Undefined behaviour: using the string after that, or freeing it. */
const char *allot_last_error(void);

/* The library's ALLOT_ABI_VERSION.
 *
 * Contexts: any thread, any time. Never blocks.
 * Errors: none. Undefined behaviour: none. */
uint32_t allot_abi_version(void);

/* ------------------------------------------------------------------------ */
/* Cells                                                                     */
/* ------------------------------------------------------------------------ */

/* The process's automatic cell, what a library that just wants "the CPUs I
 * should use" takes. The first call (or the first allot_pool_new with {0})
 * makes it: the cell `allot run` put the process in (ALLOT_CELL,
 * ALLOT_GRANT_FD), else a best-effort cell registered as `name` with the
 * broker ($ALLOT_SOCKET or the per-user socket), else — no broker, admission
 * refused, or the process already registered a cell itself — a standalone
 * cell. Later calls return new handles to that same cell (their `name` is
 * not used): the broker admits a process to one cell only. The automatic
 * cell stays registered until allot_shutdown or the process exits, even
 * when every handle to it is freed. Always succeeds on a working system.
 *
 * Contexts: any thread. The first call blocks while talking to the broker
 *   (typically well under a millisecond; no waiting for admission).
 * Errors: ALLOT_ERR_INVALID (name or out NULL; name not UTF-8 or longer
 *   than 4096 bytes); ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (too many live cells);
 *   ALLOT_ERR_INTERNAL (the process cannot create the memory file for a
 *   standalone grant).
 * Undefined behaviour: `name` not NUL-terminated. */
int allot_cell_auto(const char *name, allot_cell_t *out);

/* Registers this process with the broker as a cell named `name` asking for
 * `*spec`. With `wait` nonzero and admission saying "not now", blocks in
 * the broker's queue until admitted; with `wait` zero returns
 * ALLOT_ERR_REFUSED. The broker releases the cell when its handle is freed
 * (and every pool built on it), or when the process exits. Unlike
 * allot_cell_auto, there is no standalone fallback. A process is a member
 * of one broker cell at a time: while it holds one (registered here, by
 * allot_cell_auto, or given by `allot run`), registering again returns
 * ALLOT_ERR_INVALID. To use your registered cell for pools, pass it to
 * allot_pool_new rather than {0}.
 *
 * Contexts: any thread. Blocks for a round trip to the broker, and with
 *   `wait` until admitted (unbounded).
 * Errors: ALLOT_ERR_INVALID (a NULL argument; name not UTF-8 or too long;
 *   weight above 10000; min above a nonzero max; unknown placement; the
 *   process is already in a cell; or the broker rejected the spec);
 *   ALLOT_ERR_NO_BROKER (nothing listens on the socket); ALLOT_ERR_REFUSED
 *   (wait == 0 and the guarantees of other cells leave no room now);
 *   ALLOT_ERR_NEVER (no state of this machine can meet the spec: min above
 *   the CPUs, or a placement no node/cache can hold);
 *   ALLOT_ERR_PERMISSION; ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (socket or memory
 *   mapping failures, too many live cells); ALLOT_ERR_INTERNAL (a broker of
 *   another protocol version).
 * Undefined behaviour: `name` not NUL-terminated. */
int allot_cell_register(const char *name, const allot_spec_t *spec, int wait,
                        allot_cell_t *out);

/* allot_cell_register with the broker at `socket` (a path; NULL: the
 * default, $ALLOT_SOCKET or the per-user socket).
 *
 * Contexts, Errors, Undefined behaviour: as allot_cell_register; also
 *   ALLOT_ERR_INVALID for a socket path that is not UTF-8 or too long, and
 *   undefined behaviour for one that is not NUL-terminated. */
int allot_cell_register_at(const char *socket, const char *name,
                           const allot_spec_t *spec, int wait,
                           allot_cell_t *out);

/* A cell without a broker: the CPUs the process may run on now, fixed
 * forever (its generation stays 1).
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS
 *   (too many live cells); ALLOT_ERR_INTERNAL (no memory file).
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_standalone(allot_cell_t *out);

/* Copies the cell's current grant into *out. A few dozen memory loads, no
 * system call: cheap enough to call before every parallel region.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_grant(allot_cell_t cell, allot_grant_t *out);

/* Waits until the grant's generation differs from `seen_generation` and
 * copies that grant into *out. `timeout_ns` < 0 waits without limit, 0 only
 * checks. On ALLOT_ERR_TIMEOUT *out holds the current (unchanged) grant.
 * A standalone cell never changes: waiting on it without limit returns only
 * when the cell is freed or the library shut down.
 *
 * Contexts: any thread; blocks (futex wait on the grant page) up to the
 *   timeout. Inside a pool callback it blocks that worker: prefer a thread
 *   of your own for waiting without limit.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE (also when the
 *   cell is freed while waiting, noticed within 50 ms); ALLOT_ERR_SHUTDOWN
 *   (also when the library shuts down while waiting); ALLOT_ERR_TIMEOUT.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_wait_change(allot_cell_t cell, uint64_t seen_generation,
                           int64_t timeout_ns, allot_grant_t *out);

/* Tells the broker how the program is doing: `busy` workers now, CPUs it
 * could use now (`wanted`, 0: unknown), a counter of work done that only
 * grows (`progress`). The broker lends idle CPUs by such reports. Pools
 * report for their cell on their own; call this only for threads you manage
 * yourself. Does nothing for standalone cells.
 *
 * Contexts: any thread. Sends one datagram (does not wait for an answer);
 *   after a broker restart, reconnects first.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN; ALLOT_ERR_NO_BROKER (the
 *   broker is gone; the cell keeps its last grant); ALLOT_ERR_OS.
 * Undefined behaviour: none. */
int allot_cell_report(allot_cell_t cell, uint32_t busy, uint32_t wanted,
                      uint64_t progress);

/* Where the cell's grant comes from: one of ALLOT_MODE_*.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_mode(allot_cell_t cell, int *out);

/* The broker's id of the cell (as `allot status` shows it), 0 for a
 * standalone cell.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_broker_id(allot_cell_t cell, uint64_t *out);

/* Frees the handle. A registered cell is released at the broker once no
 * pool uses it either (pools built on the cell keep it until they are
 * freed). Calls in progress on the cell in other threads complete.
 *
 * Contexts: any thread, also inside callbacks. May block up to a fraction
 *   of a second while a registered cell says goodbye to the broker.
 * Errors: ALLOT_ERR_HANDLE (also on a second free); ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_cell_free(allot_cell_t cell);

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

/* The number of workers active now (it follows the grant, so it may change
 * between two calls).
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_pool_workers(allot_pool_t pool, uint32_t *out);

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

/* Waits until the task has run, then spends the handle (a second join, or a
 * join after allot_task_detach, returns ALLOT_ERR_HANDLE). Inside a callback
 * of the task's pool the worker runs other tasks while it waits. The task's
 * pool may already be freed: its tasks ran before the workers stopped.
 *
 * Contexts: any thread, also inside callbacks; blocks until the task ran.
 *   Inside the task itself it returns ALLOT_ERR_INVALID instead of waiting
 *   forever; wait cycles between tasks (A joins B, B joins A) deadlock.
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_INVALID (the task joins itself);
 *   ALLOT_ERR_SHUTDOWN; ALLOT_ERR_INTERNAL (a panic inside allot while
 *   running the task; the handle is spent).
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
 * returned. The range is split in halves recursively (fork/join), so the
 * pieces run in no particular order. begin == end calls nothing.
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

/* ------------------------------------------------------------------------ */
/* Library                                                                   */
/* ------------------------------------------------------------------------ */

/* Frees everything: every pool (as allot_pool_free: queued tasks finish),
 * every task handle, every cell (registered cells are released). From then
 * on every call returns ALLOT_ERR_SHUTDOWN; the library cannot be
 * restarted in this process. Optional: a process may simply exit.
 *
 * Contexts: any thread outside every pool callback. Blocks until all pools
 *   finished their work. Threads blocked in allot_cell_wait_change return
 *   ALLOT_ERR_SHUTDOWN within 50 ms.
 * Errors: ALLOT_ERR_SHUTDOWN (second call); ALLOT_ERR_INVALID (called from
 *   a callback; nothing was freed).
 * Undefined behaviour: none. */
int allot_shutdown(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_H */
