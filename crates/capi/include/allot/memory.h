/*
 * allot/memory.h — the memory system per cell: a memory guarantee the
 * kernel does not reclaim under pressure, a limit past which the cell's own
 * processes pay (reclaim, then an out-of-memory kill inside the cell), L3
 * cache ways of its own and a memory bandwidth ceiling.
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

/* Sets the cell's L3 cache ways of its own (0: none) and its memory
 * bandwidth ceiling, percent of each cache domain's (0: none), as
 * `allot run --cache-ways/--mem-bandwidth` do: the kernel's resctrl (Intel
 * RDT, AMD QoS). The rest of the cell's request stays as the broker has
 * it. Waits for the broker to accept them; a refused change leaves the
 * cell as it was.
 *
 * Contexts: any thread; blocks for one round trip to the broker.
 * Errors: ALLOT_ERR_INVALID (a ceiling above 100, more than 64 ways);
 *   ALLOT_ERR_REFUSED (the ways or classes do not fit beside the other
 *   cells' now); ALLOT_ERR_NEVER (they never can, or the machine has no
 *   resctrl); ALLOT_ERR_HANDLE; ALLOT_ERR_SHUTDOWN; ALLOT_ERR_NO_BROKER;
 *   ALLOT_ERR_OS.
 * Undefined behaviour: none beyond the conventions. */
int allot_cell_set_cache(allot_cell_t cell, uint32_t ways, uint32_t bandwidth_pct);

#ifdef __cplusplus
}
#endif

#endif
