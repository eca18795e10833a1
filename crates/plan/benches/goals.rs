//! The goals policy over time, simulated (`allot_plan::sim`): 200 cells
//! with random speed-up curves, a quarter of them with rate goals and a
//! tenth request servers with latency goals, on the 272-thread Xeon Phi
//! fixture; and a mix of a job that scales well with one that barely
//! scales, against fair share, on the 64-core fixture.
//!
//! Reports, over several seeds: the step from which every goal is met,
//! the step from which the plan no longer changes, the plan time per step
//! (one planner call and 200 tracker updates: the broker's cost per
//! evaluation), and for the mix the time to finish both jobs under each
//! policy and the machine's throughput while both run (the sum of their
//! speed-ups, which the goals policy maximises), for a long well-scaling
//! job beside a short poor one and for equal work.
//!
//! Run: `cargo bench -p allot-plan --bench goals [-- SEEDS]` (default 10).

use allot_plan::sim::{Sim, SimCell, Truth};
use allot_plan::tracking::Curve;
use allot_plan::{GlobalPolicy, PlanConfig};
use allot_spec::{CellSpec, Goal};
use std::time::Instant;

/// A small deterministic generator for the cells.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// 200 cells: rate goals needing 1–3 CPUs (a quarter), latency goals
/// (a tenth), the rest batch cells counting work (p 0.3–1) or silent.
fn cells(seed: u64) -> Vec<SimCell> {
    let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    (0..200)
        .map(|i| {
            let p = 0.3 + 0.7 * r.next();
            let curve = Curve { p, r1: 100.0 };
            let need = 1 + (r.next() * 3.0) as u32;
            let (truth, goal) = match i % 20 {
                0..=4 => {
                    let rate = |n: u32| curve.rate(f64::from(n));
                    let t = (1..=need)
                        .rev()
                        .find(|&t| t == 1 || rate(t) >= 1.25 * rate(t - 1))
                        .unwrap_or(1);
                    (
                        Truth::Rate(curve),
                        Goal::Rate {
                            milli_per_s: (rate(t) / 1.1 * 1000.0) as u64,
                        },
                    )
                }
                5 | 6 => {
                    let load = 0.6 * f64::from(need);
                    (
                        Truth::Server { k: 1_000.0, load },
                        Goal::P99 {
                            us: (1_000.0 / (1.0 - load / f64::from(need)) * 1.2) as u32,
                        },
                    )
                }
                7..=16 => (Truth::Rate(curve), Goal::None),
                _ => (Truth::Silent, Goal::None),
            };
            SimCell {
                spec: CellSpec {
                    goal,
                    ..CellSpec::default()
                },
                truth,
                phases: vec![],
                noise: 0.02,
            }
        })
        .collect()
}

fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn main() {
    let seeds: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(10);
    let phi = allot_topo::fixture("xeonphi7250").expect("the Xeon Phi fixture");
    let config = PlanConfig {
        policy: GlobalPolicy::Goals,
        lend: true,
        ..PlanConfig::default()
    };
    println!("== 200 cells on the 272-thread Xeon Phi fixture, {seeds} seeds, 40 steps each ==");
    let (mut met_at, mut settled_at, mut plan_us) = (vec![], vec![], vec![]);
    for seed in 1..=seeds {
        let cells = cells(seed);
        let goals: Vec<usize> = (0..cells.len())
            .filter(|&i| cells[i].spec.goal.is_some())
            .collect();
        let mut sim = Sim::new(&phi, config, cells, seed);
        for _ in 0..40 {
            let t = Instant::now();
            sim.step();
            plan_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        // The first step from which every goal stays met.
        let all_met = |s: usize| goals.iter().all(|&i| sim.met[s][i] == Some(true));
        let mut first = sim.met.len();
        while first > 0 && all_met(first - 1) {
            first -= 1;
        }
        met_at.push(first as f64);
        settled_at.push(sim.settled_at().unwrap_or(40) as f64);
    }
    println!(
        "every goal met from step: median {:.0}, max {:.0} (of 40; 40 = not all met at the end)",
        quantile(&mut met_at, 0.5),
        quantile(&mut met_at, 1.0)
    );
    println!(
        "plan unchanged from step: median {:.0}, p90 {:.0}, max {:.0}",
        quantile(&mut settled_at, 0.5),
        quantile(&mut settled_at, 0.9),
        quantile(&mut settled_at, 1.0)
    );
    println!(
        "one step (plan + 200 tracker updates): median {:.0} us, p99 {:.0} us",
        quantile(&mut plan_us, 0.5),
        quantile(&mut plan_us, 0.99)
    );

    // A job that scales well and one that barely does, on 64 CPUs: the
    // time until both finish, run by the simulator tick by tick (one tick
    // is one second of work at the rates the plan gives); a job that
    // finishes leaves the plan.
    let opteron = allot_topo::fixture("opteron6276-4s").expect("the 64-core fixture");
    for (well, poor) in [(60_000.0, 2_000.0), (6_000.0, 6_000.0)] {
        println!(
            "== a well-scaling (p 0.99, {well} units) and a poorly scaling (p 0.5, {poor} units) \
             job, 10 units/s on one CPU, 64 CPUs =="
        );
        let (mut medians, mut rates) = (vec![], vec![]);
        for policy in [GlobalPolicy::FairShare, GlobalPolicy::Goals] {
            let (mut finish, mut sums) = (vec![], vec![]);
            for seed in 1..=seeds {
                let curves = [Curve { p: 0.99, r1: 10.0 }, Curve { p: 0.5, r1: 10.0 }];
                let job = |c: Curve| SimCell {
                    spec: CellSpec::default(),
                    truth: Truth::Rate(c),
                    phases: vec![],
                    noise: 0.02,
                };
                let mut sim = Sim::new(
                    &opteron,
                    PlanConfig {
                        policy,
                        lend: true,
                        ..PlanConfig::default()
                    },
                    vec![job(curves[0]), job(curves[1])],
                    seed,
                );
                let mut left = [well, poor];
                let mut t = 0;
                // The machine's throughput while both run: the sum of the
                // jobs' speed-ups, what the policy maximises.
                let (mut sum, mut both) = (0.0, 0);
                while left.iter().any(|&l| l > 0.0) && t < 100_000 {
                    let held = sim.step();
                    if left.iter().all(|&l| l > 0.0) {
                        sum += (0..2).map(|i| curves[i].speedup(held[i])).sum::<f64>();
                        both += 1;
                    }
                    for i in 0..2 {
                        if left[i] > 0.0 {
                            left[i] -= curves[i].rate(held[i]);
                            if left[i] <= 0.0 {
                                sim.finish(i);
                            }
                        }
                    }
                    t += 1;
                }
                finish.push(f64::from(t));
                sums.push(sum / f64::from(both.max(1)));
            }
            let m = quantile(&mut finish, 0.5);
            let r = quantile(&mut sums, 0.5);
            medians.push(m);
            rates.push(r);
            println!(
                "{policy:<10}: both done after {m:.0} s, sum of speed-ups while both run {r:.1} \
                 (medians of {seeds})"
            );
        }
        println!(
            "time to finish, fair-share / goals: {:.2}x; throughput, goals / fair-share: {:.2}x",
            medians[0] / medians[1],
            rates[1] / rates[0]
        );
    }
}
