//! The C ABI's cells against a real broker (in this process, dry-run
//! backend, on a private socket): registration, admission answers mapped
//! to `ALLOT_ERR_REFUSED` / `ALLOT_ERR_NEVER`, grant changes seen through
//! `allot_cell_wait_change`, reports, pools on registered cells, and what
//! happens when the broker goes away. The launchers' calls are in
//! `abi_launcher.rs`.

mod abi_util;

use abi_util::broker::*;
use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::goals::*;
use allot_capi::abi::memory::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Code;
use allot_capi::abi::time::*;
use allot_capi::abi::*;
use allot_client::Client;
use allot_spec::{CellSpec, TimeContract};
use std::ffi::{CStr, c_void};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

#[test]
fn a_registered_cell_has_a_broker_id_and_a_grant() {
    let b = TestBroker::start();
    let c = b.register("capi-basic", Spec::default(), false).unwrap();
    let mut mode = -1;
    let mut id = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(allot_cell_mode(c, &mut mode));
        ok(allot_cell_broker_id(c, &mut id));
    }
    assert_eq!(mode, MODE_REGISTERED);
    assert_ne!(id, 0);
    let g = grant(c).unwrap();
    assert!(g.generation >= 1 && g.ncpus >= 1 && g.threads >= 1, "{g:?}");
    ok(allot_cell_report(c, 1, 1, 10));
    ok(allot_cell_free(c));
}

#[test]
fn admission_answers_map_to_refused_and_never() {
    let b = TestBroker::start();
    let n = cpus();
    let never = Spec {
        min: n + 1000,
        ..Spec::default()
    };
    assert_eq!(b.register("capi-never", never, false), Err(Code::Never));
    assert!(
        last_error().starts_with("allot_cell_register_at: "),
        "{}",
        last_error()
    );

    // Another process holds every CPU as a guarantee.
    let big = b.register_other(CellSpec {
        min: n,
        ..CellSpec::default()
    });
    let one = Spec {
        min: 1,
        ..Spec::default()
    };
    assert_eq!(b.register("capi-refused", one, false), Err(Code::Refused));
    assert!(
        last_error().contains("capi-other"),
        "names who holds it: {}",
        last_error()
    );

    // With wait, the request queues until the big cell leaves.
    let socket = b.socket.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = CellHandle::default();
        // SAFETY: valid strings, spec and out-pointer.
        let rc = unsafe {
            allot_cell_register_at(socket.as_ptr(), c"capi-queued".as_ptr(), &one, 1, &mut c)
        };
        (status(rc), c)
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !waiter.is_finished(),
        "admitted while the guarantees were taken"
    );
    drop(big);
    let (rc, queued) = waiter.join().unwrap();
    assert_eq!(rc, Code::Ok, "{}", last_error());
    assert!(grant(queued).unwrap().ncpus >= 1);

    // One registered cell per process: a second one is refused as invalid.
    assert_eq!(
        b.register("capi-second", Spec::default(), false),
        Err(Code::Invalid)
    );
    assert!(last_error().contains("already in cell"), "{}", last_error());
    ok(allot_cell_free(queued));
}

#[test]
fn a_grant_change_wakes_the_waiter() {
    let b = TestBroker::start();
    let a = b.register("capi-a", Spec::default(), false).unwrap();
    let g = grant(a).unwrap();
    let waiter = std::thread::spawn(move || {
        let mut h = CGrant::default();
        // SAFETY: valid out-pointer.
        let rc = unsafe { allot_cell_wait_change(a, g.generation, 5_000_000_000, &mut h) };
        (status(rc), h)
    });
    // A guaranteed newcomer takes CPUs from the best-effort cell (or at
    // least re-plans it): the generation moves.
    let other = b.register_other(CellSpec {
        min: 1,
        ..CellSpec::default()
    });
    let (rc, h) = waiter.join().unwrap();
    assert_eq!(rc, Code::Ok, "{}", last_error());
    assert!(h.generation > g.generation);
    drop(other);
    ok(allot_cell_free(a));
}

extern "C-unwind" fn bump(arg: *mut c_void) {
    // SAFETY: the test passes an `AtomicUsize` that outlives the task.
    unsafe { &*(arg as *const AtomicUsize) }.fetch_add(1, Ordering::SeqCst);
}

#[test]
fn a_pool_on_a_registered_cell_keeps_it_after_its_handle_is_freed() {
    let b = TestBroker::start();
    let c = b.register("capi-pool", Spec::default(), false).unwrap();
    let g = grant(c).unwrap();
    let mut p = PoolHandle::default();
    // SAFETY: valid out-pointer.
    ok(unsafe { allot_pool_new(c, &mut p) });
    ok(allot_cell_free(c));
    let w = workers(p).unwrap();
    assert!(w >= 1 && w <= g.ncpus, "{w} workers for {g:?}");
    let n = AtomicUsize::new(0);
    let tasks: Vec<_> = (0..100)
        .map(|_| spawn(p, bump, &n as *const AtomicUsize as *mut c_void).unwrap())
        .collect();
    for t in tasks {
        ok(allot_task_join(t));
    }
    assert_eq!(n.load(Ordering::SeqCst), 100);
    ok(allot_pool_free(p));
}

#[test]
fn without_the_broker_reports_say_no_broker_and_the_grant_stays() {
    let mut b = TestBroker::start();
    let c = b.register("capi-orphan", Spec::default(), false).unwrap();
    let g = grant(c).unwrap();
    b.stop();
    // The first report may still be written into the dying socket; within
    // a few tries the connection is known to be gone.
    let mut last = Code::Ok;
    for _ in 0..50 {
        last = status(allot_cell_report(c, 0, 0, 0));
        if last != Code::Ok {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(last, Code::NoBroker, "{}", last_error());
    assert_eq!(grant(c).unwrap().cpus, g.cpus, "the last grant is kept");
    ok(allot_cell_free(c));
}

fn register_timed(b: &TestBroker, name: &CStr, spec: Spec, time: TimeC, wait: bool) -> Code {
    let mut c = CellHandle::default();
    // SAFETY: valid strings, spec, time and out-pointer.
    let rc = unsafe {
        allot_cell_register_timed(
            b.socket.as_ptr(),
            name.as_ptr(),
            &spec,
            &time,
            i32::from(wait),
            &mut c,
        )
    };
    if status(rc) == Code::Ok {
        ok(allot_cell_free(c));
    }
    status(rc)
}

#[test]
fn a_time_triggered_cell_reads_its_windows_and_over_commit_is_refused() {
    let b = TestBroker::start();
    let n = cpus();
    let one = Spec {
        min: 1,
        ..Spec::default()
    };
    let triggered = TimeC {
        kind: TIME_TRIGGERED,
        period_us: 10_000,
        budget_us: 3_000,
        ..TimeC::default()
    };

    // Bad contracts are refused before anything reaches the broker.
    let stray = TimeC {
        fraction_ppm: 5,
        ..triggered
    };
    assert_eq!(
        register_timed(&b, c"capi-bad", one, stray, false),
        Code::Invalid
    );
    assert!(last_error().contains("fraction_ppm"), "{}", last_error());
    let no_cpu = Spec::default();
    assert_eq!(
        register_timed(&b, c"capi-bad", no_cpu, triggered, false),
        Code::Invalid
    );
    let long = TimeC {
        budget_us: 20_000,
        ..triggered
    };
    assert_eq!(
        register_timed(&b, c"capi-bad", one, long, false),
        Code::Invalid
    );
    assert!(last_error().contains("budget"), "{}", last_error());
    // Time promises may cover all CPUs but one (kept for space cells).
    assert!(n >= 2, "this test needs two CPUs");
    let everywhere = Spec {
        min: n,
        ..Spec::default()
    };
    assert_eq!(
        register_timed(&b, c"capi-never", everywhere, triggered, false),
        Code::Never
    );

    // Another process's time-fraction cell takes 90 % of every CPU that
    // may carry time: a window finds no CPU free of other promises.
    let big = b.register_other(CellSpec {
        min: n - 1,
        max: n - 1,
        time: TimeContract::Fraction {
            ppm: 900_000,
            slice_us: 0,
        },
        ..CellSpec::default()
    });
    assert_eq!(
        register_timed(&b, c"capi-refused", one, triggered, false),
        Code::Refused
    );
    // Queued, it is admitted when the fraction cell leaves.
    let socket = b.socket.clone();
    let waiter = std::thread::spawn(move || {
        let mut c = CellHandle::default();
        // SAFETY: valid strings, spec, time and out-pointer.
        let rc = unsafe {
            allot_cell_register_timed(
                socket.as_ptr(),
                c"capi-timed".as_ptr(),
                &one,
                &triggered,
                1,
                &mut c,
            )
        };
        (status(rc), c)
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !waiter.is_finished(),
        "admitted over the fraction cell's promise"
    );
    drop(big);
    let (rc, cell) = waiter.join().unwrap();
    assert_eq!(rc, Code::Ok, "{}", last_error());

    // The page carries the windows; over a few periods the call sees the
    // cell inside and outside them, with the right edges.
    let mut seen = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !(seen.0 && seen.1) && std::time::Instant::now() < deadline {
        let mut w = WindowC::default();
        // The call answers for some instant between `before` and `after`
        // (the thread may be preempted on either side of it).
        let before = allot_proto::window::monotonic_ns();
        // SAFETY: a valid out-pointer.
        ok(unsafe { allot_cell_window(cell, &mut w) });
        let after = allot_proto::window::monotonic_ns();
        assert_eq!((w.period_us, w.budget_us), (10_000, 3_000), "{w:?}");
        assert!(
            w.origin_ns > 0 && w.edge_ns > before,
            "the edge is ahead: {w:?}"
        );
        if w.open != 0 {
            seen.0 = true;
            assert!(
                w.edge_ns <= after + 3_000_000,
                "closes within a budget: {w:?}"
            );
        } else {
            seen.1 = true;
            assert!(
                w.edge_ns <= after + 10_000_000,
                "opens within a period: {w:?}"
            );
        }
        std::thread::sleep(Duration::from_micros(700));
    }
    assert!(
        seen.0 && seen.1,
        "saw open {} and closed {}",
        seen.0,
        seen.1
    );
    // Waiting for a window returns once the next one has opened, never
    // before (a descheduled test thread may return later still).
    for _ in 0..3 {
        let mut w = WindowC::default();
        let before = allot_proto::window::monotonic_ns();
        // SAFETY: a valid out-pointer.
        ok(unsafe { allot_cell_wait_window(cell, &mut w) });
        let after = allot_proto::window::monotonic_ns();
        let schedule = allot_proto::Window {
            origin_ns: w.origin_ns,
            period_us: w.period_us,
            budget_us: w.budget_us,
        };
        let opened = schedule.start_at_or_before(after);
        assert!(
            opened > before,
            "returned at {after} before the opening after {before}: {w:?}"
        );
    }
    ok(allot_cell_free(cell));

    // A best-effort cell has no windows.
    let c = b.register("capi-plain", Spec::default(), false).unwrap();
    let mut w = WindowC::default();
    // SAFETY: a valid out-pointer.
    ok(unsafe { allot_cell_window(c, &mut w) });
    assert_eq!((w.period_us, w.open, w.edge_ns), (0, 1, u64::MAX));
    // ... and nothing to wait for.
    let mut w = WindowC::default();
    // SAFETY: a valid out-pointer.
    ok(unsafe { allot_cell_wait_window(c, &mut w) });
    assert_eq!((w.period_us, w.open, w.edge_ns), (0, 1, u64::MAX));
    ok(allot_cell_free(c));
}

#[test]
fn memory_set_from_c_is_checked_and_refused_without_memory_control() {
    let b = TestBroker::start();
    let cell = b.register("capi-memory", Spec::default(), false).unwrap();
    // A guarantee above the limit: invalid before the broker is asked.
    let rc = allot_cell_set_memory(cell, 8 << 30, 2 << 30);
    assert_eq!(status(rc), Code::Invalid, "{}", last_error());
    assert!(last_error().contains("above the limit"), "{}", last_error());
    // The dry-run backend has no memory control: never, with the reason,
    // and the cell keeps its spec.
    let rc = allot_cell_set_memory(cell, 0, 1 << 30);
    assert_eq!(status(rc), Code::Never, "{}", last_error());
    assert!(
        last_error().contains("no memory control"),
        "{}",
        last_error()
    );
    // Nor cache ways or bandwidth (the dry-run backend touches nothing);
    // a ceiling above 100 % is invalid before the broker is asked.
    let rc = allot_cell_set_cache(cell, 2, 0);
    assert_eq!(status(rc), Code::Never, "{}", last_error());
    assert!(
        last_error().contains("no cache or bandwidth"),
        "{}",
        last_error()
    );
    assert_eq!(status(allot_cell_set_cache(cell, 0, 150)), Code::Invalid);
    let st = Client::connect(&b.path).unwrap().status().unwrap();
    let c = st.cells.iter().find(|c| c.name == "capi-memory").unwrap();
    assert_eq!((c.spec.memory_min, c.spec.memory_max), (0, 0));
    assert_eq!((c.spec.cache_ways, c.spec.mem_bandwidth), (0, 0));
    ok(allot_cell_free(cell));
    // A standalone cell has no broker to ask.
    let mut alone = CellHandle::default();
    // SAFETY: a valid out-pointer.
    ok(unsafe { allot_cell_standalone(&mut alone) });
    assert_eq!(
        status(allot_cell_set_memory(alone, 0, 1 << 30)),
        Code::NoBroker
    );
    ok(allot_cell_free(alone));
}

#[test]
fn a_goal_set_from_c_and_its_heartbeats_reach_the_broker() {
    let b = TestBroker::start();
    let cell = b.register("capi-goal", Spec::default(), false).unwrap();
    // SAFETY: a valid handle and NUL-terminated strings.
    ok(unsafe { allot_cell_set_goal(cell, c"rate=50/s".as_ptr()) });
    for bad in [c"fast", c"rate=0/s"] {
        // SAFETY: as above.
        let rc = unsafe { allot_cell_set_goal(cell, bad.as_ptr()) };
        assert_eq!(status(rc), Code::Invalid, "{}", last_error());
    }
    // SAFETY: a null goal is allowed by the contract (refused, not read).
    let rc = unsafe { allot_cell_set_goal(cell, std::ptr::null()) };
    assert_eq!(status(rc), Code::Invalid);
    // 100 units and 100 latencies of 1 ms a tick, for half a second.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut status_doc = None;
    while std::time::Instant::now() < deadline {
        ok(allot_heartbeat(cell, 100));
        for _ in 0..100 {
            ok(allot_report_latency(cell, 1_000_000));
        }
        std::thread::sleep(Duration::from_millis(20));
        let st = Client::connect(&b.path).unwrap().status().unwrap();
        let c = st
            .cells
            .iter()
            .find(|c| c.name == "capi-goal")
            .unwrap()
            .clone();
        if c.perf
            .as_ref()
            .is_some_and(|p| p.rate_per_s.is_some() && p.p99_us.is_some())
        {
            status_doc = Some(c);
            break;
        }
    }
    let c = status_doc.expect("the broker read the report page within 10 s");
    assert_eq!(
        c.spec.goal,
        allot_proto::status::GoalStatus::Rate {
            milli_per_s: 50_000
        }
    );
    let p = c.perf.unwrap();
    assert!(p.rate_per_s.unwrap() > 0.0, "{p:?}");
    assert!((1_000..=1_280).contains(&p.p99_us.unwrap()), "{p:?}");
    ok(allot_cell_free(cell));
    // A freed handle is refused.
    assert_eq!(status(allot_heartbeat(cell, 1)), Code::Handle);
}
