//! Work outside every cell in the broker's state machine (fake process
//! table, dry-run backend): the weights the cells get as they come and
//! go, on both settings; the teams best-effort cells are told to run
//! when outside work takes some of their CPUs, with the hysteresis; and
//! guaranteed cells left alone.

mod common;

use allot_enforce::dryrun::Call;
use allot_enforce::os::SystemCpu;
use allot_plan::Weighing;
use allot_spec::CellSpec;
use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const TICK: Duration = Duration::from_millis(100);

/// The weights last applied to each cell, and the last weight of the
/// cells together.
fn weights(w: &World) -> (BTreeMap<u64, u32>, Option<u32>) {
    let mut cells = BTreeMap::new();
    let mut together = None;
    for c in w.dry.calls() {
        match c {
            Call::Apply(id, a) => {
                cells.insert(id, a.weight);
            }
            Call::Remove(id) => {
                cells.remove(&id);
            }
            Call::Together(t) => together = Some(t),
            _ => {}
        }
    }
    (cells, together)
}

fn cell(w: &mut World, name: &str, pid: u32, spec: CellSpec) -> (u64, allot_proto::PageMap) {
    proc_of(w, pid, 1000);
    let (id, _, page) = page(register(w, ALICE, name, spec, vec![pid], false));
    (id, page)
}

#[test]
fn the_cells_weigh_as_their_threads_as_they_come_and_go() {
    let mut w = world(4);
    let (a, _pa) = cell(&mut w, "a", 50, CellSpec::default());
    // Alone on four CPUs: a team of four, weighing four threads, as do
    // the cells together.
    assert_eq!(weights(&w), (BTreeMap::from([(a, 400)]), Some(400)));
    let (b, _pb) = cell(&mut w, "b", 51, CellSpec::default());
    assert_eq!(
        weights(&w),
        (BTreeMap::from([(a, 200), (b, 200)]), Some(400))
    );
    // Six cells on four CPUs: all six share the pool of four, each with
    // a team of one and two thirds of a CPU; together they count the
    // pool's four CPUs each, as programs sized to them would.
    let others: Vec<u64> = (0..4)
        .map(|i| cell(&mut w, &format!("c{i}"), 52 + i, CellSpec::default()).0)
        .collect();
    let (cells, together) = weights(&w);
    assert!(
        cells
            .values()
            .all(|&x| x == allot_plan::weight::on_grid(400.0 / 6.0) as u32),
        "{cells:?}"
    );
    assert_eq!(cells.len(), 6);
    assert_eq!(together, Some(2400));
    // They end: the cells left weigh their teams again, and with no cell
    // the directory weighs one process.
    for (pid, id) in (52..56).zip(&others) {
        w.os.exit(pid);
        w.exited(pid);
        assert!(!weights(&w).0.contains_key(id));
    }
    assert_eq!(
        weights(&w),
        (BTreeMap::from([(a, 200), (b, 200)]), Some(400))
    );
    for pid in [50, 51] {
        w.os.exit(pid);
        w.exited(pid);
    }
    assert_eq!(weights(&w), (BTreeMap::new(), Some(100)));
}

#[test]
fn weighed_as_a_group_the_cells_keep_their_spec_weights_and_one_process_together() {
    let mut w = world_configured(4, |cfg| cfg.weigh = Weighing::Group);
    let (a, _pa) = cell(
        &mut w,
        "a",
        50,
        CellSpec {
            weight: 3,
            ..Default::default()
        },
    );
    let (b, _pb) = cell(&mut w, "b", 51, CellSpec::default());
    assert_eq!(
        weights(&w),
        (BTreeMap::from([(a, 300), (b, 100)]), Some(100))
    );
    // Weighed by threads the same cells weigh their teams (three CPUs of
    // four for the weight-3 cell), and the directory four threads.
    let mut t = world(4);
    let (a, _pa) = cell(
        &mut t,
        "a",
        50,
        CellSpec {
            weight: 3,
            ..Default::default()
        },
    );
    let (b, _pb) = cell(&mut t, "b", 51, CellSpec::default());
    assert_eq!(
        weights(&t),
        (BTreeMap::from([(a, 300), (b, 100)]), Some(400))
    );
}

/// Counters of a fake machine that advance by one tick at a time.
struct Meter {
    t0: Instant,
    k: u32,
    busy: Vec<u64>,
    used: BTreeMap<u64, u64>,
}

impl Meter {
    fn new(cpus: usize) -> Meter {
        Meter {
            t0: Instant::now(),
            k: 0,
            busy: vec![0; cpus],
            used: BTreeMap::new(),
        }
    }

    /// One tick in which each CPU was `busy[c]` busy, each cell used
    /// `used` CPUs' worth and each process's threads waited `waits`
    /// CPUs' worth.
    fn tick(&mut self, w: &mut World, busy: &[f64], used: &[(u64, f64)], waits: &[(u32, f64)]) {
        let ns = |x: f64| (x * TICK.as_nanos() as f64) as u64;
        for (b, x) in self.busy.iter_mut().zip(busy) {
            *b += ns(*x);
        }
        for &(id, x) in used {
            let u = self.used.entry(id).or_default();
            *u += ns(x);
            w.dry.set_usage(id, *u);
        }
        for &(pid, x) in waits {
            w.os.wait(pid, ns(x));
        }
        let total: u64 = self.busy.iter().sum();
        w.os.set_system(SystemCpu {
            busy_ns: total,
            per_cpu_busy_ns: self.busy.clone(),
            total_ns: u64::from(self.k) * TICK.as_nanos() as u64 * self.busy.len() as u64,
            running: 0,
            pressure_some_us: None,
        });
        w.tick(self.t0 + TICK * self.k);
        self.k += 1;
    }
}

#[test]
fn a_best_effort_team_leaves_a_busy_process_its_cpu_and_grows_back_when_it_stops() {
    let mut w = world(4);
    let (a, pa) = cell(&mut w, "a", 50, CellSpec::default());
    assert_eq!(grant(&pa).threads, 4);
    let mut m = Meter::new(4);
    // Quiet: the cell keeps every CPU busy.
    for _ in 0..3 {
        m.tick(&mut w, &[1.0; 4], &[(a, 4.0)], &[]);
    }
    assert_eq!(grant(&pa).threads, 4);
    // A busy process outside shares CPU 3 with one of the team's threads:
    // half of it each, and that thread waits the other half. Two ticks
    // of it (the first starts reading the waiting) change nothing...
    for _ in 0..2 {
        m.tick(&mut w, &[1.0; 4], &[(a, 3.5)], &[(50, 0.5)]);
    }
    assert_eq!(grant(&pa).threads, 4, "not yet: a burst resizes nothing");
    // ...the second reading that shows the team waiting does.
    m.tick(&mut w, &[1.0; 4], &[(a, 3.5)], &[(50, 0.5)]);
    assert_eq!(grant(&pa).threads, 3);
    let st = w.core.status(ALICE);
    let o = st.cells[0].outside.expect("read");
    assert_eq!(o.taken, 1);
    assert!((o.used - 0.5).abs() < 1e-9, "{o:?}");
    // The team of three leaves it a CPU; it keeps it busy, nobody waits:
    // the team stays at three.
    for _ in 0..10 {
        m.tick(&mut w, &[1.0; 4], &[(a, 3.0)], &[]);
        assert_eq!(grant(&pa).threads, 3);
    }
    // It stops: back to four at the next tick.
    m.tick(&mut w, &[1.0, 1.0, 1.0, 0.0], &[(a, 3.0)], &[]);
    assert_eq!(grant(&pa).threads, 4);
    assert_eq!(w.core.status(ALICE).cells[0].outside.unwrap().taken, 0);
}

#[test]
fn work_outside_on_idle_cpus_a_short_burst_or_a_guaranteed_cell_change_no_team() {
    let mut w = world(4);
    let (a, pa) = cell(
        &mut w,
        "a",
        50,
        CellSpec {
            min: 2,
            ..Default::default()
        },
    );
    let mut m = Meter::new(4);
    // A guaranteed cell keeps its team whatever outside work does.
    for _ in 0..8 {
        m.tick(&mut w, &[1.0; 4], &[(a, 3.0)], &[(50, 1.0)]);
    }
    assert_eq!(grant(&pa).threads, 4);
    w.os.exit(50);
    w.exited(50);

    let (b, pb) = cell(&mut w, "b", 60, CellSpec::default());
    // Outside work on CPUs the team leaves idle (a serial phase): nobody
    // waits, nothing changes.
    for _ in 0..8 {
        m.tick(&mut w, &[1.0; 4], &[(b, 1.0)], &[]);
    }
    assert_eq!(grant(&pb).threads, 4);
    // Bursts of two ticks (the first starts reading the waiting) with
    // quiet between: nothing changes.
    m.tick(&mut w, &[1.0; 4], &[(b, 4.0)], &[]);
    for _ in 0..4 {
        for _ in 0..2 {
            m.tick(&mut w, &[1.0; 4], &[(b, 3.0)], &[(60, 1.0)]);
            assert_eq!(grant(&pb).threads, 4);
        }
        m.tick(&mut w, &[1.0; 4], &[(b, 4.0)], &[]);
        assert_eq!(grant(&pb).threads, 4);
    }
}

#[test]
fn a_cell_that_grows_onto_a_cpu_outside_work_shared_leaves_it_that_cpu_at_once() {
    let mut w = world(2);
    let (a, pa) = cell(&mut w, "long", 50, CellSpec::default());
    let (b, _pb) = cell(&mut w, "short", 51, CellSpec::default());
    assert_eq!(grant(&pa).threads, 1);
    let mut m = Meter::new(2);
    // A busy process shares the short cell's CPU with it.
    for _ in 0..5 {
        m.tick(&mut w, &[1.0, 1.0], &[(a, 1.0), (b, 0.5)], &[(51, 0.5)]);
    }
    assert_eq!(grant(&pa).threads, 1);
    // The short one ends: the long one gets both CPUs and, at once, a
    // team of one, leaving the busy process the CPU it was on.
    w.os.exit(51);
    w.exited(51);
    let g = grant(&pa);
    assert_eq!((g.cpus.len(), g.threads), (2, 1), "{g:?}");
}

#[test]
fn stacked_cells_arriving_one_by_one_rewrite_their_weights_rarely() {
    let mut w = world(16);
    for i in 0..60u32 {
        cell(&mut w, &format!("c{i}"), 100 + i, CellSpec::default());
    }
    // Every newcomer moves every stacked cell's share of the pool; its
    // weight, on a grid of quarter powers of two, moves far less often
    // (here about 360 writes in all, CPU sets included; rewritten at
    // every change of the share to the hundredth of a thread, about 1400).
    let applies = w
        .dry
        .calls()
        .iter()
        .filter(|c| matches!(c, Call::Apply(..)))
        .count();
    assert!(applies < 700, "{applies} writes for 60 cells");
    let (cells, together) = weights(&w);
    let exact = 1600.0 / 60.0;
    let first = cells.values().next().copied().unwrap();
    assert!(
        cells.values().all(|&x| x == first),
        "equal cells weigh alike: {cells:?}"
    );
    assert!(
        (f64::from(first) - exact).abs() <= exact / 10.0 + 0.5,
        "{first} against {exact}"
    );
    // Each counts the pool's sixteen CPUs: 960 threads, past the most
    // the backend takes.
    assert_eq!(together, Some(10_000));
}
