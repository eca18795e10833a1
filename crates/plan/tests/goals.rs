//! The goals policy over time on every fixture machine, driven by the
//! simulator (`allot_plan::sim`): synthetic cells with random speed-up
//! curves, request servers, silent cells, minimums, maxima and exclusive
//! cells, measured with noise. Every step's plan is checked against the
//! plan invariants by the simulator itself.

use allot_plan::sim::{Sim, SimCell, Truth};
use allot_plan::tracking::Curve;
use allot_plan::{GlobalPolicy, PlanConfig};
use allot_spec::{CellSpec, Goal};
use allot_topo::{FIXTURES, Machine, fixture};
use proptest::prelude::*;
use std::sync::OnceLock;

fn machines() -> &'static Vec<Machine> {
    static M: OnceLock<Vec<Machine>> = OnceLock::new();
    M.get_or_init(|| FIXTURES.iter().map(|n| fixture(n).unwrap()).collect())
}

fn config() -> PlanConfig {
    PlanConfig {
        policy: GlobalPolicy::Goals,
        lend: true,
        ..PlanConfig::default()
    }
}

/// A cell as generated: its kind, its curve or server, and what it asks.
#[derive(Debug, Clone)]
struct Raw {
    kind: u8,
    p: f64,
    /// CPUs its goal is built to need (at most `max` when set).
    need: u32,
    min: u32,
    max: u32,
    exclusive: bool,
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        0u8..4,
        0.3f64..1.0,
        1u32..4,
        prop_oneof![4 => Just(0u32), 1 => 1u32..3],
        prop_oneof![3 => Just(0u32), 1 => 4u32..12],
        prop::bool::weighted(0.1),
    )
        .prop_map(|(kind, p, need, min, max, exclusive)| Raw {
            kind,
            p,
            need,
            min,
            max,
            exclusive,
        })
}

/// Kind 0: a rate goal; 1: a latency goal; 2: reports work, no goal;
/// 3: silent. Goals are set so that `need` CPUs meet them with room for
/// the noise; the set keeps their total needs to half of what the
/// minimums leave after a CPU for every cell, so every goal can be met.
fn cells(raw: &[Raw], capacity: u32) -> Vec<SimCell> {
    let guaranteed: u32 = raw
        .iter()
        .map(|r| if r.exclusive { r.min.max(1) } else { r.min })
        .sum();
    let mut budget = capacity.saturating_sub(guaranteed + raw.len() as u32) / 2;
    raw.iter()
        .map(|r| {
            let mut spec = CellSpec {
                min: r.min.min(r.max.max(r.min)),
                max: r.max,
                exclusive: r.exclusive,
                ..CellSpec::default()
            };
            let fits = r.need <= budget && (r.max == 0 || r.need <= r.max);
            let curve = Curve { p: r.p, r1: 100.0 };
            let (truth, goal) = match r.kind {
                0 if fits => {
                    budget -= r.need;
                    // 10 % under what `t` CPUs give (room for the
                    // tracker's aim and the noise), with `t − 1` CPUs
                    // clearly short: no goal sits on the edge between two
                    // allocations, where noise alone would flip it.
                    let rate = |n: u32| curve.rate(f64::from(n));
                    let t = (1..=r.need)
                        .rev()
                        .find(|&t| t == 1 || rate(t) >= 1.25 * rate(t - 1))
                        .unwrap_or(1);
                    let g = rate(t) / 1.1;
                    (
                        Truth::Rate(curve),
                        Goal::Rate {
                            milli_per_s: (g * 1000.0) as u64,
                        },
                    )
                }
                1 if fits => {
                    budget -= r.need;
                    // 1 ms idle p99, load 0.6 CPU per needed CPU.
                    let load = 0.6 * f64::from(r.need);
                    let bound = 1_000.0 / (1.0 - load / f64::from(r.need)) * 1.2;
                    (
                        Truth::Server { k: 1_000.0, load },
                        Goal::P99 { us: bound as u32 },
                    )
                }
                0..=2 => (Truth::Rate(curve), Goal::None),
                _ => (Truth::Silent, Goal::None),
            };
            spec.goal = goal;
            SimCell {
                spec,
                truth,
                phases: vec![],
                noise: 0.02,
            }
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 60, ..ProptestConfig::default() })]

    /// Every goal that can be met is met from step ten on, and the plan
    /// does not oscillate: from step ten no cell flips to an allocation and
    /// straight back. (How soon the plan stops moving altogether is
    /// measured, not asserted: `cargo bench -p allot-plan --bench goals`.)
    #[test]
    fn goals_are_met_within_ten_steps_and_the_plan_settles(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw(), 1..24),
        seed in 1u64..1000,
    ) {
        let m = &machines()[which];
        let capacity = m.num_cpus() as u32;
        let cells = cells(&raw, capacity);
        // The guarantees must be admissible (the broker admits no more).
        let guaranteed: u32 = cells.iter().map(|c| c.spec.guaranteed()).sum();
        prop_assume!(guaranteed + 1 < capacity);
        let mut sim = Sim::new(m, config(), cells.clone(), seed);
        for _ in 0..40 {
            sim.step();
        }
        for t in 10..sim.held.len() - 2 {
            for i in 0..cells.len() {
                let (a, b, c) = (sim.held[t][i], sim.held[t + 1][i], sim.held[t + 2][i]);
                prop_assert!(!(a == c && a != b), "cell {i} flips at step {t}: {:?}", sim.held);
            }
        }
        for (step, met) in sim.met.iter().enumerate().skip(10) {
            for (i, c) in cells.iter().enumerate() {
                if c.spec.goal.is_some() {
                    prop_assert_eq!(met[i], Some(true), "step {} cell {} {:?}: {:?}", step, i, c, sim.held[step]);
                }
            }
        }
    }

    /// A goal no allocation meets takes no CPUs from the others: the
    /// tracker calls it unmeetable once it has seen the curve, and from
    /// then on every plan is the one the cell would get without a goal.
    #[test]
    fn an_unmeetable_goal_never_starves_the_others(
        which in 1..FIXTURES.len(),
        raw in prop::collection::vec(raw(), 1..12),
        seed in 1u64..1000,
    ) {
        let m = &machines()[which];
        let capacity = m.num_cpus() as u32;
        let mut cells = cells(&raw, capacity);
        for c in &mut cells {
            c.spec.min = 0;
            c.spec.exclusive = false;
        }
        // p = 0.5: at most twice its one-CPU rate, asked for five times.
        cells.push(SimCell {
            spec: CellSpec { goal: Goal::Rate { milli_per_s: 500_000 }, ..CellSpec::default() },
            truth: Truth::Rate(Curve { p: 0.5, r1: 100.0 }),
            phases: vec![],
            noise: 0.02,
        });
        let n = cells.len() - 1;
        let mut sim = Sim::new(m, config(), cells, seed);
        let mut flagged = None;
        for step in 0..30 {
            if flagged.is_none() && sim.trackers()[n].hint().unmeetable {
                flagged = Some(step);
            }
            if flagged.is_some() {
                // The plan with its goal and the plan without it agree.
                let with = sim.inputs();
                let mut without = with.clone();
                without[n].spec.goal = Goal::None;
                without[n].perf.goal_cpus = None;
                without[n].perf.unmeetable = false;
                let (a, b) = (
                    sim.planner().plan(&with, sim.plan()),
                    sim.planner().plan(&without, sim.plan()),
                );
                for c in &with {
                    prop_assert_eq!(a.cells[&c.id].entitled, b.cells[&c.id].entitled, "step {}", step);
                }
            }
            sim.step();
        }
        prop_assert!(flagged.is_some_and(|s| s <= 20), "flagged at {flagged:?}: {:?}", sim.trackers()[n]);
    }
}

#[test]
fn a_phase_change_is_followed() {
    // A rate goal of 300/s; the cell's speed halves at step 20.
    let m = fixture("xeon-x5550-2s").unwrap();
    let curve = Curve { p: 0.95, r1: 100.0 };
    let slow = Curve { p: 0.95, r1: 50.0 };
    let cells = vec![
        SimCell {
            spec: CellSpec {
                goal: Goal::Rate {
                    milli_per_s: 300_000,
                },
                ..CellSpec::default()
            },
            truth: Truth::Rate(curve),
            phases: vec![(20, Truth::Rate(slow))],
            noise: 0.02,
        },
        SimCell {
            spec: CellSpec::default(),
            truth: Truth::Rate(Curve { p: 0.9, r1: 10.0 }),
            phases: vec![],
            noise: 0.02,
        },
    ];
    let mut sim = Sim::new(&m, config(), cells, 3);
    for _ in 0..45 {
        sim.step();
    }
    let before = sim.held[19][0];
    let after = sim.held.last().unwrap()[0];
    assert!(after > before, "{before} then {after}: {:?}", sim.held);
    assert_eq!(sim.met.last().unwrap()[0], Some(true), "{:?}", sim.held);
}
