/* late_host PLUGIN: a program that does not link liballot and loads a
 * plugin that does (tests/c/late_plugin.c) with dlopen, then runs its
 * require block. Prints `ok late` when the plugin's check passed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: late_host PLUGIN\n");
        return 2;
    }
    if (dlsym(RTLD_DEFAULT, "allot_require_enter") != NULL) {
        fprintf(stderr, "liballot is loaded before the plugin: not a late load\n");
        return 1;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    int (*block)(void) = h ? (int (*)(void))dlsym(h, "late_block") : NULL;
    if (block == NULL) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], dlerror());
        return 1;
    }
    int rc = block();
    if (rc == 0)
        printf("ok late\n");
    return rc;
}
