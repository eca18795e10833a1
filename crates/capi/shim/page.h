/* page.h: page.c's side of the shim, the bottom every other part stands
 * on: the grant page (mapped once by the constructor, start.c, then read
 * lock-free), messages, and the macros all parts use. Includes nothing of
 * the shim's but grant_page.h. */
#ifndef ALLOT_SHIM_PAGE_H
#define ALLOT_SHIM_PAGE_H

#include <stdint.h>

#include "grant_page.h"

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

extern const struct grant_page *g_page;
extern int g_debug;
extern const char *say_prefix;
extern uint64_t g_stuck_seq;
unsigned grant_threads_slow(const struct grant_page *p, uint64_t first);
/* Maps the page named by `var` (ALLOT_GRANT_FD's value); NULL and why not. */
const struct grant_page *map_page(const char *var, const char **why);

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

#endif
