//! Strict priority by weight.
//!
//! Minimums first, as always; then the cells with the largest weight are
//! filled up to their maximum, then the next weight class, and so on. Within
//! a class the division is fair (equal weights). Useful when one interactive
//! or latency-critical program must get everything it can use and batch jobs
//! take what is left. Stacking works as in the fair-share policy.

use super::{Entitlements, PolicyCell, split_stacked};
use crate::share::{Claim, waterfill_int, waterfill_real};

fn classes(cells: &[PolicyCell], idx: &[usize]) -> Vec<u32> {
    let mut ws: Vec<u32> = idx.iter().map(|&i| cells[i].spec.weight).collect();
    ws.sort_unstable_by(|a, b| b.cmp(a));
    ws.dedup();
    ws
}

pub(super) fn entitle(capacity: u32, cells: &[PolicyCell]) -> Entitlements {
    let all: Vec<usize> = (0..cells.len()).collect();
    let lo = |i: usize| cells[i].spec.guaranteed();
    let hi = |i: usize| cells[i].spec.max_within(capacity).max(lo(i));

    // Real shares: minimums, then class by class.
    let mut shares: Vec<f64> = all.iter().map(|&i| lo(i) as f64).collect();
    let mut left = capacity as f64 - shares.iter().sum::<f64>();
    for w in classes(cells, &all) {
        if left <= 0.0 {
            break;
        }
        let members: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| cells[i].spec.weight == w)
            .collect();
        let claims: Vec<Claim> = members
            .iter()
            .map(|&i| Claim {
                lo: 0,
                hi: hi(i) - lo(i),
                w: 1,
                tie: 0,
            })
            .collect();
        let extra = waterfill_real(left, &claims);
        for (k, &i) in members.iter().enumerate() {
            shares[i] += extra[k];
            left -= extra[k];
        }
    }

    split_stacked(capacity, cells, &shares, |total, whole| {
        let mut given: Vec<u32> = whole.iter().map(|&i| lo(i).max(1)).collect();
        let mut left = total.saturating_sub(given.iter().sum());
        for w in classes(cells, whole) {
            if left == 0 {
                break;
            }
            let members: Vec<usize> = (0..whole.len())
                .filter(|&k| cells[whole[k]].spec.weight == w)
                .collect();
            let claims: Vec<Claim> = members
                .iter()
                .map(|&k| {
                    let i = whole[k];
                    Claim {
                        lo: 0,
                        hi: hi(i).max(1) - given[k],
                        w: 1,
                        tie: cells[i].previous,
                    }
                })
                .collect();
            let extra = waterfill_int(left, &claims);
            for (j, &k) in members.iter().enumerate() {
                given[k] += extra[j];
                left -= extra[j];
            }
        }
        given
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::CellSpec;

    fn cell(min: u32, max: u32, weight: u32) -> PolicyCell {
        PolicyCell {
            spec: CellSpec {
                min,
                max,
                weight,
                ..Default::default()
            },
            previous: 0,
            perf: Default::default(),
        }
    }

    #[test]
    fn high_weight_fills_first() {
        let e = entitle(8, &[cell(0, 0, 1), cell(0, 6, 10)]);
        assert_eq!(e.cells[1].cpus, 6);
        assert_eq!(e.cells[0].cpus, 2);
    }

    #[test]
    fn minimum_of_low_class_is_kept() {
        let e = entitle(8, &[cell(3, 0, 1), cell(0, 0, 10)]);
        assert_eq!(e.cells[0].cpus, 3);
        assert_eq!(e.cells[1].cpus, 5);
    }

    #[test]
    fn low_class_is_stacked_when_starved() {
        let e = entitle(4, &[cell(0, 0, 10), cell(0, 0, 1), cell(0, 0, 1)]);
        // The top class takes all it can; the others share a pool of one.
        assert!(e.cells[1].stacked && e.cells[2].stacked);
        assert_eq!(e.pool, 1);
        assert_eq!(e.cells[0].cpus, 3);
    }
}
