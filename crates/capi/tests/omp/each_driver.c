/*
 * each_driver: loads each library with dlopen(RTLD_LOCAL), as Python loads
 * extension modules, and runs its teamsize_main() with ARGS, in turn.
 *
 *     each_driver LIBRARY... -- [ARGS...]
 */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int sep = 1;
    while (sep < argc && strcmp(argv[sep], "--") != 0)
        sep++;
    if (sep == 1 || sep == argc) {
        fprintf(stderr, "usage: each_driver LIBRARY... -- [ARGS...]\n");
        return 2;
    }
    for (int i = 1; i < sep; i++) {
        void *lib = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        if (lib == NULL) {
            fprintf(stderr, "each_driver: %s\n", dlerror());
            return 2;
        }
        int (*run)(int, char **) = (int (*)(int, char **))dlsym(lib, "teamsize_main");
        if (run == NULL) {
            fprintf(stderr, "each_driver: %s\n", dlerror());
            return 2;
        }
        /* The library sees "LIBRARY ARGS..." as its command line. */
        argv[sep] = argv[i];
        int rc = run(argc - sep, argv + sep);
        if (rc != 0)
            return rc;
    }
    return 0;
}
