/*
 * anon: starts a parallel region whose outlined function lies in no loaded
 * object, as JIT-compiled code's does: a jump stub in anonymous executable
 * memory forwards to the real body. x86-64, gcc (GOMP_parallel). Built as a
 * library (-DAS_LIBRARY) for dlopen_driver, so that libgomp is loaded
 * RTLD_LOCAL and the shim cannot find it by the caller or RTLD_NEXT.
 *
 * Prints "team N" for the region.
 */
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

void GOMP_parallel(void (*)(void *), void *, unsigned, unsigned);

static void body(void *arg)
{
    if (omp_get_thread_num() == 0)
        *(int *)arg = omp_get_num_threads();
}

__attribute__((visibility("default"))) int teamsize_main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    /* jmp *0(%rip); .quad body */
    unsigned char stub[14] = {0xff, 0x25, 0, 0, 0, 0};
    uintptr_t target = (uintptr_t)body;
    memcpy(stub + 6, &target, sizeof target);
    void *mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED)
        return 2;
    memcpy(mem, stub, sizeof stub);
    if (mprotect(mem, 4096, PROT_READ | PROT_EXEC) != 0)
        return 2;
    int team = 0;
    GOMP_parallel((void (*)(void *))mem, &team, 0, 0);
    printf("team %d\n", team);
    return 0;
}
