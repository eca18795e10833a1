//! The C ABI called from Rust as a C program would: results, misuse
//! (null pointers, stale, foreign and wrong-type handles, double frees,
//! calls that would wait for themselves), and concurrency around freeing.
//!
//! `allot_shutdown` is global to the process, so it is tested in its own
//! binary (`tests/abi_shutdown.rs`); nothing here calls it except from
//! inside a callback, where it must be refused.

mod abi_util;

use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::{ALL, Status};
use allot_capi::abi::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

extern "C-unwind" fn nop(_: *mut c_void) {}

extern "C-unwind" fn nop_body(_: usize, _: usize, _: *mut c_void) {}

extern "C-unwind" fn bump(arg: *mut c_void) {
    // SAFETY: every caller passes a pointer to an `AtomicUsize` that
    // outlives the task.
    unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

fn ptr<T>(r: &T) -> *mut c_void {
    r as *const T as *mut c_void
}

fn ptr_mut<T>(r: &mut T) -> *mut c_void {
    r as *mut T as *mut c_void
}

#[test]
fn null_out_pointers_are_invalid_and_name_the_function() {
    let c = standalone();
    let p = pool();
    // SAFETY: the out-pointers below are null on purpose, which the
    // library detects; everything else is valid.
    unsafe {
        assert_eq!(status(allot_cell_standalone(null_mut())), Status::Invalid);
        assert!(
            last_error().starts_with("allot_cell_standalone: out is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(
            status(allot_cell_auto(c"x".as_ptr(), null_mut())),
            Status::Invalid
        );
        let spec = Spec::default();
        assert_eq!(
            status(allot_cell_register(c"x".as_ptr(), &spec, 0, null_mut())),
            Status::Invalid
        );
        assert_eq!(status(allot_cell_grant(c, null_mut())), Status::Invalid);
        assert_eq!(
            status(allot_cell_wait_change(c, 0, 0, null_mut())),
            Status::Invalid
        );
        assert_eq!(status(allot_cell_mode(c, null_mut())), Status::Invalid);
        assert_eq!(status(allot_cell_broker_id(c, null_mut())), Status::Invalid);
        assert_eq!(status(allot_pool_new(c, null_mut())), Status::Invalid);
        assert_eq!(status(allot_pool_workers(p, null_mut())), Status::Invalid);
        assert_eq!(
            status(allot_pool_spawn(p, Some(nop), null_mut(), null_mut())),
            Status::Invalid
        );
    }
    ok(allot_pool_free(p));
    ok(allot_cell_free(c));
}

#[test]
fn null_strings_callbacks_and_bad_arguments_are_invalid() {
    let p = pool();
    let mut c = CellHandle::default();
    let mut t = TaskHandle::default();
    let spec = Spec::default();
    // SAFETY: the nulls below are detected; the other pointers are valid.
    unsafe {
        assert_eq!(status(allot_cell_auto(null(), &mut c)), Status::Invalid);
        assert_eq!(
            status(allot_cell_register(null(), &spec, 0, &mut c)),
            Status::Invalid
        );
        assert_eq!(
            status(allot_cell_register(c"x".as_ptr(), null(), 0, &mut c)),
            Status::Invalid
        );
        assert_eq!(
            status(allot_cell_auto(c"\xff\xfe".as_ptr(), &mut c)),
            Status::Invalid
        );
        assert!(last_error().contains("UTF-8"));
        let long = std::ffi::CString::new(vec![b'a'; 5000]).unwrap();
        assert_eq!(
            status(allot_cell_auto(long.as_ptr(), &mut c)),
            Status::Invalid
        );
        assert_eq!(
            status(allot_pool_spawn(p, None, null_mut(), &mut t)),
            Status::Invalid
        );
        assert_eq!(
            status(allot_pool_join(p, None, null_mut(), Some(nop), null_mut())),
            Status::Invalid
        );
        assert_eq!(
            status(allot_pool_join(p, Some(nop), null_mut(), None, null_mut())),
            Status::Invalid
        );
        assert_eq!(
            status(allot_pool_parallel_for(p, 0, 10, 1, None, null_mut())),
            Status::Invalid
        );
        assert_eq!(
            status(allot_pool_parallel_for(
                p,
                10,
                9,
                1,
                Some(nop_body),
                null_mut()
            )),
            Status::Invalid
        );
        assert!(
            last_error().contains("begin (10) is after end (9)"),
            "{}",
            last_error()
        );
    }
    assert_eq!(c, CellHandle::default(), "failed calls write nothing");
    ok(allot_pool_free(p));
}

#[test]
fn specs_are_checked_before_the_broker_is_asked() {
    let mut c = CellHandle::default();
    let no_broker = c"/nonexistent/allot-test.sock".as_ptr();
    let cases = [
        (
            Spec {
                weight: 10_001,
                ..Spec::default()
            },
            "weight",
        ),
        (
            Spec {
                min: 3,
                max: 2,
                ..Spec::default()
            },
            "above the maximum",
        ),
        (
            Spec {
                placement: 3,
                ..Spec::default()
            },
            "placement 3",
        ),
        (
            Spec {
                placement: -1,
                ..Spec::default()
            },
            "placement -1",
        ),
    ];
    for (spec, why) in cases {
        // SAFETY: valid strings, spec and out-pointer.
        let rc = unsafe { allot_cell_register_at(no_broker, c"x".as_ptr(), &spec, 0, &mut c) };
        assert_eq!(status(rc), Status::Invalid, "{spec:?}");
        assert!(last_error().contains(why), "{}", last_error());
    }
    // A valid spec gets as far as the (missing) broker; weight 0 means 1.
    let spec = Spec::default();
    // SAFETY: as above.
    let rc = unsafe { allot_cell_register_at(no_broker, c"x".as_ptr(), &spec, 0, &mut c) };
    assert_eq!(status(rc), Status::NoBroker, "{}", last_error());
    assert!(
        last_error().contains("/nonexistent/allot-test.sock"),
        "{}",
        last_error()
    );
}

#[test]
fn freed_handles_are_stale_and_double_frees_fail() {
    let c = standalone();
    let p = pool();
    let n = AtomicUsize::new(0);
    let t = spawn(p, bump, ptr(&n)).unwrap();
    ok(allot_task_join(t));
    assert_eq!(status(allot_task_join(t)), Status::Handle, "joined twice");
    assert_eq!(status(allot_task_detach(t)), Status::Handle);
    ok(allot_pool_free(p));
    assert_eq!(workers(p), Err(Status::Handle));
    assert_eq!(spawn(p, nop, null_mut()), Err(Status::Handle));
    assert_eq!(status(allot_pool_free(p)), Status::Handle, "double free");
    assert!(
        last_error().contains("stale allot_pool_t"),
        "{}",
        last_error()
    );
    ok(allot_cell_free(c));
    assert_eq!(grant(c), Err(Status::Handle));
    assert_eq!(status(allot_cell_report(c, 0, 0, 0)), Status::Handle);
    assert_eq!(status(allot_cell_free(c)), Status::Handle, "double free");
    // Slots are reused under new generations: old ids stay dead.
    let fresh: Vec<CellHandle> = (0..8).map(|_| standalone()).collect();
    assert!(fresh.iter().all(|f| f.id != c.id));
    assert_eq!(grant(c), Err(Status::Handle));
    for f in fresh {
        ok(allot_cell_free(f));
    }
}

#[test]
fn handles_of_the_wrong_type_are_rejected_by_name() {
    let c = standalone();
    let p = pool();
    let t = spawn(p, nop, null_mut()).unwrap();
    assert_eq!(grant(CellHandle { id: p.id }), Err(Status::Handle));
    assert!(
        last_error().contains("allot_pool_t passed where an allot_cell_t"),
        "{}",
        last_error()
    );
    assert_eq!(workers(PoolHandle { id: c.id }), Err(Status::Handle));
    assert!(last_error().contains("allot_cell_t passed where an allot_pool_t"));
    assert_eq!(workers(PoolHandle { id: t.id }), Err(Status::Handle));
    assert_eq!(
        status(allot_task_join(TaskHandle { id: p.id })),
        Status::Handle
    );
    assert_eq!(
        status(allot_cell_free(CellHandle { id: t.id })),
        Status::Handle
    );
    assert_eq!(
        status(allot_pool_free(PoolHandle { id: c.id })),
        Status::Handle
    );
    // Nothing was freed by the failed calls.
    ok(allot_task_join(t));
    ok(allot_pool_free(p));
    ok(allot_cell_free(c));
}

#[test]
fn null_and_made_up_handles_are_rejected() {
    for id in [0, 1, u64::MAX, 0x1234_5678_9abc_def0, u64::from(b'p') << 56] {
        assert_eq!(workers(PoolHandle { id }), Err(Status::Handle), "{id:#x}");
        assert_eq!(status(allot_pool_free(PoolHandle { id })), Status::Handle);
        assert_eq!(grant(CellHandle { id }), Err(Status::Handle));
        assert_eq!(status(allot_task_join(TaskHandle { id })), Status::Handle);
    }
    // A live handle with one bit of its generation flipped.
    let p = pool();
    assert_eq!(
        workers(PoolHandle {
            id: p.id ^ (1 << 30)
        }),
        Err(Status::Handle)
    );
    ok(allot_pool_free(p));
}

#[test]
fn strerror_describes_every_code_and_last_error_is_per_thread() {
    let unknown = allot_capi::abi::status::UNKNOWN.to_str().unwrap();
    let mut seen = Vec::new();
    for s in ALL {
        // SAFETY: allot_strerror returns a static NUL-terminated string.
        let text = unsafe { CStr::from_ptr(allot_strerror(s as c_int)) }
            .to_str()
            .unwrap();
        assert!(
            !text.is_empty() && text != unknown && !seen.contains(&text),
            "{s:?}"
        );
        seen.push(text);
    }
    for code in [-1, 13, 1000, c_int::MIN] {
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(allot_strerror(code)) };
        assert_eq!(text.to_str().unwrap(), unknown);
    }
    assert_eq!(allot_abi_version(), ABI_VERSION);

    assert_eq!(
        status(allot_pool_free(PoolHandle { id: 0 })),
        Status::Handle
    );
    let here = last_error();
    assert!(
        here.starts_with("allot_pool_free: null allot_pool_t"),
        "{here}"
    );
    let there = std::thread::spawn(last_error).join().unwrap();
    assert_eq!(there, "", "another thread has no error yet");
    let c = standalone();
    ok(allot_cell_free(c));
    assert_eq!(last_error(), here, "success leaves the detail alone");
}

#[test]
fn a_standalone_grant_is_the_allowed_cpus_and_never_changes() {
    let c = standalone();
    let g = grant(c).unwrap();
    let allowed = rustix::thread::sched_getaffinity(None).unwrap();
    let bits: u32 = g.cpus.iter().map(|w| w.count_ones()).sum();
    assert_eq!(bits, g.ncpus);
    assert_eq!(g.ncpus, allowed.count());
    for cpu in 0..1024 {
        let set = g.cpus[cpu / 64] >> (cpu % 64) & 1 == 1;
        assert_eq!(set, allowed.is_set(cpu), "CPU {cpu}");
    }
    assert_eq!(g.lent, [0; 16]);
    assert!(g.generation >= 1 && g.threads >= 1);
    let mut mode = -1;
    let mut id = 7;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(allot_cell_mode(c, &mut mode));
        ok(allot_cell_broker_id(c, &mut id));
    }
    assert_eq!((mode, id), (MODE_STANDALONE, 0));
    ok(allot_cell_report(c, 1, 2, 3));

    let mut h = Grant::default();
    let t0 = Instant::now();
    // SAFETY: valid out-pointer.
    let rc = unsafe { allot_cell_wait_change(c, g.generation, 20_000_000, &mut h) };
    assert_eq!(status(rc), Status::Timeout);
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!(h, g, "*out holds the current grant on timeout");
    // SAFETY: valid out-pointer.
    let rc = unsafe { allot_cell_wait_change(c, g.generation, 0, &mut h) };
    assert_eq!(status(rc), Status::Timeout);
    // A generation other than the current one returns at once.
    // SAFETY: valid out-pointer.
    ok(unsafe { allot_cell_wait_change(c, g.generation + 1, -1, &mut h) });
    assert_eq!(h, g);
    ok(allot_cell_free(c));
}

#[test]
fn an_unbounded_wait_ends_when_the_cell_is_freed() {
    let c = standalone();
    let g = grant(c).unwrap();
    let waiter = std::thread::spawn(move || {
        let mut h = Grant::default();
        // SAFETY: valid out-pointer.
        status(unsafe { allot_cell_wait_change(c, g.generation, -1, &mut h) })
    });
    std::thread::sleep(Duration::from_millis(80));
    let t0 = Instant::now();
    ok(allot_cell_free(c));
    assert_eq!(waiter.join().unwrap(), Status::Handle);
    assert!(t0.elapsed() < Duration::from_secs(2));
}

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
    assert_eq!(status(rc), Status::Handle);
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
    assert_eq!(s.free_own.load(Ordering::SeqCst), Status::Invalid as u32);
    assert_eq!(s.shutdown.load(Ordering::SeqCst), Status::Invalid as u32);
    assert_eq!(s.self_join.load(Ordering::SeqCst), Status::Invalid as u32);
    assert_eq!(
        s.free_other.load(Ordering::SeqCst),
        Status::Ok as u32,
        "another pool may be freed"
    );
    assert_eq!(workers(s.other), Err(Status::Handle));
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
    assert_eq!(n.rc.load(Ordering::SeqCst), Status::Invalid as u32);
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
                            Err(Status::Handle) => break,
                            Err(e) => panic!("{e:?}: {}", last_error()),
                        }
                        // SAFETY: `cover`-free body; no argument used.
                        let rc = unsafe {
                            allot_pool_parallel_for(p, 0, 64, 8, Some(nop_body), null_mut())
                        };
                        assert!(matches!(status(rc), Status::Ok | Status::Handle));
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

#[test]
fn many_cells_and_pools_come_and_go() {
    for _ in 0..20 {
        let p = pool();
        let n = AtomicUsize::new(0);
        let t = spawn(p, bump, ptr(&n)).unwrap();
        ok(allot_task_join(t));
        ok(allot_pool_free(p));
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }
}

extern "C-unwind" fn panicking(_: *mut c_void) {
    panic!("a callback unwinds");
}

/// Child half of `an_unwinding_callback_aborts_the_process`.
#[test]
#[ignore = "run by an_unwinding_callback_aborts_the_process in a child process"]
fn child_spawns_an_unwinding_callback() {
    let p = pool();
    if let Ok(t) = spawn(p, panicking, null_mut()) {
        allot_task_join(t);
    }
    // Reaching here means the unwind was swallowed: the parent sees exit 0.
}

#[test]
fn an_unwinding_callback_aborts_the_process() {
    use std::os::unix::process::ExitStatusExt;
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "child_spawns_an_unwinding_callback",
            "--ignored",
            "--nocapture",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(SIGABRT),
        "{:?}\n{stderr}",
        out.status
    );
    assert!(stderr.contains("a callback unwinds"), "{stderr}");
}

/// `SIGABRT` on Linux (every architecture).
const SIGABRT: i32 = 6;

#[test]
fn automatic_cells_are_one_cell_behind_many_handles() {
    let mut a = CellHandle::default();
    let mut b = CellHandle::default();
    // SAFETY: valid strings and out-pointers.
    unsafe {
        ok(allot_cell_auto(c"capi-auto".as_ptr(), &mut a));
        ok(allot_cell_auto(c"ignored".as_ptr(), &mut b));
    }
    assert_ne!(a.id, b.id, "each call returns its own handle");
    let (mut ma, mut mb) = (-1, -1);
    // SAFETY: valid out-pointers.
    unsafe {
        ok(allot_cell_mode(a, &mut ma));
        ok(allot_cell_mode(b, &mut mb));
    }
    assert_eq!(ma, mb);
    ok(allot_cell_free(a));
    assert!(grant(b).is_ok(), "freeing one handle leaves the other");
    ok(allot_cell_free(b));
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
        Status::Invalid
    );
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_worker_stats(p, 0, null_mut()) }),
        Status::Invalid
    );
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_slots(p, null_mut()) }),
        Status::Invalid
    );
    ok(allot_pool_free(p));
    assert_eq!(
        // SAFETY: valid (or deliberately null) out-pointers.
        status(unsafe { allot_pool_worker_stats(p, 0, &mut s) }),
        Status::Handle
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
            assert_eq!(status(rc), Status::Invalid);
            assert!(last_error().contains(want), "{}", last_error());
        }
        ok(allot_pool_free(p));
    }
    let mut p = PoolHandle::default();
    let bad = std::ffi::CString::new("stack:levels=9").unwrap();
    // SAFETY: valid out-pointer and NUL-terminated name.
    let rc = unsafe { allot_pool_new_policy(c, bad.as_ptr(), &mut p) };
    assert_eq!(status(rc), Status::Invalid);
    assert!(last_error().contains("local-lifo"), "{}", last_error());
    // NULL: the defaults.
    // SAFETY: valid out-pointer; a null name is allowed.
    ok(unsafe { allot_pool_new_policy(c, null(), &mut p) });
    ok(allot_pool_free(p));
    assert_eq!(allot_yield(), 0, "outside a task nothing yields");
    ok(allot_cell_free(c));
}
