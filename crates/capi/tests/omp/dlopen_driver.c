/*
 * dlopen_driver: loads a library build of teamsize.c with RTLD_LOCAL, the
 * way Python loads an extension module that carries its own OpenMP runtime,
 * and runs it. The runtime is then not in the global scope.
 *
 *     dlopen_driver LIBRARY MODE DURATION_MS PERIOD_US
 */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: dlopen_driver LIBRARY MODE DURATION_MS PERIOD_US\n");
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
    char *args[] = {"teamsize", argv[2], argv[3], argv[4], NULL};
    return run(4, args);
}
