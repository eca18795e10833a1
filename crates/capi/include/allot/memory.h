/*
 * allot/memory.h — memory capacity per cell: a guarantee the kernel does
 * not reclaim under pressure, and a limit past which the cell's own
 * processes pay (reclaim, then an out-of-memory kill inside the cell).
 *
 * A part of allot.h, which includes it: include <allot.h>, not this file.
 * The conventions at the top of allot.h hold for every function here.
 */
#ifndef ALLOT_MEMORY_H
#define ALLOT_MEMORY_H

#ifndef ALLOT_H
#error "include <allot.h>; allot/memory.h is a part of it"
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Sets the cell's memory guarantee and limit, bytes (0: none), as
 * `allot run --memory-min/--memory-max` do. The rest of the cell's request
 * stays as the broker has it. Waits for the broker to accept them; a
 * refused change leaves the cell as it was.
 *
 * Contexts: any thread; blocks for one round trip to the broker.
 * Errors: ALLOT_ERR_INVALID (min above max, a limit below 4 MiB, or a
 *   limit below what the cell uses now); ALLOT_ERR_REFUSED (the guarantee
 *   does not fit beside the others now); ALLOT_ERR_NEVER (it can never
 *   fit, or the broker's backend has no memory control); ALLOT_ERR_HANDLE;
 *   ALLOT_ERR_SHUTDOWN; ALLOT_ERR_NO_BROKER (a standalone cell, or the
 *   broker went away); ALLOT_ERR_OS.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_set_memory(allot_cell_t cell, uint64_t min_bytes, uint64_t max_bytes);

#ifdef __cplusplus
}
#endif

#endif
