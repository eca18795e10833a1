//! `allot_cell_set_memory` and `allot_cell_set_cache`: a cell's memory
//! guarantee and limit, its L3 ways and bandwidth ceiling, from C
//! (`include/allot/memory.h`).

use super::CELLS;
use super::CellHandle;
use super::cell::client_error;
use super::status::entry;
use std::ffi::c_int;

/// `int allot_cell_set_memory(allot_cell_t cell, uint64_t min_bytes, uint64_t max_bytes)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_cell_set_memory(cell: CellHandle, min_bytes: u64, max_bytes: u64) -> c_int {
    entry("allot_cell_set_memory", || {
        let c = CELLS.get(cell.id)?;
        c.set_memory(allot_spec::Memory {
            min: min_bytes,
            max: max_bytes,
        })
        .map_err(client_error)
    })
}

/// `int allot_cell_set_cache(allot_cell_t cell, uint32_t ways, uint32_t bandwidth_pct)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_cell_set_cache(cell: CellHandle, ways: u32, bandwidth_pct: u32) -> c_int {
    entry("allot_cell_set_cache", || {
        let c = CELLS.get(cell.id)?;
        c.set_cache(allot_spec::Cache {
            ways,
            bandwidth: bandwidth_pct,
        })
        .map_err(client_error)
    })
}
