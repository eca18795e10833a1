//! Goals in the planner: what a cell's reports say about how its
//! performance depends on its CPUs, and how many CPUs its goal needs
//! (Tessellation's adaptive resource allocation loop; ARS's efficiency
//! information).
//!
//! A [`Tracker`] per cell turns the broker's measurements, one
//! [`Observation`] per evaluation (the CPUs the cell held, the rate of
//! its heartbeats, the p99 of its request latencies, the CPU time it used),
//! into a [`PerfHint`] the `goals` policy (`crate::policy`) reads:
//!
//! - **the speed-up curve** of the cell's heartbeat rate against its CPUs
//!   (Amdahl's law, refitted as observations arrive; `fit`), which the
//!   policy uses to give spare CPUs where they buy the most work;
//! - **the CPUs its goal needs** (`goal_cpus`): from the model when it has
//!   one, moved by feedback with hysteresis: raised after the goal is
//!   missed [`RAISE_AFTER`] times with no comfortable evaluation between
//!   (to what the model says, at least one CPU above what the cell held;
//!   half as many again when the model has no answer), lowered only after the goal is beaten by
//!   [`SLACK`] for [`LOWER_AFTER`] evaluations in a row, to what the model
//!   predicts still meets it (or by one CPU), but never below half of what
//!   the cell held (the model is not trusted far from where it was
//!   measured). A stationary cell
//!   therefore settles: its target moves only while its goal is missed
//!   or comfortably beaten, and never back and forth on noise inside the
//!   slack;
//! - **whether the goal can be met at all** (`unmeetable`): for a rate, the
//!   identified curve says no allocation up to the cell's maximum reaches
//!   it; for a latency, the idle-server percentile read from three
//!   unsaturated evaluations that agree (within a factor of two: a
//!   growing queue reads as a growing percentile) is already above the
//!   bound (no allocation at all meets it). The policy then
//!   treats the cell like one without a goal, so an impossible goal never
//!   takes CPUs from the others.
//! - **a probe** (`probe`): a cell without a goal whose heartbeats have
//!   been seen only at allocations within [`IDENTIFY`] of each other cannot
//!   show its curve (it is fitted with the prior's shape until then); every
//!   [`PROBE_AFTER`] evaluations the tracker asks to hold it at a quarter
//!   of its CPUs to tell the shape (one more for a cell of three or fewer, one
//!   fewer for such a cell at its maximum) for one evaluation, at most
//!   [`MAX_PROBES`] times. A cell with a goal is probed only when it misses
//!   the goal with no more CPUs to be had (at its maximum, or below a
//!   target the plan does not grant: nothing else shows whether the goal
//!   can be met); otherwise its goal moves it, and a probe would make it miss.
//!   The evaluation that watches a probe does not count for the goal. Once
//!   the shape is identified, probes stop for good.
//!
//! Pure: no clock, no I/O. The broker evaluates once a second (its
//! windows are a second long); the simulator (`crate::sim`) once a tick.

pub mod fit;

use allot_spec::Goal;
use std::collections::BTreeMap;

/// Evaluations with the goal missed, with none in between that beat it
/// by [`SLACK`], before the target rises.
pub const RAISE_AFTER: u32 = 2;

/// Evaluations in a row with the goal beaten by [`SLACK`] before the
/// target may fall.
pub const LOWER_AFTER: u32 = 2;

/// How far beyond its goal a cell must be for CPUs to be taken back: 15 %
/// above a rate goal, 15 % under a latency bound.
pub const SLACK: f64 = 0.15;

/// The model aims this far beyond the goal (5 %), so that noise around
/// the goal does not miss it.
pub const AIM: f64 = 0.05;

/// A server busy this share of the CPUs it held is saturated.
const SATURATED: f64 = 0.9;

/// A server whose threads wait for a CPU this much (half a thread on
/// average) is starved of CPU, whatever it managed to use.
const STARVED: f64 = 0.5;

/// Latencies an evaluation needs before its p99 is believed.
pub const MIN_LATENCIES: u64 = 50;

/// A cell whose curve is not identified is probed every this many
/// evaluations (its third, sixth…), up to [`MAX_PROBES`] times.
pub const PROBE_AFTER: u32 = 3;

/// Probes a cell gets at most: a cell the plan cannot move (a machine too
/// small, a maximum of one) keeps the prior curve rather than asking
/// forever.
pub const MAX_PROBES: u32 = 2;

/// Allocation levels are told apart to a quarter of a CPU (stacked cells
/// hold fractions).
const LEVEL_STEPS: f64 = 4.0;

/// Rates seen on less than this share of a CPU are not learned from.
const MIN_CPUS: f64 = 0.1;

/// A curve's shape is told once rates were seen at allocations this far
/// apart (the largest 25 % above the smallest); before, the prior's.
pub const IDENTIFY: f64 = 1.25;

/// Allocation levels whose rates are remembered for the curve.
const LEVELS_KEPT: usize = 32;

/// A level's rate is the mean of its last this many observations (then
/// an average that forgets slowly).
const LEVEL_MEMORY: u32 = 20;

/// A rate this far (30 %) from what its level remembers, twice in a row,
/// is a new phase of the program.
const PHASE_SHIFT: f64 = 0.3;

/// The curve the policy sees changes only when the fit's parallel fraction
/// or its one-CPU rate moves by more than this (5 %).
const CURVE_MOVE: f64 = 0.05;

/// Idle percentiles that agree within this factor describe the server,
/// not a queue growing under it.
const STEADY: f64 = 2.0;

/// Latency observations kept (their median is the model's `k`).
const KS_KEPT: usize = 16;

/// A speed-up curve: Amdahl's law with parallel fraction `p`, scaled so
/// that one CPU does `r1` units of work a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Curve {
    /// Parallel fraction, 0 (serial) to 1 (perfectly parallel).
    pub p: f64,
    /// Rate on one CPU, units a second.
    pub r1: f64,
}

impl Curve {
    /// The speed-up on `n` CPUs over one.
    pub fn speedup(&self, n: f64) -> f64 {
        if n <= 0.0 {
            0.0
        } else {
            1.0 / ((1.0 - self.p) + self.p / n)
        }
    }

    /// The rate on `n` CPUs.
    pub fn rate(&self, n: f64) -> f64 {
        self.r1 * self.speedup(n)
    }

    /// The smallest whole number of CPUs (1 to `max`) at which the rate
    /// reaches `goal`; `None` when even `max` does not.
    pub fn cpus_for(&self, goal: f64, max: u32) -> Option<u32> {
        (1..=max).find(|&n| self.rate(f64::from(n)) >= goal)
    }
}

/// What the `goals` policy knows of a cell's performance (all `None` or
/// false for a cell without reports: the policy treats it as one with the
/// prior curve, `fit::PRIOR_P`).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PerfHint {
    /// The CPUs the cell's goal needs, as estimated (`None`: no goal, or
    /// not measured yet).
    pub goal_cpus: Option<u32>,
    /// No allocation up to the cell's maximum meets its goal.
    pub unmeetable: bool,
    /// The cell's measured speed-up curve (`None`: not measured).
    pub curve: Option<Curve>,
    /// Asks to hold this many CPUs for one plan, to see the curve at
    /// another allocation; `None` otherwise.
    pub probe: Option<u32>,
}

/// One evaluation's measurements of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Observation {
    /// CPUs it held on average.
    pub cpus: f64,
    /// Heartbeats a second (`None`: it counts none).
    pub rate: Option<f64>,
    /// Its requests' p99 latency, µs (`None`: none recorded).
    pub p99_us: Option<u64>,
    /// Latencies behind `p99_us`.
    pub latencies: u64,
    /// CPUs' worth of CPU time it used (`None`: not measurable).
    pub cpu_used: Option<f64>,
    /// Its threads waiting for a CPU, on average (`None`: not read).
    pub waiting: Option<f64>,
}

/// Remembered rate at one allocation level.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Level {
    /// The mean rate seen at this level.
    rate: f64,
    /// The mean CPUs actually held when it was seen: the fit reads the
    /// rate there, not at the level's nominal quarter (a stacked cell on
    /// 0.21 of a CPU files under 0.25, and the difference, seen a
    /// thousand times, would pull the curve's shape).
    cpus: f64,
    count: u32,
    seen: u32,
}

/// One cell's estimator (see the module notes).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Tracker {
    goal: Goal,
    levels: BTreeMap<u32, Level>,
    ks: Vec<f64>,
    load: Option<f64>,
    /// The curve the policy divides by: it moves only when the fit moves
    /// materially and stays moved.
    curve: Option<Curve>,
    /// The latest fit, which sizes the goal: the target has hysteresis of
    /// its own, and a sticky curve a few per cent off would hold a target
    /// above what the goal needs for as long as the fit takes to drift
    /// past the stickiness.
    fit: Option<Curve>,
    target: Option<u32>,
    unmet: u32,
    slack: u32,
    unmeetable: bool,
    evaluations: u32,
    probe: Option<u32>,
    probes: u32,
    /// Evaluations in a row whose rate was off its level (a phase change).
    shifted: u32,
    /// A fit that moved away from `curve`, waiting for a second one.
    pending: Option<Curve>,
    /// One CPU more than the cell held at the last evaluation.
    up: u32,
    /// Half as many again as it held (at least `up`).
    up_far: u32,
    /// The next evaluation watches a probe.
    probed: bool,
    /// The last evaluation's verdict (`None`: not measured).
    met: Option<bool>,
}

impl Tracker {
    /// A tracker for a cell with `goal`.
    pub fn new(goal: Goal) -> Tracker {
        Tracker {
            goal,
            ..Tracker::default()
        }
    }

    /// The cell's goal changed: what was learned of its curve stays, its
    /// target and streaks start over.
    pub fn set_goal(&mut self, goal: Goal) {
        if goal != self.goal {
            self.goal = goal;
            self.target = None;
            self.unmet = 0;
            self.slack = 0;
            self.unmeetable = false;
            self.met = None;
        }
    }

    /// Whether the rates were seen at allocations far enough apart
    /// ([`IDENTIFY`]) to tell the curve's shape.
    pub fn identified(&self) -> bool {
        match (self.levels.keys().next(), self.levels.keys().next_back()) {
            (Some(&lo), Some(&hi)) => f64::from(hi) >= IDENTIFY * f64::from(lo),
            _ => false,
        }
    }

    /// The goal tracked.
    pub fn goal(&self) -> Goal {
        self.goal
    }

    /// Whether the last evaluation found the goal met (`None`: no goal or
    /// not measured).
    pub fn met(&self) -> Option<bool> {
        self.met
    }

    /// What the policy should know now.
    pub fn hint(&self) -> PerfHint {
        PerfHint {
            goal_cpus: if self.goal.is_some() {
                self.target
            } else {
                None
            },
            unmeetable: self.unmeetable,
            curve: self.curve,
            probe: self.probe,
        }
    }

    /// One evaluation: `o` measured while the cell held `o.cpus`; `max`
    /// the most CPUs it may hold. Returns the new hint.
    pub fn observe(&mut self, o: Observation, max: u32) -> PerfHint {
        self.evaluations = self.evaluations.saturating_add(1);
        self.probe = None;
        let max = max.max(1);
        let held = o.cpus.round().max(1.0) as u32;
        // One CPU more than held (from a share of the stacked pool, one
        // whole CPU), or half as many again when the model has no answer
        // (a climb by one would take long, and would not show the curve's
        // shape).
        self.up = (o.cpus.floor() as u32 + 1).min(max);
        self.up_far = ((o.cpus * 1.5).ceil() as u32).max(self.up).min(max);
        // (A cell that held next to nothing says nothing of its curve.)
        if let Some(r) = o
            .rate
            .filter(|r| r.is_finite() && *r >= 0.0 && o.cpus >= MIN_CPUS)
        {
            self.learn_rate(o.cpus, r);
        }
        // The evaluation that watched a probe says nothing of the goal (the
        // probe moved the cell on purpose).
        let probed = std::mem::take(&mut self.probed);
        match self.goal {
            _ if probed => {}
            Goal::None => {}
            Goal::Rate { .. } => self.evaluate_rate(&o, held, max),
            Goal::P99 { us } => self.evaluate_latency(&o, f64::from(us), held, max),
        }
        // A cell that counts work but was only seen at one allocation asks
        // to be tried at another (see the module notes).
        // (A cell with a goal is probed only when it misses its goal with
        // no more CPUs to be had, at its maximum or below a target the plan
        // does not grant: nothing else can show whether the goal can be
        // met.)
        let stuck =
            self.met == Some(false) && (held >= max || self.target.is_some_and(|t| t > held));
        if o.rate.is_some()
            && (!self.goal.is_some() || stuck)
            && !self.identified()
            && self.probes < MAX_PROBES
            && self.evaluations.is_multiple_of(PROBE_AFTER)
        {
            self.probes += 1;
            self.probe = Some(probe_target(held, max));
            self.probed = true;
        }
        self.hint()
    }

    fn learn_rate(&mut self, cpus: f64, rate: f64) {
        let level = (cpus * LEVEL_STEPS).round().max(1.0) as u32;
        let now = self.evaluations;
        // A phase change: the rate at this level is off by more than
        // PHASE_SHIFT twice in a row. The whole curve is rescaled to it
        // (a phase usually changes how fast each unit of work goes, not
        // how the work scales), and its levels start counting again.
        if let Some(l) = self.levels.get(&level)
            && l.rate > 0.0
            && (rate / l.rate - 1.0).abs() > PHASE_SHIFT
        {
            self.shifted += 1;
            if self.shifted >= 2 {
                let scale = rate / l.rate;
                for l in self.levels.values_mut() {
                    l.rate *= scale;
                    l.count = 1;
                }
                self.shifted = 0;
            }
        } else {
            self.shifted = 0;
        }
        let l = self.levels.entry(level).or_insert(Level {
            rate,
            cpus,
            count: 0,
            seen: now,
        });
        l.count = (l.count + 1).min(LEVEL_MEMORY);
        l.rate += (rate - l.rate) / f64::from(l.count);
        l.cpus += (cpus - l.cpus) / f64::from(l.count);
        l.seen = now;
        if self.levels.len() > LEVELS_KEPT {
            let oldest = self
                .levels
                .iter()
                .min_by_key(|(_, l)| l.seen)
                .map(|(&k, _)| k)
                .expect("not empty");
            self.levels.remove(&oldest);
        }
        let mut obs: Vec<(f64, f64, f64)> = self
            .levels
            .values()
            .map(|l| (l.cpus, l.rate, f64::from(l.count)))
            .collect();
        // Allocations too close together cannot tell the curve's shape
        // apart (noise would decide it): until they span IDENTIFY, they
        // count as one, which gives the prior's shape at the rate seen.
        if !self.identified() {
            let w: f64 = obs.iter().map(|o| o.2).sum();
            let n = obs.iter().map(|o| o.0 * o.2).sum::<f64>() / w;
            let r = obs.iter().map(|o| o.1 * o.2).sum::<f64>() / w;
            obs = vec![(n, r, w)];
        }
        // The curve the policy sees moves only when the fit moves
        // materially (CURVE_MOVE) and stays moved, so that noise in the
        // rates does not pass CPUs back and forth.
        // A move must hold for two evaluations in a row: one noisy rate
        // does not move it.
        let far = |a: &Curve, b: &Curve| {
            (a.p - b.p).abs() > CURVE_MOVE || (a.r1 / b.r1 - 1.0).abs() > CURVE_MOVE
        };
        if let Some(fit) = fit::fit_curve(&obs) {
            self.fit = Some(fit);
            match self.curve {
                None => self.curve = Some(fit),
                Some(c) if far(&fit, &c) => match self.pending {
                    Some(p) if !far(&fit, &p) => {
                        self.curve = Some(fit);
                        self.pending = None;
                    }
                    _ => self.pending = Some(fit),
                },
                Some(_) => self.pending = None,
            }
        }
    }

    /// The feedback rule shared by both goals: `met` and `comfortable`
    /// (beaten by the slack) for this evaluation, `model` the CPUs the
    /// model says the goal needs, `fewer_ok` whether it predicts the goal
    /// still met with one CPU less than the target.
    fn feedback(
        &mut self,
        met: bool,
        comfortable: bool,
        model: Option<u32>,
        fewer_ok: impl Fn(u32) -> bool,
        held: u32,
        max: u32,
    ) {
        self.met = Some(met);
        if met {
            // Only a comfortable evaluation clears the misses: a goal met
            // and missed by turns (noise at its edge) is still raised.
            if comfortable {
                self.unmet = 0;
            }
            self.slack = if comfortable { self.slack + 1 } else { 0 };
            // What works is kept until the goal has been beaten for a while.
            let target = *self.target.get_or_insert(held);
            if self.slack >= LOWER_AFTER {
                self.slack = 0;
                // Down to what the model says suffices, or by one; never
                // below half of what was seen, where the model is an
                // extrapolation.
                let floor = target.min(held).div_ceil(2).max(1);
                let fewer = model
                    .filter(|&m| m < target && fewer_ok(m))
                    .or_else(|| (target > 1 && fewer_ok(target - 1)).then(|| target - 1))
                    .map(|n| n.max(floor))
                    .filter(|&n| n < target);
                if let Some(n) = fewer {
                    self.target = Some(n);
                }
            }
        } else {
            self.slack = 0;
            self.unmet += 1;
            if self.target.is_none() {
                self.target = Some(model.unwrap_or(self.up).max(self.up).clamp(1, max));
            }
            if self.unmet >= RAISE_AFTER {
                self.unmet = 0;
                let next = model.unwrap_or(self.up_far).max(self.up).min(max);
                self.target = Some(next.max(self.target.unwrap_or(0)).min(max));
            }
        }
    }

    fn evaluate_rate(&mut self, o: &Observation, held: u32, max: u32) {
        let (Some(goal), Some(rate)) = (self.goal.rate_per_s(), o.rate) else {
            return;
        };
        let aim = goal * (1.0 + AIM);
        let curve = self.fit.or(self.curve);
        let model = curve.and_then(|c| c.cpus_for(aim, max));
        // Unmeetable only once the curve's shape is known: the prior
        // alone does not condemn a goal.
        self.unmeetable = self.identified() && curve.is_some() && model.is_none();
        self.feedback(
            rate >= goal,
            rate >= goal * (1.0 + SLACK),
            model,
            |n| curve.is_some_and(|c| c.rate(f64::from(n)) >= aim),
            held,
            max,
        );
    }

    fn evaluate_latency(&mut self, o: &Observation, bound: f64, held: u32, max: u32) {
        let Some(p99) = o.p99_us.filter(|_| o.latencies >= MIN_LATENCIES) else {
            return;
        };
        let p99 = p99 as f64;
        // A saturated server (busy nearly all it held, or its threads
        // waiting for a CPU) says nothing of its idle percentile or its
        // load: its queue grows, and both would be read wrong. The
        // feedback alone raises it.
        let starved = o.waiting.is_some_and(|w| w >= STARVED);
        if let Some(used) = o.cpu_used.filter(|u| *u < SATURATED * o.cpus && !starved) {
            if let Some(k) = fit::latency_k(p99, used, o.cpus) {
                if self.ks.len() == KS_KEPT {
                    self.ks.remove(0);
                }
                self.ks.push(k);
            }
            self.load = Some(used);
        }
        let k = median(&self.ks);
        let aim = bound * (1.0 - AIM);
        let model = match (k, self.load) {
            (Some(k), Some(load)) => fit::cpus_for_latency(k, load, aim, max),
            _ => None,
        };
        // Only a percentile read from several unsaturated evaluations
        // that agree condemns a goal: a queue that grows (the CPU shared
        // with work the broker does not see, or load rising) shows as an
        // idle percentile that grows with it, not as a slow server.
        self.unmeetable = self.ks.len() >= 3 && k.is_some_and(|k| k >= aim) && self.steady();
        let (load, k) = (self.load, k);
        self.feedback(
            p99 <= bound,
            p99 <= bound * (1.0 - SLACK),
            model,
            |n| match (k, load) {
                (Some(k), Some(load)) => {
                    let u = load / f64::from(n);
                    u < fit::MAX_UTIL && k / (1.0 - u) <= aim
                }
                _ => false,
            },
            held,
            max,
        );
    }

    /// Whether the last three idle percentiles agree (within a factor
    /// of [`STEADY`]).
    fn steady(&self) -> bool {
        let last = &self.ks[self.ks.len().saturating_sub(3)..];
        let (lo, hi) = last.iter().fold((f64::INFINITY, 0.0f64), |(lo, hi), k| {
            (lo.min(*k), hi.max(*k))
        });
        last.len() == 3 && hi <= lo * STEADY
    }

    /// A sentence on the goal for `allot status`, given the CPUs the plan
    /// entitles the cell to.
    pub fn note(&self, entitled: u32) -> String {
        if !self.goal.is_some() {
            return String::new();
        }
        if self.unmeetable {
            return "cannot be met on this machine as measured (no allocation up to its maximum \
                    does); treated as best effort"
                .into();
        }
        match (self.met, self.target) {
            (Some(false), Some(t)) if t > entitled => format!(
                "needs about {} more CPU(s) ({t} in all); the others' minimums and goals leave \
                 none",
                t - entitled
            ),
            (Some(false), Some(t)) => format!("raising its CPUs towards {t}"),
            (Some(true), _) => format!("met with {entitled} CPU(s) of its own"),
            _ => String::new(),
        }
    }
}

/// Where a cell holding `held` CPUs (at most `max`) is probed: a quarter
/// of them (giving CPUs up costs the others nothing), one more for a cell
/// too small to shrink. A quarter, not just [`IDENTIFY`] fewer: on many
/// CPUs a poor scaler's rate hardly moves between two nearby allocations
/// (p = 0.3 loses 1 % from 30 CPUs to 23, under the noise), so only a
/// probe well down the curve shows its shape; without it the fit keeps
/// the prior's optimism and the cell is shrunk later, when larger
/// allocations happen to show it, moving the others twice.
fn probe_target(held: u32, max: u32) -> u32 {
    if held >= 4 {
        (held / 4).max(1)
    } else if held < max {
        held + 1
    } else {
        held.saturating_sub(1).max(1)
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s[s.len() / 2])
}

#[cfg(test)]
mod tests;
