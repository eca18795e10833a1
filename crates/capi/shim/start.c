/*
 * start.c: the shim's start-up. Part of liballot_shim.so (see shim.h).
 *
 * One constructor, the top of the shim: it maps the grant page (page.c),
 * then has each part look up what it needs while no thread of the program
 * exists and no loader lock is held: the require hooks (threads.c), the
 * bindings (bind.c) and, in a cell, the libraries that follow the grant
 * (follow.c). errno is left as it found it.
 */

#include "shim.h"

__attribute__((constructor)) static void shim_init(void)
{
    int saved = errno;
    const char *dbg = getenv(ALLOT_ENV_SHIM_DEBUG);
    g_debug = dbg != NULL && dbg[0] == '1' && dbg[1] == '\0';
    const char *why = NULL;
    const struct grant_page *p = map_page(getenv(ALLOT_ENV_GRANT_FD), &why);
    __atomic_store_n(&g_page, p, __ATOMIC_RELEASE);
    rq_init();
    bind_init();
    if (p != NULL)
        follow_init();
    if (g_debug) {
        if (p != NULL)
            say("active: cell %llu, grant %u threads",
                (unsigned long long)__atomic_load_n(&p->cell, __ATOMIC_RELAXED),
                grant_threads());
        else
            say("inert: %s", why);
        if (g_rq_on)
            say("require hooks: liballot found; threads follow require blocks");
    }
    errno = saved;
}
