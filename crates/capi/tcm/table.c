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

int table_settle(struct table *t, uint32_t budget)
{
    int changed = 0;
    for (int i = 0; i < TCM_SLOTS; i++) {
        struct slot *s = &t->slots[i];
        if (s->pid != 0 && kill(s->pid, 0) != 0 && errno == ESRCH) {
            changed |= s->conc != 0;
            *s = (struct slot){0};
        }
    }
    /* Claims in request order (insertion sort: a handful of permits). */
    struct claim c[TCM_SLOTS];
    int who[TCM_SLOTS];
    uint32_t out[TCM_SLOTS];
    size_t n = 0;
    for (int i = 0; i < TCM_SLOTS; i++) {
        if (!holds_threads(&t->slots[i]))
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
            .fixed = s->fixed,
            .held = s->conc,
            .caller = s->caller,
            .priority = s->priority,
        };
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
        if (s->pid != 0 && !holds_threads(s) && s->conc != 0) {
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
