/* The TCM entry points of allot's libtcm.so.1, called as a runtime calls
 * them (tests/tcm.rs runs it with a grant page of 6 threads it controls).
 * Exits non-zero at the first failed check, saying which.
 *
 * Protocol with the test: prints "publish N" when it wants the grant
 * changed to N threads, then waits for a line on stdin. */
#include "tcm_calls.h"

#include <pthread.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Concurrency each permit's callback last read, by callback argument. */
static volatile uint32_t told[2];

static tcm_result_t callback(tcm_permit_handle_t h, void *arg, tcm_callback_flags_t flags)
{
    CHECK(flags.new_concurrency, "a callback says what changed");
    told[(long)arg] = read_permit(h); /* as oneTBB does: reads it back */
    return TCM_RESULT_SUCCESS;
}

/* Waits up to 5 s for callback `which` to have read `want`. */
static void wait_told(int which, uint32_t want, const char *what)
{
    for (int i = 0; i < 5000 && told[which] != want; i++)
        usleep(1000);
    CHECK(told[which] == want, "%s: callback %d read %u, expected %u", what, which, told[which],
          want);
}

/* A request made by a thread of its own: a thread no permit counts yet, as
 * a second runtime's would be (one made by a thread that another permit
 * counts is nested in that permit). */
struct elsewhere {
    tcm_client_id_t id;
    tcm_permit_request_t req;
    void *arg;
    tcm_permit_handle_t *h;
    tcm_permit_t *p;
    tcm_result_t res;
};

static void *request_there(void *v)
{
    struct elsewhere *e = v;
    e->res = request_(e->id, e->req, e->arg, e->h, e->p);
    return NULL;
}

static tcm_result_t request_elsewhere(tcm_client_id_t id, tcm_permit_request_t req, void *arg,
                                      tcm_permit_handle_t *h, tcm_permit_t *p)
{
    struct elsewhere e = {id, req, arg, h, p, TCM_RESULT_ERROR_UNKNOWN};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, request_there, &e) == 0, "pthread_create");
    pthread_join(t, NULL);
    return e.res;
}

int main(int argc, char **argv)
{
    CHECK(argc == 2, "usage: tcm_api LIBTCM");
    void *lib = tcm_look(argv[1]);

    /* Off unless TCM_ENABLE says on. */
    tcm_client_id_t id = 0;
    unsetenv("TCM_ENABLE");
    CHECK(connect_(callback, &id) != TCM_RESULT_SUCCESS, "connected without TCM_ENABLE");
    setenv("TCM_ENABLE", "1", 1);
    CHECK(connect_(callback, &id) == TCM_RESULT_SUCCESS, "tcmConnect");
    char info[256];
    CHECK(version_(info, sizeof info) == TCM_RESULT_SUCCESS && strstr(info, "allot") &&
              strstr(info, "the cell's grant"),
          "version info: %s", info);

    /* Bad input is refused and changes nothing. */
    tcm_permit_handle_t bad = NULL;
    CHECK(request_(id, ask(3, 2, 0), NULL, &bad, NULL) == TCM_RESULT_ERROR_INVALID_ARGUMENT &&
              bad == NULL,
          "a minimum above the maximum");
    CHECK(request_(id + 100, ask(0, 2, 0), NULL, &bad, NULL) ==
              TCM_RESULT_ERROR_INVALID_ARGUMENT,
          "an unknown client");
    CHECK(request_(id, ask(0, 2, 0), NULL, NULL, NULL) == TCM_RESULT_ERROR_INVALID_ARGUMENT,
          "no handle to fill");

    /* A: TBB-like (workers 0..8; its caller works too). Alone on 6: 5. */
    tcm_permit_handle_t a = NULL;
    uint32_t ca = 0;
    tcm_permit_t pa = {&ca, NULL, 1, 0, {0}};
    CHECK(request_(id, ask(0, 8, 0), (void *)0, &a, &pa) == TCM_RESULT_SUCCESS && a != NULL,
          "request A");
    CHECK(ca == 5 && pa.state == 4, "A alone: %u (state %u), expected 5 active", ca, pa.state);
    told[0] = ca;

    /* B: 1..8 beside it: minimums (A's caller, B's 1), then in turn. A's
     * runtime hears of its loss through its callback. */
    tcm_permit_handle_t b = NULL;
    uint32_t cb = 0;
    tcm_permit_t pb = {&cb, NULL, 1, 0, {0}};
    CHECK(request_elsewhere(id, ask(1, 8, 0), (void *)1, &b, &pb) == TCM_RESULT_SUCCESS,
          "request B");
    CHECK(cb == 3, "B beside A: %u, expected 3", cb);
    wait_told(0, 2, "A shrinks for B");

    /* The broker shrinks the grant to 3: minimums (2), then one for A. */
    printf("publish 3\n");
    fflush(stdout);
    char line[16];
    CHECK(fgets(line, sizeof line, stdin) != NULL, "the test answers");
    wait_told(0, 1, "A after the grant shrank");
    wait_told(1, 1, "B after the grant shrank");

    /* Deactivated, B holds nothing; A takes what it left. */
    CHECK(deactivate_(b) == TCM_RESULT_SUCCESS, "deactivate B");
    CHECK(read_permit(b) == 0, "an inactive permit holds nothing");
    wait_told(0, 2, "A after B was deactivated");
    CHECK(activate_(b) == TCM_RESULT_SUCCESS && read_permit(b) == 1, "B active again");
    wait_told(0, 1, "A after B came back");

    /* Released, B is gone: its handle is refused, A grows. */
    CHECK(release_(b) == TCM_RESULT_SUCCESS, "release B");
    CHECK(release_(b) == TCM_RESULT_ERROR_INVALID_ARGUMENT, "a second release");
    uint32_t x = 0;
    tcm_permit_t px = {&x, NULL, 1, 0, {0}};
    CHECK(get_(b, &px) == TCM_RESULT_ERROR_INVALID_ARGUMENT, "data of a released permit");
    wait_told(0, 2, "A after B was released");

    /* A rigid permit keeps its size while active, whatever the grant. */
    tcm_permit_handle_t r = NULL;
    uint32_t cr = 0;
    tcm_permit_t pr = {&cr, NULL, 1, 0, {0}};
    CHECK(request_elsewhere(id, ask(1, 4, 1), (void *)1, &r, &pr) == TCM_RESULT_SUCCESS,
          "request rigid");
    CHECK(pr.flags.rigid_concurrency && cr == 1, "rigid: %u", cr);
    wait_told(0, 1, "A beside the rigid permit");
    printf("publish 6\n");
    fflush(stdout);
    CHECK(fgets(line, sizeof line, stdin) != NULL, "the test answers");
    /* R runs with 1; A grows to its share of 6 (2, its caller the third),
     * not into R's: that is R's when it next starts. */
    wait_told(0, 2, "A after the grant grew");
    CHECK(read_permit(r) == 1, "a running rigid permit kept its size");
    /* Activated again (an OpenMP region's start), R is divided anew. */
    CHECK(activate_(r) == TCM_RESULT_SUCCESS, "activate rigid");
    CHECK(read_permit(r) == 3, "rigid at its next activation: %u, expected 3", read_permit(r));
    CHECK(read_permit(a) == 2, "A beside it keeps its share");

    /* A team asked for by A's thread is nested in A: its primary is A's
     * caller, counted once, and it takes what A leaves (A's threads are
     * the primaries of such teams; what A's loop leaves idle, A lends by
     * rounds: tcm_nested.c). On 6: A its 5 workers, the team its primary. */
    CHECK(release_(r) == TCM_RESULT_SUCCESS, "release rigid");
    tcm_permit_handle_t n = NULL;
    uint32_t cn = 0;
    tcm_permit_t pn = {&cn, NULL, 1, 0, {0}};
    CHECK(request_(id, ask(1, 4, 0), NULL, &n, &pn) == TCM_RESULT_SUCCESS, "request nested");
    CHECK(cn == 1 && read_permit(a) == 5, "nested: %u, A %u; expected 1 and 5", cn,
          read_permit(a));
    CHECK(release_(n) == TCM_RESULT_SUCCESS, "release nested");

    /* A child of fork starts afresh: the parent's handles are refused
     * there, a new connection works. */
    fflush(stdout);
    pid_t child = fork();
    CHECK(child >= 0, "fork");
    if (child == 0) {
        uint32_t c = 0;
        tcm_permit_t pc = {&c, NULL, 1, 0, {0}};
        if (get_(a, &pc) != TCM_RESULT_ERROR_INVALID_ARGUMENT)
            _exit(2);
        tcm_client_id_t cid = 0;
        tcm_permit_handle_t h = NULL;
        if (connect_(callback, &cid) != TCM_RESULT_SUCCESS ||
            request_(cid, ask(1, 2, 0), NULL, &h, &pc) != TCM_RESULT_SUCCESS || c < 1)
            _exit(3);
        _exit(0);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "the forked child: status %d", status);
    CHECK(read_permit(a) >= 1, "the parent's permit is untouched by the child");

    CHECK(disconnect_(id) == TCM_RESULT_SUCCESS, "disconnect");
    CHECK(get_(a, &px) == TCM_RESULT_ERROR_INVALID_ARGUMENT, "permits go with their client");
    CHECK(disconnect_(id) == TCM_RESULT_ERROR_INVALID_ARGUMENT, "a second disconnect");
    /* Never unloaded (its threads run its code): still there after
     * dlclose. */
    dlclose(lib);
    CHECK(dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD) != NULL, "the library stays loaded");
    printf("ok\n");
    return 0;
}
