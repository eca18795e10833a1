/*
 * page.c: the grant page and messages, the bottom of the shim: every other
 * part uses them, and this file uses none of the others (the start-up that
 * calls each part's initializer is start.c). Part of liballot_shim.so (see
 * shim.h for the parts).
 *
 * liballot_shim.so is an LD_PRELOAD library that keeps the parallel
 * runtimes of an unmodified program within its cell's grant: OpenMP teams
 * (omp.c), and the libraries whose thread count is a setting (follow.c).
 *
 * `allot run` hands the program its cell's grant page as an inherited file
 * descriptor (ALLOT_GRANT_FD). This library maps that page once, in its
 * constructor, and interposes the entry points through which compiled
 * OpenMP code starts a parallel region: GOMP_parallel* (GNU libgomp, also
 * provided by LLVM libomp for gcc-compiled code) and __kmpc_fork_call with
 * its companions (LLVM libomp, x86-64 only). Before a region starts it
 * reads the grant's `threads` and, when the team would be larger, asks the
 * runtime for a smaller one. The design note is crates/capi/SHIM.md.
 *
 * Invariants
 *
 *  1. Shrink only. The team size passed on is never larger than what the
 *     program asked for: min(num_threads, grant) for an explicit request,
 *     min(nthreads-var, grant) for the default one, and the request itself
 *     whenever the grant is not smaller. `allot run` sets OMP_NUM_THREADS to
 *     the cell's maximum, so omp_get_max_threads() stays an upper bound on
 *     every team: buffers sized by it are never overrun. To the program the
 *     shim looks like dynamic adjustment (OMP_DYNAMIC) choosing smaller teams.
 *     A `strict` request, which dynamic adjustment may not shrink either, is
 *     passed on unchanged.
 *
 *  2. Inert outside a cell. Without a valid page every interposed function
 *     forwards to the real one; the only added work is finding the real
 *     function (two loads, cached) and one predictable branch on `g_page`.
 *     The constructor looks up no OpenMP symbol, so programs that never use
 *     OpenMP (ls, sh, python3, make) never need an OpenMP runtime. (It does
 *     look up libc's pthread functions and liballot's require hooks, which
 *     the pthread wrappers further down use; without liballot they forward
 *     after one branch.)
 *
 *  3. No locks of our own. `g_page` is written once, in the constructor,
 *     before the program runs. Grant reads follow the page's seqlock
 *     (docs/protocol.md) with __atomic builtins. The caches of runtimes and
 *     their functions are filled with compare-and-swap; a race only repeats
 *     an idempotent lookup. The loader's lookups (dlsym, dlopen) take its
 *     lock, so a runtime's functions are all looked up at once, by the
 *     thread that first meets the runtime, before any team of it exists:
 *     team threads find them cached and never wait for the loader lock,
 *     which the primary thread may hold (regions run by a constructor
 *     during dlopen) while it waits for them at the region's end.
 *
 *  4. The right runtime. A program may hold several OpenMP runtimes: one
 *     in the global scope (linked by the executable), or private copies
 *     loaded with RTLD_LOCAL by Python extension modules (wheels vendor
 *     their own libgomp). Because the shim is preloaded, every region of
 *     every one of them comes through here, and each must reach the
 *     runtime its own code is bound to: a region started in one runtime
 *     whose body asks another for omp_get_thread_num() computes garbage.
 *     When a runtime is in the global scope, the code is bound to it, and
 *     dlsym(RTLD_NEXT) finds it. Otherwise the region's outlined function
 *     (or its source-location record, for __kmpc calls) lies in the object
 *     that compiled it; we look the symbol up in that object's own
 *     dependencies. The shim holds a reference (dlopen) to every runtime
 *     and every calling object it remembers, so cached pointers cannot
 *     dangle and a cached object's address cannot be reused by another.
 *
 *  5. Never fatal for the shim's own reasons. A runtime or caller the shim
 *     cannot track (more runtimes than its table holds, a library it cannot
 *     take a reference to) has its regions forwarded uncapped, with a note
 *     under ALLOT_SHIM_DEBUG=1. The shim stops a program only where the
 *     loader would have: an entry point that no loaded library provides.
 */

#define _GNU_SOURCE /* F_GET_SEALS */
#include "page.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------------------ */
/* The grant page: grant_page.h, checked against the Rust definition.       */
/* ------------------------------------------------------------------------ */


/* Seqlock attempts before a read gives up. A publish is a few dozen stores;
 * running out means the writer was descheduled (or died) mid-publish, and
 * the region then runs uncapped rather than wait. */
#define SEQ_TRIES 256

/* The cell's page, or NULL when the shim is inert. Written once by the
 * constructor, before any thread of the program exists. */
const struct grant_page *g_page;
int g_debug;
/* What messages start with: the library that says them. */
const char *say_prefix = "allot-shim";

/* An odd `seq` that a read gave up on without seeing it move: the page's
 * writer stopped in the middle of a publish (a broker killed, or stopped,
 * between its two stores to `seq`). Reads that find `seq` still at this
 * value return at once instead of waiting again; any publish moves `seq`
 * (a new writer first rounds it up to even), so the next read after one
 * is normal. 0, an even value, means none. */
uint64_t g_stuck_seq;

/* grant_threads() after a first attempt that found `seq` at `first` and
 * failed: retries up to SEQ_TRIES times. */
__attribute__((noinline)) unsigned grant_threads_slow(const struct grant_page *p, uint64_t first)
{
    if ((first & 1) && first == __atomic_load_n(&g_stuck_seq, __ATOMIC_RELAXED))
        return 0; /* still stuck where a read gave up before: do not wait again */
    int moved = 0;
    for (int i = 0; i < SEQ_TRIES; i++) {
        uint64_t s1 = __atomic_load_n(&p->seq, __ATOMIC_ACQUIRE);
        moved |= s1 != first;
        if (s1 & 1) {
            CPU_RELAX();
            continue;
        }
        uint32_t t = __atomic_load_n(&p->threads, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&p->seq, __ATOMIC_RELAXED) == s1)
            return t ? t : 1;
    }
    if ((first & 1) && !moved) {
        __atomic_store_n(&g_stuck_seq, first, __ATOMIC_RELAXED);
        if (UNLIKELY(g_debug))
            say("grant page left mid-publish by its writer (seq %llu); regions run uncapped "
                "until it is published again",
                (unsigned long long)first);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */
/* ------------------------------------------------------------------------ */

void say(const char *fmt, ...)
{
    char line[256];
    int off = snprintf(line, sizeof line, "%s[%ld]: ", say_prefix, (long)getpid());
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line + off, sizeof line - (size_t)off - 1, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    size_t len = (size_t)off + (size_t)n;
    if (len > sizeof line - 2)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}

static int g_noted[NOTE_COUNT];

void note(enum note which, const char *fmt, ...)
{
    if (!g_debug || __atomic_exchange_n(&g_noted[which], 1, __ATOMIC_RELAXED))
        return;
    char text[200];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= 0)
        say("%s", text);
}

/* For what the loader itself would have refused: a call to an entry point
 * that no loaded library provides (the program could not have bound it
 * without the shim). Never for the shim's own limits (invariant 5). */
void die(const char *what, const char *name)
{
    say("%s %s; the program cannot continue", what, name);
    abort();
}

/* ------------------------------------------------------------------------ */
/* Start-up                                                                 */
/* ------------------------------------------------------------------------ */

/* Maps the page named by ALLOT_GRANT_FD, or says why not. */
const struct grant_page *map_page(const char *var, const char **why)
{
    if (var == NULL || var[0] == '\0') {
        *why = "ALLOT_GRANT_FD is not set";
        return NULL;
    }
    char *end = NULL;
    errno = 0;
    long fd = strtol(var, &end, 10);
    if (errno != 0 || end == var || *end != '\0' || fd < 0 || fd > INT_MAX) {
        *why = "ALLOT_GRANT_FD is not a descriptor number";
        return NULL;
    }
    struct stat st;
    if (fstat((int)fd, &st) != 0) {
        *why = "ALLOT_GRANT_FD is not open";
        return NULL;
    }
    if (!S_ISREG(st.st_mode) || st.st_size < (off_t)PAGE_BYTES) {
        *why = "ALLOT_GRANT_FD is not a grant page (wrong type or size)";
        return NULL;
    }
    /* A page sealed against shrinking can never fault (SIGBUS) under us. */
    int seals = fcntl((int)fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        *why = "ALLOT_GRANT_FD is not a sealed grant page";
        return NULL;
    }
    void *m = mmap(NULL, PAGE_BYTES, PROT_READ, MAP_SHARED, (int)fd, 0);
    if (m == MAP_FAILED) {
        *why = "cannot map ALLOT_GRANT_FD";
        return NULL;
    }
    const struct grant_page *p = m;
    if (__atomic_load_n(&p->magic, __ATOMIC_ACQUIRE) != PAGE_MAGIC ||
        __atomic_load_n(&p->version, __ATOMIC_RELAXED) != PAGE_VERSION ||
        __atomic_load_n(&p->size, __ATOMIC_RELAXED) != PAGE_BYTES) {
        munmap(m, PAGE_BYTES);
        *why = "ALLOT_GRANT_FD is not an allot grant page of this page version";
        return NULL;
    }
    return p;
}
