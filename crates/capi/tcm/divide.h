/* divide.h: how a cell's thread budget is divided among permits (divide.c).
 * Pure: no state, no system call; the table (table.c) calls it under its
 * lock. Part of libtcm.so.1. */
#ifndef ALLOT_TCM_DIVIDE_H
#define ALLOT_TCM_DIVIDE_H

#include <stddef.h>
#include <stdint.h>

/* What one permit that holds threads (active or idle) asks for. */
struct claim {
    uint32_t min, max; /* threads; min <= max */
    uint32_t fixed;    /* nonzero: a rigid permit running now keeps `held` */
    uint32_t held;     /* what it has now */
    int32_t caller;    /* threads it runs beyond its concurrency: 1 for a TBB
                        * arena's (the thread that entered it works too), -1
                        * for a team whose primary another permit counts
                        * (OpenMP inside a TBB task), else 0 */
    int32_t priority;  /* higher first when threads are handed out */
};

/* The most claims one division takes (a table's slots). */
#define TCM_DIVIDE_MAX 256

/* Writes each claim's concurrency to `out` (see divide.c for the rules);
 * n <= TCM_DIVIDE_MAX. */
void tcm_divide(uint32_t budget, const struct claim *c, size_t n, uint32_t *out);

#endif
