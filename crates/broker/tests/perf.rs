//! Performance reports and the machine's load in the broker's state
//! machine (fake process table, dry-run backend): what a cell writes on
//! its report page, and what the system poller reads, reach the status.

mod common;

use allot_enforce::os::SystemCpu;
use allot_spec::{CellSpec, Goal};
use common::*;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);

#[test]
fn heartbeats_and_latencies_on_the_report_page_reach_the_status_with_the_goal() {
    let mut w = world(4);
    proc_of(&w, 50, 1000);
    let spec = CellSpec {
        goal: Goal::Rate {
            milli_per_s: 500_000,
        },
        ..CellSpec::default()
    };
    let (_, _, page) = page(register(&mut w, ALICE, "srv", spec, vec![50], false));
    let reports = page.reports().expect("the page has a report page");
    let t0 = Instant::now();
    for k in 0..20u32 {
        // 100 units of work and 100 requests of 2 ms each tick (1000/s).
        reports.heartbeat(100);
        for _ in 0..100 {
            reports.record_latency(Duration::from_millis(2));
        }
        w.os.wait(50, 30_000_000); // 0.3 threads waiting on average
        w.tick(t0 + TICK * k);
    }
    let st = w.core.status(ALICE);
    let p = st.cells[0].perf.as_ref().expect("measured");
    assert!((p.rate_per_s.unwrap() - 1000.0).abs() < 1e-6, "{p:?}");
    assert_eq!(p.goal_met, Some(true), "1000/s meets 500/s: {p:?}");
    let p99 = p.p99_us.unwrap();
    assert!((2_000..=2_560).contains(&p99), "{p:?}");
    assert!(p.latencies >= 200, "{p:?}");
    assert!((p.waiting.unwrap() - 0.3).abs() < 1e-6, "{p:?}");
    assert_eq!(p.cpu_used, None, "the dry-run backend cannot measure use");

    // The same cell with a latency goal it misses.
    w.handle(
        7,
        ALICE,
        allot_proto::msg::Request::UpdateSpec {
            cell: st.cells[0].id,
            spec: CellSpec {
                goal: Goal::P99 { us: 1_000 },
                ..CellSpec::default()
            },
        },
        None,
    );
    w.tick(t0 + TICK * 20);
    let p = w.core.status(ALICE).cells[0].perf.clone().unwrap();
    assert_eq!(p.goal_met, Some(false), "2 ms is over 1 ms: {p:?}");
}

#[test]
fn a_goal_without_reports_says_what_is_missing() {
    let mut w = world(2);
    proc_of(&w, 50, 1000);
    let spec = CellSpec {
        goal: Goal::P99 { us: 5_000 },
        ..CellSpec::default()
    };
    register(&mut w, ALICE, "quiet", spec, vec![50], false);
    let t0 = Instant::now();
    for k in 0..3u32 {
        w.tick(t0 + TICK * k);
    }
    let p = w.core.status(ALICE).cells[0].perf.clone().unwrap();
    assert_eq!((p.goal_met, p.rate_per_s, p.p99_us), (None, None, None));
    assert!(p.goal_note.contains("report_latency"), "{p:?}");
}

#[test]
fn the_machine_load_outside_the_cells_is_shown() {
    let mut w = world(2);
    let t0 = Instant::now();
    for k in 0..=10u64 {
        // 1.5 CPUs busy, some thread waiting a tenth of the time.
        w.os.set_system(SystemCpu {
            busy_ns: k * 150_000_000,
            per_cpu_busy_ns: Vec::new(),
            total_ns: k * 200_000_000,
            running: 2,
            pressure_some_us: Some(k * 10_000),
        });
        w.tick(t0 + TICK * k as u32);
    }
    let l = w.core.status(ROOT).load.expect("two readings or more");
    assert!((l.busy - 1.5).abs() < 1e-9, "{l:?}");
    assert!((l.pressure.unwrap() - 0.1).abs() < 1e-9, "{l:?}");
    // No cell: everything busy is outside the cells.
    assert_eq!(l.unmanaged, Some(1.5), "{l:?}");
    assert_eq!(l.running, 2);
}

#[test]
fn under_the_goals_policy_a_rate_goal_is_sized_from_the_heartbeats() {
    let mut w = world_configured(8, |cfg| cfg.policy = allot_plan::GlobalPolicy::Goals);
    proc_of(&w, 50, 1000);
    proc_of(&w, 51, 1000);
    // A: 100 units a second per CPU, perfectly parallel; it wants 250/s,
    // so three CPUs (aiming 5 % above: 262.5/s). B: best effort, silent.
    let spec = CellSpec {
        goal: Goal::Rate {
            milli_per_s: 250_000,
        },
        ..CellSpec::default()
    };
    let (_, _, a) = page(register(&mut w, ALICE, "a", spec, vec![50], false));
    let (_, _, b) = page(register(
        &mut w,
        ALICE,
        "b",
        CellSpec::default(),
        vec![51],
        false,
    ));
    let t0 = Instant::now();
    let mut owed = 0.0;
    for k in 0..150u32 {
        let n = grant(&a).cpus.len() as f64;
        owed += 100.0 * n * TICK.as_secs_f64();
        let whole = owed.floor();
        a.reports().unwrap().heartbeat(whole as u64);
        owed -= whole;
        w.tick(t0 + TICK * k);
    }
    let st = w.core.status(ALICE);
    let p = st.cells[0].perf.clone().unwrap();
    assert_eq!(grant(&a).cpus.len(), 3, "{p:?}");
    assert_eq!(grant(&b).cpus.len(), 5, "the rest goes to the other cell");
    assert_eq!(p.goal_met, Some(true), "{p:?}");
    assert!(p.goal_note.contains("3 CPU"), "{p:?}");
}

#[test]
fn a_goal_under_another_policy_says_it_is_not_acted_on() {
    let mut w = world(4);
    proc_of(&w, 50, 1000);
    let spec = CellSpec {
        goal: Goal::Rate { milli_per_s: 1_000 },
        ..CellSpec::default()
    };
    let (_, _, a) = page(register(&mut w, ALICE, "a", spec, vec![50], false));
    let t0 = Instant::now();
    for k in 0..20u32 {
        a.reports().unwrap().heartbeat(10);
        w.tick(t0 + TICK * k);
    }
    let p = w.core.status(ALICE).cells[0].perf.clone().unwrap();
    assert!(p.goal_note.contains("--policy goals"), "{p:?}");
}

#[test]
fn set_goal_changes_the_goal_alone_and_refuses_time_cells() {
    let mut w = world(4);
    proc_of(&w, 50, 1000);
    proc_of(&w, 51, 1000);
    let spec = CellSpec {
        min: 2,
        weight: 3,
        ..CellSpec::default()
    };
    let (cell, _, _) = page(register(&mut w, ALICE, "a", spec, vec![50], false));
    let set = |w: &mut World, peer, cell, goal: Goal| {
        reply(&w.handle(
            7,
            peer,
            allot_proto::msg::Request::SetGoal { cell, goal },
            None,
        ))
        .clone()
    };
    let goal = Goal::P99 { us: 5_000 };
    assert_eq!(set(&mut w, ALICE, cell, goal), allot_proto::msg::Reply::Ok);
    let s = &w.core.status(ALICE).cells[0].spec;
    assert_eq!((s.min, s.weight), (2, 3), "the rest of the request stays");
    assert_eq!(s.goal, allot_proto::status::GoalStatus::P99 { us: 5_000 });
    // Another user may not; a time cell has no goal.
    assert!(matches!(
        set(&mut w, BOB, cell, Goal::None),
        allot_proto::msg::Reply::Error { request: 0x10, .. }
    ));
    let timed = CellSpec {
        min: 1,
        time: allot_spec::TimeContract::Fraction {
            ppm: 250_000,
            slice_us: 0,
        },
        ..CellSpec::default()
    };
    let (tcell, _, _) = page(register(&mut w, ALICE, "t", timed, vec![51], false));
    let r = set(&mut w, ALICE, tcell, goal);
    assert!(
        matches!(&r, allot_proto::msg::Reply::Error { message, .. } if message.contains("goals")),
        "{r:?}"
    );
}

#[test]
fn a_goal_cells_threads_are_counted_and_the_status_says_when_they_cannot_be() {
    use allot_enforce::counters::{Count, FakeCounters};
    let mut w = world(4);
    // Without hardware counters the load line says why, and no cell has IPC.
    let none = FakeCounters::new();
    none.set_unavailable("this machine has no cycles counter");
    w.core.set_counters(std::sync::Arc::new(none));
    w.os.spawn(50, 0, 3, &allot_topo::CpuSet::first_n(4)); // threads 50, 51, 52
    w.os.set_uid(50, 1000);
    w.os.spawn(60, 0, 1, &allot_topo::CpuSet::first_n(4));
    w.os.set_uid(60, 1000);
    let goal = CellSpec {
        goal: Goal::Rate { milli_per_s: 1_000 },
        ..CellSpec::default()
    };
    register(&mut w, ALICE, "srv", goal, vec![50], false);
    register(&mut w, ALICE, "batch", CellSpec::default(), vec![60], false);
    let t0 = Instant::now();
    let system = |k: u64| SystemCpu {
        busy_ns: k * 100_000_000,
        per_cpu_busy_ns: Vec::new(),
        total_ns: k * 400_000_000,
        running: 1,
        pressure_some_us: None,
    };
    for k in 0..12u32 {
        w.os.set_system(system(u64::from(k)));
        w.tick(t0 + TICK * k);
    }
    let st = w.core.status(ALICE);
    assert_eq!(
        st.load.as_ref().and_then(|l| l.counters.as_deref()),
        Some("this machine has no cycles counter")
    );
    assert!(
        st.cells
            .iter()
            .all(|c| c.perf.as_ref().is_some_and(|p| p.ipc.is_none()))
    );

    // With them: the goal cell's three threads, 1.5 instructions a cycle;
    // the cell without a goal is not counted.
    let hw = FakeCounters::new();
    for t in [50, 51, 52, 60] {
        hw.set(t, Count::default());
    }
    w.core.set_counters(std::sync::Arc::new(hw.clone()));
    let t1 = t0 + TICK * 20;
    for k in 0..=12u64 {
        for t in [50, 51, 52] {
            hw.set(
                t,
                Count {
                    lead: k * 1_000_000,
                    follow: k * 1_500_000,
                },
            );
        }
        hw.set(
            60,
            Count {
                lead: k * 1_000_000,
                follow: k * 300_000,
            },
        );
        w.os.set_system(system(20 + k));
        w.tick(t1 + TICK * k as u32);
    }
    let st = w.core.status(ALICE);
    assert_eq!(st.load.as_ref().unwrap().counters, None, "{:?}", st.load);
    let srv = st.cells.iter().find(|c| c.name == "srv").unwrap();
    let ipc = srv.perf.as_ref().unwrap().ipc.expect("counted");
    assert!((ipc - 1.5).abs() < 1e-9, "{ipc}");
    let batch = st.cells.iter().find(|c| c.name == "batch").unwrap();
    assert_eq!(
        batch.perf.as_ref().unwrap().ipc,
        None,
        "no goal, not counted"
    );
    assert_eq!(
        hw.opened(),
        3,
        "a group per thread of the goal cell, opened once"
    );
}
