/*
 * allot/goals.h — goals and performance reports: a cell says what it
 * wants to achieve ("200 frames a second", "p99 latency under 5 ms") and
 * counts what it achieves; the broker's goals policy sizes its CPUs to
 * meet the goal.
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_GOALS_H
#define ALLOT_GOALS_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/goals.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Goals and performance reports                                            */
/* ------------------------------------------------------------------------ */

/* Sets the cell's goal, in the text form `allot run --goal` takes:
 * "rate=200/s" (units of work per second, counted with allot_heartbeat;
 * also N/min), "p99=5ms" (99th percentile of the latencies recorded with
 * allot_report_latency; us, ms or s) or "none". The rest of the cell's
 * request stays as the broker has it (a program in a cell of `allot run`'s,
 * from allot_cell_auto, may set its goal too). Waits for the broker to
 * accept it. The broker acts on goals when it runs the goals policy
 * (`allot daemon --policy goals`); `allot status` says so otherwise.
 *
 * Contexts: any thread; blocks for one round trip to the broker.
 * Errors: ALLOT_ERR_INVALID (goal NULL, not understood, out of range, or
 *   the cell has a time contract); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN;
 *   ALLOT_ERR_NO_BROKER (a standalone cell, or the broker went away);
 *   ALLOT_ERR_OS.
 * Undefined behaviour: `goal` not NUL-terminated. */
int allot_cell_set_goal(allot_cell_t cell, const char *goal);

/* Counts `n` units of work done (frames, requests, iterations: the unit of
 * a rate goal). One atomic add to the cell's report page, which the broker
 * reads; no system call. The handle is looked up in the library's handle
 * table (a short lock shared by every call on any handle), so thousands of
 * calls a second from a few threads cost nothing noticeable, but a tight
 * loop on many threads contends there. A standalone cell counts on a page
 * of its own that nobody reads.
 *
 * Contexts: any thread. Not async-signal-safe (the handle table's lock).
 * Errors: ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none. */
int allot_heartbeat(allot_cell_t cell, uint64_t n);

/* Records one request's latency, in nanoseconds, for a p99 goal. Three
 * atomic adds to the cell's report page; no system call.
 *
 * Contexts, Errors, Undefined behaviour: as allot_heartbeat. */
int allot_report_latency(allot_cell_t cell, uint64_t latency_ns);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_GOALS_H */
