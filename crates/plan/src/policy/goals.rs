//! The goals policy: meet each cell's goal with the fewest CPUs, then
//! spend the rest where it buys the most work (Tessellation's adaptive
//! allocation; ARS's throughput policy).
//!
//! 1. **Minimums.** Every cell gets its guaranteed CPUs first, as in every
//!    policy: a minimum is never taken to meet someone else's goal.
//! 2. **Goals.** A cell whose goal needs `t` CPUs
//!    ([`PerfHint::goal_cpus`], from its [`crate::tracking::Tracker`]) is
//!    raised to `t` (within its maximum), smallest extra need first (so
//!    the most goals are met), larger weight first among equal needs. A
//!    goal whose extra does not fit in what is left — less the CPUs that
//!    processes outside every cell are using (`unmanaged`), which no cell
//!    can count on — stays at its minimum and competes in step 3. A goal
//!    the model calls unmeetable ([`PerfHint::unmeetable`]) is ignored:
//!    its cell is planned exactly as one without a goal, so an impossible
//!    goal never starves the others.
//! 3. **Probes.** A cell whose tracker asks to be seen at another
//!    allocation ([`PerfHint::probe`]) is held at that allocation, within
//!    its bounds and what the goals left, for this plan.
//! 4. **Throughput.** What is left goes one CPU at a time to the cell whose
//!    next CPU adds the most work relative to its one-CPU rate, times its
//!    weight: `w · (S(n+1) − S(n))` on its speed-up curve
//!    ([`PerfHint::curve`], Amdahl's law; the prior
//!    `goals::fit::PRIOR_P` for cells that report no work). The curves are
//!    concave, so this greedy division maximises the weighted sum of
//!    speed-ups. Once no cell's next CPU adds [`GAIN_FLOOR`] of its
//!    one-CPU rate, the rest is divided by weight as fair share does. A
//!    cell whose goal was met in step 2 takes more only when no other cell
//!    gains from it. A CPU a cell held in the previous plan counts
//!    [`STICK`] more to it, so a CPU moves only for a clear gain, not for
//!    noise in the measured curves; equal gains go to the cell that held
//!    more before, then to the first.
//! 5. **Hysteresis.** When the previous division still meets every bound
//!    and goal of this one, it stands unless the new one adds more than
//!    [`KEEP_UNLESS`] to the weighted sum of speed-ups: measured curves
//!    are noisy, and every move shows them at a new allocation.
//!
//! Cells that report nothing and have no goal all share the prior curve,
//! so among themselves the division is the fair one (equal weights: equal
//! CPUs, ±1). Stacking works as in the fair-share policy.

use super::{Entitlements, PolicyCell, split_stacked};
use crate::share::{Claim, waterfill_int};
use crate::tracking::{Curve, PerfHint, fit::PRIOR_P};

/// The prior curve (its scale does not matter: gains are relative).
const PRIOR: Curve = Curve {
    p: PRIOR_P,
    r1: 1.0,
};

/// How much more a CPU a cell held before is worth to it (10 %): a CPU
/// moves to another cell only when it gains that much more from it.
pub const STICK: f64 = 0.1;

/// A next CPU worth less than this share of the cell's one-CPU rate (2 %)
/// is no reason to prefer one cell over another: what is left at that
/// point is divided by weight.
pub const GAIN_FLOOR: f64 = 0.02;

/// The previous division is kept unless the new one adds more than this
/// share (2 %) to the weighted sum of speed-ups.
pub const KEEP_UNLESS: f64 = 0.02;

pub(super) fn entitle(capacity: u32, cells: &[PolicyCell], unmanaged: u32) -> Entitlements {
    let all: Vec<usize> = (0..cells.len()).collect();
    let alloc = allocate(capacity, cells, &all, unmanaged, false);
    let mut shares: Vec<f64> = alloc.iter().map(|&a| f64::from(a)).collect();
    // Cells left with at most one CPU, when one of them got none, share
    // what they got equally: they are stacked on a pool of that size, as
    // the fair-share policy stacks cells whose share is under one CPU
    // (goal cells that got their goal are not among them).
    let low: Vec<usize> = all
        .iter()
        .copied()
        .filter(|&i| {
            let c = &cells[i];
            !c.spec.is_guaranteed()
                && alloc[i] <= 1
                && !(c.perf.goal_cpus.is_some() && !c.perf.unmeetable && alloc[i] > 0)
        })
        .collect();
    if low.iter().any(|&i| alloc[i] == 0) {
        // (A pool is at least one CPU.)
        let total: u32 = low.iter().map(|&i| alloc[i]).sum::<u32>().max(1);
        for &i in &low {
            shares[i] = f64::from(total) / low.len() as f64;
        }
    }
    split_stacked(capacity, cells, &shares, |total, whole| {
        allocate(total, cells, whole, unmanaged, true)
    })
}

/// Divides `capacity` among `cells[idx]` by steps 1–5 (see the module
/// notes); with `min_one` every cell gets at least one CPU. Returns one
/// count per index of `idx`.
pub(crate) fn allocate(
    capacity: u32,
    cells: &[PolicyCell],
    idx: &[usize],
    unmanaged: u32,
    min_one: bool,
) -> Vec<u32> {
    let floor = u32::from(min_one);
    let mut lo: Vec<u32> = idx
        .iter()
        .map(|&i| cells[i].spec.guaranteed().max(floor))
        .collect();
    let mut hi: Vec<u32> = idx
        .iter()
        .zip(&lo)
        .map(|(&i, &l)| cells[i].spec.max_within(capacity).max(l))
        .collect();
    let lo_sum: u32 = lo.iter().sum();
    if lo_sum >= capacity {
        return lo;
    }
    let mut left = capacity - lo_sum;
    // 2. Goals, smallest extra need first.
    let mut goal_room = left.saturating_sub(unmanaged);
    let mut goals: Vec<(usize, u32)> = idx
        .iter()
        .enumerate()
        .filter_map(|(k, &i)| {
            let h: PerfHint = cells[i].perf;
            // (A probed cell is held where its probe asks, goal or not.)
            let t = h.goal_cpus.filter(|_| !h.unmeetable && h.probe.is_none())?;
            Some((k, t.clamp(lo[k], hi[k])))
        })
        .collect();
    goals.sort_by_key(|&(k, need)| {
        (
            need - lo[k],
            std::cmp::Reverse(cells[idx[k]].spec.weight),
            k,
        )
    });
    let mut settled = vec![false; idx.len()];
    for (k, need) in goals {
        let extra = need - lo[k];
        if extra <= goal_room {
            lo[k] = need;
            goal_room -= extra;
            left -= extra;
            settled[k] = true;
        }
    }

    // 3. Probes, within the bounds and what the goals left.
    for (k, &i) in idx.iter().enumerate() {
        match cells[i].perf.probe {
            Some(to) if to > lo[k] => {
                let want = to.min(hi[k]);
                if want - lo[k] <= left {
                    left -= want - lo[k];
                    lo[k] = want;
                }
                hi[k] = want;
            }
            Some(to) => hi[k] = to.max(lo[k]),
            None => {}
        }
    }

    // 4. Throughput: the next CPU to the largest weighted marginal gain.
    let mut alloc = lo.clone();
    let gain = |k: usize, n: u32| -> f64 {
        if settled[k] {
            return 0.0;
        }
        let c = &cells[idx[k]];
        let curve = c.perf.curve.unwrap_or(PRIOR);
        let (a, b) = (curve.speedup(f64::from(n)), curve.speedup(f64::from(n + 1)));
        // Relative to the one-CPU rate, so that cells counting different
        // units compare; at least a hair, so work is never left idle.
        let s1 = curve.speedup(1.0).max(f64::MIN_POSITIVE);
        // A CPU the cell held before is worth a little more to it, so
        // that noise in the measured curves does not move CPUs back and
        // forth between cells that gain about the same from them.
        let keep = if n < c.previous { 1.0 + STICK } else { 1.0 };
        f64::from(c.spec.weight.max(1)) * ((b - a) / s1).max(0.0) * keep
    };
    while left > 0 {
        let mut best: Option<(usize, f64)> = None;
        for k in 0..idx.len() {
            if alloc[k] >= hi[k] {
                continue;
            }
            let g = gain(k, alloc[k]);
            let better = match best {
                None => true,
                Some((b, bg)) => {
                    const EPS: f64 = 1e-12;
                    g > bg + EPS
                        || (g > bg - EPS && {
                            // Equal gains: the one that held more before.
                            let held = |j: usize| cells[idx[j]].previous > alloc[j];
                            held(k) && !held(b)
                        })
                }
            };
            if better {
                best = Some((k, g));
            }
        }
        let Some((k, g)) = best else {
            break; // everyone at its maximum
        };
        if g < GAIN_FLOOR {
            break; // the rest is divided fairly, below
        }
        alloc[k] += 1;
        left -= 1;
    }
    // What no cell gains much from is divided by weight, as fair share
    // does (cells that met their goal last), so that curves flat there do
    // not pass CPUs back and forth on noise.
    for settled_too in [false, true] {
        if left == 0 {
            break;
        }
        let claims: Vec<Claim> = (0..idx.len())
            .map(|k| Claim {
                lo: alloc[k],
                hi: if settled_too || !settled[k] {
                    hi[k].max(alloc[k])
                } else {
                    alloc[k]
                },
                w: cells[idx[k]].spec.weight.max(1),
                tie: cells[idx[k]].previous,
            })
            .collect();
        let total = alloc.iter().sum::<u32>() + left;
        let given = waterfill_int(total, &claims);
        left = total - given.iter().sum::<u32>();
        alloc = given;
    }
    // 5. Hysteresis: the previous division stands unless the new one buys
    // clearly more work (the curves are measured with noise, and every
    // move shows them at a new allocation, which moves them again).
    let previous: Vec<u32> = idx.iter().map(|&i| cells[i].previous).collect();
    // (A cell whose goal is met holds its goal's CPUs, not more: what its
    // goal no longer needs goes to the others at once.)
    let feasible = previous.iter().sum::<u32>() == alloc.iter().sum::<u32>()
        && (0..idx.len()).all(|k| {
            previous[k] >= lo[k] && previous[k] <= hi[k] && (!settled[k] || previous[k] == alloc[k])
        });
    if feasible && previous != alloc {
        let value = |a: &[u32]| -> f64 {
            (0..idx.len())
                .filter(|&k| !settled[k])
                .map(|k| {
                    let c = &cells[idx[k]];
                    let curve = c.perf.curve.unwrap_or(PRIOR);
                    f64::from(c.spec.weight.max(1)) * curve.speedup(f64::from(a[k]))
                        / curve.speedup(1.0).max(f64::MIN_POSITIVE)
                })
                .sum()
        };
        if value(&alloc) < value(&previous) * (1.0 + KEEP_UNLESS) {
            return previous;
        }
    }
    alloc
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::CellSpec;

    fn cell(min: u32, max: u32, perf: PerfHint) -> PolicyCell {
        PolicyCell {
            spec: CellSpec {
                min,
                max,
                ..Default::default()
            },
            previous: 0,
            perf,
        }
    }

    fn curve(p: f64) -> PerfHint {
        PerfHint {
            curve: Some(Curve { p, r1: 10.0 }),
            ..PerfHint::default()
        }
    }

    fn goal(t: u32) -> PerfHint {
        PerfHint {
            goal_cpus: Some(t),
            ..PerfHint::default()
        }
    }

    fn cpus(e: &Entitlements) -> Vec<u32> {
        e.cells.iter().map(|c| c.cpus).collect()
    }

    #[test]
    fn cells_without_reports_divide_evenly() {
        let e = entitle(8, &[cell(0, 0, PerfHint::default()); 4], 0);
        assert_eq!(cpus(&e), vec![2, 2, 2, 2]);
    }

    #[test]
    fn a_cell_that_scales_well_gets_more_than_one_that_barely_does() {
        let e = entitle(16, &[cell(0, 0, curve(0.99)), cell(0, 0, curve(0.3))], 0);
        let c = cpus(&e);
        assert!(c[0] > c[1] && c[1] >= 1, "{c:?}");
        assert_eq!(c.iter().sum::<u32>(), 16);
    }

    #[test]
    fn a_goal_is_met_before_throughput_and_minimums_are_never_taken() {
        // A goal of 5 CPUs, a guaranteed cell of 2 and two batch cells on 8.
        let e = entitle(
            8,
            &[
                cell(0, 0, goal(5)),
                cell(2, 0, PerfHint::default()),
                cell(0, 0, curve(0.9)),
                cell(0, 0, curve(0.9)),
            ],
            0,
        );
        let c = cpus(&e);
        assert_eq!(c[0], 5, "{c:?}");
        assert!(c[1] >= 2, "{c:?}");
        // A goal that does not fit beside the minimum stays out.
        let e = entitle(8, &[cell(0, 0, goal(7)), cell(2, 0, curve(0.9))], 0);
        let c = cpus(&e);
        assert!(c[0] < 7 && c[1] >= 2, "{c:?}");
    }

    #[test]
    fn work_outside_the_cells_is_not_counted_on_for_goals() {
        let cells = [cell(0, 0, goal(6)), cell(0, 0, PerfHint::default())];
        assert_eq!(cpus(&entitle(8, &cells, 0))[0], 6);
        // Three CPUs busy outside every cell: 6 no longer fits the 5 left.
        assert!(cpus(&entitle(8, &cells, 3))[0] < 6);
    }

    #[test]
    fn an_unmeetable_goal_is_planned_as_no_goal() {
        let hopeless = PerfHint {
            unmeetable: true,
            ..goal(8)
        };
        let with = entitle(8, &[cell(0, 0, hopeless), cell(0, 0, curve(0.9))], 0);
        let without = entitle(
            8,
            &[cell(0, 0, PerfHint::default()), cell(0, 0, curve(0.9))],
            0,
        );
        assert_eq!(cpus(&with), cpus(&without));
    }

    #[test]
    fn the_smallest_goals_are_met_first() {
        let e = entitle(
            6,
            &[
                cell(0, 0, goal(5)),
                cell(0, 0, goal(2)),
                cell(0, 0, goal(3)),
            ],
            0,
        );
        let c = cpus(&e);
        assert_eq!((c[1], c[2]), (2, 3), "{c:?}");
    }

    #[test]
    fn a_probe_holds_a_cell_where_its_tracker_asks() {
        let mut a = cell(0, 0, PerfHint::default());
        let mut b = cell(0, 0, PerfHint::default());
        a.previous = 4;
        b.previous = 4;
        a.perf.probe = Some(3);
        assert_eq!(cpus(&entitle(8, &[a, b], 0)), vec![3, 5]);
        a.perf.probe = Some(6);
        assert_eq!(cpus(&entitle(8, &[a, b], 0)), vec![6, 2]);
        // Never past what is left beside a minimum.
        let mut c = cell(6, 0, PerfHint::default());
        c.previous = 6;
        a.perf.probe = Some(5);
        let got = cpus(&entitle(8, &[a, c], 0));
        assert!(got[0] <= 2 && got[1] >= 6, "{got:?}");
    }

    #[test]
    fn more_cells_than_cpus_are_stacked_and_maxima_hold() {
        let e = entitle(2, &[cell(0, 0, PerfHint::default()); 5], 0);
        assert!(e.pool >= 1 && e.cells.iter().all(|c| c.stacked));
        let e = entitle(16, &[cell(0, 3, curve(1.0)), cell(0, 0, curve(0.2))], 0);
        assert_eq!(cpus(&e), vec![3, 13]);
    }
}
