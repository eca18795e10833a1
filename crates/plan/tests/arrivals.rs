//! What one arrival changes for the cells already there, on every fixture
//! machine. The broker rewrites a cell's cgroup cpuset when its CPU set
//! changes and republishes its grant page when anything in its grant
//! changes (`Plan::changes_to` counts both as it does); the first is what
//! the design bounds.
//!
//! The mapping keeps each cell's CPUs from plan to plan and changes them
//! only where its counts change (docs/architecture.md, "Mapping layer"),
//! so an arriving space cell rewrites the CPU set of no existing cell but:
//!
//! - a whole-CPU cell whose entitled, kept or borrowed count changed;
//! - a whole-CPU cell that had borrowed a CPU that is no longer lendable
//!   (its owner, the newcomer or the pool's own share took it);
//! - an `llc` or `numa` cell whose CPUs straddled its domains (placement
//!   wins over stability once a domain has room);
//! - a cell that moved between whole CPUs and the stacked pool;
//! - a stacked cell, when the pool changed.
//!
//! Shares, `home` and stacked thread counts change far more often: those
//! cost a page, not a cgroup write. The bench (`benches/plan.rs`) prints
//! how many of each an arrival into 10 to 10 000 cells costs.

mod common;

use allot_plan::{CellInput, GlobalPolicy, Plan, PlanConfig, Planner};
use allot_spec::{CellId, Placement};
use allot_topo::{CpuSet, FIXTURES, Machine};
use common::*;
use proptest::prelude::*;

/// Why an arrival may rewrite cell `id`'s CPU set going from `before` to
/// `after`, or `None` when the design says it must not.
fn may_rewrite(
    m: &Machine,
    placement: Placement,
    id: CellId,
    before: &Plan,
    after: &Plan,
) -> Option<&'static str> {
    let (b, a) = (&before.cells[&id], &after.cells[&id]);
    match (b.stacked, a.stacked) {
        (true, true) => return (before.pool != after.pool).then_some("the pool changed"),
        (false, false) => {}
        _ => return Some("moved between whole CPUs and the pool"),
    }
    let kept = |g: &allot_plan::Allotment| g.cpus.intersection(&g.entitled).len();
    if (b.entitled.len(), kept(b), b.lent.len()) != (a.entitled.len(), kept(a), a.lent.len()) {
        return Some("its counts changed");
    }
    // What is not lendable now: every cell's kept CPUs, the pool's own
    // share (the pool less what it borrows) and the reserve.
    let taken = after
        .cells
        .values()
        .fold(after.reserve, |acc, g| match g.stacked {
            true => acc.union(&after.pool.difference(&g.lent)),
            false => acc.union(&g.cpus.intersection(&g.entitled)),
        });
    if b.lent.intersects(&taken) {
        return Some("a CPU it borrowed was taken back");
    }
    let domains: Vec<CpuSet> = match placement {
        Placement::Any => vec![],
        Placement::Llc => m.llcs().iter().map(|l| l.cpus).collect(),
        Placement::Numa => m.nodes().iter().map(|n| n.cpus).collect(),
    };
    if domains.iter().filter(|d| d.intersects(&b.entitled)).count() > 1 {
        return Some("its CPUs straddled its placement domains");
    }
    None
}

/// Plans the arrival of `new` into the settled plan of `cells` and checks
/// that only the cells the design allows have their CPU sets rewritten.
fn check_arrival(planner: &Planner<'_>, m: &Machine, cells: &[CellInput], new: CellInput) {
    // The broker's plan once it has settled (re-planning moves nothing).
    let first = planner.plan(cells, &Plan::default());
    let before = planner.plan(cells, &first);
    let mut with = cells.to_vec();
    with.push(new);
    let after = planner.plan(&with, &before);
    check(planner, m, &with, &after);
    let mut allowed = 0;
    for c in cells {
        let why = may_rewrite(m, c.spec.placement, c.id, &before, &after);
        allowed += usize::from(why.is_some());
        let (b, a) = (&before.cells[&c.id], &after.cells[&c.id]);
        assert!(
            why.is_some() || b.cpus == a.cpus,
            "{} ({:?}): cell {} moved from {} to {} with its counts unchanged \
             (entitled {} then {}, lent {} then {})",
            m.name(),
            planner.config(),
            c.id,
            b.cpus,
            a.cpus,
            b.entitled,
            a.entitled,
            b.lent,
            a.lent
        );
    }
    let changes = before.changes_to(&after);
    assert!(changes.cpus <= allowed);
    assert!(changes.cpuset_writes <= 2 * changes.cpus);
    assert!(changes.cpus <= changes.grants);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// An arriving space cell rewrites only the CPU sets the design allows.
    #[test]
    fn an_arrival_rewrites_only_cells_whose_counts_change(
        which in 0..FIXTURES.len(),
        raw in prop::collection::vec(raw_cell(), 1..40),
        new in raw_cell(),
        lend in any::<bool>(),
        policy in 0usize..3,
        reserve in prop_oneof![3 => Just(0u32), 1 => 1u32..3],
    ) {
        let m = &machines()[which];
        let policy = GlobalPolicy::ALL[policy];
        let planner = Planner::new(m, PlanConfig { reserve, policy, lend, ..Default::default() });
        let space = |r: &RawCell| RawCell { time: Default::default(), ..r.clone() };
        let raw: Vec<RawCell> = raw.iter().map(space).collect();
        let (cells, plan) = admitted_with_plan(&planner, &raw);
        let spec = spec_of(&space(&new));
        prop_assume!(!cells.is_empty() && try_admit(&planner, &cells, &spec, &plan));
        let new = CellInput {
            id: CellId(raw.len() as u64),
            spec,
            demand: new.demand,
            perf: Default::default(),
            held: Default::default(),
        };
        check_arrival(&planner, m, &cells, new);
    }
}

/// Many cells, most of them stacked: a best-effort and a guaranteed
/// newcomer into 1000 cells on every fixture (the bench's mix).
#[test]
fn arrivals_into_a_thousand_cells() {
    for m in machines() {
        for lend in [false, true] {
            let planner = Planner::new(
                m,
                PlanConfig {
                    lend,
                    ..Default::default()
                },
            );
            // One in ten guaranteed a CPU while guarantees fit (admission
            // would refuse the rest), one in twenty of those exclusive.
            let mut guaranteed = 0;
            let cells: Vec<CellInput> = (0..1000u32)
                .map(|i| {
                    let fits = guaranteed + 2 <= planner.capacity();
                    let min = u32::from(i % 10 == 0 && fits);
                    guaranteed += min;
                    let spec = spec_of(&RawCell {
                        min,
                        max: 0,
                        weight: 1 + i % 4,
                        exclusive: min == 1 && i % 20 == 0,
                        placement: (i % 3) as u8,
                        demand: None,
                        time: Default::default(),
                    });
                    CellInput {
                        id: CellId(u64::from(i)),
                        spec,
                        demand: (i % 2 == 1).then_some(1 + i % 5),
                        perf: Default::default(),
                        held: Default::default(),
                    }
                })
                .collect();
            let plan = planner.plan(&cells, &Plan::default());
            for min in [0, 2] {
                let spec = allot_spec::CellSpec {
                    min,
                    ..Default::default()
                };
                if try_admit(&planner, &cells, &spec, &plan) {
                    let new = CellInput {
                        id: CellId(1000),
                        spec,
                        demand: None,
                        perf: Default::default(),
                        held: Default::default(),
                    };
                    check_arrival(&planner, m, &cells, new);
                }
            }
        }
    }
}
