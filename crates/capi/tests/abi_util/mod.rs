//! Helpers for the C ABI tests: call the exported functions from Rust as
//! a C program would, and read their error details.
#![allow(dead_code)]

pub mod broker;

use allot_capi::abi::cell::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::*;
use std::ffi::{CStr, c_int, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The status a call returned.
pub fn status(rc: c_int) -> Code {
    Code::from_code(rc).unwrap_or_else(|| panic!("unknown status code {rc}"))
}

/// This thread's last error detail.
pub fn last_error() -> String {
    // SAFETY: the library returns a NUL-terminated string owned by this
    // thread, valid until its next failing call; it is copied at once.
    unsafe { CStr::from_ptr(allot_last_error()) }
        .to_string_lossy()
        .into_owned()
}

/// Asserts a call succeeded, showing the detail if not.
#[track_caller]
pub fn ok(rc: c_int) {
    assert_eq!(status(rc), Code::Ok, "{}", last_error());
}

/// A standalone cell.
pub fn standalone() -> CellHandle {
    let mut c = CellHandle::default();
    // SAFETY: `c` is a valid out-pointer.
    ok(unsafe { allot_cell_standalone(&mut c) });
    c
}

/// A pool on a new standalone cell (the cell handle is freed: the pool
/// keeps its own reference).
pub fn pool() -> PoolHandle {
    let c = standalone();
    let mut p = PoolHandle::default();
    // SAFETY: `p` is a valid out-pointer.
    ok(unsafe { allot_pool_new(c, &mut p) });
    ok(allot_cell_free(c));
    p
}

/// The cell's grant.
pub fn grant(c: CellHandle) -> Result<CGrant, Code> {
    let mut g = CGrant::default();
    // SAFETY: `g` is a valid out-pointer.
    match status(unsafe { allot_cell_grant(c, &mut g) }) {
        Code::Ok => Ok(g),
        s => Err(s),
    }
}

/// The pool's worker count.
pub fn workers(p: PoolHandle) -> Result<u32, Code> {
    let mut n = 0;
    // SAFETY: `n` is a valid out-pointer.
    match status(unsafe { allot_pool_workers(p, &mut n) }) {
        Code::Ok => Ok(n),
        s => Err(s),
    }
}

/// Spawns `f(arg)`.
pub fn spawn(p: PoolHandle, f: TaskFn, arg: *mut std::ffi::c_void) -> Result<TaskHandle, Code> {
    let mut t = TaskHandle::default();
    // SAFETY: `t` is a valid out-pointer; `f` is a function of the right
    // type and the callers keep `arg` alive until the task is joined.
    match status(unsafe { allot_pool_spawn(p, Some(f), arg, &mut t) }) {
        Code::Ok => Ok(t),
        s => Err(s),
    }
}

/// A task that does nothing.
pub extern "C-unwind" fn nop(_: *mut c_void) {}

/// A loop body that does nothing.
pub extern "C-unwind" fn nop_body(_: usize, _: usize, _: *mut c_void) {}

/// A task that adds one to the `AtomicUsize` its argument points at.
pub extern "C-unwind" fn bump(arg: *mut c_void) {
    // SAFETY: every caller passes a pointer to an `AtomicUsize` that
    // outlives the task.
    unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

/// `r` as a callback argument.
pub fn ptr<T>(r: &T) -> *mut c_void {
    r as *const T as *mut c_void
}

/// `r` as a callback argument the callback may write through.
pub fn ptr_mut<T>(r: &mut T) -> *mut c_void {
    r as *mut T as *mut c_void
}
