//! Plan time for 10 to 10 000 cells on the 64-core, 272-thread and
//! 1024-CPU fixtures (goals: 1000 cells under 1 ms; 10 000 cells under
//! 2 ms on the 1024-CPU machine), and what one arrival changes.
//!
//! - `replan`: each iteration plans from the previous plan with one cell's
//!   demand changed, which is what the broker does on every event.
//! - `arrival`: each iteration plans the N cells and one best-effort
//!   newcomer from the plan of the N cells.
//!
//! Before the timings a table says, per arrival of one cell into N cells,
//! how many of the N the broker has to touch: cells whose CPU set
//! changes (their cgroup's cpuset is rewritten; `Plan::changes_to` counts
//! the writes as `core/reconcile.rs` makes them), whose thread count
//! changes, and whose grant changes in any field (their grant page is
//! republished); and of those pages, how many read differently (`shown`:
//! the rest differ only in the share beyond the thousandth of a CPU the
//! page carries). `tests/arrivals.rs` checks which cells may be rewritten.
//!
//! Run: `cargo bench -p allot-plan --bench plan`.

use allot_plan::{Admission, Admitted, Allotment, CellInput, Plan, PlanConfig, Planner};
use allot_spec::{CellId, CellSpec, Placement};
use allot_topo::Machine;

/// The machines timed: 64 cores, 272 threads, 1024 CPUs.
const MACHINES: [&str; 3] = ["opteron6276-4s", "xeonphi7250", "synth-8s-1024"];

fn main() {
    if !std::env::args().any(|a| a == "--list") {
        print_arrivals();
    }
    divan::main();
}

/// A mix of `n` cells: one in ten guaranteed a CPU (one in twenty of them
/// exclusive), weights 1–4, placements `any`, `llc` and `numa` in turn,
/// every other cell's demand known (1–5 CPUs). Guarantees that would not
/// be admitted on `planner`'s machine are dropped (the cell is best effort).
fn cells(planner: &Planner<'_>, n: usize) -> Vec<CellInput> {
    let cap = planner.capacity();
    let mut held = 0;
    (0..n)
        .map(|i| {
            let mut spec = CellSpec {
                min: if i % 10 == 0 { 1 } else { 0 },
                max: 0,
                weight: 1 + (i % 4) as u32,
                exclusive: i % 20 == 0,
                placement: [Placement::Any, Placement::Llc, Placement::Numa][i % 3],
                time: Default::default(),
                goal: Default::default(),
                memory: Default::default(),
                cache: Default::default(),
            };
            if held + spec.guaranteed() + 1 > cap {
                spec.min = 0;
                spec.exclusive = false;
            }
            held += spec.guaranteed();
            CellInput {
                id: CellId(i as u64),
                spec,
                demand: if i % 2 == 0 {
                    None
                } else {
                    Some(1 + (i % 5) as u32)
                },
                perf: Default::default(),
                held: Default::default(),
            }
        })
        .collect()
}

fn planner(machine: &Machine) -> Planner<'_> {
    Planner::new(
        machine,
        PlanConfig {
            lend: true,
            ..Default::default()
        },
    )
}

/// The plan the broker holds for `cells` once it has settled (re-planning
/// it moves nothing).
fn settled(planner: &Planner<'_>, cells: &[CellInput]) -> Plan {
    let first = planner.plan(cells, &Plan::default());
    planner.plan(cells, &first)
}

/// A newcomer: best effort, or guaranteed `min` CPUs.
fn newcomer(id: usize, min: u32) -> CellInput {
    CellInput {
        id: CellId(id as u64),
        spec: CellSpec {
            min,
            ..Default::default()
        },
        demand: None,
        perf: Default::default(),
        held: Default::default(),
    }
}

/// What the grant page shows of a grant (`allot_proto::Grant` as the
/// broker's `page_grant` fills it, less the time window).
fn shown(g: &Allotment) -> impl PartialEq {
    (
        g.cpus,
        g.lent,
        g.entitled.len(),
        g.threads,
        g.stacked,
        g.home,
        (g.share * 1000.0).round() as u32,
    )
}

fn print_arrivals() {
    println!("One arrival into N cells: how many of the N change");
    println!(
        "{:<16} {:>6}  {:<12} {:>8} {:>7} {:>8} {:>6} {:>6}",
        "fixture", "N", "newcomer", "cpusets", "writes", "threads", "pages", "shown"
    );
    for name in MACHINES {
        let machine = allot_topo::fixture(name).unwrap();
        let planner = planner(&machine);
        for n in [10, 100, 1000, 10_000] {
            let mut input = cells(&planner, n);
            let before = settled(&planner, &input);
            for (kind, min) in [("best effort", 0), ("min 2", 2)] {
                let new = newcomer(n, min);
                let admitted: Vec<Admitted<'_>> = input
                    .iter()
                    .map(|c| Admitted {
                        id: c.id,
                        name: "c",
                        spec: &c.spec,
                    })
                    .collect();
                if planner.admit(
                    &admitted,
                    &new.spec.check().expect("the bench's specs are valid"),
                    &before,
                    &allot_plan::Room::cpus_only(),
                ) != Admission::Admit
                {
                    println!("{name:<16} {n:>6}  {kind:<12} (not admitted)");
                    continue;
                }
                input.push(new);
                let after = planner.plan(&input, &before);
                input.pop();
                let c = before.changes_to(&after);
                let visible = before
                    .cells
                    .iter()
                    .filter(|(id, g)| shown(g) != shown(&after.cells[id]))
                    .count();
                println!(
                    "{name:<16} {n:>6}  {kind:<12} {:>8} {:>7} {:>8} {:>6} {visible:>6}",
                    c.cpus, c.cpuset_writes, c.threads, c.grants
                );
            }
        }
    }
    println!();
}

#[divan::bench(args = MACHINES, consts = [10, 100, 1000, 10_000])]
fn replan<const N: usize>(bencher: divan::Bencher, fixture: &str) {
    let machine = allot_topo::fixture(fixture).unwrap();
    let planner = planner(&machine);
    let mut input = cells(&planner, N);
    let mut prev = planner.plan(&input, &Plan::default());
    let mut tick = 0u32;
    bencher.bench_local(|| {
        tick = tick.wrapping_add(1);
        let k = tick as usize % input.len();
        input[k].demand = Some(1 + tick % 7);
        prev = planner.plan(&input, &prev);
        divan::black_box(prev.cells.len())
    });
}

#[divan::bench(args = MACHINES, consts = [10, 100, 1000, 10_000])]
fn arrival<const N: usize>(bencher: divan::Bencher, fixture: &str) {
    let machine = allot_topo::fixture(fixture).unwrap();
    let planner = planner(&machine);
    let mut input = cells(&planner, N);
    let before = settled(&planner, &input);
    input.push(newcomer(N, 0));
    bencher.bench_local(|| planner.plan(&input, &before));
}
