/*
 * tcm.c: libtcm.so.1, allot's Thread Composability Manager. oneTBB (2021.11
 * on) and Intel's OpenMP runtime load a library of this name when
 * TCM_ENABLE=1 and ask it for *permits*: how many threads each arena or
 * team may run. Intel's own manager divides one process's CPUs; this one
 * divides the cell's grant, across every process of the cell, and tells
 * each runtime when the broker changes it. The design note is
 * crates/capi/TCM.md; the interface is tcm_api.h.
 *
 * Parts: divide.c (the division, pure), table.c (the cell's permits,
 * shared memory), page.c (the grant page, shared with the shim), and this
 * file: the entry points, and two watcher threads.
 *
 * Invariants
 *
 *  1. Off unless asked: tcmConnect fails unless TCM_ENABLE is a nonzero
 *     number, and the runtimes then keep their own thread management.
 *  2. Never blocks a runtime on the broker: the budget is read from the
 *     grant page (ALLOT_GRANT_FD, as the shim reads it), or without one is
 *     the number of CPUs the process may use, fixed. Every entry point
 *     takes the table's lock for a few hundred instructions, nothing more.
 *  3. A runtime hears of a change of its permit through its callback,
 *     called by this process's notifier thread, never with the table's
 *     lock held (the callback reads the permit back). Rigid permits
 *     (OpenMP's) get no callback: their runtime reads the permit when it
 *     activates it, at each region's start.
 *  4. A callback never runs for a permit being released: release waits
 *     for a callback in flight (unless it is called from that callback).
 *  5. Loaded for good, and fork-safe. The library is linked `-z nodelete`
 *     (its threads run its code until the process ends). A child of fork
 *     starts with fresh locks, no permits or clients (its parent's stay
 *     the parent's, in the table under the parent's pid) and no watcher
 *     threads; its runtimes' old handles are refused, and a new connect
 *     starts the watchers again.
 *  6. Abandoned permits do not pile up. Intel's OpenMP runtime drops a
 *     permit that gave its team a single thread (the region runs
 *     serialized) without releasing it, and asks for a new one at the next
 *     region. A thread is the primary of one such team at a time, so a new
 *     rigid request from the thread that holds a rigid permit of one
 *     thread, untouched since it was granted, releases that one.
 */

#define _GNU_SOURCE
#include "../shim/page.h"
#include "divide.h"
#include "table.h"
#include "tcm_api.h"

#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/* How often the notifier looks for processes that ended holding permits. */
#define REAP_MS 200

/* A permit, as this process holds it; the handle the runtime gets. */
struct tcm_permit_rep_t {
    int slot;
    tcm_client_id_t client;
    void *arg;
    uint32_t told; /* the concurrency the runtime last read or was told */
    int released;
    pid_t tid;    /* the thread that asked for it */
    int touched;  /* idled, activated or deactivated since it was granted */
    struct tcm_permit_rep_t *next;
};

struct client {
    tcm_client_id_t id;
    tcm_callback_t callback;
    struct client *next;
};

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static struct table *g_table;
static int g_private; /* the table is this process's own (no ALLOT_TCM_FD) */
static const char *g_why; /* why the library is off, or NULL */
static uint32_t g_fixed_budget; /* budget without a grant page */

/* This process's clients and permits, under g_local. */
static pthread_mutex_t g_local = PTHREAD_MUTEX_INITIALIZER;
static struct client *g_clients;
static struct tcm_permit_rep_t *g_permits;
static tcm_client_id_t g_next_client = 1;

/* Held while callbacks run (recursive: a callback may release). */
static pthread_mutex_t g_calling = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;

static __thread struct tcm_permit_rep_t *t_registered;
/* The permit that counts this thread: the one it was registered with, or
 * the one whose request made it a worker's peer (a TBB arena's caller, an
 * OpenMP team's primary). A permit asked for by a thread another permit
 * counts is nested in that one (see `caller` in divide.h). */
static __thread struct tcm_permit_rep_t *t_counted;
/* The round of its arena in which this thread last started a nested team
 * (table_team_started), and that arena's slot (+1; 0: none). */
static __thread uint16_t t_round;
static __thread int t_round_arena;

static int enabled(void)
{
    const char *v = getenv("TCM_ENABLE");
    return v != NULL && atoi(v) != 0;
}

static uint32_t budget(void)
{
    if (g_page != NULL)
        return grant_threads();
    return g_fixed_budget;
}

static void start(void)
{
    say_prefix = "allot-tcm";
    const char *dbg = getenv(ALLOT_ENV_SHIM_DEBUG);
    g_debug = dbg != NULL && dbg[0] == '1' && dbg[1] == '\0';
    const char *why = NULL;
    const struct grant_page *p = map_page(getenv(ALLOT_ENV_GRANT_FD), &why);
    __atomic_store_n(&g_page, p, __ATOMIC_RELEASE);
    if (p == NULL) {
        cpu_set_t set;
        CPU_ZERO(&set);
        g_fixed_budget = sched_getaffinity(0, sizeof set, &set) == 0 ? (uint32_t)CPU_COUNT(&set) : 1;
        if (g_fixed_budget == 0)
            g_fixed_budget = 1;
    }
    int fd = -1;
    const char *v = getenv(ALLOT_ENV_TCM_FD);
    if (v != NULL && v[0] != '\0') {
        char *end = NULL;
        long n = strtol(v, &end, 10);
        fd = (end != v && *end == '\0' && n >= 0 && n < 1 << 20) ? (int)n : -1;
    }
    const char *twhy = NULL;
    g_table = table_open(fd, &twhy);
    g_private = fd < 0;
    if (g_table == NULL && fd >= 0) {
        if (g_debug)
            say("%s; permits are divided in this process only", twhy);
        g_table = table_open(-1, &twhy);
        g_private = 1;
    }
    if (g_table == NULL)
        g_why = twhy;
    if (g_debug)
        say("%s: %s, budget %u threads, %s table", g_table ? "ready" : "off",
            p ? "following the cell's grant" : why, budget(), fd >= 0 ? "the run's" : "a private");
}

static int ready(void)
{
    pthread_once(&g_once, start);
    return g_table != NULL;
}

/* Under the table's lock: divides again with the grant's budget now. */
static void settle(void)
{
    table_settle(g_table, budget());
}

static void fill(const struct slot *s, tcm_permit_t *permit)
{
    if (permit == NULL)
        return;
    if (permit->concurrencies != NULL && permit->size > 0) {
        permit->concurrencies[0] = s->conc;
        for (uint32_t i = 1; i < permit->size; i++)
            permit->concurrencies[i] = 0;
    }
    permit->state = (tcm_permit_state_t)s->state;
    memset(&permit->flags, 0, sizeof permit->flags);
    permit->flags.rigid_concurrency = s->rigid != 0;
}

static int futex_wait(uint32_t *word, uint32_t seen, long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    return (int)syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, NULL, 0);
}

/* Calls the callback of every permit of this process whose concurrency
 * changed since its runtime last heard of it (invariant 3). */
static void notify(void)
{
    pthread_mutex_lock(&g_calling);
    for (;;) {
        struct tcm_permit_rep_t *due = NULL;
        tcm_callback_t cb = NULL;
        pthread_mutex_lock(&g_local);
        table_lock(g_table);
        for (struct tcm_permit_rep_t *r = g_permits; r != NULL && due == NULL; r = r->next) {
            const struct slot *s = &g_table->slots[r->slot];
            if (r->released || s->rigid || s->conc == r->told)
                continue;
            if (s->state == TCM_PERMIT_STATE_INACTIVE) {
                r->told = s->conc; /* its runtime turned it off itself */
                continue;
            }
            r->told = s->conc;
            for (struct client *c = g_clients; c != NULL; c = c->next)
                if (c->id == r->client)
                    cb = c->callback;
            if (cb != NULL)
                due = r;
        }
        table_unlock(g_table);
        pthread_mutex_unlock(&g_local);
        if (due == NULL)
            break;
        tcm_callback_flags_t flags = {0};
        flags.new_concurrency = 1;
        if (g_debug)
            say("permit %p: concurrency %u", (void *)due, due->told);
        cb(due, due->arg, flags);
    }
    pthread_mutex_unlock(&g_calling);
}

/* The notifier: wakes when the table changes (or every REAP_MS to free
 * the permits of processes that ended) and tells this process's runtimes. */
static void *notifier(void *unused)
{
    (void)unused;
    for (;;) {
        uint32_t seen = __atomic_load_n(&g_table->futex, __ATOMIC_ACQUIRE);
        notify();
        if (futex_wait(&g_table->futex, seen, REAP_MS) != 0 && errno == ETIMEDOUT) {
            table_lock(g_table);
            table_quiet(g_table);
            settle();
            table_unlock(g_table);
        }
    }
    return NULL;
}

/* The grant watcher: divides again whenever the broker publishes. */
static void *grant_watcher(void *unused)
{
    (void)unused;
    const struct grant_page *p = g_page;
    uint32_t *word = (uint32_t *)&p->futex;
    for (;;) {
        uint32_t seen = __atomic_load_n(word, __ATOMIC_ACQUIRE);
        uint32_t now = budget();
        table_lock(g_table);
        if (now != g_table->budget)
            settle();
        table_unlock(g_table);
        futex_wait(word, seen, 1000);
    }
    return NULL;
}

static pthread_once_t g_watchers = PTHREAD_ONCE_INIT;

/* Invariant 5: the child of a fork. Its records name the parent's permits
 * and may have been caught mid-change by the fork; drop them (leaked, not
 * freed: another thread of the parent may have been using them). */
static void in_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_t fresh_rec = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    pthread_once_t once = PTHREAD_ONCE_INIT;
    memcpy(&g_local, &fresh, sizeof fresh);
    memcpy(&g_calling, &fresh_rec, sizeof fresh_rec);
    memcpy(&g_watchers, &once, sizeof once);
    g_permits = NULL;
    g_clients = NULL;
    t_registered = NULL;
    t_counted = NULL;
    t_round = 0;
    t_round_arena = 0;
    /* A private table's lock may have been held by another thread; a
     * shared one's holder lives on in the parent and lets it go. Its
     * slots are the parent's: free them for the child. */
    if (g_private && g_table != NULL) {
        pthread_mutex_t fresh_table = PTHREAD_MUTEX_INITIALIZER;
        memcpy(&g_table->lock, &fresh_table, sizeof fresh_table);
        memset(g_table->slots, 0, sizeof g_table->slots);
    }
}

static void start_watchers(void)
{
    pthread_atfork(NULL, NULL, in_child);
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 64 * 1024);
    pthread_t t;
    if (pthread_create(&t, &a, notifier, NULL) != 0 && g_debug)
        say("cannot start the notifier thread: runtimes hear of changes when they ask");
    if (g_page != NULL && pthread_create(&t, &a, grant_watcher, NULL) != 0 && g_debug)
        say("cannot start the grant watcher: the budget is read when permits change");
    pthread_attr_destroy(&a);
}

static struct tcm_permit_rep_t *find_permit(tcm_permit_handle_t h)
{
    for (struct tcm_permit_rep_t *r = g_permits; r != NULL; r = r->next)
        if (r == h && !r->released)
            return r;
    return NULL;
}

static int client_known(tcm_client_id_t id)
{
    for (struct client *c = g_clients; c != NULL; c = c->next)
        if (c->id == id)
            return 1;
    return 0;
}

/* Counts slot `i`, asked for or activated by this thread, among its
 * arena's teams of the round (with the table's lock held). */
static void team_started(int i)
{
    int arena = g_table->slots[i].outer;
    if (arena <= 0)
        return;
    if (t_round_arena != arena) {
        t_round_arena = arena;
        t_round = 0;
    }
    table_team_started(g_table, i, &t_round);
}

/* ------------------------------------------------------------------------ */
/* Entry points                                                             */
/* ------------------------------------------------------------------------ */

EXPORT tcm_result_t tcmConnect(tcm_callback_t callback, tcm_client_id_t *client_id)
{
    if (client_id == NULL)
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    if (!enabled() || !ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    struct client *c = calloc(1, sizeof *c);
    if (c == NULL)
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_once(&g_watchers, start_watchers);
    pthread_mutex_lock(&g_local);
    c->id = g_next_client++;
    c->callback = callback;
    c->next = g_clients;
    g_clients = c;
    *client_id = c->id;
    pthread_mutex_unlock(&g_local);
    return TCM_RESULT_SUCCESS;
}

/* Frees permit `r` (with g_local held). */
static void drop_permit(struct tcm_permit_rep_t *r)
{
    table_lock(g_table);
    table_free(g_table, r->slot);
    settle();
    table_unlock(g_table);
    r->released = 1;
}

/* Frees the records of released permits (with g_local and g_calling held:
 * no callback is using one). A handle a runtime kept is then unknown
 * here: using it is refused, and nothing dereferences it. */
static void reap_released(void)
{
    struct tcm_permit_rep_t **pr = &g_permits;
    while (*pr != NULL) {
        struct tcm_permit_rep_t *r = *pr;
        if (r->released) {
            *pr = r->next;
            free(r);
        } else {
            pr = &r->next;
        }
    }
}

EXPORT tcm_result_t tcmDisconnect(tcm_client_id_t client_id)
{
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_calling);
    pthread_mutex_lock(&g_local);
    struct client **pc = &g_clients;
    while (*pc != NULL && (*pc)->id != client_id)
        pc = &(*pc)->next;
    if (*pc == NULL) {
        pthread_mutex_unlock(&g_local);
        pthread_mutex_unlock(&g_calling);
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    }
    struct client *gone = *pc;
    *pc = gone->next;
    free(gone);
    /* Permits the client left behind go with it. */
    for (struct tcm_permit_rep_t *r = g_permits; r != NULL; r = r->next)
        if (!r->released && r->client == client_id)
            drop_permit(r);
    reap_released();
    pthread_mutex_unlock(&g_local);
    pthread_mutex_unlock(&g_calling);
    return TCM_RESULT_SUCCESS;
}

static uint32_t count(int32_t asked, uint32_t automatic)
{
    if (asked == TCM_AUTOMATIC || asked < 0)
        return automatic;
    return (uint32_t)asked;
}

EXPORT tcm_result_t tcmRequestPermit(tcm_client_id_t client_id, tcm_permit_request_t request,
                                     void *callback_arg, tcm_permit_handle_t *permit_handle,
                                     tcm_permit_t *permit)
{
    if (permit_handle == NULL)
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    /* Automatic counts: none at least, the whole budget at most. */
    uint32_t max = count(request.max_sw_threads, budget());
    uint32_t min = count(request.min_sw_threads, 0);
    if (min > max)
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_local);
    if (!client_known(client_id)) {
        pthread_mutex_unlock(&g_local);
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    }
    struct tcm_permit_rep_t *r = NULL;
    if (*permit_handle != NULL) {
        r = find_permit(*permit_handle);
        if (r == NULL || r->client != client_id) {
            pthread_mutex_unlock(&g_local);
            return TCM_RESULT_ERROR_INVALID_ARGUMENT;
        }
    }
    pid_t tid = (pid_t)syscall(SYS_gettid);
    if (r == NULL && request.flags.rigid_concurrency) {
        /* Invariant 6. */
        for (struct tcm_permit_rep_t *o = g_permits; o != NULL; o = o->next) {
            if (o->released || o->client != client_id || o->tid != tid || o->touched)
                continue;
            table_lock(g_table);
            const struct slot *os = &g_table->slots[o->slot];
            int abandoned = os->rigid && os->conc == 1 && os->state == TCM_PERMIT_STATE_ACTIVE;
            table_unlock(g_table);
            if (abandoned)
                drop_permit(o);
        }
        /* Their records go now unless a callback runs (then at the next
         * request, release or disconnect). */
        if (pthread_mutex_trylock(&g_calling) == 0) {
            reap_released();
            pthread_mutex_unlock(&g_calling);
        }
    }
    table_lock(g_table);
    if (r == NULL) {
        int free_slot = -1;
        for (int i = 0; i < TCM_SLOTS && free_slot < 0; i++)
            if (g_table->slots[i].pid == 0)
                free_slot = i;
        r = free_slot < 0 ? NULL : calloc(1, sizeof *r);
        if (r == NULL) {
            table_unlock(g_table);
            pthread_mutex_unlock(&g_local);
            if (g_debug)
                say("no permit left (%d in the cell's table)", TCM_SLOTS);
            return TCM_RESULT_ERROR_UNKNOWN;
        }
        r->slot = free_slot;
        r->client = client_id;
        r->tid = tid;
        r->next = g_permits;
        g_permits = r;
        g_table->slots[free_slot].order = ++g_table->next_order;
    }
    r->arg = callback_arg;
    r->touched = 0;
    struct slot *s = &g_table->slots[r->slot];
    s->pid = getpid();
    s->state = TCM_PERMIT_STATE_ACTIVE;
    s->min = min;
    s->max = max;
    s->rigid = request.flags.rigid_concurrency;
    s->fixed = 0;
    /* A TBB arena asks for workers (minimum 0); the thread that entered
     * it works too, unless another permit counts it already. One that
     * asks for none costs nothing: its thread is counted where it works.
     * A team (minimum 1 and more) counts its primary, unless another
     * permit does. */
    struct tcm_permit_rep_t *outer = t_counted;
    if (outer == r || find_permit(outer) == NULL) /* compares, never reads */
        outer = NULL;
    /* The permit that counts this thread may be a team it led before,
     * nested in an arena (the thread registered with it): the arena is
     * the outer one. */
    int outer_slot = outer != NULL ? outer->slot : -1;
    for (int k = 0; k < 4 && outer_slot >= 0 && g_table->slots[outer_slot].outer > 0; k++)
        outer_slot = g_table->slots[outer_slot].outer - 1;
    if (outer_slot == r->slot)
        outer = NULL, outer_slot = -1;
    if (min == 0)
        s->caller = max > 0 && outer == NULL ? 1 : 0;
    else
        s->caller = outer != NULL ? -1 : 0;
    s->outer = min > 0 && outer != NULL ? outer_slot + 1 : 0;
    if (outer == NULL && max > 0)
        t_counted = r;
    s->priority = request.priority;
    team_started(r->slot);
    settle();
    fill(s, permit);
    r->told = s->conc;
    if (g_debug)
        say("permit %p: asked %u..%u%s%s, got %u of %u", (void *)r, min, max,
            s->rigid ? " (rigid)" : "",
            s->caller > 0 ? " with its caller" : s->caller < 0 ? " nested" : "", s->conc,
            g_table->budget);
    table_unlock(g_table);
    pthread_mutex_unlock(&g_local);
    *permit_handle = r;
    return TCM_RESULT_SUCCESS;
}

EXPORT tcm_result_t tcmGetPermitData(tcm_permit_handle_t permit_handle, tcm_permit_t *permit)
{
    if (permit == NULL || !ready())
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    pthread_mutex_lock(&g_local);
    struct tcm_permit_rep_t *r = find_permit(permit_handle);
    if (r == NULL) {
        pthread_mutex_unlock(&g_local);
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    }
    table_lock(g_table);
    const struct slot *s = &g_table->slots[r->slot];
    fill(s, permit);
    r->told = s->conc;
    table_unlock(g_table);
    pthread_mutex_unlock(&g_local);
    return TCM_RESULT_SUCCESS;
}

/* Moves a permit to `state` and divides again. */
static tcm_result_t set_state(tcm_permit_handle_t permit_handle, uint32_t state)
{
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_local);
    struct tcm_permit_rep_t *r = find_permit(permit_handle);
    if (r == NULL) {
        pthread_mutex_unlock(&g_local);
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    }
    r->touched = 1;
    table_lock(g_table);
    struct slot *s = &g_table->slots[r->slot];
    s->state = state;
    s->fixed = 0;
    if (state == TCM_PERMIT_STATE_ACTIVE) {
        team_started(r->slot);
    } else if (state == TCM_PERMIT_STATE_INACTIVE) {
        table_turned_off(g_table, r->slot);
    }
    settle();
    if (g_debug)
        say("permit %p: %s, got %u", (void *)r,
            state == TCM_PERMIT_STATE_ACTIVE ? "active"
            : state == TCM_PERMIT_STATE_IDLE ? "idle"
                                             : "inactive",
            s->conc);
    table_unlock(g_table);
    pthread_mutex_unlock(&g_local);
    return TCM_RESULT_SUCCESS;
}

EXPORT tcm_result_t tcmIdlePermit(tcm_permit_handle_t permit_handle)
{
    return set_state(permit_handle, TCM_PERMIT_STATE_IDLE);
}

EXPORT tcm_result_t tcmDeactivatePermit(tcm_permit_handle_t permit_handle)
{
    return set_state(permit_handle, TCM_PERMIT_STATE_INACTIVE);
}

EXPORT tcm_result_t tcmActivatePermit(tcm_permit_handle_t permit_handle)
{
    return set_state(permit_handle, TCM_PERMIT_STATE_ACTIVE);
}

EXPORT tcm_result_t tcmReleasePermit(tcm_permit_handle_t permit_handle)
{
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_calling); /* invariant 4 */
    pthread_mutex_lock(&g_local);
    struct tcm_permit_rep_t *r = find_permit(permit_handle);
    if (r != NULL)
        drop_permit(r);
    reap_released();
    pthread_mutex_unlock(&g_local);
    pthread_mutex_unlock(&g_calling);
    return r != NULL ? TCM_RESULT_SUCCESS : TCM_RESULT_ERROR_INVALID_ARGUMENT;
}

EXPORT tcm_result_t tcmRegisterThread(tcm_permit_handle_t permit_handle)
{
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_local);
    struct tcm_permit_rep_t *r = find_permit(permit_handle);
    if (r != NULL) {
        table_lock(g_table);
        struct tcm_permit_rep_t *before = find_permit(t_registered);
        if (before != NULL && g_table->slots[before->slot].threads > 0)
            g_table->slots[before->slot].threads--;
        g_table->slots[r->slot].threads++;
        if (g_debug)
            say("permit %p: thread registered, %u in it", (void *)r, g_table->slots[r->slot].threads);
        table_unlock(g_table);
        t_registered = r;
        t_counted = r;
    }
    pthread_mutex_unlock(&g_local);
    return r != NULL ? TCM_RESULT_SUCCESS : TCM_RESULT_ERROR_INVALID_ARGUMENT;
}

EXPORT tcm_result_t tcmUnregisterThread(void)
{
    if (!ready())
        return TCM_RESULT_ERROR_UNKNOWN;
    pthread_mutex_lock(&g_local);
    struct tcm_permit_rep_t *r = find_permit(t_registered);
    if (r != NULL) {
        table_lock(g_table);
        if (g_table->slots[r->slot].threads > 0)
            g_table->slots[r->slot].threads--;
        if (g_debug)
            say("permit %p: thread left, %u in it", (void *)r, g_table->slots[r->slot].threads);
        table_unlock(g_table);
    }
    if (t_counted == t_registered)
        t_counted = NULL;
    t_registered = NULL;
    pthread_mutex_unlock(&g_local);
    return TCM_RESULT_SUCCESS;
}

EXPORT tcm_result_t tcmGetVersionInfo(char *buffer, uint32_t buffer_size)
{
    if (buffer == NULL || buffer_size == 0)
        return TCM_RESULT_ERROR_INVALID_ARGUMENT;
    int on = ready();
    int n = snprintf(buffer, buffer_size,
                     "TCM: VERSION            allot %s\n"
                     "TCM: INTERFACE VERSION  1000\n"
                     "TCM: BUDGET             %s\n",
                     ALLOT_VERSION,
                     !on                  ? g_why
                     : g_page != NULL     ? "the cell's grant"
                                          : "the process's CPUs (no cell)");
    return n < 0 ? TCM_RESULT_ERROR_UNKNOWN : TCM_RESULT_SUCCESS;
}
