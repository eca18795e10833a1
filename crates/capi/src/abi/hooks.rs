//! `allot_rq_*`: the thread hooks the preload shim calls from its
//! `pthread_create`, `pthread_join` and condition-wait wrappers, so that
//! threads the program (or a library such as libgomp) creates inside a
//! `require` block share it and make its spawn-timed requests, and threads
//! that block give their allocation back (Poli-C §2.3, §2.7, §5.3).
//!
//! Each hook costs one atomic load ([`Blocks::global_if_started`]) in a
//! process that never entered a block, and does nothing while the calling
//! thread is inside liballot's require code ([`busy`]): the runtime may
//! create its ledger watcher thread, or wait, while it holds its lock. The
//! hooks never call the functions they are hooked into. A panic inside one
//! (a bug) is caught and the hook does nothing: a hook has no caller to
//! report to, and thread creation must go on.

use super::site::{Busy, busy};
use allot_require::blocks::{ChildGuard, SpawnCtx};
use allot_require::{Blocks, Wait};
use std::cell::Cell;
use std::ffi::{c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::ptr;
use std::sync::OnceLock;

/// The runtime, if one was started and this thread is not inside liballot.
fn runtime() -> Option<&'static Blocks> {
    if busy() {
        return None;
    }
    Blocks::global_if_started()
}

/// Runs `f` as a hook: inside liballot, panics caught (`or` on a panic).
fn hook<T>(or: T, f: impl FnOnce() -> T) -> T {
    let _busy = Busy::new();
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(or)
}

thread_local! {
    /// This thread created threads that share a block's allocation since
    /// it last left its outermost block ([`release_idle_teams`]).
    static SPAWNED: Cell<bool> = const { Cell::new(false) };
}

/// `void *allot_rq_spawn_prepare(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_spawn_prepare() -> *mut c_void {
    let Some(rt) = runtime() else {
        return ptr::null_mut();
    };
    hook(ptr::null_mut(), || match rt.spawn_prepare() {
        Some(ctx) => {
            SPAWNED.with(|s| s.set(true));
            Box::into_raw(Box::new(ctx)) as *mut c_void
        }
        None => ptr::null_mut(),
    })
}

/// `omp_pause_resource_all(int)`, OpenMP 5.0, if the process has an
/// OpenMP runtime loaded (libgomp has it since GCC 9).
type PauseFn = unsafe extern "C" fn(c_int) -> c_int;

fn pause_openmp() -> Option<PauseFn> {
    static PAUSE: OnceLock<Option<PauseFn>> = OnceLock::new();
    *PAUSE.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the symbol, when
        // present, has the OpenMP 5.0 signature.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"omp_pause_resource_all".as_ptr()) };
        // SAFETY: as above: a function of that signature, or null.
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut c_void, PauseFn>(f) })
    })
}

/// Called when a thread has left its outermost block: if it created
/// threads inside blocks, its OpenMP runtime's idle team threads (which
/// wait in futex calls of their own, out of the shim's sight, and so
/// would keep sharing the block's allocation for good) are ended with
/// `omp_pause_resource_all(omp_pause_soft)`; they give the allocation
/// back as they exit, and the next parallel region makes a new team,
/// inside whatever block is open then. Without an OpenMP runtime, or
/// inside a parallel region (libgomp then refuses), it does nothing.
pub(crate) fn release_idle_teams() {
    if !SPAWNED.with(|s| s.replace(false)) {
        return;
    }
    if let Some(pause) = pause_openmp() {
        const OMP_PAUSE_SOFT: c_int = 1;
        // SAFETY: the OpenMP 5.0 call; the thread holds no liballot lock.
        let _ = unsafe { pause(OMP_PAUSE_SOFT) };
    }
}

/// `void allot_rq_spawn_done(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_spawn_done() {
    if let Some(rt) = runtime() {
        hook((), || rt.spawn_done());
    }
}

/// `void allot_rq_spawn_cancel(void *ctx)`.
///
/// # Safety
/// `ctx` is NULL or a context from `allot_rq_spawn_prepare`, used once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_rq_spawn_cancel(ctx: *mut c_void) {
    if ctx.is_null() {
        return;
    }
    // SAFETY: the function's contract: a box made by spawn_prepare.
    let ctx = unsafe { Box::from_raw(ctx as *mut SpawnCtx) };
    if let Some(rt) = Blocks::global_if_started() {
        hook((), || rt.spawn_cancel(*ctx));
    }
}

/// `void *allot_rq_child_start(void *ctx)`.
///
/// # Safety
/// `ctx` is NULL or a context from `allot_rq_spawn_prepare`, used once, in
/// the thread it was prepared for.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_rq_child_start(ctx: *mut c_void) -> *mut c_void {
    if ctx.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the function's contract: a box made by spawn_prepare.
    let ctx = unsafe { Box::from_raw(ctx as *mut SpawnCtx) };
    let Some(rt) = Blocks::global_if_started() else {
        return ptr::null_mut();
    };
    hook(ptr::null_mut(), || {
        Box::into_raw(Box::new(rt.child_start(*ctx))) as *mut c_void
    })
}

/// `void allot_rq_child_exit(void *guard)`.
///
/// # Safety
/// `guard` is NULL or what `allot_rq_child_start` returned on this thread,
/// used once.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_rq_child_exit(guard: *mut c_void) {
    if guard.is_null() {
        return;
    }
    // SAFETY: the function's contract: a box made by child_start.
    let guard = unsafe { Box::from_raw(guard as *mut ChildGuard<'static>) };
    hook((), || drop(guard));
}

/// `void allot_rq_block(void)`: a join or condition wait begins (a wait
/// for another thread, [`Wait::Sync`]).
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_block() {
    if let Some(rt) = runtime() {
        hook((), || {
            rt.block_current_for(Wait::Sync);
        });
    }
}

/// `void allot_rq_block_for(int wait)`: a wait of kind `wait`
/// (`ALLOT_WAIT_*`) begins; the thread gives its allocation back if it
/// releases on such waits. An unknown kind gives nothing back.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_block_for(wait: c_int) {
    let Some(w) = u32::try_from(wait).ok().and_then(Wait::from_bits) else {
        return;
    };
    if let Some(rt) = runtime() {
        hook((), || {
            rt.block_current_for(w);
        });
    }
}

/// `int allot_rq_releases(int wait)`: 1 if the calling thread may hold an
/// allocation and gives it back during waits of kind `wait`
/// (`ALLOT_WAIT_*`). Thread-local reads only: the shim's wrappers ask it
/// before anything costlier.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_releases(wait: c_int) -> c_int {
    let Some(w) = u32::try_from(wait).ok().and_then(Wait::from_bits) else {
        return 0;
    };
    c_int::from(allot_require::blocks::releases(w) && !busy())
}

/// `int allot_rq_try_unblock(void)`: 1 retaken, 0 must wait.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_try_unblock() -> c_int {
    match runtime() {
        Some(rt) => hook(1, || c_int::from(rt.try_unblock_current())),
        None => 1,
    }
}

/// `void allot_rq_unblock(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_unblock() {
    if let Some(rt) = runtime() {
        hook((), || rt.unblock_current());
    }
}

/// `int allot_rq_holds(void)`: 1 if the calling thread may hold
/// allocations (it entered a block or started as a child of one), else 0.
/// One thread-local read: the shim's blocking-call wrappers ask it before
/// anything costlier (a `fcntl` to see whether a read can block at all).
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_holds() -> c_int {
    c_int::from(allot_require::blocks::may_hold_current() && !busy())
}

/// `int allot_rq_try_block(void)`: `allot_rq_block` for futex waits, which
/// the runtime's own locks make too: 1 if the thread is now blocked and
/// must call `allot_rq_unblock` after its wait, 0 if it gave nothing back
/// (it holds nothing, or the wait is liballot's own: [`busy`], or inside
/// the runtime's lock).
#[unsafe(no_mangle)]
pub extern "C" fn allot_rq_try_block() -> c_int {
    match runtime() {
        Some(rt) => hook(0, || c_int::from(rt.try_block_current_for(Wait::Sync))),
        None => 0,
    }
}
