//! Weighted max-min fair division ("water-filling"), real and integer.
//!
//! Both functions divide `total` among claimants, each with a lower bound
//! `lo`, an upper bound `hi` and a weight `w`: every claimant first receives
//! `lo`; the rest is poured so that the claimant with the smallest
//! allocation-per-weight always receives next, until it is used up or every
//! claimant is at `hi`. The result is the unique weighted max-min fair
//! allocation within the bounds (for the integer version, up to ties, which
//! are broken by the `tie` key and then by position, so results are
//! deterministic).
//!
//! Callers guarantee `Σ lo ≤ total` and `lo ≤ hi`; when the first does not
//! hold the lower bounds are still returned (the caller's admission control
//! was wrong, and the plan checker will say so).

/// One claimant of a division: its bounds, weight and tie-breaker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Claim {
    /// Lower bound, received before anything is poured (`Σ lo ≤ total` is the caller's).
    pub lo: u32,
    /// Upper bound (≥ `lo`).
    pub hi: u32,
    /// Weight (≥ 1).
    pub w: u32,
    /// Tie-breaker: among equally deserving claimants, larger `tie` first
    /// (the mapping passes how many CPUs the cell held before, for stability).
    pub tie: u32,
}

/// Real-valued weighted max-min fair shares of `total`.
///
/// At fill level λ a claimant holds `clamp(λ·w, lo, hi)`; the total is a
/// non-decreasing piecewise-linear function of λ whose slope changes only
/// where a claimant starts (`lo/w`) or stops (`hi/w`) growing. Walking those
/// breakpoints in order finds the λ that pours exactly `total`, in
/// O(n log n).
pub fn waterfill_real(total: f64, claims: &[Claim]) -> Vec<f64> {
    let lo_sum: f64 = claims.iter().map(|c| c.lo as f64).sum();
    let at = |level: f64| -> Vec<f64> {
        claims
            .iter()
            .map(|c| (level * c.w.max(1) as f64).clamp(c.lo as f64, c.hi as f64))
            .collect()
    };
    if total <= lo_sum {
        return claims.iter().map(|c| c.lo as f64).collect();
    }
    // (λ, Δslope): slope grows by w where a claimant starts, shrinks where it stops.
    let mut points: Vec<(f64, f64)> = Vec::with_capacity(claims.len() * 2);
    for c in claims.iter().filter(|c| c.hi > c.lo) {
        let w = c.w.max(1) as f64;
        points.push((c.lo as f64 / w, w));
        points.push((c.hi as f64 / w, -w));
    }
    points.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut level, mut slope, mut poured) = (0.0, 0.0, lo_sum);
    for (x, dw) in points {
        let next = poured + (x - level) * slope;
        if next >= total && slope > 0.0 {
            return at(level + (total - poured) / slope);
        }
        poured = next;
        level = x;
        slope += dw;
    }
    // Everyone is at `hi`: not enough claims to pour everything.
    at(level)
}

/// Integer weighted max-min fair shares of `total` units.
///
/// Units go one at a time to the claimant below its `hi` with the smallest
/// `(given + 1) / w` (the one that stays lowest after receiving), ties to the
/// larger weight, then the larger `tie`, then the earlier position. Runs in
/// O(n + units·log n).
pub fn waterfill_int(total: u32, claims: &[Claim]) -> Vec<u32> {
    use std::cmp::Ordering;
    use std::collections::BinaryHeap;

    #[derive(PartialEq, Eq)]
    struct Next {
        given: u32,
        w: u32,
        tie: u32,
        idx: usize,
    }
    impl Ord for Next {
        fn cmp(&self, other: &Self) -> Ordering {
            // BinaryHeap is a max-heap: "greater" means "served first".
            // (a+1)/wa < (b+1)/wb  ⇔  (a+1)·wb < (b+1)·wa
            let lhs = (self.given as u64 + 1) * other.w as u64;
            let rhs = (other.given as u64 + 1) * self.w as u64;
            rhs.cmp(&lhs)
                .then(self.w.cmp(&other.w))
                .then(self.tie.cmp(&other.tie))
                .then(other.idx.cmp(&self.idx))
        }
    }
    impl PartialOrd for Next {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }

    let mut given: Vec<u32> = claims.iter().map(|c| c.lo).collect();
    let used: u64 = given.iter().map(|&g| g as u64).sum();
    let mut left = (total as u64).saturating_sub(used);
    let mut heap: BinaryHeap<Next> = claims
        .iter()
        .enumerate()
        .filter(|(_, c)| c.hi > c.lo)
        .map(|(idx, c)| Next {
            given: c.lo,
            w: c.w.max(1),
            tie: c.tie,
            idx,
        })
        .collect();
    while left > 0 {
        let Some(mut n) = heap.pop() else { break };
        n.given += 1;
        given[n.idx] = n.given;
        left -= 1;
        if n.given < claims[n.idx].hi {
            heap.push(n);
        }
    }
    given
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn c(lo: u32, hi: u32, w: u32) -> Claim {
        Claim { lo, hi, w, tie: 0 }
    }

    #[test]
    fn equal_weights_split_evenly() {
        assert_eq!(waterfill_int(8, &[c(0, 8, 1), c(0, 8, 1)]), vec![4, 4]);
        let r = waterfill_real(2.0, &[c(0, 2, 1), c(0, 2, 1), c(0, 2, 1)]);
        for s in r {
            assert!((s - 2.0 / 3.0).abs() < 1e-9);
        }
    }

    #[test]
    fn weights_and_bounds() {
        // 3:1 weights over 8 units.
        assert_eq!(waterfill_int(8, &[c(0, 8, 3), c(0, 8, 1)]), vec![6, 2]);
        // A capped claimant's surplus flows to the others.
        assert_eq!(
            waterfill_int(8, &[c(0, 1, 1), c(0, 8, 1), c(0, 8, 1)]),
            vec![1, 4, 3]
        );
        // A minimum above the fair share is honoured.
        assert_eq!(waterfill_int(4, &[c(3, 4, 1), c(0, 4, 1)]), vec![3, 1]);
        let r = waterfill_real(4.0, &[c(3, 4, 1), c(0, 4, 1)]);
        assert!((r[0] - 3.0).abs() < 1e-9 && (r[1] - 1.0).abs() < 1e-9);
        let r = waterfill_real(10.0, &[c(0, 2, 1), c(0, 100, 1), c(1, 100, 3)]);
        assert!((r[0] - 2.0).abs() < 1e-9, "{r:?}");
        assert!((r[1] - 2.0).abs() < 1e-9, "{r:?}");
        assert!((r[2] - 6.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn ties_prefer_previous_holder() {
        let a = Claim {
            lo: 0,
            hi: 3,
            w: 1,
            tie: 0,
        };
        let b = Claim {
            lo: 0,
            hi: 3,
            w: 1,
            tie: 2,
        };
        assert_eq!(waterfill_int(3, &[a, b]), vec![1, 2]);
    }

    proptest! {
        #[test]
        fn int_fill_is_max_min_fair(
            total in 0u32..64,
            raw in proptest::collection::vec((0u32..4, 0u32..16, 1u32..8), 1..12),
        ) {
            let claims: Vec<Claim> = raw.iter().map(|&(lo, extra, w)| c(lo, lo + extra, w)).collect();
            let lo_sum: u32 = claims.iter().map(|c| c.lo).sum();
            prop_assume!(lo_sum <= total);
            let g = waterfill_int(total, &claims);
            let hi_sum: u32 = claims.iter().map(|c| c.hi).sum();
            prop_assert_eq!(g.iter().sum::<u32>(), total.min(hi_sum));
            for (x, cl) in g.iter().zip(&claims) {
                prop_assert!(*x >= cl.lo && *x <= cl.hi);
            }
            // No unit can move from i to j and make j's normalised share
            // stay below i's: the discrete max-min condition.
            for i in 0..claims.len() {
                for j in 0..claims.len() {
                    if i == j || g[i] == claims[i].lo || g[j] == claims[j].hi { continue; }
                    let after_j = (g[j] as u64 + 1) * claims[i].w as u64;
                    let before_i = g[i] as u64 * claims[j].w as u64;
                    prop_assert!(after_j >= before_i, "{:?} -> {:?}", claims, g);
                }
            }
        }

        #[test]
        fn real_fill_sums_and_respects_bounds(
            total in 0.0f64..64.0,
            raw in proptest::collection::vec((0u32..4, 0u32..16, 1u32..8), 1..12),
        ) {
            let claims: Vec<Claim> = raw.iter().map(|&(lo, extra, w)| c(lo, lo + extra, w)).collect();
            let lo_sum: f64 = claims.iter().map(|c| c.lo as f64).sum();
            prop_assume!(lo_sum <= total);
            let s = waterfill_real(total, &claims);
            let hi_sum: f64 = claims.iter().map(|c| c.hi as f64).sum();
            prop_assert!((s.iter().sum::<f64>() - total.min(hi_sum)).abs() < 1e-6);
            for (x, cl) in s.iter().zip(&claims) {
                prop_assert!(*x >= cl.lo as f64 - 1e-9 && *x <= cl.hi as f64 + 1e-9);
            }
        }
    }
}
