//! The C ABI called from Rust as a C program would: results, misuse
//! (null pointers, stale, foreign and wrong-type handles, double frees),
//! cells, and callbacks that unwind. Pools at work are tested in
//! `tests/abi_pool.rs`.
//!
//! `allot_shutdown` is global to the process, so it is tested in its own
//! binary (`tests/abi_shutdown.rs`).

mod abi_util;

use abi_util::*;
use allot_capi::abi::cell::*;
use allot_capi::abi::pool::*;
use allot_capi::abi::status::{ALL, Code};
use allot_capi::abi::*;
use std::ffi::{CStr, c_int, c_void};
use std::ptr::{null, null_mut};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

#[test]
fn null_out_pointers_are_invalid_and_name_the_function() {
    let c = standalone();
    let p = pool();
    // SAFETY: the out-pointers below are null on purpose, which the
    // library detects; everything else is valid.
    unsafe {
        assert_eq!(status(allot_cell_standalone(null_mut())), Code::Invalid);
        assert!(
            last_error().starts_with("allot_cell_standalone: out is NULL"),
            "{}",
            last_error()
        );
        assert_eq!(
            status(allot_cell_auto(c"x".as_ptr(), null_mut())),
            Code::Invalid
        );
        let spec = Spec::default();
        assert_eq!(
            status(allot_cell_register(c"x".as_ptr(), &spec, 0, null_mut())),
            Code::Invalid
        );
        assert_eq!(status(allot_cell_grant(c, null_mut())), Code::Invalid);
        assert_eq!(
            status(allot_cell_wait_change(c, 0, 0, null_mut())),
            Code::Invalid
        );
        assert_eq!(status(allot_cell_mode(c, null_mut())), Code::Invalid);
        assert_eq!(status(allot_cell_broker_id(c, null_mut())), Code::Invalid);
        assert_eq!(status(allot_pool_new(c, null_mut())), Code::Invalid);
        assert_eq!(status(allot_pool_workers(p, null_mut())), Code::Invalid);
        assert_eq!(
            status(allot_pool_spawn(p, Some(nop), null_mut(), null_mut())),
            Code::Invalid
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
        assert_eq!(status(allot_cell_auto(null(), &mut c)), Code::Invalid);
        assert_eq!(
            status(allot_cell_register(null(), &spec, 0, &mut c)),
            Code::Invalid
        );
        assert_eq!(
            status(allot_cell_register(c"x".as_ptr(), null(), 0, &mut c)),
            Code::Invalid
        );
        assert_eq!(
            status(allot_cell_auto(c"\xff\xfe".as_ptr(), &mut c)),
            Code::Invalid
        );
        assert!(last_error().contains("UTF-8"));
        let long = std::ffi::CString::new(vec![b'a'; 5000]).unwrap();
        assert_eq!(
            status(allot_cell_auto(long.as_ptr(), &mut c)),
            Code::Invalid
        );
        assert_eq!(
            status(allot_pool_spawn(p, None, null_mut(), &mut t)),
            Code::Invalid
        );
        assert_eq!(
            status(allot_pool_join(p, None, null_mut(), Some(nop), null_mut())),
            Code::Invalid
        );
        assert_eq!(
            status(allot_pool_join(p, Some(nop), null_mut(), None, null_mut())),
            Code::Invalid
        );
        assert_eq!(
            status(allot_pool_parallel_for(p, 0, 10, 1, None, null_mut())),
            Code::Invalid
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
            Code::Invalid
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
        assert_eq!(status(rc), Code::Invalid, "{spec:?}");
        assert!(last_error().contains(why), "{}", last_error());
    }
    // A valid spec gets as far as the (missing) broker; weight 0 means 1.
    let spec = Spec::default();
    // SAFETY: as above.
    let rc = unsafe { allot_cell_register_at(no_broker, c"x".as_ptr(), &spec, 0, &mut c) };
    assert_eq!(status(rc), Code::NoBroker, "{}", last_error());
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
    assert_eq!(status(allot_task_join(t)), Code::Handle, "joined twice");
    assert_eq!(status(allot_task_detach(t)), Code::Handle);
    ok(allot_pool_free(p));
    assert_eq!(workers(p), Err(Code::Handle));
    assert_eq!(spawn(p, nop, null_mut()), Err(Code::Handle));
    assert_eq!(status(allot_pool_free(p)), Code::Handle, "double free");
    assert!(
        last_error().contains("stale allot_pool_t"),
        "{}",
        last_error()
    );
    ok(allot_cell_free(c));
    assert_eq!(grant(c), Err(Code::Handle));
    assert_eq!(status(allot_cell_report(c, 0, 0, 0)), Code::Handle);
    assert_eq!(status(allot_cell_free(c)), Code::Handle, "double free");
    // Slots are reused under new generations: old ids stay dead.
    let fresh: Vec<CellHandle> = (0..8).map(|_| standalone()).collect();
    assert!(fresh.iter().all(|f| f.id != c.id));
    assert_eq!(grant(c), Err(Code::Handle));
    for f in fresh {
        ok(allot_cell_free(f));
    }
}

#[test]
fn handles_of_the_wrong_type_are_rejected_by_name() {
    let c = standalone();
    let p = pool();
    let t = spawn(p, nop, null_mut()).unwrap();
    assert_eq!(grant(CellHandle { id: p.id }), Err(Code::Handle));
    assert!(
        last_error().contains("allot_pool_t passed where an allot_cell_t"),
        "{}",
        last_error()
    );
    assert_eq!(workers(PoolHandle { id: c.id }), Err(Code::Handle));
    assert!(last_error().contains("allot_cell_t passed where an allot_pool_t"));
    assert_eq!(workers(PoolHandle { id: t.id }), Err(Code::Handle));
    assert_eq!(
        status(allot_task_join(TaskHandle { id: p.id })),
        Code::Handle
    );
    assert_eq!(
        status(allot_cell_free(CellHandle { id: t.id })),
        Code::Handle
    );
    assert_eq!(
        status(allot_pool_free(PoolHandle { id: c.id })),
        Code::Handle
    );
    // Nothing was freed by the failed calls.
    ok(allot_task_join(t));
    ok(allot_pool_free(p));
    ok(allot_cell_free(c));
}

#[test]
fn null_and_made_up_handles_are_rejected() {
    for id in [0, 1, u64::MAX, 0x1234_5678_9abc_def0, u64::from(b'p') << 56] {
        assert_eq!(workers(PoolHandle { id }), Err(Code::Handle), "{id:#x}");
        assert_eq!(status(allot_pool_free(PoolHandle { id })), Code::Handle);
        assert_eq!(grant(CellHandle { id }), Err(Code::Handle));
        assert_eq!(status(allot_task_join(TaskHandle { id })), Code::Handle);
    }
    // A live handle with one bit of its generation flipped.
    let p = pool();
    assert_eq!(
        workers(PoolHandle {
            id: p.id ^ (1 << 30)
        }),
        Err(Code::Handle)
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
    for code in [-1, 14, 1000, c_int::MIN] {
        // SAFETY: as above.
        let text = unsafe { CStr::from_ptr(allot_strerror(code)) };
        assert_eq!(text.to_str().unwrap(), unknown);
    }
    assert_eq!(allot_abi_version(), ABI_VERSION);

    assert_eq!(status(allot_pool_free(PoolHandle { id: 0 })), Code::Handle);
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

    let mut h = CGrant::default();
    let t0 = Instant::now();
    // SAFETY: valid out-pointer.
    let rc = unsafe { allot_cell_wait_change(c, g.generation, 20_000_000, &mut h) };
    assert_eq!(status(rc), Code::Timeout);
    assert!(t0.elapsed() >= Duration::from_millis(20));
    assert_eq!(h, g, "*out holds the current grant on timeout");
    // SAFETY: valid out-pointer.
    let rc = unsafe { allot_cell_wait_change(c, g.generation, 0, &mut h) };
    assert_eq!(status(rc), Code::Timeout);
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
        let mut h = CGrant::default();
        // SAFETY: valid out-pointer.
        status(unsafe { allot_cell_wait_change(c, g.generation, -1, &mut h) })
    });
    std::thread::sleep(Duration::from_millis(80));
    let t0 = Instant::now();
    ok(allot_cell_free(c));
    assert_eq!(waiter.join().unwrap(), Code::Handle);
    assert!(t0.elapsed() < Duration::from_secs(2));
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
