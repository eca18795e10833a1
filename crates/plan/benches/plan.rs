//! Plan time for 10, 100 and 1000 cells on the 64-core and 272-thread
//! fixtures (goal: 1000 cells under 1 ms).
//!
//! Each iteration plans from the previous plan with one cell's demand
//! changed, which is what the broker does on every event.
//! Run: `cargo bench -p allot-plan --bench plan`.

use allot_plan::{CellId, CellInput, CellSpec, Placement, Plan, PlanConfig, Planner};

fn main() {
    divan::main();
}

fn cells(n: usize) -> Vec<CellInput> {
    (0..n)
        .map(|i| CellInput {
            id: CellId(i as u64),
            spec: CellSpec {
                min: if i % 10 == 0 { 1 } else { 0 },
                max: 0,
                weight: 1 + (i % 4) as u32,
                exclusive: i % 20 == 0,
                placement: [Placement::Any, Placement::Llc, Placement::Numa][i % 3],
                time: Default::default(),
                goal: Default::default(),
            },
            demand: if i % 2 == 0 {
                None
            } else {
                Some(1 + (i % 5) as u32)
            },
            perf: Default::default(),
            held: Default::default(),
        })
        .collect()
}

#[divan::bench(args = ["opteron6276-4s", "xeonphi7250"], consts = [10, 100, 1000])]
fn replan<const N: usize>(bencher: divan::Bencher, fixture: &str) {
    let machine = allot_topo::fixture(fixture).unwrap();
    let planner = Planner::new(
        &machine,
        PlanConfig {
            lend: true,
            ..Default::default()
        },
    );
    let mut input = cells(N);
    // Keep guarantees admissible on the machine.
    let cap = planner.capacity();
    let mut held = 0;
    for c in &mut input {
        if held + c.spec.guaranteed() + 1 > cap {
            c.spec.min = 0;
            c.spec.exclusive = false;
        }
        held += c.spec.guaranteed();
    }
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
