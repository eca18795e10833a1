//! The monitor thread's throttling (no `ALLOT_THROTTLE_CGROUP`: the way
//! Poli-C limits a fractional CPU): a thread limited to a quarter of a CPU
//! that spins is interrupted and put to sleep until its CPU time over the
//! window matches its fraction.
//!
//! What is judged is an upper bound (the limit), which a busy machine can
//! only help: a spinning thread that got more than its fraction plus a
//! margin was not throttled. How much it gets below the bound is the
//! machine's business.

use allot_require::throttle;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// CPU time of thread `tid` of this process, ns.
fn cpu_ns(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .expect("schedstat of a thread of this process")
}

/// The thread's share of one CPU over `span` of wall time.
fn share_over(tid: u64, span: Duration) -> f64 {
    let (c0, t0) = (cpu_ns(tid), Instant::now());
    std::thread::sleep(span);
    (cpu_ns(tid) - c0) as f64 / t0.elapsed().as_nanos() as f64
}

#[test]
fn a_spinning_thread_is_held_to_its_fraction() {
    assert!(
        std::env::var_os(allot_proto::env::THROTTLE_CGROUP).is_none(),
        "this test is about the monitor, not the cgroup quota"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (stop, tid) = (stop.clone(), tid.clone());
        std::thread::spawn(move || {
            tid.store(
                rustix::thread::gettid().as_raw_nonzero().get() as u64,
                Ordering::Release,
            );
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
    };
    while tid.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    let tid = tid.load(Ordering::Acquire);
    throttle::set(tid, Some(0.25));
    // Let the monitor's window fill, then measure over several windows.
    std::thread::sleep(2 * throttle::WINDOW);
    let limited = share_over(tid, Duration::from_millis(1500));
    assert!(
        limited <= 0.25 + 0.15,
        "a thread limited to 0.25 of a CPU ran {limited:.3} of one"
    );
    assert!(limited > 0.0, "the thread did not run at all");
    // Lifted, it runs as much as the machine lets it (printed for the
    // record: what it gets then is the machine's business).
    throttle::set(tid, None);
    std::thread::sleep(throttle::WINDOW);
    let free = share_over(tid, Duration::from_millis(1000));
    eprintln!("limited {limited:.3}, lifted {free:.3} of a CPU");
    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
}
