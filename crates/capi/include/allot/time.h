/*
 * allot/time.h — time contracts: cells that hold a fraction of their CPUs'
 * time, or a budget in a window every period (the whole cell at once).
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_TIME_H
#define ALLOT_TIME_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/time.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Time contracts                                                            */
/* ------------------------------------------------------------------------ */

#define ALLOT_TIME_SPACE 0u      /* whole CPUs or a best-effort share (allot_spec_t alone) */
#define ALLOT_TIME_FRACTION 1u   /* a fraction of each of the cell's CPUs */
#define ALLOT_TIME_TRIGGERED 2u  /* a budget every period, all threads in the same window */
#define ALLOT_TIME_MESSAGE 3u    /* nothing until a message arrives (channels) */

/* When a cell runs. All zeros is ALLOT_TIME_SPACE. A field the kind does
 * not use must be 0. With any other kind, the allot_spec_t passed beside
 * it says how many CPUs the contract covers in `min` (at least 1; `max`
 * 0 or equal to `min`; not exclusive, placement ANY). */
typedef struct {
    uint32_t kind;         /* ALLOT_TIME_* */
    uint32_t fraction_ppm; /* FRACTION: millionths of each CPU, 1..1000000 */
    uint32_t slice_us;     /* FRACTION: shortest piece of CPU time, µs
                              (0: the broker's default) */
    uint32_t period_us;    /* TRIGGERED: the period, 1 ms to 10 s */
    uint32_t budget_us;    /* TRIGGERED: CPU time per period on each CPU,
                              100 µs up to the period */
    uint32_t idle_ms;      /* MESSAGE: idle time before the grant goes back */
} allot_time_t;

/* A time-triggered cell's windows: window k opens at
 * origin_ns + k * period_us * 1000 (CLOCK_MONOTONIC) and lasts budget_us.
 * `open` and `edge_ns` describe the moment of the call. */
typedef struct {
    uint64_t origin_ns; /* when window 0 opens; 0 with period_us: no windows */
    uint64_t edge_ns;   /* open: when this window closes; closed: when the
                           next opens; UINT64_MAX without windows */
    uint32_t period_us; /* 0: the cell has no windows (it may run any time) */
    uint32_t budget_us;
    int open;           /* nonzero: inside a window (or no windows) */
} allot_window_t;

/* allot_cell_register_at with a time contract: `*time` says when the cell
 * runs, `spec->min` on how many CPUs. The broker admits the cell only if
 * the time it promises fits on those CPUs beside what it already promised
 * (and its reserve for the system): otherwise ALLOT_ERR_REFUSED (`wait`
 * zero) or a place in its queue (`wait` nonzero), or ALLOT_ERR_NEVER when
 * no state of the machine could hold it. A time-triggered cell is
 * suspended between its windows (the freezer) where the broker can; read
 * the schedule with allot_cell_window. `time` NULL is ALLOT_TIME_SPACE.
 *
 * Contexts, Errors, Undefined behaviour: as allot_cell_register_at; also
 *   ALLOT_ERR_INVALID for an unknown kind, a field the kind does not use
 *   that is not 0, a value outside its range, or a spec the contract does
 *   not allow (min 0, max other than min, exclusive, a placement);
 *   allot_last_error() says which. */
int allot_cell_register_timed(const char *socket, const char *name,
                              const allot_spec_t *spec,
                              const allot_time_t *time, int wait,
                              allot_cell_t *out);

/* The cell's windows as its grant page says now, and whether this moment
 * is inside one. A cell without windows (not time-triggered, standalone,
 * or a broker that cannot suspend cells) gets period_us 0 and open 1.
 * A program that wants to do its periodic work inside its windows waits
 * for them with allot_cell_wait_window.
 *
 * Contexts: any thread. Does not block (reads the page and the clock).
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_window(allot_cell_t cell, allot_window_t *out);

/* Blocks until the cell's next window opens (inside a window: the one
 * after it), then fills `*out` as allot_cell_window does at that moment
 * (open 1, edge_ns the window's close). Returns at once, with period_us
 * 0 and open 1, for a cell without windows. The periodic loop of a
 * time-triggered cell:
 *
 *     for (;;) { do_period_work(); allot_cell_wait_window(cell, &w); }
 *
 * The wait returns at the opening itself, not a timer's wake-up later,
 * and the cell's suspension between windows cannot make it miss one
 * (it sleeps on a timerfd, which the freezer interrupts, rather than in
 * clock_nanosleep; it spins the last 50 us). The schedule is read when
 * the wait starts; a change meanwhile takes effect at the next call.
 *
 * Contexts: any thread; blocks for up to one period. Not async-signal-safe.
 * Errors: ALLOT_ERR_INVALID (out NULL); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_wait_window(allot_cell_t cell, allot_window_t *out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* ALLOT_TIME_H */
