/* shim.h: what the parts of liballot_shim.so share (internal; every symbol
 * here is hidden: the library is built with -fvisibility=hidden and exports
 * only the entry points marked EXPORT).
 *
 *   page.c     the grant page and messages (uses no other part)
 *   omp.c      OpenMP teams capped to the grant (GNU libgomp, LLVM libomp)
 *   omp_route.c  which runtime each OpenMP call goes to (omp_route.h)
 *   threads.c  threads created and blocked inside `require` blocks
 *   bind.c     thread bindings (OMP_PROC_BIND, places) kept inside the grant
 *   follow.c   libraries whose thread count is a setting (BLAS, oneTBB)
 *              set to the grant whenever it changes; dlopen watched
 *   entry.c    the entry points several parts act on (pthread_create,
 *              sched_getaffinity): follow.c looks first, then threads.c
 *   start.c    start-up: the constructor, which initializes the others
 *
 * The design of each part is in the comment that opens its file; the
 * invariants that hold across them are in page.c. */
#ifndef ALLOT_SHIM_H
#define ALLOT_SHIM_H

#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "page.h"

#define EXPORT __attribute__((visibility("default")))

/* omp_route.c: the loaded object `addr` lies in (lock-free), and a
 * reference to it (NULL for the main program or one that cannot be
 * opened by name). */
struct link_map *object_of(const void *addr);
void *open_object(const struct link_map *obj);

/* threads.c */
extern int g_rq_on;
void rq_init(void);
void rq_try_object(void *handle);
int real_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                        void *arg);
int real_sched_getaffinity(pid_t pid, size_t size, cpu_set_t *mask);
/* The body of the pthread_create wrapper (entry.c): the require hooks, and
 * a binding refused outside the grant carried into it (bind.c). */
int rq_pthread_create(pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                      void *arg);
/* Around other blocking calls (blocking.c): rq_releases(kind) first (0
 * when the hooks are off, the thread holds nothing, or it keeps its
 * allocation through waits of that kind), then rq_block_for(kind) and
 * rq_unblock() around the wait; rq_try_block() (1: blocked, unblock after)
 * around futex waits. Kinds are liballot's ALLOT_WAIT_* values. Each
 * preserves errno. */
#define RQ_WAIT_SYNC 1
#define RQ_WAIT_SLEEP 2
#define RQ_WAIT_IO 4
int rq_releases(int kind);
void rq_block_for(int kind);
void rq_unblock(void);
int rq_try_block(void);
/* After a wait that returned with `m` locked: retake the allocation,
 * unlocking `m` meanwhile if it cannot be retaken at once (threads.c). */
void rq_after_wait(pthread_mutex_t *m);

/* bind.c: bindings the kernel refused (outside the grant) carried into it. */
void bind_init(void);
int bind_retry_create(int (*create)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *),
                      pthread_t *thread, const pthread_attr_t *attr, void *(*start)(void *),
                      void *arg);
/* After syscall(SYS_sched_setaffinity, pid, size, set) was refused with
 * EINVAL: 0 once carried, else -1 with errno EINVAL. */
long bind_retry_raw(long pid, long size, long set);

/* follow.c */
void follow_init(void);
void follow_rescan(void);
/* Whether `code` lies in a library that sizes its OpenMP teams itself,
 * from omp_get_max_threads(), and needs every thread it asks for: its
 * threads wait for each other's share of the work (OpenBLAS built on
 * OpenMP). Such a team is never capped: the library is told the grant
 * through omp_get_max_threads() instead. The first form classifies a
 * library it has not seen (dlopen, dlsym: a region's primary thread only,
 * see invariant 3); the second only looks (lock-free, any thread). */
int sizes_own_teams(const void *code);
int sizes_own_teams_known(const void *code);

#endif
