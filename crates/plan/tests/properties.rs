//! Plan invariants over random cell sets on every fixture machine.
//!
//! Cells are admitted one by one through admission control (as the broker
//! does), so the guarantees in every generated set are ones the broker
//! would have given.

mod common;

use allot_plan::{Admission, Admitted, CellInput, GlobalPolicy, Plan, PlanConfig, Planner};
use allot_spec::{CellId, CellSpec, Placement, TimeContract};
use allot_topo::{FIXTURES, Machine, fixture};
use common::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn invariants_hold(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 1..40),
        reserve in prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        lend in any::<bool>(),
        policy in 0usize..3,
        hints in prop::collection::vec(hint(), 40),
        unmanaged in prop_oneof![3 => Just(0u32), 1 => 1u32..8],
        pause_best_effort in any::<bool>(),
    ) {
        let m = &machines()[which];
        let policy = GlobalPolicy::ALL[policy];
        let planner = Planner::new(m, PlanConfig { reserve, policy, lend, time_reserve_ppm: 50_000, pause_best_effort });
        let (mut cells, held) = admitted_with_plan(&planner, &raw);
        prop_assume!(!cells.is_empty());
        // What the cells' reports say (only the goals policy reads it).
        for (c, h) in cells.iter_mut().zip(&hints) {
            c.perf = *h;
        }
        let plan = planner.plan_loaded(&cells, &held, unmanaged);
        check(&planner, m, &cells, &plan);
    }

    #[test]
    fn plans_are_stable(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 1..30),
        lend in any::<bool>(),
    ) {
        let m = &machines()[which];
        let planner = Planner::new(m, PlanConfig { lend, ..Default::default() });
        let (cells, held) = admitted_with_plan(&planner, &raw);
        prop_assume!(!cells.is_empty());
        let first = planner.plan(&cells, &held);
        let again = planner.plan(&cells, &first);
        prop_assert_eq!(&again, &first, "replanning the same input moved CPUs");
    }

    #[test]
    fn a_newcomer_moves_few_cpus(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 2..30),
    ) {
        // With placement `any`, an existing cell keeps min(old, new) of its
        // entitled CPUs when another cell arrives: only shrinking loses
        // CPUs — and CPUs the time region newly covers, which a time
        // newcomer takes from whoever held them.
        let m = &machines()[which];
        let planner = Planner::new(m, PlanConfig { lend: false, ..Default::default() });
        let raw: Vec<RawCell> = raw.into_iter().map(|r| RawCell { placement: 0, ..r }).collect();
        let cells = admitted(&planner, &raw);
        prop_assume!(cells.len() >= 2);
        // The state just before the last admission (admission is
        // deterministic, so the prefix admits the same cells).
        let last = cells[cells.len() - 1].id.0 as usize;
        let (old_cells, before) = admitted_with_plan(&planner, &raw[..last]);
        assert_eq!(old_cells.len(), cells.len() - 1);
        let before = planner.plan(&old_cells, &before);
        let after = planner.plan(&cells, &before);
        check(&planner, m, &cells, &after);
        let newly_timed = after.time.difference(&before.time);
        for c in &old_cells {
            let (b, a) = (&before.cells[&c.id], &after.cells[&c.id]);
            let kept = b.entitled.intersection(&a.entitled).len();
            let taken = b.entitled.intersection(&newly_timed).len();
            prop_assert!(kept + taken >= b.entitled.len().min(a.entitled.len()),
                "cell {} entitled {} then {} (time region {} then {})",
                c.id, b.entitled, a.entitled, before.time, after.time);
        }
    }

    #[test]
    fn no_cpu_idles_while_a_cell_wants_more(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 1..20),
    ) {
        let m = &machines()[which];
        let planner = Planner::new(m, PlanConfig { lend: true, ..Default::default() });
        let (mut cells, held) = admitted_with_plan(&planner, &raw);
        prop_assume!(!cells.is_empty() && !cells[0].spec.time.is_time());
        // One unbounded space cell that can use everything.
        cells[0].spec.max = 0;
        cells[0].demand = None;
        let plan = planner.plan(&cells, &held);
        check(&planner, m, &cells, &plan);
        if !plan.cells[&cells[0].id].stacked {
            let used = plan.cells.values().fold(allot_topo::CpuSet::new(), |acc, g| acc.union(&g.cpus));
            prop_assert_eq!(used.len() as u32, planner.capacity(),
                "idle CPUs while cell {} wants more: {:#?}", cells[0].id, plan);
        }
    }
}

#[test]
fn two_cells_share_the_vm_then_one_gets_both() {
    let m = fixture("vm2").unwrap();
    let planner = Planner::new(
        &m,
        PlanConfig {
            lend: true,
            ..Default::default()
        },
    );
    let a = CellInput {
        id: CellId(1),
        spec: CellSpec::default(),
        demand: None,
        perf: Default::default(),
        held: Default::default(),
    };
    let b = CellInput {
        id: CellId(2),
        spec: CellSpec::default(),
        demand: None,
        perf: Default::default(),
        held: Default::default(),
    };
    let both = planner.plan(&[a, b], &Plan::default());
    assert_eq!(both.cells[&CellId(1)].cpus.len(), 1);
    assert_eq!(both.cells[&CellId(2)].cpus.len(), 1);
    assert!(
        !both.cells[&CellId(1)]
            .cpus
            .intersects(&both.cells[&CellId(2)].cpus)
    );
    let alone = planner.plan(&[b], &both);
    assert_eq!(alone.cells[&CellId(2)].cpus.to_string(), "0-1");
    assert_eq!(alone.cells[&CellId(2)].threads, 2);
    // B kept the CPU it had.
    assert!(
        both.cells[&CellId(2)]
            .cpus
            .is_subset(&alone.cells[&CellId(2)].cpus)
    );
}

#[test]
fn idle_cell_lends_its_cpu_and_gets_it_back() {
    let spec = CellSpec::default();
    let mut cells = [
        CellInput {
            id: CellId(1),
            spec,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
        CellInput {
            id: CellId(2),
            spec,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
    ];
    // On 2 CPUs an idle cell still keeps its one CPU, so lending shows on
    // the 16-CPU fixture.
    let x = fixture("xeon-x5550-2s").unwrap();
    let planner16 = Planner::new(
        &x,
        PlanConfig {
            lend: true,
            ..Default::default()
        },
    );
    let q0 = planner16.plan(&cells, &Plan::default());
    assert_eq!(q0.cells[&CellId(1)].cpus.len(), 8);
    cells[0].demand = Some(2);
    let q1 = planner16.plan(&cells, &q0);
    let (g1, g2) = (&q1.cells[&CellId(1)], &q1.cells[&CellId(2)]);
    assert_eq!(g1.cpus.len(), 2);
    assert_eq!(g2.cpus.len(), 14);
    assert_eq!(g2.lent.len(), 6, "borrowed CPUs are marked lent");
    assert!(g2.lent.is_subset(&g1.entitled));
    // Demand rises again: the lent CPUs go back to their owner.
    cells[0].demand = None;
    let q2 = planner16.plan(&cells, &q1);
    assert_eq!(q2.cells[&CellId(1)].cpus, q0.cells[&CellId(1)].cpus);
    assert!(q2.cells[&CellId(2)].lent.is_empty());
}

#[test]
fn stacked_cells_share_a_pool_and_run_one_thread_each() {
    let m = fixture("vm2").unwrap();
    let planner = Planner::new(
        &m,
        PlanConfig {
            lend: true,
            ..Default::default()
        },
    );
    let cells: Vec<CellInput> = (0..4)
        .map(|i| CellInput {
            id: CellId(i),
            spec: CellSpec::default(),
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        })
        .collect();
    let p = planner.plan(&cells, &Plan::default());
    for g in p.cells.values() {
        assert!(g.stacked);
        assert_eq!(g.cpus.to_string(), "0-1");
        assert_eq!(g.threads, 1);
    }
    // Their homes tile the pool: two cells start on each CPU, so runtimes
    // that pin one worker from their home on do not all take CPU 0.
    let homes: Vec<u32> = p.cells.values().map(|g| g.home).collect();
    assert_eq!(homes, [0, 1, 0, 1]);
    // One cell leaves: the others keep tiling.
    let p3 = planner.plan(&cells[1..], &p);
    let homes: Vec<u32> = p3.cells.values().map(|g| g.home).collect();
    assert_eq!(homes, [0, 1, 0]);
}

#[test]
fn numa_placement_keeps_cells_on_one_node() {
    let m = fixture("opteron6276-4s").unwrap();
    let planner = Planner::new(
        &m,
        PlanConfig {
            lend: false,
            ..Default::default()
        },
    );
    let spec = CellSpec {
        min: 6,
        max: 6,
        placement: Placement::Numa,
        ..Default::default()
    };
    let cells: Vec<CellInput> = (0..8)
        .map(|i| CellInput {
            id: CellId(i),
            spec,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        })
        .collect();
    let p = planner.plan(&cells, &Plan::default());
    for g in p.cells.values() {
        let nodes = m
            .nodes()
            .iter()
            .filter(|n| n.cpus.intersects(&g.cpus))
            .count();
        assert_eq!(nodes, 1, "{}", g.cpus);
    }
}

fn any_spec() -> impl Strategy<Value = CellSpec> {
    (
        prop_oneof![2 => Just(0u32), 3 => 1u32..5],
        prop::bool::weighted(0.3),
    )
        .prop_map(|(min, exclusive)| CellSpec {
            min,
            exclusive,
            ..Default::default()
        })
}

proptest! {
    /// `delays` is exact: it says a newcomer delays a waiting cell exactly
    /// when some set of admitted cells could leave such that the waiting
    /// cell would fit without the newcomer and not with it.
    #[test]
    fn delays_matches_every_order_of_departures(
        cpus in 1usize..9,
        held in prop::collection::vec(any_spec(), 0..8),
        waiting in any_spec(),
        new in any_spec(),
        pause in any::<bool>(),
    ) {
        let m = Machine::uniform(cpus);
        prop_assume!(waiting.guaranteed() as usize <= cpus);
        let fits = |remaining: &[CellSpec]| {
            let a: Vec<Admitted> = remaining.iter().map(|s| Admitted { id: CellId(0), name: "x", spec: s }).collect();
            let none = Plan::default();
            let room = allot_plan::admission::TimeRoom { candidates: &[], limit: allot_spec::PPM, current: &none };
            waiting.check().is_ok_and(|w| allot_plan::admit(&m, 0, &room, &a, &w, pause) == Admission::Admit)
        };
        let mut harmed = false;
        for mask in 0u32..(1 << held.len()) {
            let stay: Vec<CellSpec> = (0..held.len()).filter(|i| mask >> i & 1 == 1).map(|i| held[i]).collect();
            let mut with_new = stay.clone();
            with_new.push(new);
            if fits(&stay) && !fits(&with_new) {
                harmed = true;
            }
        }
        let a: Vec<Admitted> = held.iter().map(|s| Admitted { id: CellId(0), name: "x", spec: s }).collect();
        prop_assert_eq!(allot_plan::delays(&m, 0, &a, &waiting, &new, pause), harmed);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Admitting, resizing or ending one cell never breaks the contract of
    /// an admitted time cell: after every step the plan passes the checker
    /// (every promise fits its CPUs, the windows on every CPU keep apart)
    /// and every time cell still has the CPUs and the phase it was first
    /// given.
    #[test]
    fn time_contracts_survive_arrivals_resizes_and_departures(
        which in 0..FIXTURES.len(),
        steps in prop::collection::vec((raw_cell(), 0u8..10, any::<prop::sample::Index>()), 1..40),
        reserve in prop_oneof![3 => Just(0u32), 1 => 1u32..3],
        time_reserve_ppm in prop_oneof![Just(0u32), Just(50_000u32), Just(200_000u32)],
    ) {
        let m = &machines()[which];
        let planner = Planner::new(m, PlanConfig { reserve, lend: true, time_reserve_ppm, ..Default::default() });
        let mut cells: Vec<CellInput> = Vec::new();
        let mut plan = Plan::default();
        let mut first_cpus = std::collections::BTreeMap::new();
        for (i, (raw, op, pick)) in steps.iter().enumerate() {
            match op {
                // End a cell.
                0..=2 if !cells.is_empty() => {
                    let gone = cells.remove(pick.index(cells.len()));
                    first_cpus.remove(&gone.id);
                }
                // Resize a cell to the raw spec, if admission allows it.
                3 if !cells.is_empty() => {
                    let at = pick.index(cells.len());
                    let spec = spec_of(raw);
                    let others: Vec<CellInput> =
                        cells.iter().enumerate().filter(|(j, _)| *j != at).map(|(_, c)| *c).collect();
                    if try_admit(&planner, &others, &spec, &plan) {
                        cells[at].spec = spec;
                        first_cpus.remove(&cells[at].id);
                    }
                }
                _ => {
                    let spec = spec_of(raw);
                    if try_admit(&planner, &cells, &spec, &plan) {
                        cells.push(CellInput { id: CellId(i as u64), spec, demand: raw.demand, perf: Default::default(), held: Default::default() });
                    }
                }
            }
            plan = planner.plan(&cells, &plan);
            check(&planner, m, &cells, &plan);
            for c in cells.iter().filter(|c| c.spec.time.is_time()) {
                let now = (plan.cells[&c.id].cpus, plan.phases.get(&c.id).copied());
                let first = *first_cpus.entry(c.id).or_insert(now);
                prop_assert_eq!(now, first, "time cell {} moved or shifted its windows", c.id);
            }
        }
    }
}

#[test]
fn best_effort_cells_run_on_the_time_region_and_exclusive_ones_never_do() {
    let m = fixture("opteron6276-4s").unwrap();
    let planner = Planner::new(
        &m,
        PlanConfig {
            lend: true,
            time_reserve_ppm: 50_000,
            ..Default::default()
        },
    );
    let tt = CellSpec {
        min: 2,
        time: TimeContract::Triggered {
            period_us: 10_000,
            budget_us: 3_000,
        },
        ..Default::default()
    };
    let fr = CellSpec {
        min: 1,
        time: TimeContract::Fraction {
            ppm: 250_000,
            slice_us: 0,
        },
        ..Default::default()
    };
    let pinned = CellSpec {
        min: 4,
        max: 4,
        exclusive: true,
        ..Default::default()
    };
    let cells = [
        CellInput {
            id: CellId(1),
            spec: tt,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
        CellInput {
            id: CellId(2),
            spec: fr,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
        CellInput {
            id: CellId(3),
            spec: pinned,
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
        CellInput {
            id: CellId(4),
            spec: CellSpec::default(),
            demand: None,
            perf: Default::default(),
            held: Default::default(),
        },
    ];
    let plan = planner.plan(&cells, &Plan::default());
    check(&planner, &m, &cells, &plan);
    assert_eq!(
        plan.time.len(),
        3,
        "two triggered CPUs and one fraction CPU: {}",
        plan.time
    );
    assert!(!plan.cells[&CellId(3)].cpus.intersects(&plan.time));
    let be = &plan.cells[&CellId(4)];
    assert!(
        plan.time.is_subset(&be.cpus) && plan.time.is_subset(&be.lent),
        "{be:?}"
    );
    assert_eq!(plan.cells[&CellId(1)].cpus.len(), 2);
    assert_eq!(plan.cells[&CellId(1)].threads, 2);
    // 64 CPUs: 4 pinned, 3 time, the best-effort cell the other 57 plus the region.
    assert_eq!(be.cpus.len(), 60);
}
