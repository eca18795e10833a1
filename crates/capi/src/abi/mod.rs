//! The C ABI (`liballot`): cells and pools for C and C++ programs.
//!
//! `include/allot.h` is the contract; each function there documents its
//! contexts, errors and undefined behaviour. This module implements it:
//!
//! - [`status`]: status codes, the thread-local last error, and [`entry`],
//!   the guard around every function body (no panic crosses into C);
//! - [`handle`]: the generation-checked handle tables;
//! - [`cell`]: `allot_cell_*` over [`allot_client::Cell`]; [`time`]: time
//!   contracts (`allot_cell_register_timed`) and windows (`allot_cell_window`,
//!   `allot_cell_wait_window`); [`goals`]: goals and performance reports
//!   (`allot_cell_set_goal`, `allot_heartbeat`, `allot_report_latency`);
//!   [`channel`]: named channels (`allot_channel_*`);
//! - [`require`]: `allot_require_enter` / `_leave` (Poli-C's require
//!   blocks), virtual kinds and named policies; [`view`]: policies written
//!   in C; [`hooks`]: the `allot_rq_*` thread hooks the preload shim calls;
//! - [`pool`]: `allot_pool_*` and `allot_task_*` over
//!   [`allot_runtime::Pool`], and the per-thread record of which pool's
//!   callback is running (to refuse calls that would wait for themselves);
//! - this file: the shared `#[repr(C)]` types, `allot_strerror`,
//!   `allot_last_error`, `allot_abi_version` and `allot_shutdown`.
//!
//! # Shutdown protocol
//!
//! `allot_shutdown` (1) refuses to run inside a callback, (2) sets
//! [`SHUT_DOWN`] so new calls fail fast, (3) closes the pool table and
//! frees every pool (each waits until no other call uses it, then lets its
//! queued tasks finish and joins its workers), (4) closes the task and cell
//! tables and drops what they held, and the process's automatic cell. A call racing with it either completes
//! before its table closes or fails with `ALLOT_ERR_SHUTDOWN`: tables check
//! their closed flag under their own lock, so nothing is inserted after
//! they were drained.

pub mod cell;
pub mod channel;
pub mod goals;
pub mod handle;
pub mod hooks;
pub mod kinds;
pub mod launcher;
pub mod memory;
pub mod pool;
pub mod request;
pub mod require;
pub mod site;
pub mod status;
pub mod suspend;
pub mod time;
pub mod view;

use handle::{Kind, Table};
use status::{Code, Error, Result, entry};
use std::ffi::{c_char, c_int};
use std::sync::atomic::{AtomicBool, Ordering};

/// `ALLOT_ABI_VERSION` in the header; bump it (and the soname in
/// `build.rs`) on any incompatible change to a type or function.
pub const ABI_VERSION: u32 = 2;

/// `allot_cell_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CellHandle {
    /// Tag, generation and slot (see [`handle`]); 0 is no cell.
    pub id: u64,
}

/// `allot_pool_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolHandle {
    /// Tag, generation and slot; 0 is no pool.
    pub id: u64,
}

/// `allot_task_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TaskHandle {
    /// Tag, generation and slot; 0 is no task.
    pub id: u64,
}

/// `allot_resumer_t`: permission to resume one suspended task, once.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResumerHandle {
    /// Tag, generation and slot; 0 is no resumer.
    pub id: u64,
}

/// `allot_spec_t`: what a cell asks for.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spec {
    /// Guaranteed CPUs (0: best effort).
    pub min: u32,
    /// Most CPUs (0: the machine).
    pub max: u32,
    /// Share weight, 1..=10000 (0: the default, 1).
    pub weight: u32,
    /// Nonzero: CPUs of this cell alone.
    pub exclusive: c_int,
    /// 0 any, 1 llc, 2 numa.
    pub placement: c_int,
}

/// Words in the grant's CPU bitmaps (1024 CPUs).
pub const GRANT_WORDS: usize = 16;

/// `allot_grant_t`: a consistent copy of a cell's grant.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CGrant {
    /// Grows with every change.
    pub generation: u64,
    /// Recommended worker count.
    pub threads: u32,
    /// CPUs in `cpus`.
    pub ncpus: u32,
    /// CPUs the cell is entitled to.
    pub entitled: u32,
    /// `ALLOT_GRANT_*` bits (1 stacked, 2 released).
    pub flags: u32,
    /// CPUs the cell may run on: bit `i` of word `w` is CPU `64 w + i`.
    pub cpus: [u64; GRANT_WORDS],
    /// The lent subset of `cpus`.
    pub lent: [u64; GRANT_WORDS],
}

const _: () = assert!(std::mem::size_of::<CellHandle>() == 8);
const _: () = assert!(std::mem::size_of::<Spec>() == 20);
const _: () = assert!(std::mem::size_of::<CGrant>() == 280);
const _: () = assert!(std::mem::offset_of!(CGrant, cpus) == 24);
const _: () = assert!(std::mem::offset_of!(CGrant, lent) == 152);
impl CGrant {
    /// The C view of a client grant. (The bitmaps are the client's words
    /// as they are: a different `MAX_CPUS` there fails to compile here.)
    pub fn from_client(g: &allot_client::Grant) -> CGrant {
        CGrant {
            generation: g.generation,
            threads: g.threads,
            ncpus: g.cpus.len() as u32,
            entitled: g.entitled,
            flags: g.flags,
            cpus: *g.cpus.words(),
            lent: *g.lent.words(),
        }
    }
}

/// Set once by `allot_shutdown`; tables are the authority (see the module
/// docs), this only makes later calls fail before doing any work.
pub(crate) static SHUT_DOWN: AtomicBool = AtomicBool::new(false);

/// Fails with `ALLOT_ERR_SHUTDOWN` after `allot_shutdown`.
pub(crate) fn ensure_live() -> Result<()> {
    if SHUT_DOWN.load(Ordering::Acquire) {
        return Err(Error::shut_down());
    }
    Ok(())
}

/// Writes `value` through the out-pointer `out`.
///
/// # Safety
/// `out` is non-null (checked with [`need_out`]) and, by the C contract,
/// valid for a write of a `T`.
pub(crate) unsafe fn write_out<T>(out: *mut T, value: T) {
    // SAFETY: see the function's contract.
    unsafe { out.write(value) }
}

/// `ALLOT_ERR_INVALID` unless `out` is non-null.
pub(crate) fn need_out<T>(out: *mut T, what: &str) -> Result<()> {
    if out.is_null() {
        return Err(Error::invalid(format!(
            "{what} is NULL; pass the address of a variable to receive the result"
        )));
    }
    Ok(())
}

pub(crate) static CELLS: Table<allot_client::Cell> = Table::new(Kind::Cell);
pub(crate) static POOLS: Table<std::sync::Arc<allot_runtime::Pool>> = Table::new(Kind::Pool);
pub(crate) static TASKS: Table<pool::TaskEntry> = Table::new(Kind::Task);
pub(crate) static RESUMERS: Table<allot_runtime::Resumer> = Table::new(Kind::Resumer);
pub(crate) static CHANNELS: Table<std::sync::Arc<channel::Entry>> = Table::new(Kind::Channel);

/// `const char *allot_strerror(int status)`: never null, static.
#[unsafe(no_mangle)]
pub extern "C" fn allot_strerror(status: c_int) -> *const c_char {
    Code::from_code(status)
        .map(Code::description)
        .unwrap_or(status::UNKNOWN)
        .as_ptr()
}

/// `const char *allot_last_error(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_last_error() -> *const c_char {
    status::last_error()
}

/// `uint32_t allot_abi_version(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_abi_version() -> u32 {
    ABI_VERSION
}

/// `int allot_shutdown(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_shutdown() -> c_int {
    entry("allot_shutdown", || {
        if pool::in_any_callback() {
            return Err(Error::invalid(
                "called from a callback running on an allot pool; it would wait for that \
                 callback to return. Call it from a thread outside every pool",
            ));
        }
        if SHUT_DOWN.swap(true, Ordering::AcqRel) {
            return Err(Error::shut_down());
        }
        for p in POOLS.close() {
            pool::finish(p);
        }
        // The pools are gone: unresumed tasks are cancelled (their handles
        // say so) before the task table goes.
        drop(RESUMERS.close());
        drop(TASKS.close());
        drop(CHANNELS.close());
        drop(CELLS.close());
        cell::drop_auto_cell();
        Ok(())
    })
}
