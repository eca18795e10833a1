/*
 * dlopen_driver: loads a library build (-DAS_LIBRARY) of a test program
 * with RTLD_LOCAL, the way Python loads an extension module that carries
 * its own OpenMP runtime, and runs its teamsize_main(). The runtime is then
 * not in the global scope.
 *
 *     dlopen_driver LIBRARY [ARGS...]
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: dlopen_driver LIBRARY [ARGS...]\n");
        return 2;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        fprintf(stderr, "dlopen_driver: %s\n", dlerror());
        return 2;
    }
    int (*run)(int, char **) = (int (*)(int, char **))dlsym(lib, "teamsize_main");
    if (run == NULL) {
        fprintf(stderr, "dlopen_driver: %s\n", dlerror());
        return 2;
    }
    /* The library sees ARGS as its command line, LIBRARY as its name. */
    return run(argc - 1, argv + 1);
}
