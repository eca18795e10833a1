/* The grant page as C sees it: the C copy of allot's page contract.
 *
 * The contract is defined once, in Rust: crates/proto/src/page.rs (layout,
 * PAGE_VERSION, flags) and crates/proto/src/env.rs (variable names).
 * crates/capi/tests/c_layout.rs compiles this header and checks every
 * offset, size and constant below against those definitions, so the two
 * cannot drift apart. Changing the layout means bumping PAGE_VERSION
 * there and here. */
#ifndef ALLOT_GRANT_PAGE_H
#define ALLOT_GRANT_PAGE_H

#include <stddef.h>
#include <stdint.h>

#define ALLOT_PAGE_MAGIC 0x544F4C41u /* "ALOT", little-endian */
#define ALLOT_PAGE_VERSION 2u
#define ALLOT_PAGE_BYTES 4096u

/* grant_page.flags */
#define ALLOT_PAGE_FLAG_STACKED 1u
#define ALLOT_PAGE_FLAG_RELEASED 2u

/* Environment variables (crates/proto/src/env.rs). */
#define ALLOT_ENV_GRANT_FD "ALLOT_GRANT_FD"
#define ALLOT_ENV_SHIM_DEBUG "ALLOT_SHIM_DEBUG"
#define ALLOT_ENV_LAUNCH_CPUS "ALLOT_LAUNCH_CPUS"
#define ALLOT_ENV_TCM_FD "ALLOT_TCM_FD"

/* Every field is accessed with __atomic builtins: the broker writes the page
 * from another process under a seqlock (docs/protocol.md). */
struct grant_page {
    uint32_t magic;
    uint32_t version;
    uint32_t size;
    uint32_t futex;
    uint64_t seq;
    uint64_t cell;
    uint64_t generation;
    uint64_t instance;
    uint32_t threads;
    uint32_t flags;
    uint32_t entitled;
    uint32_t ncpus;
    uint32_t share_milli;
    uint32_t home;
    /* Time-triggered cells: window k opens at win_origin + k * win_period
     * (CLOCK_MONOTONIC ns, periods in µs) for win_budget µs; win_period 0
     * means no windows (crates/proto/src/window.rs). */
    uint64_t win_origin;
    uint32_t win_period;
    uint32_t win_budget;
    uint32_t reserved[10];
    uint64_t cpus[16];
    uint64_t lent[16];
};

_Static_assert(sizeof(struct grant_page) <= ALLOT_PAGE_BYTES, "the page fits");

#endif
