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
                        * arena's (the thread that entered it works too);
                        * negative for a team nested in an arena, whose
                        * primary (and any threads lent to it, tcm_lent) the
                        * arena counts: -(1 + lent), with min >= 1 + lent;
                        * else 0 */
    int32_t priority;  /* higher first when threads are handed out */
};

/* The most claims one division takes (a table's slots). */
#define TCM_DIVIDE_MAX 256

/* Writes each claim's concurrency to `out` (see divide.c for the rules);
 * n <= TCM_DIVIDE_MAX. */
void tcm_divide(uint32_t budget, const struct claim *c, size_t n, uint32_t *out);

/* The threads an arena lends each of its nested teams that is being
 * divided now (activated or asked for). The arena runs `threads` threads
 * (its concurrency and its caller); its last rounds of work started
 * `teams` teams (0: no round known yet); `lent_out` threads are lent to
 * its teams running now, and `waiting` teams are being divided. A round
 * leaves `threads - teams` threads without a team: split evenly among the
 * teams of a round, and never more than is left of them, split among the
 * waiting, so a wrong guess from the last rounds cannot lend more threads
 * than the arena has. */
uint32_t tcm_lent(uint32_t threads, uint32_t teams, uint32_t lent_out, uint32_t waiting);

#endif
