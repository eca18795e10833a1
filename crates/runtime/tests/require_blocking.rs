//! A thread blocked in the runtime gives its `require` allocation back and
//! retakes it before it continues (Poli-C's rule for blocked threads).

use allot_require::{Blocks, Need};
use allot_runtime::Event;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

/// Runs `f` on a thread; whether it finished within 20 s. (The caller
/// releases the blocked thread before asserting, so a failure cannot hang
/// the test binary.)
fn within(f: impl FnOnce() + Send + 'static) -> bool {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(20)).is_ok()
}

#[test]
fn a_thread_waiting_on_an_event_lends_its_cpu_and_retakes_it() {
    let rt = Blocks::global();
    let cpu0 = || vec![Need::device("cpu", 0, 1.0)];
    let event = Arc::new(Event::new());
    let (held_tx, held_rx) = mpsc::channel();
    let holder = {
        let event = event.clone();
        std::thread::spawn(move || {
            let _s = rt.enter(cpu0()).unwrap();
            held_tx.send(()).unwrap();
            event.wait(); // blocks: gives CPU 0 back meanwhile
            // Retaken before it continues.
            let tid = allot_require::blocks::current_tid();
            rt.holding(tid, "cpu", 0)
        })
    };
    held_rx.recv().unwrap();
    // Another thread gets the same exclusive CPU while the holder waits.
    let got = within(move || {
        let _s = rt.enter(cpu0()).unwrap();
    });
    event.set();
    assert!(got, "a second scope on CPU 0 still waits after 20 s");
    assert_eq!(holder.join().unwrap(), Some(1.0));
}

#[test]
fn a_worker_parked_inside_a_scope_lends_its_cpu() {
    let rt = Blocks::global();
    let pool = allot_runtime::Pool::new();
    let (held_tx, held_rx) = mpsc::channel();
    let gate = Arc::new(Event::new());
    let g2 = gate.clone();
    // A task enters a scope on CPU 1 and waits for an event; the worker
    // blocks there.
    let task = pool.spawn(move || {
        let _s = rt.enter(vec![Need::device("cpu", 1, 1.0)]).unwrap();
        held_tx.send(()).unwrap();
        g2.wait();
    });
    held_rx.recv().unwrap();
    let got = within(move || {
        let _s = rt.enter(vec![Need::device("cpu", 1, 1.0)]).unwrap();
    });
    gate.set();
    task.join().unwrap();
    assert!(
        got,
        "a scope on CPU 1 still waits after 20 s while the worker waits"
    );
}
