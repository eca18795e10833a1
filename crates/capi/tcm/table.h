/* table.h: the permits of a cell, shared by its processes (table.c). Part
 * of libtcm.so.1. Includes nothing of the library's but divide.h. */
#ifndef ALLOT_TCM_TABLE_H
#define ALLOT_TCM_TABLE_H

#include <pthread.h>
#include <stdint.h>

#include "divide.h"

/* Permits a table holds, over all processes of the cell. */
#define TCM_SLOTS TCM_DIVIDE_MAX
/* Bytes `allot run` gives the table's memory file (ALLOT_TCM_FD). */
#define TCM_TABLE_BYTES 16384u
#define TCM_TABLE_MAGIC 0x4D43544Cu /* "LTCM" */

struct slot {
    int32_t pid;      /* owner; 0: free */
    uint32_t state;   /* TCM_PERMIT_STATE_* */
    uint32_t min, max;
    uint32_t conc;    /* the permit's concurrency now */
    uint32_t rigid;   /* rigid_concurrency was asked for */
    uint32_t fixed;   /* rigid and running with `conc`: not re-divided */
    int32_t caller;   /* threads beyond `conc` (struct claim's `caller`) */
    int32_t priority;
    uint32_t threads; /* threads registered with it (tcmRegisterThread) */
    uint64_t order;   /* request order, for the division's turns */
};

struct table {
    uint32_t magic;
    uint32_t ready;  /* 0 new, 1 being initialized, 2 ready */
    uint32_t futex;  /* bumped after every change of a concurrency */
    uint32_t budget; /* the budget of the last division */
    pthread_mutex_t lock; /* process-shared and robust */
    uint64_t next_order;
    struct slot slots[TCM_SLOTS];
};

_Static_assert(sizeof(struct table) <= TCM_TABLE_BYTES, "the table fits its file");

/* The table in the memory file `fd` (shared by the cell's processes), or
 * a private one for fd < 0; NULL and why not. */
struct table *table_open(int fd, const char **why);
/* Takes the lock; a holder that died is forgiven (its permits go at the
 * next division, with the rest of its process's). */
void table_lock(struct table *t);
void table_unlock(struct table *t);
/* Under the lock: frees the slots of processes that ended, divides
 * `budget` among the rest and, if any concurrency changed, bumps `futex`
 * and wakes its waiters. Returns whether anything changed. */
int table_settle(struct table *t, uint32_t budget);

#endif
