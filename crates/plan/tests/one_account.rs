//! The one account (plan invariant 8): CPUs that processes hold
//! exclusively through `require` stay with their holder, and no other cell
//! runs on them, whatever arrives, on every fixture machine.
//!
//! Holdings are drawn as the broker allows them: a space cell's processes
//! hold CPUs of its entitlement; processes outside every cell hold CPUs
//! outside the reserve, the time region and other holdings, through a cell
//! of their own (exclusive, exactly the held CPUs) that admission must let
//! in.

mod common;

use allot_plan::{CellInput, Plan, PlanConfig, Planner};
use allot_spec::{CellId, CellSpec};
use allot_topo::{CpuSet, FIXTURES};
use common::*;
use proptest::prelude::*;

/// The bits of `pick` chosen from `set` (CPU c when bit c mod 64 is set).
fn some_of(set: &CpuSet, pick: u64) -> CpuSet {
    set.iter().filter(|c| pick >> (c % 64) & 1 == 1).collect()
}

/// No cell but its holder runs on a held CPU.
fn assert_pins_kept(cells: &[CellInput], plan: &Plan) {
    for c in cells {
        let g = &plan.cells[&c.id];
        if c.spec.time.is_time() {
            continue;
        }
        assert!(
            c.held.is_subset(&g.entitled.difference(&g.lent)) && c.held.is_subset(&g.cpus),
            "cell {} holds {} through require but runs on {} (entitled {}, lent {})",
            c.id,
            c.held,
            g.cpus,
            g.entitled,
            g.lent
        );
        for o in cells.iter().filter(|o| o.id != c.id) {
            let theirs = &plan.cells[&o.id].cpus;
            assert!(
                !theirs.intersects(&c.held),
                "cell {} runs on {} held by cell {}",
                o.id,
                theirs.intersection(&c.held),
                c.id
            );
        }
    }
}

const OUTSIDE: CellId = CellId(u64::MAX);

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn held_cpus_stay_with_their_holder(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 1..25),
        picks in prop::collection::vec(any::<u64>(), 25),
        outside in any::<u64>(),
        newcomers in prop::collection::vec(raw_cell(), 0..4),
        lend in any::<bool>(),
        reserve in prop_oneof![3 => Just(0u32), 1 => 1u32..3],
    ) {
        let m = &machines()[which];
        let planner = Planner::new(m, PlanConfig { lend, reserve, ..Default::default() });
        let (mut cells, plan) = admitted_with_plan(&planner, &raw);
        prop_assume!(!cells.is_empty());
        for (c, &pick) in cells.iter_mut().zip(&picks) {
            if !c.spec.time.is_time() {
                c.held = some_of(&plan.cells[&c.id].entitled, pick);
            }
        }
        // Processes outside every cell pin CPUs nobody else held.
        let taken = cells.iter().fold(plan.reserve.union(&plan.time), |a, c| a.union(&c.held));
        let out = some_of(&m.usable().difference(&taken), outside);
        if !out.is_empty() {
            let spec = CellSpec::partition(out.len() as u32);
            if try_admit(&planner, &cells, &spec, &plan) {
                cells.push(CellInput {
                    id: OUTSIDE,
                    spec,
                    demand: None,
                    perf: Default::default(),
                    held: out,
                });
            }
        }
        let mut plan = planner.plan(&cells, &plan);
        check(&planner, m, &cells, &plan);
        assert_pins_kept(&cells, &plan);
        // Newcomers are admitted against the held guarantees and never
        // take a held CPU; nor does a replan with a cell's demand at one.
        for (i, r) in newcomers.iter().enumerate() {
            let spec = spec_of(r);
            if try_admit(&planner, &cells, &spec, &plan) {
                cells.push(CellInput {
                    id: CellId(1000 + i as u64),
                    spec,
                    demand: r.demand,
                    perf: Default::default(),
                    held: CpuSet::new(),
                });
                plan = planner.plan(&cells, &plan);
                check(&planner, m, &cells, &plan);
                assert_pins_kept(&cells, &plan);
            }
        }
        for c in cells.iter_mut() {
            c.demand = Some(1);
        }
        let idle = planner.plan(&cells, &plan);
        check(&planner, m, &cells, &idle);
        assert_pins_kept(&cells, &idle);
    }
}

#[test]
fn a_pin_outside_every_cell_moves_a_cell_off_its_cpu() {
    let m = allot_topo::Machine::uniform(4);
    let planner = Planner::new(&m, PlanConfig::default());
    let mut cells = vec![CellInput {
        id: CellId(1),
        spec: CellSpec::default(),
        demand: None,
        perf: Default::default(),
        held: CpuSet::new(),
    }];
    let before = planner.plan(&cells, &Plan::default());
    assert_eq!(before.cells[&CellId(1)].cpus.len(), 4);
    cells.push(CellInput {
        id: OUTSIDE,
        spec: CellSpec::partition(1),
        demand: None,
        perf: Default::default(),
        held: [2].into_iter().collect(),
    });
    let after = planner.plan(&cells, &before);
    check(&planner, &m, &cells, &after);
    assert_eq!(after.cells[&CellId(1)].cpus.to_string(), "0-1,3");
    assert_eq!(after.cells[&OUTSIDE].cpus.to_string(), "2");
}

#[test]
fn a_best_effort_cell_holding_a_cpu_is_guaranteed_it() {
    // Two best-effort cells on two CPUs; the first one's process holds
    // CPU 0. Three more best-effort cells come: without the pin the five
    // would be stacked on a shared pool; with it the first keeps CPU 0.
    let m = allot_topo::Machine::uniform(2);
    let planner = Planner::new(&m, PlanConfig::default());
    let cell = |id: u64| CellInput {
        id: CellId(id),
        spec: CellSpec::default(),
        demand: None,
        perf: Default::default(),
        held: CpuSet::new(),
    };
    let mut cells = vec![cell(1), cell(2)];
    let plan = planner.plan(&cells, &Plan::default());
    let mine = plan.cells[&CellId(1)].entitled.first().expect("entitled");
    cells[0].held = [mine].into_iter().collect();
    cells.extend([cell(3), cell(4), cell(5)]);
    let plan = planner.plan(&cells, &plan);
    check(&planner, &m, &cells, &plan);
    let g = &plan.cells[&CellId(1)];
    assert!(!g.stacked);
    assert_eq!(g.cpus, [mine].into_iter().collect());
    for id in 2..=5 {
        assert!(!plan.cells[&CellId(id)].cpus.contains(mine));
    }
}
