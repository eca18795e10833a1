//! The C ABI's cells against a real broker (in this process, dry-run
//! backend, on a private socket): registration, admission answers mapped
//! to `ALLOT_ERR_REFUSED` / `ALLOT_ERR_NEVER`, grant changes seen through
//! `allot_cell_wait_change`, reports, pools on registered cells, and what
//! happens when the broker goes away.

mod abi_util;

use abi_util::*;
use allot_broker::{Broker, Config, StopHandle};
use allot_capi::abi::cell::*;
use allot_capi::abi::goals::*;
use allot_capi::abi::memory::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::Status;
use allot_capi::abi::time::*;
use allot_capi::abi::*;
use allot_client::{CellSpec, Client, TimeContract};
use std::ffi::{CStr, CString, c_char, c_void};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

struct TestBroker {
    _dir: tempfile::TempDir,
    path: PathBuf,
    socket: CString,
    stop: StopHandle,
    thread: Option<JoinHandle<()>>,
}

impl TestBroker {
    fn start() -> TestBroker {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("allot.sock");
        let mut cfg = Config::new(socket.clone());
        cfg.backend = allot_enforce::BackendKind::DryRun;
        cfg.tick = Duration::from_millis(20);
        let broker = Broker::start(cfg).unwrap();
        let stop = broker.stop_handle();
        let thread = std::thread::spawn(move || broker.run().unwrap());
        TestBroker {
            socket: CString::new(socket.to_str().unwrap()).unwrap(),
            path: socket,
            _dir: dir,
            stop,
            thread: Some(thread),
        }
    }

    fn register(&self, name: &str, spec: Spec, wait: bool) -> Result<CellHandle, Status> {
        let name = CString::new(name).unwrap();
        let mut c = CellHandle::default();
        // SAFETY: valid strings, spec and out-pointer.
        let rc = unsafe {
            allot_cell_register_at(
                self.socket.as_ptr(),
                name.as_ptr(),
                &spec,
                i32::from(wait),
                &mut c,
            )
        };
        match status(rc) {
            Status::Ok => Ok(c),
            s => Err(s),
        }
    }

    /// A cell for another process (the broker admits one cell per
    /// process): a `sleep` child, registered through the Rust client.
    fn register_other(&self, spec: CellSpec) -> Other {
        let child = Command::new("sleep").arg("60").spawn().unwrap();
        let mut client = Client::connect(&self.path).unwrap();
        let reg = client
            .register("capi-other", spec, &[child.id()], false, false, |_, _| {})
            .unwrap();
        Other {
            child,
            client,
            cell: reg.cell,
        }
    }

    fn stop(&mut self) {
        self.stop.stop();
        if let Some(t) = self.thread.take() {
            t.join().unwrap();
        }
    }
}

impl Drop for TestBroker {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Another process's cell; released (and the process killed) on drop.
struct Other {
    child: Child,
    client: Client,
    cell: u64,
}

impl Drop for Other {
    fn drop(&mut self) {
        let _ = self.client.release(self.cell);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn cpus() -> u32 {
    rustix::thread::sched_getaffinity(None).unwrap().count()
}

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
    assert_eq!(b.register("capi-never", never, false), Err(Status::Never));
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
    assert_eq!(b.register("capi-refused", one, false), Err(Status::Refused));
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
    assert_eq!(rc, Status::Ok, "{}", last_error());
    assert!(grant(queued).unwrap().ncpus >= 1);

    // One registered cell per process: a second one is refused as invalid.
    assert_eq!(
        b.register("capi-second", Spec::default(), false),
        Err(Status::Invalid)
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
        let mut h = Grant::default();
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
    assert_eq!(rc, Status::Ok, "{}", last_error());
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
    let mut last = Status::Ok;
    for _ in 0..50 {
        last = status(allot_cell_report(c, 0, 0, 0));
        if last != Status::Ok {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(last, Status::NoBroker, "{}", last_error());
    assert_eq!(grant(c).unwrap().cpus, g.cpus, "the last grant is kept");
    ok(allot_cell_free(c));
}

fn register_timed(b: &TestBroker, name: &CStr, spec: Spec, time: TimeC, wait: bool) -> Status {
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
    if status(rc) == Status::Ok {
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
        Status::Invalid
    );
    assert!(last_error().contains("fraction_ppm"), "{}", last_error());
    let no_cpu = Spec::default();
    assert_eq!(
        register_timed(&b, c"capi-bad", no_cpu, triggered, false),
        Status::Invalid
    );
    let long = TimeC {
        budget_us: 20_000,
        ..triggered
    };
    assert_eq!(
        register_timed(&b, c"capi-bad", one, long, false),
        Status::Invalid
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
        Status::Never
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
        Status::Refused
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
    assert_eq!(rc, Status::Ok, "{}", last_error());

    // The page carries the windows; over a few periods the call sees the
    // cell inside and outside them, with the right edges.
    let mut seen = (false, false);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !(seen.0 && seen.1) && std::time::Instant::now() < deadline {
        let mut w = WindowC::default();
        let now = allot_proto::window::monotonic_ns();
        // SAFETY: a valid out-pointer.
        ok(unsafe { allot_cell_window(cell, &mut w) });
        assert_eq!((w.period_us, w.budget_us), (10_000, 3_000), "{w:?}");
        assert!(
            w.origin_ns > 0 && w.edge_ns > now,
            "the edge is ahead: {w:?}"
        );
        if w.open != 0 {
            seen.0 = true;
            assert!(
                w.edge_ns <= now + 3_000_000,
                "closes within a budget: {w:?}"
            );
        } else {
            seen.1 = true;
            assert!(
                w.edge_ns <= now + 10_000_000,
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
    assert_eq!(status(rc), Status::Invalid, "{}", last_error());
    assert!(last_error().contains("above the limit"), "{}", last_error());
    // The dry-run backend has no memory control: never, with the reason,
    // and the cell keeps its spec.
    let rc = allot_cell_set_memory(cell, 0, 1 << 30);
    assert_eq!(status(rc), Status::Never, "{}", last_error());
    assert!(
        last_error().contains("no memory control"),
        "{}",
        last_error()
    );
    // Nor cache ways or bandwidth (the dry-run backend touches nothing);
    // a ceiling above 100 % is invalid before the broker is asked.
    let rc = allot_cell_set_cache(cell, 2, 0);
    assert_eq!(status(rc), Status::Never, "{}", last_error());
    assert!(
        last_error().contains("no cache or bandwidth"),
        "{}",
        last_error()
    );
    assert_eq!(status(allot_cell_set_cache(cell, 0, 150)), Status::Invalid);
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
        Status::NoBroker
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
        assert_eq!(status(rc), Status::Invalid, "{}", last_error());
    }
    // SAFETY: a null goal is allowed by the contract (refused, not read).
    let rc = unsafe { allot_cell_set_goal(cell, std::ptr::null()) };
    assert_eq!(status(rc), Status::Invalid);
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
    assert_eq!(status(allot_heartbeat(cell, 1)), Status::Handle);
}

/// Collects what `allot_cell_environment` sets.
unsafe extern "C" fn collect(name: *const c_char, value: *const c_char, arg: *mut c_void) {
    // SAFETY: the library passes NUL-terminated strings and our `arg`.
    let (name, value, vars) = unsafe {
        (
            CStr::from_ptr(name).to_str().unwrap().to_owned(),
            CStr::from_ptr(value).to_str().unwrap().to_owned(),
            &mut *arg.cast::<Vec<(String, String)>>(),
        )
    };
    vars.push((name, value));
}

#[test]
fn a_launcher_gets_allot_s_thread_composability_manager() {
    let b = TestBroker::start();
    let c = b.register("capi-tcm", Spec::default(), false).unwrap();
    let t = tempfile::tempdir().unwrap();
    let trusted = allot_proto::dirs::TrustedDir::create(t.path(), 0o700).unwrap();
    let dir = allot_capi::tcm::install_tcm(&trusted, 0o700).unwrap();
    let dir_c = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: valid strings, callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_tcm_environment(
            c,
            dir_c.as_ptr(),
            c"/opt/lib".as_ptr(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let get = |k: &str| vars.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    assert_eq!(get("TCM_ENABLE").as_deref(), Some("1"));
    assert_eq!(
        get("LD_LIBRARY_PATH").unwrap(),
        format!("{}:/opt/lib", dir.display())
    );
    // The permit table: open, inheritable, the table's size.
    let fd: i32 = get("ALLOT_TCM_FD").unwrap().parse().unwrap();
    // SAFETY: the call opened it for us; we own it from here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    assert!(
        !rustix::io::fcntl_getfd(&fd)
            .unwrap()
            .contains(rustix::io::FdFlags::CLOEXEC)
    );
    assert_eq!(
        std::fs::File::from(fd).metadata().unwrap().len(),
        allot_capi::tcm::TABLE_BYTES
    );
    // A directory without the library: a clear error, nothing set.
    vars.clear();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: as above.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_tcm_environment(
            c,
            c"/nonexistent".as_ptr(),
            std::ptr::null(),
            Some(collect),
            arg,
        )
    };
    assert_eq!(status(rc), Status::Invalid);
    assert!(vars.is_empty());
    assert!(
        last_error().contains("allot shim --out"),
        "{}",
        last_error()
    );
    ok(allot_cell_free(c));
}

#[test]
fn a_launcher_gets_the_environment_allot_run_gives() {
    let b = TestBroker::start();
    let spec = Spec {
        max: 1,
        ..Spec::default()
    };
    let c = b.register("capi-environ", spec, false).unwrap();
    let mut id = 0;
    // SAFETY: a valid out-pointer.
    unsafe { ok(allot_cell_broker_id(c, &mut id)) };
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: valid strings, callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            c"/opt/allot/liballot_shim.so".as_ptr(),
            c"/other.so".as_ptr(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let get = |k: &str| {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{k} not set: {vars:?}"))
    };
    assert_eq!(get("ALLOT_CELL"), id.to_string());
    assert_eq!(get("ALLOT_SOCKET"), b.path.to_str().unwrap());
    assert_eq!(get("LD_PRELOAD"), "/opt/allot/liballot_shim.so:/other.so");
    assert_eq!(get("OMP_NUM_THREADS"), "1", "the cell's maximum");
    assert_eq!(get("OPENBLAS_NUM_THREADS"), "1");
    // The page descriptor is open, inheritable, and the cell's page.
    let fd: i32 = get("ALLOT_GRANT_FD").parse().unwrap();
    // SAFETY: the call opened it for us; we own it from here.
    let fd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let flags = rustix::io::fcntl_getfd(&fd).unwrap();
    assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
    let page = allot_proto::PageMap::open(fd).unwrap();
    assert_eq!(page.page().read().cell, id);

    // No callback: a clear error, nothing set.
    // SAFETY: null strings are allowed; a null callback is the error.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            std::ptr::null(),
            std::ptr::null(),
            None,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(status(rc), Status::Invalid);
    ok(allot_cell_free(c));

    // Without a maximum, the ceiling is every CPU the broker gives cells,
    // whatever the first grant.
    let c = b
        .register("capi-environ-all", Spec::default(), false)
        .unwrap();
    let mut vars: Vec<(String, String)> = Vec::new();
    let arg = (&raw mut vars).cast::<c_void>();
    // SAFETY: null strings are allowed; a valid callback and argument.
    let rc = unsafe {
        allot_capi::abi::launcher::allot_cell_environment(
            c,
            c"/opt/allot/liballot_shim.so".as_ptr(),
            std::ptr::null(),
            Some(collect),
            arg,
        )
    };
    ok(rc);
    let omp = vars.iter().find(|(n, _)| n == "OMP_NUM_THREADS").unwrap();
    assert_eq!(omp.1, cpus().to_string());
    let (_, fd) = vars.iter().find(|(n, _)| n == "ALLOT_GRANT_FD").unwrap();
    // SAFETY: the call opened it for us; closing it is ours to do.
    drop(unsafe {
        <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd.parse().unwrap())
    });
    ok(allot_cell_free(c));
}

#[test]
fn a_ticket_lets_another_process_join_the_cell_and_nothing_else_does() {
    let b = TestBroker::start();
    // The registrant's side: a ticket of a cell this process registered.
    let mine = b.register("capi-ticket", Spec::default(), false).unwrap();
    let mut buf = [0 as c_char; allot_capi::abi::launcher::TICKET_MAX];
    // SAFETY: a buffer of ALLOT_TICKET_MAX bytes.
    ok(unsafe { allot_capi::abi::launcher::allot_cell_ticket(mine, buf.as_mut_ptr(), buf.len()) });
    // SAFETY: the library wrote a NUL-terminated string.
    let text = unsafe { CStr::from_ptr(buf.as_ptr()) }
        .to_str()
        .unwrap()
        .to_owned();
    let mut id = 0;
    // SAFETY: a valid out-pointer.
    unsafe { ok(allot_cell_broker_id(mine, &mut id)) };
    assert!(text.starts_with(&format!("{id}:")), "{text}");
    // Too short a buffer: a clear error.
    // SAFETY: a buffer of 4 bytes.
    let rc = unsafe { allot_capi::abi::launcher::allot_cell_ticket(mine, buf.as_mut_ptr(), 4) };
    assert_eq!(status(rc), Status::Invalid);
    ok(allot_cell_free(mine));

    // The joiner's side: a cell of another process (its registration's
    // ticket), which this process attaches to.
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let mut client = Client::connect(&b.path).unwrap();
    let reg = client
        .register(
            "capi-job",
            CellSpec::default(),
            &[child.id()],
            false,
            false,
            |_, _| {},
        )
        .unwrap();
    let attach = |ticket: &str| {
        let t = CString::new(ticket).unwrap();
        let mut c = CellHandle::default();
        // SAFETY: valid strings and out-pointer.
        let rc = unsafe {
            allot_capi::abi::launcher::allot_cell_attach_at(b.socket.as_ptr(), t.as_ptr(), &mut c)
        };
        (status(rc), c)
    };
    assert_eq!(attach("not a ticket").0, Status::Invalid);
    assert_eq!(
        attach(&format!("{}:{}", reg.cell, reg.token ^ 1)).0,
        Status::Permission
    );
    assert_eq!(
        attach(&format!("{}:{}", reg.cell + 100, reg.token)).0,
        Status::NoBroker
    );
    let (st, joined) = attach(&format!("{}:{}", reg.cell, reg.token));
    assert_eq!(st, Status::Ok, "{}", last_error());
    let mut mode = -1;
    let mut joined_id = 0;
    // SAFETY: valid out-pointers.
    unsafe {
        ok(allot_cell_mode(joined, &mut mode));
        ok(allot_cell_broker_id(joined, &mut joined_id));
    }
    assert_eq!((mode, joined_id), (MODE_JOINED, reg.cell));
    assert!(grant(joined).unwrap().ncpus >= 1);
    // The broker counts this process among the cell's members.
    let members = client
        .status()
        .unwrap()
        .cells
        .into_iter()
        .find(|c| c.id == reg.cell)
        .unwrap()
        .pids;
    assert!(members.contains(&std::process::id()), "{members:?}");
    // Once in a cell, a process cannot attach to another.
    assert_eq!(
        attach(&format!("{}:{}", reg.cell, reg.token)).0,
        Status::Invalid
    );
    // Freeing the joined handle leaves the cell to its processes.
    ok(allot_cell_free(joined));
    assert!(
        client
            .status()
            .unwrap()
            .cells
            .iter()
            .any(|c| c.id == reg.cell)
    );
    let _ = client.release(reg.cell);
    let mut child = child;
    let _ = child.kill();
    let _ = child.wait();
}
