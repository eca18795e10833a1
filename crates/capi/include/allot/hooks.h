/*
 * allot/hooks.h — the thread hooks liballot_shim.so calls (internal: a
 * program calls none of them).
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_HOOKS_H
#define ALLOT_HOOKS_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/hooks.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif


/* The preload shim's wrappers of pthread_create and of the waits it
 * knows (joins, condition, semaphore, futex and mutex waits, sleeps,
 * reads, accepts and polls; crates/capi/SHIM.md) call these when liballot
 * is loaded, so threads created in a block share it, spawn timings run,
 * and waiting threads give their allocation back as they chose. They
 * cost one atomic load when no block was ever entered, never call the
 * functions they are hooked into, are no-ops while the calling thread is
 * inside liballot, and are not async-signal-safe (nor is what they hook).
 *
 * allot_rq_spawn_prepare: before pthread_create; a context for the child,
 *   or NULL (no block, nothing to pass on). allot_rq_spawn_done: after a
 *   successful create, when the context was not NULL. allot_rq_spawn_cancel:
 *   the create failed; frees the context. allot_rq_child_start: first thing
 *   in the child, with the context; returns a guard (NULL for a NULL
 *   context). allot_rq_child_exit: when the child ends (return or
 *   pthread_exit), with the guard. allot_rq_block / allot_rq_unblock: around
 *   a join or condition wait (an ALLOT_WAIT_SYNC wait: the thread gives
 *   back if it releases on those). allot_rq_block_for(kind): the same for a
 *   wait of kind `kind` (ALLOT_WAIT_*). allot_rq_releases(kind): 1 if the
 *   calling thread may hold an allocation and releases on waits of that
 *   kind (thread-local reads; 0 lets a wrapper skip the rest).
 *   allot_rq_try_unblock: 1 if the thread's allocation was
 *   retaken, 0 if it must wait (call allot_rq_unblock without holding locks
 *   other threads need). allot_rq_holds: 1 if the calling thread may hold
 *   an allocation (one thread-local read; 0 lets a wrapper skip the rest).
 *   allot_rq_try_block: allot_rq_block that never waits for liballot's own
 *   lock (around futex waits, which liballot's locks make); 1 if the thread
 *   is now blocked and calls allot_rq_unblock after its wait, 0 if not. */
void *allot_rq_spawn_prepare(void);
void allot_rq_spawn_done(void);
void allot_rq_spawn_cancel(void *ctx);
void *allot_rq_child_start(void *ctx);
void allot_rq_child_exit(void *guard);
void allot_rq_block(void);
int allot_rq_try_unblock(void);
void allot_rq_unblock(void);
int allot_rq_holds(void);
int allot_rq_try_block(void);
void allot_rq_block_for(int kind);
int allot_rq_releases(int kind);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_HOOKS_H */
