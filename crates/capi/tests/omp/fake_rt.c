/*
 * fake_rt: a stand-in OpenMP runtime for the shim's tests, with a program
 * of its own that calls it. It records the team size each fork would have
 * run, so a test can check exactly what the shim passed on, including
 * through entry points the installed LLVM does not have
 * (__kmpc_push_num_threads_strict, the _list forms, __kmpc_fork_call_if).
 * Regions run on the calling thread alone; only the requested size counts.
 *
 * Its calls of its own entry points go through the PLT (gcc -fPIC keeps
 * exported functions interposable), hence, with the shim preloaded, through
 * the shim, which routes them back here by the calling object's
 * dependencies when the library is loaded RTLD_LOCAL. Copies of the file
 * under different names are different runtimes to the loader and the shim.
 *
 * Built with -fPIC -shared; -DOLD_RUNTIME leaves out the newer entry points
 * (as LLVM 14's libomp does), whose calls then bind to the shim's exports.
 * nthreads-var is 4, or FAKE_MAX_THREADS. FAKE_DIRECT=1 makes
 * __kmpc_fork_call_if fork internally rather than through __kmpc_fork_call.
 *
 * teamsize_main (for dlopen_driver / each_driver) takes a mode:
 *   gomp    one GOMP_parallel region with the default team; prints
 *           "gomp N", N the num_threads the runtime received (0 = default)
 *   kmpc    a sequence of __kmpc calls; prints "NAME TEAM" per case, TEAM
 *           the size the runtime would have forked (1 when serialized)
 */
#define _GNU_SOURCE
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*kmpc_micro)(int32_t *, int32_t *, ...);

struct ident {
    int32_t reserved_1, flags, reserved_2, reserved_3;
    const char *psource;
};

static int32_t g_pushed;   /* for the next fork; 0: none */
static int32_t g_team;     /* what the last fork or serialized region ran */
static int g_direct;

static int max_threads(void)
{
    const char *v = getenv("FAKE_MAX_THREADS");
    return v != NULL ? atoi(v) : 4;
}

EXPORT int omp_get_max_threads(void) { return max_threads(); }

EXPORT void GOMP_parallel(void (*fn)(void *), void *data, unsigned num_threads, unsigned flags)
{
    (void)flags;
    g_team = (int32_t)num_threads;
    fn(data);
}

EXPORT int32_t __kmpc_global_thread_num(struct ident *loc)
{
    (void)loc;
    return 0;
}

/* The pushes share this, rather than call each other through the PLT
 * (where the shim would see them as the program's calls). */
static void push(int32_t n) { g_pushed = n; }

EXPORT void __kmpc_push_num_threads(struct ident *loc, int32_t gtid, int32_t n)
{
    (void)loc;
    (void)gtid;
    push(n);
}

#ifndef OLD_RUNTIME
EXPORT void __kmpc_push_num_threads_strict(struct ident *loc, int32_t gtid, int32_t n,
                                           int severity, const char *message)
{
    (void)loc;
    (void)gtid;
    (void)severity;
    (void)message;
    push(n);
}

EXPORT void __kmpc_push_num_threads_list(struct ident *loc, int32_t gtid, uint32_t len,
                                         int32_t *list)
{
    (void)loc;
    (void)gtid;
    if (len > 0)
        push(list[0]);
}

EXPORT void __kmpc_push_num_threads_list_strict(struct ident *loc, int32_t gtid, uint32_t len,
                                                int32_t *list, int severity, const char *message)
{
    (void)loc;
    (void)gtid;
    (void)severity;
    (void)message;
    if (len > 0)
        push(list[0]);
}
#endif

static void run(int32_t team, int32_t argc, kmpc_micro micro, void *arg)
{
    g_team = team;
    g_pushed = 0;
    int32_t gtid = 0, bound = 0;
    if (argc > 0)
        micro(&gtid, &bound, arg);
    else
        micro(&gtid, &bound);
}

static void fork_internal(int32_t argc, kmpc_micro micro, void *arg)
{
    run(g_pushed > 0 ? g_pushed : max_threads(), argc, micro, arg);
}

/* Takes at most one microtask argument, all these tests pass. */
EXPORT void __kmpc_fork_call(struct ident *loc, int32_t argc, kmpc_micro micro, ...)
{
    (void)loc;
    void *arg = NULL;
    if (argc > 0) {
        va_list ap;
        va_start(ap, micro);
        arg = va_arg(ap, void *);
        va_end(ap);
    }
    fork_internal(argc, micro, arg);
}

/* A league of one team on the host: the pushed value is replaced. */
EXPORT void __kmpc_fork_teams(struct ident *loc, int32_t argc, kmpc_micro micro, ...)
{
    (void)loc;
    void *arg = NULL;
    if (argc > 0) {
        va_list ap;
        va_start(ap, micro);
        arg = va_arg(ap, void *);
        va_end(ap);
    }
    int32_t team = g_team;
    run(1, argc, micro, arg);
    g_team = team; /* a teams construct is not a parallel region */
}

EXPORT void __kmpc_serialized_parallel(struct ident *loc, int32_t gtid)
{
    (void)loc;
    (void)gtid;
    g_team = 1;
    g_pushed = 0;
}

EXPORT void __kmpc_end_serialized_parallel(struct ident *loc, int32_t gtid)
{
    (void)loc;
    (void)gtid;
}

#ifndef OLD_RUNTIME
/* As libomp's: with the fork through __kmpc_fork_call (or internal). */
EXPORT void __kmpc_fork_call_if(struct ident *loc, int32_t argc, kmpc_micro micro, int32_t cond,
                                void *args)
{
    if (cond && g_direct) {
        fork_internal(args != NULL ? 1 : 0, micro, args);
    } else if (cond) {
        if (args != NULL)
            __kmpc_fork_call(loc, argc, micro, args);
        else
            __kmpc_fork_call(loc, argc, micro);
    } else {
        __kmpc_serialized_parallel(loc, 0);
        int32_t gtid = 0, bound = 0;
        if (args != NULL)
            micro(&gtid, &bound, args);
        else
            micro(&gtid, &bound);
        __kmpc_end_serialized_parallel(loc, 0);
    }
}
#else
void __kmpc_push_num_threads_strict(struct ident *, int32_t, int32_t, int, const char *);
void __kmpc_push_num_threads_list(struct ident *, int32_t, uint32_t, int32_t *);
void __kmpc_push_num_threads_list_strict(struct ident *, int32_t, uint32_t, int32_t *, int,
                                         const char *);
void __kmpc_fork_call_if(struct ident *, int32_t, kmpc_micro, int32_t, void *);
#endif

/* ------------------------------------------------------------------------ */
/* The program                                                              */
/* ------------------------------------------------------------------------ */

static struct ident loc = {0, 2, 0, 0, ";fake_rt.c;teamsize_main;1;1;;"};

static void gomp_body(void *data) { ++*(int *)data; }

static int g_ran;
static void micro(int32_t *gtid, int32_t *bound) /* argc 0 */
{
    (void)gtid;
    (void)bound;
    g_ran++;
}

static void micro_arg(int32_t *gtid, int32_t *bound, int *arg) /* argc 1 */
{
    (void)gtid;
    (void)bound;
    *arg += 1;
}

static void report(const char *name)
{
    printf("%s %d\n", name, (int)g_team);
    g_team = -1;
}

static int kmpc_cases(void)
{
    int32_t gtid = __kmpc_global_thread_num(&loc);
    kmpc_micro m = (kmpc_micro)micro;

    __kmpc_fork_call(&loc, 0, m);
    report("fork");

    __kmpc_push_num_threads(&loc, gtid, 2);
    __kmpc_fork_call(&loc, 0, m);
    report("push");

    __kmpc_push_num_threads_strict(&loc, gtid, 2, 2, "strict");
    __kmpc_fork_call(&loc, 0, m);
    report("strict");

    int32_t list[2] = {2, 1};
    __kmpc_push_num_threads_list(&loc, gtid, 2, list);
    __kmpc_fork_call(&loc, 0, m);
    report("list");
    printf("list_intact %d\n", list[0] == 2 && list[1] == 1);

    __kmpc_push_num_threads_list_strict(&loc, gtid, 2, list, 2, "strict");
    __kmpc_fork_call(&loc, 0, m);
    report("list_strict");

    /* A push the teams construct consumes must not stop the next fork's
     * default cap. */
    __kmpc_push_num_threads(&loc, gtid, 2);
    __kmpc_fork_teams(&loc, 0, m);
    __kmpc_fork_call(&loc, 0, m);
    report("fork_after_teams");

    __kmpc_fork_call_if(&loc, 0, m, 1, NULL);
    report("if_true");

    __kmpc_push_num_threads(&loc, gtid, 2);
    __kmpc_fork_call_if(&loc, 0, m, 1, NULL);
    report("push_if_true");
    __kmpc_fork_call(&loc, 0, m);
    report("fork_after_if_true");

    __kmpc_push_num_threads(&loc, gtid, 2);
    __kmpc_fork_call_if(&loc, 0, m, 0, NULL);
    report("push_if_false");
    __kmpc_fork_call(&loc, 0, m);
    report("fork_after_if_false");

    int arg = 0;
    __kmpc_fork_call_if(&loc, 1, (kmpc_micro)micro_arg, 1, &arg);
    __kmpc_fork_call_if(&loc, 1, (kmpc_micro)micro_arg, 0, &arg);
    __kmpc_fork_teams(&loc, 1, (kmpc_micro)micro_arg, &arg);
    printf("args %d\n", arg == 3);
    printf("ran %d\n", g_ran);
    return 0;
}

EXPORT int teamsize_main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    g_direct = getenv("FAKE_DIRECT") != NULL && strcmp(getenv("FAKE_DIRECT"), "1") == 0;
    if (argc == 2 && strcmp(argv[1], "gomp") == 0) {
        int ran = 0;
        GOMP_parallel(gomp_body, &ran, 0, 0);
        printf("gomp %d\n", ran == 1 ? (int)g_team : -1);
        return 0;
    }
    if (argc == 2 && strcmp(argv[1], "kmpc") == 0)
        return kmpc_cases();
    fprintf(stderr, "usage: fake_rt gomp|kmpc\n");
    return 2;
}
