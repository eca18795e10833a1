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
#define TCM_TABLE_MAGIC 0x3243544Cu /* "LTC2": slots with `outer` */

struct slot {
    int32_t pid;      /* owner; 0: free */
    uint32_t state;   /* TCM_PERMIT_STATE_* */
    uint32_t min, max;
    uint32_t conc;    /* the permit's concurrency now */
    uint16_t rigid;   /* rigid_concurrency was asked for */
    uint16_t fixed;   /* rigid and running with `conc`: not re-divided */
    int32_t caller;   /* threads beyond `conc` (struct claim's `caller`) */
    int32_t priority;
    uint32_t threads; /* threads registered with it (tcmRegisterThread) */
    int16_t outer;    /* 1 + the slot of the permit that counts this one's
                       * requester (a team nested in a TBB arena); 0: none */
    /* An arena's rounds of work (table_team_started): */
    uint16_t round;         /* the round now, counted */
    uint16_t teams_started; /* its teams that started in this round */
    uint16_t teams_seen;    /* teams of its last rounds: how many of its
                             * threads host teams at once */
    uint16_t lingers;       /* an arena turned off while its loop's items
                             * still start teams: how many more team starts
                             * it keeps what it had for (0: none) */
    uint16_t quiet_ticks;   /* quiet spells since its round started no team */
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
/* Under the lock: frees slot `i`, and forgets it as any team's outer. */
void table_free(struct table *t, int i);
/* Under the lock: slot `i`, a team nested in slot `outer - 1` (or in none
 * for 0), was asked for or activated by a thread that last started a
 * team in its arena's round `*round` (0: never; updated here): counted
 * among its arena's teams of this round. An arena's *round* is a wave of
 * teams started by distinct threads: it ends when a thread that hosted
 * one of its teams hosts another (it finished its item), and how many
 * teams it held is what the arena lends by (tcm_lent in divide.h). */
void table_team_started(struct table *t, int i, uint16_t *round);
/* Under the lock: slot `i` was turned off (deactivated). An arena whose
 * rounds host teams lingers (see `lingers`) for the starts its round still
 * expects (the round's teams so far against its last rounds'), and one
 * more. */
void table_turned_off(struct table *t, int i);
/* Under the lock: nothing changed for a while. An arena that lingers and
 * whose round started no team through two such spells lingers no more
 * (its teams are not coming: a loop without them, or no loop at all). */
void table_quiet(struct table *t);

#endif
