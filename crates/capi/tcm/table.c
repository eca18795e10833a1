/*
 * table.c: the permits of every process of a cell, in one table. Part of
 * libtcm.so.1 (see tcm.c).
 *
 * `allot run` makes one memory file per run, sized TCM_TABLE_BYTES, and
 * hands it to the program as an inherited descriptor (ALLOT_TCM_FD); every
 * process of the run that loads the library maps it, so a TBB program and
 * an OpenMP program started by one script divide one cell's threads. A
 * process without the descriptor keeps a private table.
 *
 * Invariants
 *
 *  1. Every read or write of a slot, and every division, happens under
 *     `lock`: a process-shared, robust mutex. A process that dies holding
 *     it leaves it to the next taker, who marks it consistent: a division
 *     is recomputed whole from the slots, so a half-done one is harmless.
 *  2. A slot belongs to the process whose pid it holds. A slot whose
 *     process ended is freed by the next division, so a program that dies
 *     holding permits gives their threads back (the watcher in tcm.c
 *     divides again when it finds such a slot).
 *  3. `futex` changes exactly when some concurrency did; processes wait on
 *     it to learn that a permit of theirs changed.
 *  4. Initialization: the first process to find `ready` 0 moves it to 1,
 *     fills the header and the lock, and publishes 2; the others wait for
 *     2. The memory file starts zeroed, so every slot starts free.
 *  5. A team's `outer` names a live slot or is 0: freeing a slot clears
 *     every `outer` that named it (table_free). What an arena lends its
 *     nested teams (its rounds, `lingers`) is kept in its slot and only
 *     read by the division through `nest` (TCM.md, "What an arena lends
 *     its nested teams").
 */

#define _GNU_SOURCE
#include "table.h"
#include "divide.h"
#include "tcm_api.h"

#include <errno.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static void init_lock(struct table *t, int shared)
{
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    if (shared) {
        pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
        pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
    }
    pthread_mutex_init(&t->lock, &a);
    pthread_mutexattr_destroy(&a);
}

struct table *table_open(int fd, const char **why)
{
    if (fd < 0) {
        struct table *t = calloc(1, sizeof *t);
        if (t == NULL) {
            *why = "out of memory";
            return NULL;
        }
        t->magic = TCM_TABLE_MAGIC;
        init_lock(t, 0);
        t->ready = 2;
        return t;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < (off_t)TCM_TABLE_BYTES) {
        *why = "ALLOT_TCM_FD is not an open permit table";
        return NULL;
    }
    void *m = mmap(NULL, TCM_TABLE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        *why = "cannot map ALLOT_TCM_FD";
        return NULL;
    }
    struct table *t = m;
    uint32_t zero = 0;
    if (__atomic_compare_exchange_n(&t->ready, &zero, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE)) {
        t->magic = TCM_TABLE_MAGIC;
        init_lock(t, 1);
        __atomic_store_n(&t->ready, 2, __ATOMIC_RELEASE);
    } else {
        /* Another process is filling it in: a few stores away. */
        for (int i = 0; __atomic_load_n(&t->ready, __ATOMIC_ACQUIRE) != 2; i++) {
            if (i > 100000) {
                munmap(m, TCM_TABLE_BYTES);
                *why = "the permit table was never initialized";
                return NULL;
            }
            sched_yield();
        }
    }
    if (t->magic != TCM_TABLE_MAGIC) {
        munmap(m, TCM_TABLE_BYTES);
        *why = "ALLOT_TCM_FD is not a permit table";
        return NULL;
    }
    return t;
}

void table_lock(struct table *t)
{
    if (pthread_mutex_lock(&t->lock) == EOWNERDEAD)
        pthread_mutex_consistent(&t->lock);
}

void table_unlock(struct table *t)
{
    pthread_mutex_unlock(&t->lock);
}

static int holds_threads(const struct slot *s)
{
    return s->pid != 0 &&
           (s->state == TCM_PERMIT_STATE_ACTIVE || s->state == TCM_PERMIT_STATE_IDLE);
}

/* Whether slot `j` is a team nested in slot `i`, running now with threads
 * besides its primary. (Intel's OpenMP leaves a team of one thread active
 * after its region, so such a team may have ended long ago; it holds
 * nothing of the arena's either way.) */
static int runs_in(const struct table *t, int j, int i)
{
    const struct slot *s = &t->slots[j];
    return s->pid != 0 && s->outer == i + 1 && s->state == TCM_PERMIT_STATE_ACTIVE && s->conc > 1;
}

/* Whether slot `i` counts threads in the division: a permit that holds
 * them, or an arena oneTBB turned off when its work ran out (every item
 * taken) while its threads still run the items, and their teams: those
 * threads are still there. It keeps what it had while the teams its loop
 * is expected to start still come (`lingers`: oneTBB turns an arena off
 * as the last item is taken, often before that item's team starts), or
 * while a team of its runs with threads it lent. */
static int counts(const struct table *t, int i)
{
    const struct slot *s = &t->slots[i];
    if (holds_threads(s))
        return 1;
    if (s->pid == 0 || s->state != TCM_PERMIT_STATE_INACTIVE || s->conc == 0)
        return 0;
    if (s->lingers)
        return 1;
    for (int j = 0; j < TCM_SLOTS; j++)
        if (runs_in(t, j, i))
            return 1;
    return 0;
}

/* A team's claim, nested in its arena: while the arena counts, the team's
 * primary and the threads the arena lends it are the arena's (they cost
 * the team nothing and it gets them whatever the budget); otherwise the
 * team counts its primary itself. */
static void nest(const struct table *t, const struct slot *s, struct claim *c)
{
    int a = s->outer - 1;
    if (a < 0 || !counts(t, a)) {
        c->caller = 0;
        return;
    }
    const struct slot *o = &t->slots[a];
    uint32_t threads = o->conc + (o->caller > 0 ? (uint32_t)o->caller : 0);
    uint32_t lent;
    if (s->fixed) {
        lent = s->conc; /* running: what it has, up to what a round lends */
        uint32_t most = 1 + tcm_lent(threads, o->teams_seen, 0, 1);
        if (lent > most)
            lent = most;
    } else {
        uint32_t lent_out = 0, waiting = 0;
        for (int j = 0; j < TCM_SLOTS; j++) {
            const struct slot *m = &t->slots[j];
            if (m->pid == 0 || m->outer != a + 1 || m->state != TCM_PERMIT_STATE_ACTIVE)
                continue;
            if (!m->fixed)
                waiting++; /* being divided now (or never fixed: not rigid) */
            else if (m->conc > 1)
                lent_out += m->conc - 1;
        }
        lent = 1 + tcm_lent(threads, o->teams_seen, lent_out, waiting);
    }
    if (lent > s->max)
        lent = s->max;
    if (c->min < lent)
        c->min = lent;
    c->caller = -(int32_t)lent;
}

void table_free(struct table *t, int i)
{
    t->slots[i] = (struct slot){0};
    for (int j = 0; j < TCM_SLOTS; j++)
        if (t->slots[j].outer == i + 1)
            t->slots[j].outer = 0;
}

/* Ends slot `i`'s (an arena's) round: at a thread's second team
 * (table_team_started), not when oneTBB asks for the arena again (it may
 * do so in the middle of a loop, and a loop cut in two rounds would lend
 * twice what it leaves). The teams the round started become what it lends
 * by: more teams count at once, fewer a quarter of the way a round, so
 * that one odd round does not make it lend much more (lending too much
 * costs more than too little: a team holds its threads for its whole
 * region, and leaves the next ones none). */
static void new_round(struct table *t, int i)
{
    struct slot *s = &t->slots[i];
    uint16_t n = s->teams_started;
    if (n > 0)
        s->teams_seen = n >= s->teams_seen ? n : (uint16_t)(s->teams_seen - (s->teams_seen - n + 3) / 4);
    s->teams_started = 0;
    s->round = (uint16_t)(s->round == UINT16_MAX ? 1 : s->round + 1);
}

void table_team_started(struct table *t, int i, uint16_t *round)
{
    struct slot *s = &t->slots[i];
    if (s->outer <= 0)
        return;
    struct slot *a = &t->slots[s->outer - 1];
    if (a->round == 0)
        a->round = 1;
    /* This thread hosted a team in this round and hosts another: it
     * finished its item, so the round's teams have all started. */
    if (*round == a->round)
        new_round(t, s->outer - 1);
    *round = a->round;
    if (a->teams_started < UINT16_MAX)
        a->teams_started++;
    /* A start the arena lingers for (the last one it expects sees it
     * lingering still). */
    if (a->lingers > 0)
        a->lingers--;
}

void table_turned_off(struct table *t, int i)
{
    struct slot *s = &t->slots[i];
    s->lingers = 0;
    s->quiet_ticks = 0;
    if (s->rigid || s->teams_seen == 0 || s->conc == 0)
        return;
    uint16_t expected =
        s->teams_seen > s->teams_started ? (uint16_t)(s->teams_seen - s->teams_started) : 0;
    s->lingers = (uint16_t)(expected + 1);
}

void table_quiet(struct table *t)
{
    for (int i = 0; i < TCM_SLOTS; i++) {
        struct slot *s = &t->slots[i];
        if (s->lingers == 0)
            continue;
        if (s->teams_started > 0)
            s->quiet_ticks = 0;
        else if (++s->quiet_ticks >= 2)
            s->lingers = 0;
    }
}

int table_settle(struct table *t, uint32_t budget)
{
    int changed = 0;
    for (int i = 0; i < TCM_SLOTS; i++) {
        struct slot *s = &t->slots[i];
        if (s->pid != 0 && kill(s->pid, 0) != 0 && errno == ESRCH) {
            changed |= s->conc != 0;
            table_free(t, i);
        }
    }
    /* Claims in request order (insertion sort: a handful of permits). */
    struct claim c[TCM_SLOTS];
    int who[TCM_SLOTS];
    uint32_t out[TCM_SLOTS];
    size_t n = 0;
    for (int i = 0; i < TCM_SLOTS; i++) {
        if (!counts(t, i))
            continue;
        size_t k = n++;
        while (k > 0 && t->slots[who[k - 1]].order > t->slots[i].order) {
            who[k] = who[k - 1];
            k--;
        }
        who[k] = i;
    }
    for (size_t k = 0; k < n; k++) {
        const struct slot *s = &t->slots[who[k]];
        c[k] = (struct claim){
            .min = s->min,
            .max = s->max,
            .fixed = s->fixed || !holds_threads(s), /* an arena off, still counting */
            .held = s->conc,
            .caller = s->caller,
            .priority = s->priority,
        };
        if (s->caller < 0)
            nest(t, s, &c[k]);
    }
    tcm_divide(budget, c, n, out);
    for (size_t k = 0; k < n; k++) {
        struct slot *s = &t->slots[who[k]];
        changed |= s->conc != out[k];
        s->conc = out[k];
        if (s->rigid && s->state == TCM_PERMIT_STATE_ACTIVE)
            s->fixed = 1;
    }
    for (int i = 0; i < TCM_SLOTS; i++) {
        struct slot *s = &t->slots[i];
        if (s->pid != 0 && !counts(t, i) && s->conc != 0) {
            s->conc = 0;
            changed = 1;
        }
    }
    t->budget = budget;
    if (changed) {
        __atomic_add_fetch(&t->futex, 1, __ATOMIC_RELEASE);
        syscall(SYS_futex, &t->futex, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
    }
    return changed;
}
