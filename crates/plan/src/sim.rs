//! A driver of the pure plan over time with synthetic cells, for the
//! goals policy's tests and benchmark: each cell has a true performance
//! (an Amdahl speed-up curve for its heartbeat rate, or a request server's
//! latency against its CPUs), perturbed by noise and changing by phases;
//! every step plans, checks the plan's invariants, lets each cell "run" on
//! what it was given, and feeds what it would report to its
//! [`Tracker`], as the broker does once a second.
//!
//! Deterministic for a seed (its own xorshift generator; no I/O).

use crate::tracking::{Curve, Observation, Tracker};
use crate::{CellInput, Plan, PlanConfig, Planner};
use allot_spec::{CellId, CellSpec};
use allot_topo::Machine;

/// How a synthetic cell really performs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Truth {
    /// It counts work at this curve's rate.
    Rate(Curve),
    /// It serves requests: `load` CPUs' worth of work, p99 `k / (1 − u)`
    /// µs at utilisation `u = load / CPUs` (saturated from 0.95).
    Server {
        /// p99 of an idle server, µs.
        k: f64,
        /// CPUs' worth of work.
        load: f64,
    },
    /// It reports nothing.
    Silent,
}

/// A synthetic cell.
#[derive(Debug, Clone, PartialEq)]
pub struct SimCell {
    /// What it asks for (its goal included).
    pub spec: CellSpec,
    /// How it performs, from step 0.
    pub truth: Truth,
    /// Later phases: from step `.0` on it performs as `.1`.
    pub phases: Vec<(u32, Truth)>,
    /// Relative noise on every measurement (0.02: ±2 %, uniform).
    pub noise: f64,
}

/// A run of the planner over synthetic cells, advanced one step at a time.
#[derive(Debug)]
pub struct Sim<'m> {
    machine: &'m Machine,
    planner: Planner<'m>,
    cells: Vec<SimCell>,
    trackers: Vec<Tracker>,
    plan: Plan,
    rng: u64,
    step: u32,
    /// Cells that finished (they leave the plan).
    gone: Vec<bool>,
    /// Per step, the CPUs each cell held (in cell order).
    pub held: Vec<Vec<f64>>,
    /// Per step, whether each cell's goal was met (`None`: no goal or not
    /// measured).
    pub met: Vec<Vec<Option<bool>>>,
}

impl<'m> Sim<'m> {
    /// A simulation of `cells` on `machine` under `config`, seeded.
    pub fn new(
        machine: &'m Machine,
        config: PlanConfig,
        cells: Vec<SimCell>,
        seed: u64,
    ) -> Sim<'m> {
        let trackers = cells.iter().map(|c| Tracker::new(c.spec.goal)).collect();
        let n = cells.len();
        Sim {
            machine,
            planner: Planner::new(machine, config),
            cells,
            trackers,
            plan: Plan::default(),
            rng: seed.max(1),
            step: 0,
            gone: vec![false; n],
            held: vec![],
            met: vec![],
        }
    }

    fn uniform(&mut self) -> f64 {
        // xorshift64*
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let v = self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d);
        (v >> 11) as f64 / (1u64 << 53) as f64
    }

    fn truth(&self, i: usize) -> Truth {
        let c = &self.cells[i];
        c.phases
            .iter()
            .rev()
            .find(|(from, _)| self.step >= *from)
            .map_or(c.truth, |(_, t)| *t)
    }

    /// The plan in force.
    pub fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The trackers, in cell order.
    pub fn trackers(&self) -> &[Tracker] {
        &self.trackers
    }

    /// The planner's input for the next step: each cell with its
    /// tracker's hint.
    pub fn inputs(&self) -> Vec<CellInput> {
        self.cells
            .iter()
            .zip(&self.trackers)
            .enumerate()
            .filter(|(i, _)| !self.gone[*i])
            .map(|(i, (c, t))| CellInput {
                id: CellId(i as u64),
                spec: c.spec,
                demand: None,
                perf: t.hint(),
                held: Default::default(),
            })
            .collect()
    }

    /// The planner every step runs, with the configuration the simulation was made with.
    pub fn planner(&self) -> &Planner<'m> {
        &self.planner
    }

    /// One step: plan (checking the invariants, panicking with the cells
    /// if one is broken), run, observe. Returns the CPUs each cell held.
    pub fn step(&mut self) -> Vec<f64> {
        let inputs = self.inputs();
        self.plan = self.planner.plan(&inputs, &self.plan);
        let specs: Vec<(CellId, CellSpec)> = inputs.iter().map(|c| (c.id, c.spec)).collect();
        if let Err(v) = self.plan.check(self.machine, &specs) {
            panic!("step {}: {v}\ncells: {:?}", self.step, self.cells);
        }
        let capacity = self.planner.capacity();
        let mut held = Vec::with_capacity(self.cells.len());
        let mut met = Vec::with_capacity(self.cells.len());
        for i in 0..self.cells.len() {
            if self.gone[i] {
                held.push(0.0);
                met.push(None);
                continue;
            }
            let g = &self.plan.cells[&CellId(i as u64)];
            let n = if g.stacked {
                g.share
            } else {
                g.cpus.len() as f64
            };
            let noise = self.cells[i].noise;
            let truth = self.truth(i);
            let mut jitter = || 1.0 + noise * (2.0 * self.uniform() - 1.0);
            let o = match truth {
                Truth::Rate(c) => Observation {
                    cpus: n,
                    rate: Some(c.rate(n) * jitter()),
                    ..Observation::default()
                },
                Truth::Server { k, load } => {
                    let u = (load / n.max(1e-9)).min(crate::tracking::fit::MAX_UTIL);
                    Observation {
                        cpus: n,
                        p99_us: Some((k / (1.0 - u) * jitter()) as u64),
                        latencies: 1000,
                        cpu_used: Some(load.min(n) * jitter()),
                        ..Observation::default()
                    }
                }
                Truth::Silent => Observation {
                    cpus: n,
                    ..Observation::default()
                },
            };
            let max = self.cells[i].spec.max_within(capacity);
            self.trackers[i].observe(o, max);
            met.push(self.trackers[i].met());
            held.push(n);
        }
        self.step += 1;
        self.held.push(held.clone());
        self.met.push(met);
        held
    }

    /// Cell `i` finished: it leaves the plan from the next step.
    pub fn finish(&mut self, i: usize) {
        self.gone[i] = true;
    }

    /// The first step from which every cell held the same CPUs to the end
    /// of the run (`None` before any step).
    pub fn settled_at(&self) -> Option<usize> {
        let last = self.held.last()?;
        let mut at = self.held.len() - 1;
        while at > 0 && self.held[at - 1] == *last {
            at -= 1;
        }
        Some(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::GlobalPolicy;
    use allot_spec::Goal;

    fn rate_cell(p: f64, goal: Option<u64>) -> SimCell {
        SimCell {
            spec: CellSpec {
                goal: goal.map_or(Goal::None, |g| Goal::Rate {
                    milli_per_s: g * 1000,
                }),
                ..CellSpec::default()
            },
            truth: Truth::Rate(Curve { p, r1: 100.0 }),
            phases: vec![],
            noise: 0.02,
        }
    }

    #[test]
    fn a_rate_goal_is_met_and_the_rest_goes_to_the_better_scaler() {
        let m = Machine::uniform(16);
        let config = PlanConfig {
            policy: GlobalPolicy::Goals,
            lend: true,
            ..PlanConfig::default()
        };
        // A goal needing 4 CPUs at p = 0.95 (382/s), a good and a poor
        // scaler without goals.
        let cells = vec![
            rate_cell(0.95, Some(370)),
            rate_cell(0.99, None),
            rate_cell(0.4, None),
        ];
        let mut sim = Sim::new(&m, config, cells, 7);
        for _ in 0..30 {
            sim.step();
        }
        let last = sim.held.last().unwrap().clone();
        assert_eq!(sim.met.last().unwrap()[0], Some(true), "{last:?}");
        assert!(last[0] >= 4.0 && last[0] <= 5.0, "{last:?}");
        assert!(last[1] > last[2], "{last:?}");
        assert!(sim.settled_at().unwrap() <= 15, "{:?}", sim.held);
    }
}
