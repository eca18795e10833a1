//! Suspended and timed tasks through the C ABI, called from Rust as a C
//! program would: resume once, cancel, a pool freed under a suspended task,
//! timed tasks, misuse, and the statistics that count them.

mod abi_util;

use abi_util::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::suspend::*;
use allot_capi::abi::*;
use std::ffi::c_void;
use std::ptr::null_mut;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

extern "C-unwind" fn bump(arg: *mut c_void) {
    // SAFETY: every caller passes a pointer to an `AtomicUsize` that
    // outlives the task.
    unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

fn ptr<T>(r: &T) -> *mut c_void {
    r as *const T as *mut c_void
}

fn suspended(p: PoolHandle) -> u64 {
    let mut n = u64::MAX;
    // SAFETY: a valid out-pointer.
    ok(unsafe { allot_pool_suspended(p, &mut n) });
    n
}

fn spawn_suspended(
    p: PoolHandle,
    n: &AtomicUsize,
    priority: i32,
    worker: i32,
) -> (ResumerHandle, TaskHandle) {
    let mut r = ResumerHandle::default();
    let mut t = TaskHandle::default();
    // SAFETY: valid function and out-pointers; `n` outlives every join.
    ok(unsafe {
        allot_pool_spawn_suspended(p, Some(bump), ptr(n), priority, worker, &mut r, &mut t)
    });
    (r, t)
}

#[test]
fn a_suspended_task_runs_once_after_allot_resume() {
    let p = pool();
    let n = AtomicUsize::new(0);
    let (r, t) = spawn_suspended(p, &n, 2, -1);
    assert_eq!(suspended(p), 1);
    // Other work runs meanwhile; the suspended task does not.
    let other = AtomicUsize::new(0);
    let mut t2 = TaskHandle::default();
    // SAFETY: as above.
    ok(unsafe { allot_pool_spawn(p, Some(bump), ptr(&other), &mut t2) });
    ok(allot_task_join(t2));
    assert_eq!(other.load(Ordering::SeqCst), 1);
    assert_eq!(n.load(Ordering::SeqCst), 0);
    ok(allot_resume(r));
    ok(allot_task_join(t));
    assert_eq!(n.load(Ordering::SeqCst), 1);
    assert_eq!(suspended(p), 0);
    // The resumer is spent: a task is resumed at most once.
    assert_eq!(status(allot_resume(r)), Code::Handle);
    assert_eq!(status(allot_resumer_cancel(r)), Code::Handle);
    let mut slots = 0u32;
    // SAFETY: a valid out-pointer.
    ok(unsafe { allot_pool_slots(p, &mut slots) });
    let mut resumed = 0;
    for w in 0..slots {
        let mut s = WorkerStatsC::default();
        // SAFETY: a valid out-pointer.
        ok(unsafe { allot_pool_worker_stats(p, w, &mut s) });
        resumed += s.tasks_resumed;
    }
    assert_eq!(resumed, 1);
    ok(allot_pool_free(p));
}

#[test]
fn cancelling_or_freeing_the_pool_cancels_the_task() {
    let p = pool();
    let n = AtomicUsize::new(0);
    let (r, t) = spawn_suspended(p, &n, 1, -1);
    ok(allot_resumer_cancel(r));
    assert_eq!(status(allot_task_join(t)), Code::Cancelled);
    assert!(last_error().contains("cancelled"), "{}", last_error());
    // Freed pool: the resume reports the cancellation, and so does the join.
    let (r, t) = spawn_suspended(p, &n, 1, 0);
    let mut timed = TaskHandle::default();
    // SAFETY: as above.
    ok(unsafe {
        allot_pool_spawn_after(p, 3_600_000_000_000, Some(bump), ptr(&n), 1, -1, &mut timed)
    });
    assert_eq!(suspended(p), 2);
    ok(allot_pool_free(p));
    assert_eq!(status(allot_resume(r)), Code::Cancelled);
    assert_eq!(status(allot_task_join(t)), Code::Cancelled);
    assert_eq!(status(allot_task_join(timed)), Code::Cancelled);
    assert_eq!(n.load(Ordering::SeqCst), 0, "nothing cancelled ran");
}

#[test]
fn timed_tasks_run_once_due() {
    let p = pool();
    let n = AtomicUsize::new(0);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for ms in [30u64, 10, 20] {
        let mut t = TaskHandle::default();
        // SAFETY: as above.
        ok(unsafe {
            allot_pool_spawn_after(p, ms * 1_000_000, Some(bump), ptr(&n), 0, -1, &mut t)
        });
        tasks.push(t);
    }
    for t in tasks {
        ok(allot_task_join(t));
    }
    assert!(start.elapsed() >= Duration::from_millis(30));
    assert_eq!(n.load(Ordering::SeqCst), 3);
    ok(allot_pool_free(p));
}

#[test]
fn misuse_is_refused_and_creates_nothing() {
    let p = pool();
    let n = AtomicUsize::new(0);
    let mut r = ResumerHandle::default();
    let mut t = TaskHandle::default();
    // SAFETY: null pointers and bad arguments on purpose; the library
    // detects them before queueing anything.
    unsafe {
        let rc = allot_pool_spawn_suspended(p, Some(bump), ptr(&n), 1, -1, null_mut(), &mut t);
        assert_eq!(status(rc), Code::Invalid);
        assert!(last_error().contains("resumer is NULL"), "{}", last_error());
        let rc = allot_pool_spawn_suspended(p, None, ptr(&n), 1, -1, &mut r, &mut t);
        assert_eq!(status(rc), Code::Invalid);
        let rc = allot_pool_spawn_suspended(p, Some(bump), ptr(&n), 7, -1, &mut r, &mut t);
        assert_eq!(status(rc), Code::Invalid);
        assert!(last_error().contains("priority 7"), "{}", last_error());
        let rc = allot_pool_spawn_after(p, 0, Some(bump), ptr(&n), 1, 4096, &mut t);
        assert_eq!(status(rc), Code::Invalid);
        assert!(last_error().contains("does not exist"), "{}", last_error());
        let rc = allot_pool_suspended(p, null_mut());
        assert_eq!(status(rc), Code::Invalid);
        // A pool handle is not a resumer.
        assert_eq!(
            status(allot_resume(ResumerHandle { id: p.id })),
            Code::Handle
        );
        assert_eq!(status(allot_resume(ResumerHandle::default())), Code::Handle);
    }
    assert_eq!(suspended(p), 0);
    ok(allot_pool_free(p));
    let mut x = 0u64;
    // SAFETY: a valid out-pointer; the pool is freed.
    let rc = unsafe { allot_pool_suspended(p, &mut x) };
    assert_eq!(status(rc), Code::Handle);
}
