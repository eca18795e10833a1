//! Helpers shared by the plan's property tests: fixture machines, random
//! cells, and admission one cell at a time as the broker does it.

#![allow(dead_code)] // each test file uses its own part

use allot_plan::tracking::{Curve, PerfHint};
use allot_plan::{Admission, Admitted, CellInput, Plan, Planner};
use allot_spec::{CellId, CellSpec, Placement, TimeContract};
use allot_topo::{FIXTURES, Machine, fixture};
use proptest::prelude::*;
use std::sync::OnceLock;

pub fn machines() -> &'static Vec<Machine> {
    static M: OnceLock<Vec<Machine>> = OnceLock::new();
    M.get_or_init(|| FIXTURES.iter().map(|n| fixture(n).unwrap()).collect())
}

#[derive(Debug, Clone)]
pub struct RawCell {
    pub min: u32,
    pub max: u32,
    pub weight: u32,
    pub exclusive: bool,
    pub placement: u8,
    pub demand: Option<u32>,
    pub time: TimeContract,
}

/// Mostly space cells; one in four asks for time.
pub fn time_contract() -> impl Strategy<Value = TimeContract> {
    prop_oneof![
        6 => Just(TimeContract::Space),
        1 => (1u32..=19).prop_map(|twentieths| TimeContract::Fraction {
            ppm: twentieths * 50_000,
            slice_us: 0,
        }),
        1 => (1u32..=100, 1u32..=9).prop_map(|(ms, tenths)| TimeContract::Triggered {
            period_us: ms * 1_000,
            budget_us: (ms * 100 * tenths).max(100),
        }),
    ]
}

pub fn raw_cell() -> impl Strategy<Value = RawCell> {
    (
        prop_oneof![3 => Just(0u32), 1 => 1u32..4, 1 => 1u32..20],
        prop_oneof![2 => Just(0u32), 1 => 1u32..40],
        1u32..5,
        prop::bool::weighted(0.2),
        0u8..3,
        prop_oneof![1 => Just(None), 2 => (1u32..30).prop_map(Some)],
        time_contract(),
    )
        .prop_map(
            |(min, max, weight, exclusive, placement, demand, time)| match time {
                TimeContract::Space => RawCell {
                    min,
                    max: if max == 0 { 0 } else { max.max(min) },
                    weight,
                    exclusive,
                    placement,
                    demand,
                    time,
                },
                _ => RawCell {
                    min: min.clamp(1, 4),
                    max: 0,
                    weight,
                    exclusive: false,
                    placement: 0,
                    demand,
                    time,
                },
            },
        )
}

/// What a tracker may tell the goals policy about a cell.
pub fn hint() -> impl Strategy<Value = PerfHint> {
    (
        prop::option::of(1u32..80),
        prop::bool::weighted(0.1),
        prop::option::of((0.0f64..=1.0, 1.0f64..100.0)),
        prop::option::of(1u32..40),
    )
        .prop_map(|(goal_cpus, unmeetable, curve, probe)| PerfHint {
            goal_cpus,
            unmeetable,
            curve: curve.map(|(p, r1)| Curve { p, r1 }),
            probe: probe.filter(|_| goal_cpus.is_none()),
        })
}

pub fn spec_of(r: &RawCell) -> CellSpec {
    CellSpec {
        min: r.min,
        max: r.max,
        weight: r.weight,
        exclusive: r.exclusive,
        placement: Placement::from_code(r.placement).unwrap(),
        time: r.time,
        goal: Default::default(),
        memory: Default::default(),
        cache: Default::default(),
    }
}

/// Admits `spec` as the broker does: against the cells admitted so far
/// (each guaranteed the CPUs it holds through `require` too) and the plan
/// in force.
pub fn try_admit(planner: &Planner<'_>, cells: &[CellInput], spec: &CellSpec, plan: &Plan) -> bool {
    let held: Vec<CellSpec> = cells
        .iter()
        .map(|c| c.spec.holding(c.held.len() as u32))
        .collect();
    let adm: Vec<Admitted> = cells
        .iter()
        .zip(&held)
        .map(|(c, spec)| Admitted {
            id: c.id,
            name: "c",
            spec,
        })
        .collect();
    // An invalid spec is never admitted (the broker refuses it before
    // admission).
    spec.check().is_ok_and(|valid| {
        planner.admit(&adm, &valid, plan, &allot_plan::Room::cpus_only()) == Admission::Admit
    })
}

/// Admits the raw cells in order, planning after each as the broker does,
/// dropping those admission refuses.
pub fn admitted(planner: &Planner<'_>, raw: &[RawCell]) -> Vec<CellInput> {
    admitted_with_plan(planner, raw).0
}

/// [`admitted`], and the plan the broker would hold after the last one.
/// Time cells are placed as they arrive and keep their CPUs; the plans
/// checked start from this one, as the broker's do (a restart restores it
/// from the journal).
pub fn admitted_with_plan(planner: &Planner<'_>, raw: &[RawCell]) -> (Vec<CellInput>, Plan) {
    let mut cells: Vec<CellInput> = Vec::new();
    let mut plan = Plan::default();
    for (i, r) in raw.iter().enumerate() {
        let spec = spec_of(r);
        if try_admit(planner, &cells, &spec, &plan) {
            cells.push(CellInput {
                id: CellId(i as u64),
                spec,
                demand: r.demand,
                perf: Default::default(),
                held: Default::default(),
            });
            plan = planner.plan(&cells, &plan);
        }
    }
    (cells, plan)
}

pub fn check(planner: &Planner<'_>, m: &Machine, cells: &[CellInput], plan: &Plan) {
    let specs: Vec<(CellId, CellSpec)> = cells.iter().map(|c| (c.id, c.spec)).collect();
    if let Err(v) = plan.check(m, &specs) {
        panic!(
            "{} ({:?}): {v}\ncells: {cells:#?}\nplan: {plan:#?}",
            m.name(),
            planner.config()
        );
    }
}
