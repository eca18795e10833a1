//! `allot_shutdown`, alone in its process (it is global and final): it
//! refuses to run inside a callback, lets queued tasks finish, stops every
//! worker, wakes waiters, and every later call returns `ALLOT_ERR_SHUTDOWN`.
//!
//! One test function, so that nothing else in this binary runs after the
//! library was shut down.

mod abi_util;

use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::*;
use std::ffi::{CStr, c_void};
use std::ptr::null_mut;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

extern "C-unwind" fn slow_bump(arg: *mut c_void) {
    std::thread::sleep(Duration::from_millis(2));
    // SAFETY: the test passes a `'static` `AtomicUsize`.
    unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

extern "C-unwind" fn try_shutdown(arg: *mut c_void) {
    // SAFETY: the test passes a `'static` `AtomicU32`.
    unsafe { &*(arg as *const AtomicU32) }.store(allot_shutdown() as u32, Ordering::SeqCst);
}

/// Threads of this process whose name starts with `prefix`.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

#[test]
fn shutdown_frees_everything_and_refuses_every_later_call() {
    static RAN: AtomicUsize = AtomicUsize::new(0);
    static INSIDE: AtomicU32 = AtomicU32::new(99);
    let arg = |a: &'static AtomicUsize| a as *const AtomicUsize as *mut c_void;

    let cell = standalone();
    let p = pool();
    let q = pool();
    assert!(threads_named("liballot") >= 2, "the pools' workers run");

    // Inside a callback: refused, nothing freed.
    let t = spawn(p, try_shutdown, &INSIDE as *const AtomicU32 as *mut c_void).unwrap();
    ok(allot_task_join(t));
    assert_eq!(INSIDE.load(Ordering::SeqCst), Code::Invalid as u32);
    assert!(workers(p).is_ok());

    // Queued work, an unjoined task handle, and a thread waiting forever.
    let unjoined: Vec<TaskHandle> = (0..40)
        .map(|_| spawn(p, slow_bump, arg(&RAN)).unwrap())
        .collect();
    for _ in 0..10 {
        spawn(q, slow_bump, arg(&RAN)).unwrap();
    }
    let g = grant(cell).unwrap();
    let waiter = std::thread::spawn(move || {
        let mut h = CGrant::default();
        // SAFETY: valid out-pointer.
        status(unsafe { allot_cell_wait_change(cell, g.generation, -1, &mut h) })
    });
    std::thread::sleep(Duration::from_millis(60));

    let t0 = Instant::now();
    ok(allot_shutdown());
    assert_eq!(
        RAN.load(Ordering::SeqCst),
        50,
        "queued tasks finished first"
    );
    assert_eq!(waiter.join().unwrap(), Code::Shutdown);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert_eq!(threads_named("liballot"), 0, "every worker was joined");

    // Every later call says so; nothing crashes.
    let mut c = CellHandle::default();
    let mut np = PoolHandle::default();
    let mut t = TaskHandle::default();
    let mut gr = CGrant::default();
    let mut n = 0u32;
    // SAFETY: valid strings and out-pointers throughout.
    let rcs = unsafe {
        [
            allot_cell_standalone(&mut c),
            allot_cell_auto(c"x".as_ptr(), &mut c),
            allot_cell_register(c"x".as_ptr(), &Spec::default(), 0, &mut c),
            allot_cell_grant(cell, &mut gr),
            allot_cell_wait_change(cell, 0, 0, &mut gr),
            allot_cell_report(cell, 0, 0, 0),
            allot_cell_free(cell),
            allot_pool_new(CellHandle::default(), &mut np),
            allot_pool_workers(p, &mut n),
            allot_pool_spawn(p, Some(slow_bump), null_mut(), &mut t),
            allot_pool_parallel_for(p, 0, 10, 1, Some(nop_body), null_mut()),
            allot_pool_join(p, Some(slow_bump), null_mut(), Some(slow_bump), null_mut()),
            allot_pool_free(p),
            allot_task_join(unjoined[0]),
            allot_task_detach(unjoined[1]),
            allot_shutdown(),
        ]
    };
    for (i, rc) in rcs.into_iter().enumerate() {
        assert_eq!(status(rc), Code::Shutdown, "call #{i}: {}", last_error());
    }
    assert!(last_error().starts_with("allot_shutdown: the library was shut down"));
    // The error functions keep working.
    // SAFETY: static NUL-terminated string.
    let s = unsafe { CStr::from_ptr(allot_strerror(Code::Shutdown as i32)) };
    assert!(s.to_str().unwrap().contains("shut down"));
    assert_eq!(allot_abi_version(), ABI_VERSION);
}

extern "C-unwind" fn nop_body(_: usize, _: usize, _: *mut c_void) {}
