//! The monitor thread's throttling (no `ALLOT_THROTTLE_CGROUP`: the way
//! Poli-C limits a fractional CPU): a thread limited to a quarter of a CPU
//! that spins is interrupted and put to sleep until its CPU time over the
//! window matches its fraction.
//!
//! What is judged is an upper bound (the limit), which a busy machine can
//! only help: a spinning thread that got more than its fraction plus a
//! margin was not throttled. How much it gets below the bound is the
//! machine's business.

mod common;

use allot_require::throttle;
use common::{Spinner, share_over};
use std::time::Duration;

#[test]
fn a_spinning_thread_is_held_to_its_fraction() {
    assert!(
        std::env::var_os(allot_proto::env::THROTTLE_CGROUP).is_none(),
        "this test is about the monitor, not the cgroup quota"
    );
    let spinner = Spinner::start();
    let tid = spinner.tid;
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
    drop(spinner);
}
