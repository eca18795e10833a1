//! The C ABI's pools called from Rust as a C program would: parallel
//! loops (adaptive and static), spawned tasks, fork/join, calls that would
//! wait for themselves, freeing while in use, worker statistics, policies
//! and named workers.
//!
//! `allot_shutdown` is global to the process (tested in
//! `tests/abi_shutdown.rs`); nothing here calls it except from inside a
//! callback, where it must be refused.

mod abi_util;

use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::*;
use std::ffi::{c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
struct Cover {
    hits: Vec<AtomicU32>,
    max_piece: AtomicUsize,
    calls: AtomicUsize,
}

extern "C-unwind" fn cover_body(lo: usize, hi: usize, arg: *mut c_void) {
    // SAFETY: the test passes a `Cover` that outlives the loop.
    let c = unsafe { &*(arg as *const Cover) };
    c.calls.fetch_add(1, Ordering::SeqCst);
    c.max_piece.fetch_max(hi - lo, Ordering::SeqCst);
    for i in lo..hi {
        c.hits[i].fetch_add(1, Ordering::SeqCst);
    }
}

#[test]
fn parallel_for_covers_the_range_once_in_pieces_of_at_most_grain() {
    let p = pool();
    let w = workers(p).unwrap() as usize;
    for (begin, end, grain) in [
        (0, 10_000, 64),
        (3, 9_999, 1000),
        (0, 1, 1),
        (17, 5000, 0),
        (0, 100, 1_000_000),
    ] {
        let c = Cover {
            hits: (0..end).map(|_| AtomicU32::new(0)).collect(),
            max_piece: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        };
        // SAFETY: `cover_body` matches the type and `c` outlives the call.
        ok(unsafe { allot_pool_parallel_for(p, begin, end, grain, Some(cover_body), ptr(&c)) });
        for (i, h) in c.hits.iter().enumerate() {
            let want = u32::from(i >= begin);
            assert_eq!(
                h.load(Ordering::SeqCst),
                want,
                "index {i} of {begin}..{end} grain {grain}"
            );
        }
        let limit = if grain == 0 {
            ((end - begin) / (8 * w)).max(1)
        } else {
            grain
        };
        assert!(c.max_piece.load(Ordering::SeqCst) <= limit);
        if grain == 0 {
            assert!(c.calls.load(Ordering::SeqCst) >= 8 * w.min(end - begin));
        }
    }
    // An empty range validates the handle and calls nothing.
    // SAFETY: the body is never called.
    ok(unsafe { allot_pool_parallel_for(p, 5, 5, 1, Some(nop_body), null_mut()) });
    ok(allot_pool_free(p));
    // SAFETY: as above.
    let rc = unsafe { allot_pool_parallel_for(p, 5, 5, 1, Some(nop_body), null_mut()) };
    assert_eq!(status(rc), Code::Handle);
}

#[test]
fn the_static_schedule_gives_one_block_per_worker() {
    let p = pool();
    let w = workers(p).unwrap() as usize;
    for (begin, end) in [(0usize, 10_000usize), (7, 8), (3, 3 + w + 1)] {
        let c = Cover {
            hits: (0..end).map(|_| AtomicU32::new(0)).collect(),
            max_piece: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        };
        // SAFETY: `cover_body` matches the type and `c` outlives the call.
        ok(unsafe { allot_pool_parallel_for_static(p, begin, end, Some(cover_body), ptr(&c)) });
        for (i, h) in c.hits.iter().enumerate() {
            assert_eq!(h.load(Ordering::SeqCst), u32::from(i >= begin), "index {i}");
        }
        let blocks = w.min(end - begin);
        assert_eq!(c.calls.load(Ordering::SeqCst), blocks);
        assert_eq!(
            c.max_piece.load(Ordering::SeqCst),
            (end - begin).div_ceil(blocks)
        );
    }
    // SAFETY: the body is never called.
    ok(unsafe { allot_pool_parallel_for_static(p, 5, 5, Some(nop_body), null_mut()) });
    // SAFETY: as above.
    let rc = unsafe { allot_pool_parallel_for_static(p, 6, 5, Some(nop_body), null_mut()) };
    assert_eq!(status(rc), Code::Invalid);
    assert!(last_error().contains("after end"), "{}", last_error());
    // SAFETY: a null body is refused before anything is called.
    let rc = unsafe { allot_pool_parallel_for_static(p, 0, 5, None, null_mut()) };
    assert_eq!(status(rc), Code::Invalid);
    ok(allot_pool_free(p));
    // SAFETY: as above.
    let rc = unsafe { allot_pool_parallel_for_static(p, 0, 5, Some(nop_body), null_mut()) };
    assert_eq!(status(rc), Code::Handle);
}

#[test]
fn a_thousand_spawned_tasks_each_run_once() {
    let p = pool();
    let counters: Vec<AtomicUsize> = (0..1000).map(|_| AtomicUsize::new(0)).collect();
    let tasks: Vec<TaskHandle> = counters
        .iter()
        .map(|c| spawn(p, bump, ptr(c)).unwrap())
        .collect();
    let mut ids: Vec<u64> = tasks.iter().map(|t| t.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 1000, "live handles are distinct");
    for t in tasks {
        ok(allot_task_join(t));
    }
    assert!(counters.iter().all(|c| c.load(Ordering::SeqCst) == 1));
    ok(allot_pool_free(p));
}

struct Fib {
    pool: PoolHandle,
    n: u32,
    result: u64,
}

extern "C-unwind" fn fib_task(arg: *mut c_void) {
    // SAFETY: the caller passes an exclusive `Fib` that outlives the call.
    let f = unsafe { &mut *(arg as *mut Fib) };
    if f.n < 10 {
        f.result = fib_seq(f.n);
        return;
    }
    let mut a = Fib {
        pool: f.pool,
        n: f.n - 1,
        result: 0,
    };
    let mut b = Fib {
        pool: f.pool,
        n: f.n - 2,
        result: 0,
    };
    // SAFETY: `a` and `b` live on this frame until the join returns.
    let rc = unsafe {
        allot_pool_join(
            f.pool,
            Some(fib_task),
            ptr_mut(&mut a),
            Some(fib_task),
            ptr_mut(&mut b),
        )
    };
    f.result = if rc == 0 {
        a.result + b.result
    } else {
        u64::MAX
    };
}

fn fib_seq(n: u32) -> u64 {
    if n < 2 {
        u64::from(n)
    } else {
        fib_seq(n - 1) + fib_seq(n - 2)
    }
}

#[test]
fn join_recursion_computes_fib() {
    let p = pool();
    let mut f = Fib {
        pool: p,
        n: 24,
        result: 0,
    };
    fib_task(ptr_mut(&mut f));
    assert_eq!(f.result, fib_seq(24));
    ok(allot_pool_free(p));
}

struct Inside {
    pool: PoolHandle,
    other: PoolHandle,
    me: AtomicU64,
    go: AtomicBool,
    free_own: AtomicU32,
    free_other: AtomicU32,
    shutdown: AtomicU32,
    self_join: AtomicU32,
}

extern "C-unwind" fn inside_task(arg: *mut c_void) {
    // SAFETY: the test passes an `Inside` that outlives the task.
    let s = unsafe { &*(arg as *const Inside) };
    while !s.go.load(Ordering::SeqCst) {
        std::hint::spin_loop();
    }
    s.free_own
        .store(allot_pool_free(s.pool) as u32, Ordering::SeqCst);
    s.shutdown.store(allot_shutdown() as u32, Ordering::SeqCst);
    let me = TaskHandle {
        id: s.me.load(Ordering::SeqCst),
    };
    s.self_join
        .store(allot_task_join(me) as u32, Ordering::SeqCst);
    s.free_other
        .store(allot_pool_free(s.other) as u32, Ordering::SeqCst);
}

#[test]
fn calls_that_would_wait_for_themselves_are_refused() {
    let s = Inside {
        pool: pool(),
        other: pool(),
        me: AtomicU64::new(0),
        go: AtomicBool::new(false),
        free_own: AtomicU32::new(99),
        free_other: AtomicU32::new(99),
        shutdown: AtomicU32::new(99),
        self_join: AtomicU32::new(99),
    };
    let t = spawn(s.pool, inside_task, ptr(&s)).unwrap();
    s.me.store(t.id, Ordering::SeqCst);
    s.go.store(true, Ordering::SeqCst);
    ok(allot_task_join(t));
    assert_eq!(s.free_own.load(Ordering::SeqCst), Code::Invalid as u32);
    assert_eq!(s.shutdown.load(Ordering::SeqCst), Code::Invalid as u32);
    assert_eq!(s.self_join.load(Ordering::SeqCst), Code::Invalid as u32);
    assert_eq!(
        s.free_other.load(Ordering::SeqCst),
        Code::Ok as u32,
        "another pool may be freed"
    );
    assert_eq!(workers(s.other), Err(Code::Handle));
    assert!(
        workers(s.pool).unwrap() >= 1,
        "the refused free left the pool alone"
    );
    // The same refusal from a loop body nested in a join.
    struct Nested {
        pool: PoolHandle,
        rc: AtomicU32,
    }
    extern "C-unwind" fn body(_: usize, _: usize, arg: *mut c_void) {
        // SAFETY: the test passes a `Nested` that outlives the loop.
        let n = unsafe { &*(arg as *const Nested) };
        n.rc.store(allot_pool_free(n.pool) as u32, Ordering::SeqCst);
    }
    extern "C-unwind" fn half(arg: *mut c_void) {
        // SAFETY: as in `body`.
        let n = unsafe { &*(arg as *const Nested) };
        // SAFETY: `body` matches the type; `n` outlives the loop.
        unsafe { allot_pool_parallel_for(n.pool, 0, 4, 1, Some(body), arg) };
    }
    let n = Nested {
        pool: s.pool,
        rc: AtomicU32::new(99),
    };
    // SAFETY: `half` matches the type; `n` outlives the join.
    ok(unsafe { allot_pool_join(s.pool, Some(half), ptr(&n), Some(nop), null_mut()) });
    assert_eq!(n.rc.load(Ordering::SeqCst), Code::Invalid as u32);
    ok(allot_pool_free(s.pool));
}

extern "C-unwind" fn slow_bump(arg: *mut c_void) {
    std::thread::sleep(Duration::from_millis(2));
    bump(arg);
}

#[test]
fn free_finishes_queued_tasks_and_their_handles_stay_joinable() {
    let p = pool();
    let n = AtomicUsize::new(0);
    let tasks: Vec<TaskHandle> = (0..50)
        .map(|_| spawn(p, slow_bump, ptr(&n)).unwrap())
        .collect();
    ok(allot_pool_free(p));
    assert_eq!(
        n.load(Ordering::SeqCst),
        50,
        "every queued task ran before free returned"
    );
    for t in &tasks[..25] {
        ok(allot_task_join(*t));
    }
    for t in &tasks[25..] {
        ok(allot_task_detach(*t));
    }
}

#[test]
fn freeing_a_pool_while_other_threads_use_it_is_safe() {
    for _ in 0..5 {
        let p = pool();
        let n = AtomicUsize::new(0);
        let spawned = AtomicUsize::new(0);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    let mut mine = Vec::new();
                    loop {
                        match spawn(p, bump, ptr(&n)) {
                            Ok(t) => mine.push(t),
                            Err(Code::Handle) => break,
                            Err(e) => panic!("{e:?}: {}", last_error()),
                        }
                        // SAFETY: `cover`-free body; no argument used.
                        let rc = unsafe {
                            allot_pool_parallel_for(p, 0, 64, 8, Some(nop_body), null_mut())
                        };
                        assert!(matches!(status(rc), Code::Ok | Code::Handle));
                    }
                    spawned.fetch_add(mine.len(), Ordering::SeqCst);
                    for t in mine {
                        ok(allot_task_join(t));
                    }
                });
            }
            std::thread::sleep(Duration::from_millis(20));
            ok(allot_pool_free(p));
        });
        assert_eq!(n.load(Ordering::SeqCst), spawned.load(Ordering::SeqCst));
    }
}

#[test]
fn worker_statistics_count_the_pool_tasks_and_refuse_a_bad_index() {
    let p = pool();
    let n = AtomicUsize::new(0);
    for _ in 0..50 {
        let t = spawn(p, bump, ptr(&n)).unwrap();
        ok(allot_task_join(t));
    }
    assert_eq!(n.load(Ordering::SeqCst), 50);
    let mut slots = 0u32;
    // SAFETY: valid out-pointers throughout.
    ok(unsafe { allot_pool_slots(p, &mut slots) });
    assert!(slots >= 1);
    let run = || {
        (0..slots)
            .map(|w| {
                let mut s = WorkerStatsC::default();
                // SAFETY: a valid out-pointer.
                ok(unsafe { allot_pool_worker_stats(p, w, &mut s) });
                assert_eq!(s.worker, w);
                assert!(s.cpu >= -1);
                s.tasks_run
            })
            .sum::<u64>()
    };
    // Each task is counted by its worker just after it released its
    // joiner, so the last count may lag a moment.
    let deadline = Instant::now() + Duration::from_secs(10);
    while run() != 50 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(run(), 50);
    let mut s = WorkerStatsC::default();
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_worker_stats(p, slots, &mut s) }),
        Code::Invalid
    );
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_worker_stats(p, 0, null_mut()) }),
        Code::Invalid
    );
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_slots(p, null_mut()) }),
        Code::Invalid
    );
    ok(allot_pool_free(p));
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_worker_stats(p, 0, &mut s) }),
        Code::Handle
    );
}

/// Records the worker and priority-ordered position a task ran at.
extern "C-unwind" fn note_worker(arg: *mut c_void) {
    // SAFETY: the caller passes an `AtomicUsize` that outlives the task.
    let slot = unsafe { &*(arg as *const AtomicUsize) };
    let w = allot_runtime::current_worker().expect("runs on a worker");
    slot.store(w + 1, Ordering::SeqCst);
}

#[test]
fn policies_by_name_priorities_and_named_workers_from_c() {
    let c = standalone();
    for name in [
        "local-fifo:levels=2,victims=round-robin",
        "global-lifo",
        "fifo",
    ] {
        let mut p = PoolHandle::default();
        let cname = std::ffi::CString::new(name).unwrap();
        // SAFETY: valid out-pointer and NUL-terminated name.
        ok(unsafe { allot_pool_new_policy(c, cname.as_ptr(), &mut p) });
        let mut slots = 0u32;
        // SAFETY: a valid out-pointer.
        ok(unsafe { allot_pool_slots(p, &mut slots) });
        // A task for the last slot, at each priority, runs there (the
        // standalone cell grants every CPU, so every slot is active).
        let last = slots as c_int - 1;
        for prio in [0, 1, 2] {
            let seen = AtomicUsize::new(0);
            let mut t = TaskHandle::default();
            // SAFETY: valid function, argument kept alive until the join.
            ok(unsafe {
                allot_pool_spawn_with(p, Some(note_worker), ptr(&seen), prio, last, &mut t)
            });
            ok(allot_task_join(t));
            assert_eq!(seen.load(Ordering::SeqCst), slots as usize, "{name}");
        }
        let n = AtomicUsize::new(0);
        let mut t = TaskHandle::default();
        // SAFETY: as above; -1 lets the policy place it.
        ok(unsafe { allot_pool_spawn_with(p, Some(bump), ptr(&n), 1, -1, &mut t) });
        ok(allot_task_join(t));
        assert_eq!(n.load(Ordering::SeqCst), 1);
        for (prio, worker, want) in [
            (3, -1, "priority 3"),
            (-1, -1, "priority -1"),
            (1, slots as c_int, "does not exist"),
            (1, -2, "worker -2"),
        ] {
            // SAFETY: as above; the call fails before queueing anything.
            let rc = unsafe { allot_pool_spawn_with(p, Some(bump), ptr(&n), prio, worker, &mut t) };
            assert_eq!(status(rc), Code::Invalid);
            assert!(last_error().contains(want), "{}", last_error());
        }
        ok(allot_pool_free(p));
    }
    let mut p = PoolHandle::default();
    let bad = std::ffi::CString::new("stack:levels=9").unwrap();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let rc = unsafe { allot_pool_new_policy(c, bad.as_ptr(), &mut p) };
    assert_eq!(status(rc), Code::Invalid);
    assert!(last_error().contains("local-lifo"), "{}", last_error());
    // NULL: the defaults.
    // SAFETY: valid out-pointer; a null name is allowed.
    ok(unsafe { allot_pool_new_policy(c, null(), &mut p) });
    ok(allot_pool_free(p));
    assert_eq!(allot_yield(), 0, "outside a task nothing yields");
    ok(allot_cell_free(c));
}

#[test]
fn a_pool_on_an_automatic_cell_works() {
    let mut p = PoolHandle::default();
    // SAFETY: valid out-pointer.
    ok(unsafe { allot_pool_new(CellHandle { id: 0 }, &mut p) });
    let mut f = Fib {
        pool: p,
        n: 18,
        result: 0,
    };
    fib_task(ptr_mut(&mut f));
    assert_eq!(f.result, fib_seq(18));
    ok(allot_pool_free(p));
}
