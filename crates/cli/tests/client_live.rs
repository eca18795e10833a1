//! The client library's `Cell` against a real broker.

mod common;

use allot_client::{Cell, Mode, Options};
use allot_topo::CpuSet;
use common::*;
use std::time::Duration;

#[test]
fn standalone_and_manual_cells() {
    let s = Cell::standalone();
    assert_eq!(s.mode(), Mode::Standalone);
    assert_eq!(s.grant().cpus, allot_topo::allowed_cpus().unwrap());
    let (m, mut w) = Cell::manual(CpuSet::first_n(1)).unwrap();
    let g0 = m.grant();
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || m.wait_change(g0.generation, Some(Duration::from_secs(5))))
    };
    std::thread::sleep(Duration::from_millis(20));
    w.publish(CpuSet::first_n(2), CpuSet::parse_list("1").unwrap());
    let g = waiter.join().unwrap();
    assert_eq!(g.cpus, CpuSet::first_n(2));
    assert_eq!(g.lent.to_string(), "1");
    assert_eq!(m.threads(), 2);
}

#[test]
fn no_broker_means_standalone_with_a_reason() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::new("t");
    o.socket = Some(dir.path().join("nobody.sock"));
    let c = Cell::register(&o).unwrap();
    assert_eq!(c.mode(), Mode::Standalone);
    assert!(
        c.fallback_reason().unwrap().contains("no broker answers"),
        "{:?}",
        c.fallback_reason()
    );
    o.fallback = false;
    assert!(Cell::register(&o).is_err());
}

#[test]
fn registered_cell_follows_the_broker_across_a_restart() {
    let mut d = Daemon::start("dry-run", &[]);
    let mut o = Options::new("me");
    o.socket = Some(d.socket.clone());
    let cell = Cell::register(&o).unwrap();
    assert_eq!(cell.mode(), Mode::Registered);
    let id = cell.id();
    let g = cell.grant();
    assert_eq!(g.cell, id);
    assert!(!g.cpus.is_empty());
    cell.report(1, 0, 10).unwrap();
    assert!(eventually(Duration::from_secs(2), || d.status().cells[0]
        .progress
        == 10));

    d.kill9();
    assert!(eventually(Duration::from_secs(3), || !cell.broker_up()));
    assert_eq!(
        cell.grant().cpus,
        g.cpus,
        "the last grant is kept while the broker is down"
    );
    d.spawn();
    assert!(
        eventually(Duration::from_secs(5), || cell.broker_up()),
        "watcher did not rejoin\n{}",
        d.log()
    );
    assert_eq!(cell.id(), id);
    let instance = d.client().hello("t").unwrap().instance;
    assert!(
        eventually(Duration::from_secs(2), || cell.grant().instance == instance),
        "the page is written by the new broker"
    );
    // Dropping the cell releases it.
    drop(cell);
    assert!(eventually(Duration::from_secs(3), || d
        .status()
        .cells
        .is_empty()));
}

/// With `watch_later` (a launcher's choice) nothing watches the broker
/// until `watch` starts the watcher: a broker that went away goes unseen;
/// from then on the cell follows a restarted broker as any registered
/// cell does. Sending the request and taking the answer in two steps
/// makes the same cell.
#[test]
fn a_cell_watched_later_sees_nothing_until_asked_then_follows_a_restart() {
    let mut d = Daemon::start("dry-run", &[]);
    let mut o = Options::new("later");
    o.socket = Some(d.socket.clone());
    o.watch_later = true;
    let sent =
        Cell::send_registration(allot_client::Client::connect(&d.socket).unwrap(), &o).unwrap();
    let cell = sent.finish(|_| {}).unwrap();
    assert_eq!(cell.mode(), Mode::Registered);
    let id = cell.id();
    d.kill9();
    // The watcher polls every 200 ms: one would have seen it by now.
    std::thread::sleep(Duration::from_millis(600));
    assert!(cell.broker_up(), "nothing watches before watch()");
    cell.watch();
    cell.watch(); // starts it once
    assert!(eventually(Duration::from_secs(3), || !cell.broker_up()));
    d.spawn();
    assert!(
        eventually(Duration::from_secs(5), || cell.broker_up()),
        "watcher did not rejoin\n{}",
        d.log()
    );
    assert_eq!(cell.id(), id);
    // Leaving at exit does not release the cell (this process, its
    // member, still runs).
    cell.leave_at_exit();
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(d.status().cells.len(), 1, "not released");
}

/// A runtime pool on a registered cell reports its statistics, and the
/// broker's status shows them for that cell.
#[test]
fn a_runtime_pools_statistics_reach_the_status() {
    let d = Daemon::start("dry-run", &[]);
    let mut o = Options::new("pool-stats");
    o.socket = Some(d.socket.clone());
    let cell = Cell::register(&o).unwrap();
    assert_eq!(cell.mode(), Mode::Registered);
    let pool = allot_runtime::Pool::builder()
        .cell(cell)
        .name("stats-report")
        .report_period(Duration::from_millis(20))
        .build()
        .unwrap();
    pool.for_each(0..10_000, 100, |i| {
        std::hint::black_box(i);
    });
    let (r, h) = pool
        .spawn_suspended(allot_runtime::SpawnOptions::new(), || 1)
        .unwrap();
    assert!(r.resume());
    assert_eq!(h.join().unwrap(), 1);
    // The resumed task runs on a worker (a join from outside the pool
    // waits); the loop's pieces may all run on this thread when the
    // machine is busy. The worker counts a task once it returned, which
    // can be just after the joiner saw its result.
    let ran = || allot_runtime::WorkerStats::total(&pool.worker_stats()).tasks_run;
    assert!(
        eventually(Duration::from_secs(5), || ran() >= 1),
        "at least the resumed task: {}",
        ran()
    );
    let ran = ran();
    let mut last = None;
    let seen = eventually(Duration::from_secs(5), || {
        last = d.status().cells[0].pool_stats;
        last.is_some_and(|s| s.tasks_run >= ran && s.tasks_resumed == 1 && s.workers >= 1)
    });
    assert!(seen, "{last:?}\n{}", d.log());
}
