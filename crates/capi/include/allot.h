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
 * The same library gives C and C++ Poli-C's `require` blocks: a guarantee
 * and a limit for a block of code (allot/require.h):
 *
 *     allot_outcome_t c;
 *     allot_require(&c, allot_cores(2)) { run_with(c.ncores); }
 *
 * Build: cc -std=c11 prog.c $(pkg-config --cflags --libs allot)
 * (install with scripts/install-liballot.sh PREFIX; see crates/capi/CAPI.md).
 *
 * Conventions, for every function of this header and of its parts
 * (allot/pool.h, allot/require.h, which it includes) unless it says otherwise:
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
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface version this header describes; allot_abi_version() returns
 * the library's. They differ only if the header and the library come from
 * different installs. */
#define ALLOT_ABI_VERSION 2u

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
    ALLOT_ERR_INTERNAL = 10,  /* a bug in allot; please report it */
    ALLOT_ERR_UNKNOWN = 11,   /* no such resource kind, device or policy */
    ALLOT_ERR_CANCELLED = 12, /* a suspended task was cancelled before it ran */
    ALLOT_ERR_CLOSED = 13     /* the other end of a channel is gone */
} allot_status;

/* A cell: where the program's CPUs come from. */
typedef struct { uint64_t id; } allot_cell_t;
/* A pool of workers following a cell's grant. */
typedef struct { uint64_t id; } allot_pool_t;
/* A spawned task, to be joined (or detached) exactly once. */
typedef struct { uint64_t id; } allot_task_t;
/* Permission to resume one suspended task, once (allot_resume). */
typedef struct { uint64_t id; } allot_resumer_t;
/* A channel end (allot/channel.h). */
typedef struct { uint64_t id; } allot_channel_t;
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
 *   ALLOT_ERR_PERMISSION (also: the socket's directory belongs to another
 *   user or others can write it, so the socket is not trusted);
 *   ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (socket or memory
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

/* Called by allot_cell_environment once per variable. */
typedef void (*allot_env_set_fn)(const char *name, const char *value,
                                 void *arg);

/* The environment a program started in `cell` should get, the one
 * `allot run` gives its programs, for launchers of their own (a batch
 * system's plugin, a job runner): calls set(name, value, arg) for each
 * variable. They are the thread counts (OMP_NUM_THREADS, the BLAS
 * libraries', RAYON_NUM_THREADS, GOMAXPROCS, ...), and for a cell
 * registered with a broker ALLOT_SOCKET, ALLOT_CELL and ALLOT_GRANT_FD,
 * the number of a descriptor of the cell's grant page that this call
 * opens without close-on-exec: it stays open in the caller so that the
 * processes it starts inherit it (close it once they are started, or keep
 * it for the next). With `shim` (the path of liballot_shim.so, installed
 * where only root or the user can replace it) LD_PRELOAD loads the shim
 * first and keeps `preload` (the current LD_PRELOAD, or NULL) after it,
 * and OMP_NUM_THREADS is the cell's maximum, which the shim caps to the
 * grant at every parallel region. Strings passed to `set` live only for
 * the call.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (set NULL; shim or preload empty);
 *   ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS (no descriptor
 *   left for the page).
 * Undefined behaviour: shim or preload not NUL-terminated; `set` not
 *   callable as declared. */
int allot_cell_environment(allot_cell_t cell, const char *shim,
                           const char *preload, allot_env_set_fn set,
                           void *arg);

/* allot's Thread Composability Manager for the programs a launcher starts
 * in `cell` (crates/capi/TCM.md): oneTBB and Intel's OpenMP runtime then
 * ask it how many threads they may run, and it divides the cell's grant
 * among them. Calls set(name, value, arg) for TCM_ENABLE=1 (a launcher
 * skips the call where the user set TCM_ENABLE=0), ALLOT_TCM_FD, the number of a new
 * permit table this call opens without close-on-exec (it stays open in
 * the caller, so the processes it starts inherit it and divide the grant
 * together; close it once they are started), and LD_LIBRARY_PATH: `tcm_dir`
 * (where `allot shim --out DIR` wrote it: DIR/tcm, holding libtcm.so.1)
 * first, then `library_path` (the current LD_LIBRARY_PATH, or NULL).
 * Strings passed to `set` live only for the call.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (set or tcm_dir NULL; a string empty; no
 *   libtcm.so.1 in tcm_dir); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN;
 *   ALLOT_ERR_OS (no memory file for the table).
 * Undefined behaviour: a string not NUL-terminated; `set` not callable as
 *   declared. */
int allot_cell_tcm_environment(allot_cell_t cell, const char *tcm_dir,
                               const char *library_path, allot_env_set_fn set,
                               void *arg);

/* The longest ticket allot_cell_ticket writes, with its NUL. */
#define ALLOT_TICKET_MAX 42

/* Writes the ticket of a cell this process registered into buf (at most
 * `len` bytes with the NUL; ALLOT_TICKET_MAX always suffices): a secret,
 * "ID:TOKEN", with which another process of the cell's user (or root) can
 * join the cell (allot_cell_attach_at). A launcher that starts the parts
 * of one job at different times (the steps of a batch job) keeps it where
 * only that user can read it.
 *
 * Contexts: any thread. Does not block.
 * Errors: ALLOT_ERR_INVALID (buf NULL or too short; the cell was not
 *   registered by this process); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: buf shorter than len. */
int allot_cell_ticket(allot_cell_t cell, char *buf, size_t len);

/* Makes this process a member of the cell `ticket` names (see
 * allot_cell_ticket) at the broker on `socket` (NULL: the default), so
 * that the processes it starts from now on run in the cell, and returns a
 * handle that reads the cell's grant (mode ALLOT_MODE_JOINED). Freeing the
 * handle does not end the cell: it ends when its processes are gone.
 *
 * Contexts: any thread. Blocks for two round trips to the broker.
 * Errors: ALLOT_ERR_INVALID (a NULL argument; a malformed ticket; this
 *   process is in a cell already); ALLOT_ERR_NO_BROKER (nothing listens
 *   on the socket, or the cell ended); ALLOT_ERR_PERMISSION (a wrong
 *   token, or another user's cell); ALLOT_ERR_SHUTDOWN; ALLOT_ERR_OS.
 * Undefined behaviour: socket or ticket not NUL-terminated. */
int allot_cell_attach_at(const char *socket, const char *ticket,
                         allot_cell_t *out);

/* For launchers whose processes live in cgroups of their own (Slurm's
 * task/cgroup on cgroup v2, which tracks a step by its cgroups): the cell
 * reaches those processes through the launcher's cgroups, never by moving
 * them.
 *
 * allot_cell_register_in_place_at is allot_cell_register_at for a process
 * that stays in the cgroup it is in: on the cgroup2 backend the broker
 * watches it (the cell lives while it does) without moving it; other
 * backends move it as allot_cell_register_at does.
 * allot_cell_attach_in_place_at is allot_cell_attach_at without making
 * this process a member: it gets a handle that reads the cell's grant.
 * allot_cell_include_group_at makes the cell also confine `dir`, an
 * existing cgroup v2 directory the launcher made for its processes (for
 * Slurm, a step's `.../job_J/step_S/user`): the broker writes the cell's
 * CPUs and weight to it at every grant, moves no process, counts its
 * processes (and those below it) as the cell's, and when the cell ends
 * gives it its parent's CPUs again and leaves it to the launcher. Only
 * root may include a group, with the cell's ticket; including one twice
 * is done once.
 *
 * Contexts: any thread. Block for a round trip or two to the broker.
 * Errors: as allot_cell_register_at and allot_cell_attach_at; for
 *   allot_cell_include_group_at also ALLOT_ERR_PERMISSION (not root, or a
 *   wrong token) and ALLOT_ERR_INVALID with the reason (dir is not an
 *   absolute path of a cgroup in the broker's cgroup v2 hierarchy, is
 *   allot's own or holds it, has no cpuset controller, or the broker's
 *   backend is not cgroup2); nothing changes then.
 * Undefined behaviour: strings not NUL-terminated. */
int allot_cell_register_in_place_at(const char *socket, const char *name,
                                    const allot_spec_t *spec, int wait,
                                    allot_cell_t *out);
int allot_cell_attach_in_place_at(const char *socket, const char *ticket,
                                  allot_cell_t *out);
int allot_cell_include_group_at(const char *socket, const char *ticket,
                                const char *dir);

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

/* The rest of the interface, in parts; include this file, not them. */
#include "allot/pool.h"    /* pools, tasks, loops, statistics */
#include "allot/require.h" /* require blocks, kinds, policies; C++ */
#include "allot/time.h"    /* time contracts and windows */
#include "allot/goals.h"   /* goals and performance reports */
#include "allot/memory.h"  /* memory guarantee and limit per cell */
#include "allot/channel.h" /* named channels between cells */
#include "allot/hooks.h"   /* the preload shim's thread hooks (internal) */

#endif /* ALLOT_H */
