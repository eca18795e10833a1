/*
 * omp.c: OpenMP teams capped to the grant: the entry points through which
 * compiled code starts a parallel region (GNU libgomp's GOMP_parallel*,
 * also provided by LLVM libomp for gcc-compiled code; LLVM libomp's
 * __kmpc_fork_call and companions, x86-64 only), and omp_get_max_threads.
 * Each call reaches the runtime its code is bound to through omp_route.h.
 * Invariants 1 and 3 of page.c's opening comment are kept here. Part of
 * liballot_shim.so (see shim.h).
 */

#include "omp_route.h"

/* ------------------------------------------------------------------------ */
/* The team-size rule                                                       */
/* ------------------------------------------------------------------------ */

/* The team size to request instead of `requested` (0 = the default,
 * nthreads-var), for a region entering through `entry` from code in
 * `owner`'s object. Returns `requested` unchanged unless the grant is
 * smaller than the team it stands for, or the code sizes its own teams
 * (shim.h: sizes_own_teams); never returns a larger number (invariant 1). */
static unsigned cap_team(struct omp_rt *rt, unsigned requested, enum sym entry, const void *owner)
{
    if (requested == 1 || rt == NULL)
        return requested;
    unsigned grant = grant_threads();
    if (grant == 0)
        return requested;
    unsigned want = requested;
    if (want == 0) {
        int (*max_threads)(void) = (int (*)(void))rt_fn(rt, S_OMP_GET_MAX_THREADS);
        int m = max_threads ? max_threads() : 0;
        if (m <= 0)
            return requested;
        want = (unsigned)m;
    }
    if (grant >= want)
        return requested;
    if (sizes_own_teams(owner))
        return requested; /* its work is split for the whole team */
    if (UNLIKELY(g_debug))
        say("%s: team of %u capped to the grant's %u", sym_name[entry], want, grant);
    return grant;
}

/*
 * A library that sizes its own teams (shim.h: sizes_own_teams) asks
 * omp_get_max_threads() at the start of each call and is told min(its
 * setting, the grant): the split it makes then matches the CPUs it has.
 * Everyone else gets the runtime's own answer, which stays an upper bound
 * on every team (invariant 1).
 *
 * Some releases of such a library (OpenBLAS before 0.3.22) store the count
 * they were told back with omp_set_num_threads(), which would make the
 * grant of that moment the calling thread's setting for good: the program's
 * own regions would keep it, and the library could never grow again. The
 * shim remembers, per thread, the grant it told instead of the setting
 * (t_told), and drops that one value when the same library stores it. (A
 * program that asks the library for exactly that count by itself, while it
 * is the grant, has its request dropped too; it is what it gets anyway
 * until the grant grows.)
 *
 * Being exported, both are also what dlsym(RTLD_DEFAULT) finds in a
 * process without an OpenMP runtime: there they answer as a program
 * without OpenMP runs, with 1 thread, and ignore a setting.
 */
static __thread unsigned t_told __attribute__((tls_model("initial-exec")));

EXPORT int omp_get_max_threads(void)
{
    const void *caller = __builtin_return_address(0);
    struct omp_rt *rt;
    int (*real)(void) = (int (*)(void))route(FAM_GOMP, S_OMP_GET_MAX_THREADS, caller, &rt);
    if (UNLIKELY(real == NULL))
        return 1; /* found through dlsym(RTLD_DEFAULT) with no runtime loaded */
    int m = real();
    if (LIKELY(!shim_active()) || m <= 1 || !sizes_own_teams_known(caller))
        return m;
    unsigned grant = grant_threads();
    t_told = grant != 0 && grant < (unsigned)m ? grant : 0;
    return t_told != 0 ? (int)t_told : m;
}

EXPORT void omp_set_num_threads(int n)
{
    const void *caller = __builtin_return_address(0);
    struct omp_rt *rt;
    void (*real)(int) = (void (*)(int))route(FAM_GOMP, S_OMP_SET_NUM_THREADS, caller, &rt);
    if (UNLIKELY(t_told != 0) && n == (int)t_told && sizes_own_teams_known(caller)) {
        t_told = 0;
        return;
    }
    if (LIKELY(real != NULL))
        real(n);
}

/* ------------------------------------------------------------------------ */
/* GNU libgomp entry points (signatures: libgomp's libgomp_g.h)             */
/* ------------------------------------------------------------------------ */

typedef void (*gomp_fn)(void *);

/* The real entry points' types. */
typedef void (*parallel_fn)(gomp_fn, void *, unsigned, unsigned);
typedef void (*parallel_start_fn)(gomp_fn, void *, unsigned);
typedef unsigned (*parallel_reductions_fn)(gomp_fn, void *, unsigned, unsigned);
typedef void (*sections_fn)(gomp_fn, void *, unsigned, unsigned, unsigned);
typedef void (*sections_start_fn)(gomp_fn, void *, unsigned, unsigned);
/* Combined loops: (fn, data, num_threads, start, end, incr, chunk_size, flags). */
typedef void (*loop_fn)(gomp_fn, void *, unsigned, long, long, long, long, unsigned);
/* Runtime schedule: no chunk size. */
typedef void (*loop_runtime_fn)(gomp_fn, void *, unsigned, long, long, long, unsigned);
/* The GOMP_1.0 split form (the team runs until GOMP_parallel_end): no flags. */
typedef void (*loop_start_fn)(gomp_fn, void *, unsigned, long, long, long, long);
typedef void (*loop_runtime_start_fn)(gomp_fn, void *, unsigned, long, long, long);

/* Declares `real`, the function entry point `s` forwards to, and caps
 * `num_threads` when in a cell. The outlined `fn` locates the caller. */
#define GOMP_PROLOGUE(s, type)                                                 \
    struct omp_rt *rt;                                                         \
    type real = (type)route_need(FAM_GOMP, (s), (const void *)fn, &rt);        \
    if (UNLIKELY(shim_active()))                                               \
    num_threads = cap_team(rt, num_threads, (s), (const void *)fn)

EXPORT void GOMP_parallel(gomp_fn fn, void *data, unsigned num_threads, unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL, parallel_fn);
    real(fn, data, num_threads, flags);
}

EXPORT void GOMP_parallel_start(gomp_fn fn, void *data, unsigned num_threads)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_START, parallel_start_fn);
    real(fn, data, num_threads);
}

EXPORT unsigned GOMP_parallel_reductions(gomp_fn fn, void *data, unsigned num_threads,
                                         unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_REDUCTIONS, parallel_reductions_fn);
    return real(fn, data, num_threads, flags);
}

EXPORT void GOMP_parallel_sections(gomp_fn fn, void *data, unsigned num_threads, unsigned count,
                                   unsigned flags)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_SECTIONS, sections_fn);
    real(fn, data, num_threads, count, flags);
}

EXPORT void GOMP_parallel_sections_start(gomp_fn fn, void *data, unsigned num_threads,
                                         unsigned count)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_SECTIONS_START, sections_start_fn);
    real(fn, data, num_threads, count);
}

#define GOMP_LOOP(name, s)                                                     \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, long chunk_size, unsigned flags)     \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_fn);                                             \
        real(fn, data, num_threads, start, end, incr, chunk_size, flags);      \
    }
GOMP_LOOP(GOMP_parallel_loop_static, S_GOMP_PARALLEL_LOOP_STATIC)
GOMP_LOOP(GOMP_parallel_loop_dynamic, S_GOMP_PARALLEL_LOOP_DYNAMIC)
GOMP_LOOP(GOMP_parallel_loop_guided, S_GOMP_PARALLEL_LOOP_GUIDED)
GOMP_LOOP(GOMP_parallel_loop_nonmonotonic_dynamic, S_GOMP_PARALLEL_LOOP_NONMONOTONIC_DYNAMIC)
GOMP_LOOP(GOMP_parallel_loop_nonmonotonic_guided, S_GOMP_PARALLEL_LOOP_NONMONOTONIC_GUIDED)

#define GOMP_LOOP_RUNTIME(name, s)                                             \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, unsigned flags)                      \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_runtime_fn);                                     \
        real(fn, data, num_threads, start, end, incr, flags);                  \
    }
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_runtime, S_GOMP_PARALLEL_LOOP_RUNTIME)
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_nonmonotonic_runtime,
                  S_GOMP_PARALLEL_LOOP_NONMONOTONIC_RUNTIME)
GOMP_LOOP_RUNTIME(GOMP_parallel_loop_maybe_nonmonotonic_runtime,
                  S_GOMP_PARALLEL_LOOP_MAYBE_NONMONOTONIC_RUNTIME)

#define GOMP_LOOP_START(name, s)                                               \
    EXPORT void name(gomp_fn fn, void *data, unsigned num_threads, long start, \
                     long end, long incr, long chunk_size)                     \
    {                                                                          \
        GOMP_PROLOGUE(s, loop_start_fn);                                       \
        real(fn, data, num_threads, start, end, incr, chunk_size);             \
    }
GOMP_LOOP_START(GOMP_parallel_loop_static_start, S_GOMP_PARALLEL_LOOP_STATIC_START)
GOMP_LOOP_START(GOMP_parallel_loop_dynamic_start, S_GOMP_PARALLEL_LOOP_DYNAMIC_START)
GOMP_LOOP_START(GOMP_parallel_loop_guided_start, S_GOMP_PARALLEL_LOOP_GUIDED_START)

EXPORT void GOMP_parallel_loop_runtime_start(gomp_fn fn, void *data, unsigned num_threads,
                                             long start, long end, long incr)
{
    GOMP_PROLOGUE(S_GOMP_PARALLEL_LOOP_RUNTIME_START, loop_runtime_start_fn);
    real(fn, data, num_threads, start, end, incr);
}

/* ------------------------------------------------------------------------ */
/* LLVM libomp entry points (x86-64 only)                                   */
/* ------------------------------------------------------------------------ */
#if defined(__x86_64__)

/*
 * clang lowers `#pragma omp parallel` to
 *
 *     [__kmpc_push_num_threads(loc, gtid, n);]   only with num_threads(n)
 *     if (cond) __kmpc_fork_call(loc, argc, microtask, arg1, ..., argN);
 *     else      __kmpc_serialized_parallel(loc, gtid); ...
 *
 * Newer LLVM (OpenMPIRBuilder, flang) also pushes with
 * __kmpc_push_num_threads_strict (num_threads(strict: n)) and the _list
 * forms (a count per nesting level, num_threads(n1, n2, ...)), and forks
 * with __kmpc_fork_call_if (the if clause evaluated by the runtime); a host
 * `teams` construct forks with __kmpc_fork_teams.
 *
 * A pushed value is for the next fork on the same thread, whichever entry
 * point that is. An explicit request is capped where it is pushed (unless
 * strict), and the thread remembers it pushed (t_pushed) so that the fork
 * that consumes the value does not replace it with the default cap, which
 * could be larger; every fork entry point clears the mark. A fork without
 * a pushed value pushes min(grant, omp_get_max_threads()) itself, when
 * that is smaller.
 */
static __thread int t_pushed __attribute__((tls_model("initial-exec")));

typedef void (*kmpc_micro)(int32_t *, int32_t *, ...);
typedef void (*push_fn)(void *, int32_t, int32_t);
typedef void (*push_strict_fn)(void *, int32_t, int32_t, int, const char *);
typedef void (*push_list_fn)(void *, int32_t, uint32_t, int32_t *);
typedef void (*push_list_strict_fn)(void *, int32_t, uint32_t, int32_t *, int, const char *);
typedef void (*serialized_fn)(void *, int32_t);
typedef int32_t (*gtid_fn)(void *);
typedef void (*fork_fn)(void *, int32_t, kmpc_micro, ...);
typedef void (*fork_if_fn)(void *, int32_t, kmpc_micro, int32_t, void *);

EXPORT void __kmpc_push_num_threads(void *loc, int32_t gtid, int32_t num_threads)
{
    struct omp_rt *rt;
    push_fn real = (push_fn)route_need(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS, loc, &rt);
    if (UNLIKELY(shim_active())) {
        t_pushed = 1;
        if (num_threads > 1)
            num_threads = (int32_t)cap_team(rt, (unsigned)num_threads,
                                             S_KMPC_PUSH_NUM_THREADS, loc);
    }
    real(loc, gtid, num_threads);
}

/* A push for a runtime that lacks the newer entry point `missing` (the
 * caller found it through the shim, which exports it): the plain push of
 * the first level's count, which is how libomp implements them, less the
 * strictness or the inner levels. */
static void push_plain(void *loc, int32_t gtid, int32_t num_threads, enum sym missing)
{
    note(NOTE_OLD_RUNTIME,
         "the OpenMP runtime predates %s (and maybe others); the shim stands in for them",
         sym_name[missing]);
    struct omp_rt *rt;
    push_fn push = (push_fn)route_need(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS, loc, &rt);
    push(loc, gtid, num_threads);
}

/* num_threads(strict: n): the program requires exactly n threads (the
 * runtime reports an error otherwise), which dynamic adjustment may not
 * change either, so it is passed on unchanged; the mark keeps the fork
 * from applying the default cap. */
EXPORT void __kmpc_push_num_threads_strict(void *loc, int32_t gtid, int32_t num_threads,
                                           int severity, const char *message)
{
    struct omp_rt *rt;
    push_strict_fn real =
        (push_strict_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_STRICT, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 1;
    if (LIKELY(real != NULL))
        real(loc, gtid, num_threads, severity, message);
    else
        push_plain(loc, gtid, num_threads, S_KMPC_PUSH_NUM_THREADS_STRICT);
}

/* Nesting levels of a capped num_threads list the shim copies; a longer
 * list is passed on uncapped. */
#define MAX_LEVELS 8
static __thread int32_t t_levels[MAX_LEVELS] __attribute__((tls_model("initial-exec")));

/* `list` with its first level (the team about to be forked) capped; the
 * inner levels are the teams of nested regions, capped when those fork.
 * The program's array is never written: a changed list is a per-thread
 * copy, valid until this thread's next capped list (libomp copies the list
 * into its own thread state when it is pushed). */
static int32_t *cap_levels(struct omp_rt *rt, void *loc, uint32_t len, int32_t *list)
{
    if (list == NULL || len == 0 || list[0] <= 1)
        return list;
    int32_t first = (int32_t)cap_team(rt, (unsigned)list[0], S_KMPC_PUSH_NUM_THREADS_LIST, loc);
    if (first == list[0])
        return list;
    if (len > MAX_LEVELS) {
        note(NOTE_LONG_LIST, "num_threads list of %u levels (the shim copies %d): passed on uncapped",
             len, MAX_LEVELS);
        return list;
    }
    memcpy(t_levels, list, len * sizeof *list);
    t_levels[0] = first;
    return t_levels;
}

EXPORT void __kmpc_push_num_threads_list(void *loc, int32_t gtid, uint32_t list_length,
                                         int32_t *num_threads_list)
{
    struct omp_rt *rt;
    push_list_fn real = (push_list_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_LIST, loc, &rt);
    int32_t *list = num_threads_list;
    if (UNLIKELY(shim_active())) {
        t_pushed = 1;
        list = cap_levels(rt, loc, list_length, list);
    }
    if (LIKELY(real != NULL))
        real(loc, gtid, list_length, list);
    else if (list != NULL && list_length > 0)
        push_plain(loc, gtid, list[0], S_KMPC_PUSH_NUM_THREADS_LIST);
}

/* A strict list: passed on unchanged, as a strict single count. */
EXPORT void __kmpc_push_num_threads_list_strict(void *loc, int32_t gtid, uint32_t list_length,
                                                int32_t *num_threads_list, int severity,
                                                const char *message)
{
    struct omp_rt *rt;
    push_list_strict_fn real =
        (push_list_strict_fn)route(FAM_KMPC, S_KMPC_PUSH_NUM_THREADS_LIST_STRICT, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 1;
    if (LIKELY(real != NULL))
        real(loc, gtid, list_length, num_threads_list, severity, message);
    else if (num_threads_list != NULL && list_length > 0)
        push_plain(loc, gtid, num_threads_list[0], S_KMPC_PUSH_NUM_THREADS_LIST_STRICT);
}

EXPORT void __kmpc_serialized_parallel(void *loc, int32_t gtid)
{
    struct omp_rt *rt;
    serialized_fn real = (serialized_fn)route_need(FAM_KMPC, S_KMPC_SERIALIZED_PARALLEL, loc, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 0; /* the pushed value (if any) was for this region */
    real(loc, gtid);
}

/* The default cap, for a fork with nothing pushed: pushes
 * min(grant, omp_get_max_threads()) when that is smaller. */
static void push_default_cap(struct omp_rt *rt, void *loc, enum sym entry)
{
    if (rt == NULL)
        return;
    gtid_fn gtid = (gtid_fn)rt_fn(rt, S_KMPC_GLOBAL_THREAD_NUM);
    push_fn push = (push_fn)rt_fn(rt, S_KMPC_PUSH_NUM_THREADS);
    if (gtid == NULL || push == NULL)
        return;
    unsigned n = cap_team(rt, 0, entry, loc);
    if (n != 0)
        push(loc, gtid(loc), (int32_t)n);
}

/* Called by the __kmpc_fork_call trampoline below with the fork's first
 * three arguments; returns the real __kmpc_fork_call to jump to. */
__attribute__((visibility("hidden"), used)) void *allot_kmpc_fork_prepare(void *loc, int32_t argc,
                                                                         void *microtask);

void *allot_kmpc_fork_prepare(void *loc, int32_t argc, void *microtask)
{
    (void)argc;
    struct omp_rt *rt;
    void *real = route_need(FAM_KMPC, S_KMPC_FORK_CALL, microtask, &rt);
    if (LIKELY(!shim_active()))
        return real;
    if (t_pushed) {
        t_pushed = 0;
        return real;
    }
    push_default_cap(rt, loc, S_KMPC_FORK_CALL);
    return real;
}

/* The same for __kmpc_fork_teams: a pass-through that clears the mark (the
 * teams construct replaces any pushed value with its league size; teams
 * are not capped). */
__attribute__((visibility("hidden"), used)) void *
allot_kmpc_fork_teams_prepare(void *loc, int32_t argc, void *microtask);

void *allot_kmpc_fork_teams_prepare(void *loc, int32_t argc, void *microtask)
{
    (void)loc;
    (void)argc;
    struct omp_rt *rt;
    void *real = route_need(FAM_KMPC, S_KMPC_FORK_TEAMS, microtask, &rt);
    if (UNLIKELY(shim_active()))
        t_pushed = 0;
    return real;
}

/* __kmpc_fork_call_if for a runtime that predates it: what libomp's own
 * does, through entry points every libomp has. */
static __attribute__((noinline)) void fork_call_if_standin(void *loc, int32_t argc,
                                                           kmpc_micro microtask, int32_t cond,
                                                           void *args)
{
    note(NOTE_OLD_RUNTIME,
         "the OpenMP runtime predates %s (and maybe others); the shim stands in for them",
         sym_name[S_KMPC_FORK_CALL_IF]);
    if (cond) {
        fork_fn fork = (fork_fn)allot_kmpc_fork_prepare(loc, argc, (void *)microtask);
        if (args != NULL)
            fork(loc, argc, microtask, args);
        else
            fork(loc, argc, microtask);
        return;
    }
    struct omp_rt *rt;
    const void *owner = (const void *)microtask;
    gtid_fn gtid_of = (gtid_fn)route_need(FAM_KMPC, S_KMPC_GLOBAL_THREAD_NUM, owner, &rt);
    serialized_fn begin =
        (serialized_fn)route_need(FAM_KMPC, S_KMPC_SERIALIZED_PARALLEL, owner, &rt);
    serialized_fn end =
        (serialized_fn)route_need(FAM_KMPC, S_KMPC_END_SERIALIZED_PARALLEL, owner, &rt);
    int32_t gtid = gtid_of(loc);
    if (shim_active())
        t_pushed = 0;
    begin(loc, gtid);
    int32_t bound_tid = 0;
    if (args != NULL)
        microtask(&gtid, &bound_tid, args);
    else
        microtask(&gtid, &bound_tid);
    end(loc, gtid);
}

/* If `cond`, a fork like __kmpc_fork_call's (the default cap applies unless
 * a value was pushed); if not, the pushed value (if any) is dropped with the
 * serialized region. The mark stays set while the runtime runs the call, in
 * case its fork goes through __kmpc_fork_call (and so through the shim),
 * and is cleared once it returns. */
EXPORT void __kmpc_fork_call_if(void *loc, int32_t argc, kmpc_micro microtask, int32_t cond,
                                void *args)
{
    struct omp_rt *rt;
    fork_if_fn real =
        (fork_if_fn)route(FAM_KMPC, S_KMPC_FORK_CALL_IF, (const void *)microtask, &rt);
    if (UNLIKELY(real == NULL)) {
        fork_call_if_standin(loc, argc, microtask, cond, args);
        return;
    }
    int active = shim_active();
    if (UNLIKELY(active)) {
        if (!cond) {
            t_pushed = 0;
        } else if (!t_pushed) {
            push_default_cap(rt, loc, S_KMPC_FORK_CALL_IF);
            t_pushed = 1;
        }
    }
    real(loc, argc, microtask, cond, args);
    if (UNLIKELY(active))
        t_pushed = 0;
}

/*
 * __kmpc_fork_call(ident_t *loc, kmp_int32 argc, kmpc_micro microtask, ...)
 * passes `argc` pointer-sized arguments on to the microtask, and so does
 * __kmpc_fork_teams. C cannot forward a variable argument list, so their
 * interposers are trampolines: each saves the argument registers (and %al,
 * the vector-register count of a variadic call), asks its prepare function
 * for the real function (which may push a smaller team first), restores the
 * registers and jumps to it. The stack, with any arguments beyond the
 * sixth, is untouched, so every argc is forwarded exactly. The varargs are
 * pointers, so no argument travels in a vector register. Seven pushes after
 * the return address leave %rsp 16-byte aligned for the call.
 */
#define KMPC_TRAMPOLINE(name, prepare)                                         \
    __asm__(".text\n"                                                          \
            ".globl " #name "\n"                                               \
            ".type " #name ", @function\n"                                     \
            ".p2align 4\n" #name ":\n"                                         \
            "  .cfi_startproc\n"                                               \
            "  endbr64\n"                                                      \
            "  pushq %rdi\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rsi\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rdx\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rcx\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %r8\n"                                                    \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %r9\n"                                                    \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  pushq %rax\n"                                                   \
            "  .cfi_adjust_cfa_offset 8\n"                                     \
            "  call " #prepare "\n"                                            \
            "  movq %rax, %r11\n"                                              \
            "  popq %rax\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %r9\n"                                                     \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %r8\n"                                                     \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rcx\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rdx\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rsi\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  popq %rdi\n"                                                    \
            "  .cfi_adjust_cfa_offset -8\n"                                    \
            "  jmp *%r11\n"                                                    \
            "  .cfi_endproc\n"                                                 \
            ".size " #name ", .-" #name "\n")

KMPC_TRAMPOLINE(__kmpc_fork_call, allot_kmpc_fork_prepare);
KMPC_TRAMPOLINE(__kmpc_fork_teams, allot_kmpc_fork_teams_prepare);

#endif /* __x86_64__ */

