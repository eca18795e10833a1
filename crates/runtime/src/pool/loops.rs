//! Parallel loops: how a range is cut into tasks, and into the pieces the
//! body sees.
//!
//! # Two cuts
//!
//! A loop over `range` makes two separate decisions:
//!
//! - **pieces**: the sub-ranges handed to the body. For
//!   [`Pool::for_each_chunk`] and [`Pool::map_reduce`] no piece is longer
//!   than `grain`; every index is in exactly one piece.
//! - **tasks**: how those pieces are grouped into units that other workers
//!   can take. Every fork is a `join` (a deque push, and a wake-up when a
//!   thief takes it), so forking down to single pieces makes a loop of `p`
//!   pieces pay `p - 1` forks however few workers there are.
//!
//! # Adaptive splitting
//!
//! Tasks are cut lazily. A task holding a range and a *split budget* `b`:
//!
//! 1. runs the range as one piece if it is at most `grain` long;
//! 2. else, with `b == 0`, runs its pieces itself, in ascending order;
//! 3. else forks: the left half continues here with budget `b / 2`, the
//!    right half is offered to thieves with budget `b / 2` — or, when a
//!    thief took it (it runs on another worker than the one that forked
//!    it), with `max(b / 2, workers)`: a steal shows a worker was idle, so
//!    the stolen half is cut again for others that may be idle too.
//!
//! A loop starts with `b = workers` (the pool's active workers when it
//! starts). Without steals it makes about `2 · workers` tasks whatever the
//! grain; under imbalance (a slow piece, a worker that loses its CPU) the
//! steals re-open the splitting where it is needed. This is the lazy
//! splitting of Tzannes et al. in the form rayon uses; the stolen test is
//! "which worker runs me", not a flag from `join`.
//!
//! # Static schedule
//!
//! [`Pool::for_each_static`] is OpenMP's `schedule(static)`: the range is
//! cut into one contiguous block per active worker (fewer when the range
//! is shorter), block `k` of `n` starting at `start + k·(len / n) +
//! min(k, len % n)`; the body is called once per block. The blocks are
//! forked in halves down to single blocks, so each idle worker takes one.
//! There is no balancing beyond that: use it for bodies whose cost per
//! index is even, or that want one call per worker (per-thread set-up).
//!
//! # Where the loop runs
//!
//! Called from a worker of the pool, a loop runs on that worker's fast
//! path (the calling worker takes the first piece). Called from any other
//! thread, the loop is queued as one task ([`Pool::install`]) and the
//! caller waits.

use super::{Pool, join};
use crate::controller::current_worker;
use std::ops::Range;

impl Pool {
    /// Runs `f(i)` for every `i` in `range`, in chunks of at most `grain`
    /// indices.
    pub fn for_each<F: Fn(usize) + Sync>(&self, range: Range<usize>, grain: usize, f: F) {
        self.for_each_chunk(range, grain, |r| r.for_each(&f));
    }

    /// Runs `f` on disjoint sub-ranges covering `range`, each at most
    /// `grain` long, split adaptively into tasks (see the module docs):
    /// about two tasks per worker unless workers go idle and steal.
    pub fn for_each_chunk<F: Fn(Range<usize>) + Sync>(
        &self,
        range: Range<usize>,
        grain: usize,
        f: F,
    ) {
        if range.is_empty() {
            return;
        }
        let cut = Cut::new(grain, self.workers());
        self.install(|| split(range, cut.budget(), cut, &f));
    }

    /// Calls `f` once per block of `range`: one contiguous block per active
    /// worker (fewer when `range` is shorter), of lengths differing by at
    /// most one, in parallel (OpenMP's `schedule(static)`; see the module
    /// docs). Returns once every call returned.
    pub fn for_each_static<F: Fn(Range<usize>) + Sync>(&self, range: Range<usize>, f: F) {
        if range.is_empty() {
            return;
        }
        let n = self.workers().clamp(1, range.len());
        self.install(|| blocks(&range, 0..n, n, &f));
    }

    /// Maps every chunk of `range` (each at most `grain` long) with `map`
    /// and combines the results with `reduce` (associative; results are
    /// combined in index order, so it need not be commutative), starting
    /// from `identity()`. Split adaptively, as
    /// [`for_each_chunk`](Pool::for_each_chunk).
    pub fn map_reduce<T, M, R>(
        &self,
        range: Range<usize>,
        grain: usize,
        identity: impl Fn() -> T + Sync,
        map: M,
        reduce: R,
    ) -> T
    where
        T: Send,
        M: Fn(Range<usize>) -> T + Sync,
        R: Fn(T, T) -> T + Sync,
    {
        if range.is_empty() {
            return identity();
        }
        let cut = Cut::new(grain, self.workers());
        self.install(|| split_reduce(range, cut.budget(), cut, &map, &reduce))
    }
}

/// The fixed parameters of one loop's adaptive splitting.
#[derive(Debug, Clone, Copy)]
struct Cut {
    /// Longest piece handed to the body (at least 1).
    grain: usize,
    /// Active workers when the loop started (at least 1): the starting
    /// budget, and the budget a stolen half gets back.
    workers: usize,
}

impl Cut {
    fn new(grain: usize, workers: usize) -> Cut {
        Cut {
            grain: grain.max(1),
            workers: workers.max(1),
        }
    }

    fn budget(self) -> usize {
        self.workers
    }

    /// The budget of the right half of a fork made on worker `forked_on`
    /// with budget `b`, now running on the calling thread.
    fn right_budget(self, b: usize, forked_on: Option<usize>) -> usize {
        if current_worker() != forked_on {
            (b / 2).max(self.workers)
        } else {
            b / 2
        }
    }

    /// The pieces of `r`, in ascending order.
    fn pieces(self, r: Range<usize>) -> impl Iterator<Item = Range<usize>> {
        let g = self.grain;
        r.clone()
            .step_by(g)
            .map(move |lo| lo..lo.saturating_add(g).min(r.end))
    }
}

fn split<F: Fn(Range<usize>) + Sync>(r: Range<usize>, b: usize, cut: Cut, f: &F) {
    if r.len() <= cut.grain {
        f(r);
        return;
    }
    if b == 0 {
        cut.pieces(r).for_each(f);
        return;
    }
    let mid = r.start + r.len() / 2;
    let here = current_worker();
    join(
        || split(r.start..mid, b / 2, cut, f),
        || split(mid..r.end, cut.right_budget(b, here), cut, f),
    );
}

fn split_reduce<T: Send, M, R>(r: Range<usize>, b: usize, cut: Cut, map: &M, reduce: &R) -> T
where
    M: Fn(Range<usize>) -> T + Sync,
    R: Fn(T, T) -> T + Sync,
{
    if r.len() <= cut.grain {
        return map(r);
    }
    if b == 0 {
        let mut pieces = cut.pieces(r);
        let first = map(pieces.next().expect("a range longer than grain has pieces"));
        return pieces.fold(first, |acc, p| reduce(acc, map(p)));
    }
    let mid = r.start + r.len() / 2;
    let here = current_worker();
    let (a, b) = join(
        || split_reduce(r.start..mid, b / 2, cut, map, reduce),
        || split_reduce(mid..r.end, cut.right_budget(b, here), cut, map, reduce),
    );
    reduce(a, b)
}

/// Block `k` of `range` cut into `n` blocks whose lengths differ by at
/// most one (the longer ones first).
fn block(range: &Range<usize>, k: usize, n: usize) -> Range<usize> {
    let (len, base) = (range.len(), range.start);
    let (q, extra) = (len / n, len % n);
    let at = |k: usize| base + k * q + k.min(extra);
    at(k)..at(k + 1)
}

/// Runs the blocks `ks` of `range` (cut into `n`), forking in halves.
fn blocks<F: Fn(Range<usize>) + Sync>(range: &Range<usize>, ks: Range<usize>, n: usize, f: &F) {
    if ks.len() == 1 {
        f(block(range, ks.start, n));
        return;
    }
    let mid = ks.start + ks.len() / 2;
    join(
        || blocks(range, ks.start..mid, n, f),
        || blocks(range, mid..ks.end, n, f),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Blocks tile the range in order, and their lengths differ by at
        /// most one.
        #[test]
        fn blocks_tile_the_range(start in 0usize..1000, len in 1usize..10_000, n in 1usize..64) {
            let range = start..start + len;
            let n = n.min(len);
            let bs: Vec<_> = (0..n).map(|k| block(&range, k, n)).collect();
            prop_assert_eq!(bs[0].start, range.start);
            prop_assert_eq!(bs[n - 1].end, range.end);
            for w in bs.windows(2) {
                prop_assert_eq!(w[0].end, w[1].start);
            }
            let (lo, hi) = bs.iter().fold((usize::MAX, 0), |(lo, hi), b| (lo.min(b.len()), hi.max(b.len())));
            prop_assert!(lo >= 1 && hi - lo <= 1, "{:?}", bs);
        }

        /// A leaf's pieces tile its range in order, none longer than grain.
        #[test]
        fn pieces_tile_the_leaf(start in 0usize..1000, len in 1usize..5000, grain in 1usize..300) {
            let cut = Cut::new(grain, 2);
            let r = start..start + len;
            let ps: Vec<_> = cut.pieces(r.clone()).collect();
            prop_assert_eq!(ps[0].start, r.start);
            prop_assert_eq!(ps.last().unwrap().end, r.end);
            for w in ps.windows(2) {
                prop_assert_eq!(w[0].end, w[1].start);
            }
            prop_assert!(ps.iter().all(|p| !p.is_empty() && p.len() <= grain));
        }
    }

    #[test]
    fn a_piece_at_the_top_of_the_address_space_does_not_overflow() {
        let cut = Cut::new(10, 1);
        let r = usize::MAX - 15..usize::MAX;
        let ps: Vec<_> = cut.pieces(r).collect();
        assert_eq!(
            ps,
            vec![usize::MAX - 15..usize::MAX - 5, usize::MAX - 5..usize::MAX]
        );
    }

    #[test]
    fn a_fork_not_stolen_halves_the_budget_and_a_stolen_one_restores_it() {
        let cut = Cut::new(1, 4);
        // Outside any pool `current_worker()` is None: "forked on None" is
        // not a steal, "forked on worker 0" seen from here is.
        assert_eq!(cut.right_budget(4, None), 2);
        assert_eq!(cut.right_budget(1, None), 0);
        assert_eq!(cut.right_budget(1, Some(0)), 4);
        assert_eq!(cut.right_budget(16, Some(0)), 8);
    }
}
