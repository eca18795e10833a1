//! Bitonic sort with a parallel divide-and-conquer merge, the shape of
//! Sting's `abisort` benchmark.
//!
//! This is Batcher's bitonic sort written recursively (sort the halves in
//! opposite directions, then merge the bitonic sequence), not Bilardi and
//! Nicolau's *adaptive* bitonic sort: the adaptive version keeps bitonic
//! sequences in a tree to do O(n log n) comparisons, this one does
//! O(n log² n) in place on an array. The task structure is the same
//! (a binary fork tree for the sort, and inside every merge a parallel
//! compare-exchange pass followed by two independent half merges), which
//! is what the benchmark exercises. `benches/sting/sting.c` is the same
//! algorithm line for line for OpenMP.

use super::variants::Fork;

/// Pieces of at most this many keys are sorted or merged sequentially.
pub const CUTOFF: usize = 2048;

/// The keys of a run: `n` pseudo-random 32-bit keys from `seed`
/// (splitmix64, as in the C version).
pub fn keys(n: usize, seed: u64) -> Vec<u32> {
    let mut s = seed;
    (0..n).map(|_| (splitmix64(&mut s) >> 32) as u32).collect()
}

/// The splitmix64 generator (the C version has the same one).
pub fn splitmix64(s: &mut u64) -> u64 {
    *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *s;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A checksum of a sorted sequence that depends on every key's position;
/// the same sorted output gives the same sum in Rust and C.
pub fn checksum(a: &[u32]) -> u64 {
    a.iter().enumerate().fold(0u64, |acc, (i, &k)| {
        acc.wrapping_add((i as u64 + 1).wrapping_mul(u64::from(k) + 1))
    })
}

/// Whether `a` is in ascending order.
pub fn is_sorted(a: &[u32]) -> bool {
    a.windows(2).all(|w| w[0] <= w[1])
}

/// Sorts `a` (its length a power of two) ascending.
pub fn sort<F: Fork>(f: &F, a: &mut [u32]) {
    assert!(a.len().is_power_of_two(), "bitonic sort needs 2^k keys");
    sort_dir(f, a, true);
}

fn sort_dir<F: Fork>(f: &F, a: &mut [u32], up: bool) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    if n <= CUTOFF {
        return sort_seq(a, up);
    }
    let (lo, hi) = a.split_at_mut(n / 2);
    f.join(|| sort_dir(f, lo, true), || sort_dir(f, hi, false));
    merge(f, a, up);
}

/// Merges the bitonic sequence `a` into order `up`.
fn merge<F: Fork>(f: &F, a: &mut [u32], up: bool) {
    let n = a.len();
    if n <= CUTOFF {
        return merge_seq(a, up);
    }
    let (lo, hi) = a.split_at_mut(n / 2);
    exchange_par(f, lo, hi, up);
    f.join(|| merge(f, lo, up), || merge(f, hi, up));
}

/// The compare-exchange pass of a merge, split in halves down to
/// `CUTOFF` pairs.
fn exchange_par<F: Fork>(f: &F, lo: &mut [u32], hi: &mut [u32], up: bool) {
    let n = lo.len();
    if n <= CUTOFF {
        return exchange(lo, hi, up);
    }
    let (l0, l1) = lo.split_at_mut(n / 2);
    let (h0, h1) = hi.split_at_mut(n / 2);
    f.join(
        || exchange_par(f, l0, h0, up),
        || exchange_par(f, l1, h1, up),
    );
}

fn exchange(lo: &mut [u32], hi: &mut [u32], up: bool) {
    for (x, y) in lo.iter_mut().zip(hi.iter_mut()) {
        if (*x > *y) == up {
            std::mem::swap(x, y);
        }
    }
}

fn sort_seq(a: &mut [u32], up: bool) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    let (lo, hi) = a.split_at_mut(n / 2);
    sort_seq(lo, true);
    sort_seq(hi, false);
    merge_seq(a, up);
}

fn merge_seq(a: &mut [u32], up: bool) {
    let n = a.len();
    if n <= 1 {
        return;
    }
    let (lo, hi) = a.split_at_mut(n / 2);
    exchange(lo, hi, up);
    merge_seq(lo, up);
    merge_seq(hi, up);
}
