//! `allot_cell_set_memory`: a cell's memory guarantee and limit from C
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
        c.set_memory(allot_client::Memory {
            min: min_bytes,
            max: max_bytes,
        })
        .map_err(client_error)
    })
}
