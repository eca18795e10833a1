/* tcm_api.h: the Thread Composability Manager interface as oneTBB (2021.11
 * and later) and Intel's OpenMP runtime call it, written from the public
 * header those runtimes compile against. Only the binary layout and the
 * names are shared with that header; what each call means in allot is in
 * tcm.c. Part of libtcm.so.1 (crates/capi/TCM.md). */
#ifndef ALLOT_TCM_API_H
#define ALLOT_TCM_API_H

#include <stdint.h>

typedef enum {
    TCM_RESULT_SUCCESS = 0x0,
    TCM_RESULT_ERROR_INVALID_ARGUMENT = 0x78000004,
    TCM_RESULT_ERROR_UNKNOWN = 0x7ffffffe
} tcm_result_t;

/* A permit's state, as the permit data reports it. */
enum {
    TCM_PERMIT_STATE_VOID = 0,
    TCM_PERMIT_STATE_INACTIVE = 1,
    TCM_PERMIT_STATE_PENDING = 2,
    TCM_PERMIT_STATE_IDLE = 3,
    TCM_PERMIT_STATE_ACTIVE = 4
};
typedef uint8_t tcm_permit_state_t;

typedef struct {
    uint32_t stale : 1;
    uint32_t rigid_concurrency : 1;
    uint32_t exclusive : 1;
    uint32_t reserved : 29;
} tcm_permit_flags_t;

typedef struct {
    uint32_t new_concurrency : 1;
    uint32_t new_state : 1;
    uint32_t reserved : 30;
} tcm_callback_flags_t;

/* hwloc bitmaps: passed through, never read or written here. */
typedef void *tcm_cpu_mask_t;
typedef uint64_t tcm_client_id_t;

typedef struct {
    uint32_t *concurrencies;
    tcm_cpu_mask_t *cpu_masks;
    uint32_t size;
    tcm_permit_state_t state;
    tcm_permit_flags_t flags;
} tcm_permit_t;

/* Opaque to the runtimes: tcm.c defines it. */
typedef struct tcm_permit_rep_t *tcm_permit_handle_t;

typedef struct {
    int32_t min_concurrency;
    int32_t max_concurrency;
    tcm_cpu_mask_t mask;
    int32_t numa_id;
    int32_t core_type_id;
    int32_t threads_per_core;
} tcm_cpu_constraints_t;

/* "Decide for me" in a count field. */
#define TCM_AUTOMATIC (-1)

typedef struct {
    int32_t min_sw_threads;
    int32_t max_sw_threads;
    tcm_cpu_constraints_t *cpu_constraints;
    uint32_t constraints_size;
    int32_t priority;
    tcm_permit_flags_t flags;
    char reserved[4];
} tcm_permit_request_t;

typedef tcm_result_t (*tcm_callback_t)(tcm_permit_handle_t, void *, tcm_callback_flags_t);

#endif
