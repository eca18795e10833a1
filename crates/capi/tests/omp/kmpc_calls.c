/*
 * kmpc_calls: calls LLVM libomp's fork and push entry points by hand, the
 * way compilers emit them, including ones clang 14 does not emit
 * (__kmpc_fork_teams with a pushed value before it) and ones LLVM 14's
 * libomp does not have: __kmpc_push_num_threads_strict, the _list forms and
 * __kmpc_fork_call_if, looked up with dlsym(RTLD_DEFAULT), which finds them
 * in the preloaded shim if the runtime lacks them (as a program probing for
 * them would). Build with clang -fopenmp (it links libomp) and -ldl.
 *
 * Prints "NAME TEAM" per case, TEAM the omp_get_num_threads() the region's
 * microtask saw, or "NAME absent" for an entry point nothing provides.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>

typedef void (*kmpc_micro)(int32_t *, int32_t *, ...);

struct ident {
    int32_t reserved_1, flags, reserved_2, reserved_3;
    const char *psource;
};

int32_t __kmpc_global_thread_num(struct ident *);
void __kmpc_push_num_threads(struct ident *, int32_t, int32_t);
void __kmpc_fork_call(struct ident *, int32_t, kmpc_micro, ...);
void __kmpc_fork_teams(struct ident *, int32_t, kmpc_micro, ...);

static struct ident loc = {0, 2 /* KMP_IDENT_KMPC */, 0, 0, ";kmpc_calls.c;main;1;1;;"};

static int g_team;

static void micro(int32_t *gtid, int32_t *bound)
{
    (void)gtid;
    (void)bound;
    if (omp_get_thread_num() == 0)
        g_team = omp_get_num_threads();
}

static void micro_arg(int32_t *gtid, int32_t *bound, int *arg)
{
    (void)gtid;
    (void)bound;
    if (omp_get_thread_num() == 0)
        *arg += 1;
}

static void report(const char *name)
{
    printf("%s %d\n", name, g_team);
    g_team = -1;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int32_t gtid = __kmpc_global_thread_num(&loc);
    kmpc_micro m = (kmpc_micro)micro;

    __kmpc_fork_call(&loc, 0, m);
    report("fork");

    /* A value pushed before a teams construct, which replaces it: the next
     * region still gets the default cap. */
    int arg = 0;
    __kmpc_push_num_threads(&loc, gtid, 2);
    __kmpc_fork_teams(&loc, 1, (kmpc_micro)micro_arg, &arg);
    __kmpc_fork_call(&loc, 0, m);
    report("fork_after_teams");
    printf("teams_arg %d\n", arg == 1);

    void (*strict)(struct ident *, int32_t, int32_t, int, const char *) =
        (void (*)(struct ident *, int32_t, int32_t, int, const char *))dlsym(
            RTLD_DEFAULT, "__kmpc_push_num_threads_strict");
    void (*list)(struct ident *, int32_t, uint32_t, int32_t *) =
        (void (*)(struct ident *, int32_t, uint32_t, int32_t *))dlsym(
            RTLD_DEFAULT, "__kmpc_push_num_threads_list");
    void (*list_strict)(struct ident *, int32_t, uint32_t, int32_t *, int, const char *) =
        (void (*)(struct ident *, int32_t, uint32_t, int32_t *, int, const char *))dlsym(
            RTLD_DEFAULT, "__kmpc_push_num_threads_list_strict");
    void (*fork_if)(struct ident *, int32_t, kmpc_micro, int32_t, void *) =
        (void (*)(struct ident *, int32_t, kmpc_micro, int32_t, void *))dlsym(
            RTLD_DEFAULT, "__kmpc_fork_call_if");

    if (strict != NULL) {
        strict(&loc, gtid, 2, 1 /* warning */, "strict");
        __kmpc_fork_call(&loc, 0, m);
        report("strict");
    } else {
        printf("strict absent\n");
    }

    int32_t levels[2] = {2, 1};
    if (list != NULL) {
        list(&loc, gtid, 2, levels);
        __kmpc_fork_call(&loc, 0, m);
        report("list");
        printf("list_intact %d\n", levels[0] == 2 && levels[1] == 1);
    } else {
        printf("list absent\n");
    }

    if (list_strict != NULL) {
        list_strict(&loc, gtid, 2, levels, 1, "strict");
        __kmpc_fork_call(&loc, 0, m);
        report("list_strict");
    } else {
        printf("list_strict absent\n");
    }

    if (fork_if != NULL) {
        fork_if(&loc, 0, m, 1, NULL);
        report("if_true");
        __kmpc_push_num_threads(&loc, gtid, 2);
        fork_if(&loc, 0, m, 1, NULL);
        report("push_if_true");
        __kmpc_push_num_threads(&loc, gtid, 2);
        fork_if(&loc, 0, m, 0, NULL);
        report("push_if_false");
        __kmpc_fork_call(&loc, 0, m);
        report("fork_after_if_false");
        arg = 0;
        fork_if(&loc, 1, (kmpc_micro)micro_arg, 1, &arg);
        fork_if(&loc, 1, (kmpc_micro)micro_arg, 0, &arg);
        printf("if_args %d\n", arg == 2);
    } else {
        printf("fork_call_if absent\n");
    }
    return 0;
}
