/* What the C tests of libtcm.so.1 share (tcm_api.c, tcm_nested.c): the
 * library's entry points, looked up by name in the library a test is given
 * (as the runtimes find them), a failing check's report, and a permit
 * request. */
#ifndef ALLOT_TCM_CALLS_H
#define ALLOT_TCM_CALLS_H

#include "../../tcm/tcm_api.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exits 1 with the line and the message unless `cond` holds. */
#define CHECK(cond, ...)                                                                         \
    do {                                                                                         \
        if (!(cond)) {                                                                           \
            printf("FAIL line %d: ", __LINE__);                                                  \
            printf(__VA_ARGS__);                                                                 \
            printf("\n");                                                                        \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static tcm_result_t (*connect_)(tcm_callback_t, tcm_client_id_t *);
static tcm_result_t (*disconnect_)(tcm_client_id_t);
static tcm_result_t (*request_)(tcm_client_id_t, tcm_permit_request_t, void *,
                                tcm_permit_handle_t *, tcm_permit_t *);
static tcm_result_t (*get_)(tcm_permit_handle_t, tcm_permit_t *);
static tcm_result_t (*release_)(tcm_permit_handle_t);
static tcm_result_t (*idle_)(tcm_permit_handle_t);
static tcm_result_t (*deactivate_)(tcm_permit_handle_t);
static tcm_result_t (*activate_)(tcm_permit_handle_t);
static tcm_result_t (*register_)(tcm_permit_handle_t);
static tcm_result_t (*version_)(char *, uint32_t);

/* Opens the library at `path` and finds every entry point; returns it. */
static inline void *tcm_look(const char *path)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib != NULL, "dlopen: %s", dlerror());
#define LOOK(var, name) CHECK((*(void **)&var = dlsym(lib, name)) != NULL, "no %s", name)
    LOOK(connect_, "tcmConnect");
    LOOK(disconnect_, "tcmDisconnect");
    LOOK(request_, "tcmRequestPermit");
    LOOK(get_, "tcmGetPermitData");
    LOOK(release_, "tcmReleasePermit");
    LOOK(idle_, "tcmIdlePermit");
    LOOK(deactivate_, "tcmDeactivatePermit");
    LOOK(activate_, "tcmActivatePermit");
    LOOK(register_, "tcmRegisterThread");
    LOOK(version_, "tcmGetVersionInfo");
#undef LOOK
    return lib;
}

/* A request for `min`..`max` threads at priority 0, rigid or not. */
static inline tcm_permit_request_t ask(int32_t min, int32_t max, int rigid)
{
    tcm_permit_request_t r;
    memset(&r, 0, sizeof r);
    r.min_sw_threads = min;
    r.max_sw_threads = max;
    r.priority = 0;
    r.flags.rigid_concurrency = rigid ? 1 : 0;
    return r;
}

/* Permit `h`'s concurrency, read as a runtime reads it. */
static inline uint32_t read_permit(tcm_permit_handle_t h)
{
    uint32_t c = 99;
    tcm_permit_t p = {&c, NULL, 1, 0, {0}};
    CHECK(get_(h, &p) == TCM_RESULT_SUCCESS, "tcmGetPermitData");
    return c;
}

#endif
