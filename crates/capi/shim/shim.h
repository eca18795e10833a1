/* shim.h: what the parts of liballot_shim.so share (internal; every symbol
 * here is hidden: the library is built with -fvisibility=hidden and exports
 * only the entry points marked EXPORT).
 *
 *   page.c     the grant page, messages, start-up (the constructor)
 *   omp.c      OpenMP teams capped to the grant (GNU libgomp, LLVM libomp)
 *   omp_route.c  which runtime each OpenMP call goes to (omp_route.h)
 *   threads.c  threads created and blocked inside `require` blocks
 *   bind.c     thread bindings (OMP_PROC_BIND, places) kept inside the grant
 *   follow.c   libraries whose thread count is a setting (BLAS, oneTBB)
 *              set to the grant whenever it changes; dlopen watched
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

#include "grant_page.h"

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)

#define PAGE_MAGIC ALLOT_PAGE_MAGIC
#define PAGE_VERSION ALLOT_PAGE_VERSION
#define PAGE_BYTES ALLOT_PAGE_BYTES

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* page.c */
extern const struct grant_page *g_page;
extern int g_debug;
extern uint64_t g_stuck_seq;
unsigned grant_threads_slow(const struct grant_page *p, uint64_t first);

static inline int shim_active(void)
{
    return __atomic_load_n(&g_page, __ATOMIC_RELAXED) != NULL;
}

/* The grant's recommended thread count (>= 1), or 0 if no consistent read
 * could be had. Reader side of the seqlock: seq (acquire), retry if odd,
 * the field, acquire fence, seq again, retry if it moved. */
static inline unsigned grant_threads(void)
{
    const struct grant_page *p = __atomic_load_n(&g_page, __ATOMIC_RELAXED);
    uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
    if (LIKELY(!(s1 & 1))) {
        uint32_t t = __atomic_load_n(&p->threads, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (LIKELY(__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1))
            return t ? t : 1;
    }
    return grant_threads_slow(p, s1);
}

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Things the shim cannot handle and works around; each is told once, with
 * ALLOT_SHIM_DEBUG=1. */
enum note {
    NOTE_TOO_MANY_RUNTIMES,
    NOTE_CANNOT_OPEN,
    NOTE_OLD_RUNTIME,
    NOTE_LONG_LIST,
    NOTE_FOLLOW,
    NOTE_COUNT
};
void note(enum note which, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* For what the loader itself would have refused (see page.c). */
void die(const char *what, const char *name) __attribute__((noreturn));

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
/* Around other blocking calls (blocking.c): rq_holds() first (0 when the
 * hooks are off or the thread holds nothing), then rq_block() and
 * rq_unblock() around the wait; rq_try_block() (1: blocked, unblock after)
 * around futex waits. Each preserves errno. */
int rq_holds(void);
void rq_block(void);
void rq_unblock(void);
int rq_try_block(void);
/* glibc's syscall() with three arguments, bypassing the shim's wrapper. */
long real_syscall(long number, long a1, long a2, long a3);

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
