//! A pool in a time-triggered cell takes new tasks only inside the cell's
//! windows (the schedule its grant page shows), and loses none.

use allot_client::Cell;
use allot_proto::window::monotonic_ns;
use allot_proto::{Phase, Window};
use allot_runtime::Pool;
use allot_testkit::eventually;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn workers_start_tasks_only_inside_windows_and_every_task_runs() {
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    let (cell, mut writer) = Cell::manual(allowed.take_first(1)).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .max_workers(1)
        .name("windows-test")
        .build()
        .expect("pool");
    assert!(eventually(Duration::from_secs(10), || pool.workers() == 1));
    // 5 ms windows every 100 ms, starting now.
    let window = Window {
        origin_ns: monotonic_ns(),
        period_us: 100_000,
        budget_us: 5_000,
    };
    let generation = writer.publish_window(window);
    assert!(pool.wait_resized(generation, Duration::from_secs(10)));
    assert_eq!(pool.time_window(), Some(window));

    let starts = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..60)
        .map(|_| {
            let starts = starts.clone();
            pool.spawn(move || {
                starts.lock().unwrap().push(monotonic_ns());
                // 1 ms of work: a window holds a few tasks.
                let t = monotonic_ns();
                while monotonic_ns() - t < 1_000_000 {
                    std::hint::spin_loop();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("every task runs");
    }
    let starts = starts.lock().unwrap();
    assert_eq!(starts.len(), 60, "no task is lost");
    // A task is taken inside a window; it may start a while after the
    // check (the test runs on a shared machine, where a worker can be
    // descheduled between its check and its clock read for many
    // milliseconds): allow 20 ms past a close. A pool that ignored the
    // windows would run the 60 ms of tasks back to back, starting tasks
    // every millisecond through the 75 ms left of each 95 ms closed span,
    // so this still tells them apart.
    const GRACE_NS: u64 = 20_000_000;
    let outside: Vec<u64> = starts
        .iter()
        .copied()
        .filter(|&t| {
            matches!(
                window.phase(t.saturating_sub(GRACE_NS)),
                Phase::Closed { .. }
            ) && matches!(window.phase(t), Phase::Closed { .. })
        })
        .collect();
    assert!(
        outside.is_empty(),
        "tasks started between windows: {outside:?}"
    );
    // 60 tasks of 1 ms do not fit one 5 ms window: the worker waited.
    assert!(pool.window_waits() > 0);

    // Lifting the windows lets the pool run freely again.
    let generation = writer.publish_window(Window::default());
    assert!(pool.wait_resized(generation, Duration::from_secs(10)));
    assert_eq!(pool.time_window(), None);
}
