//! Adaptive bitonic sort (Bilardi and Nicolau), the algorithm of Sting's
//! `abisort` benchmark, with both recursive halves forked.
//!
//! # The bitonic tree
//!
//! A sequence of `n = 2^k` keys is kept as a complete binary tree of
//! `n - 1` nodes, read in order, followed by one extra key, the *spare*.
//! The root's left subtree with the root's key as its spare is the first
//! half of the sequence; the right subtree with the spare is the second
//! half. Both halves have the same shape, so walking down both at once
//! visits the pairs `(i, i + n/2)` that a bitonic merge compares.
//!
//! # Why it is adaptive
//!
//! Merging a bitonic sequence compares every pair `(i, i + n/2)` and
//! swaps the out-of-order ones; the swapped pairs form one contiguous run
//! that reaches one end of the half. Batcher's network swaps them one by
//! one (O(n) per merge level, O(n log² n) in all). Here the pair at the
//! end of the halves (root against spare) says which end the run touches,
//! and one walk down both subtrees finds the run's other end like a binary
//! search: at each node pair, if the run covers everything on one side of
//! the pair, the two subtrees on that side are swapped whole (one pointer
//! swap each) and the walk goes the other way. A merge level costs
//! O(log n) before its two halves merge independently, and the sort does
//! O(n log n) comparisons.
//!
//! The run is contiguous only if no two keys are equal (with ties, an
//! equal pair inside the run is left alone and the walk turns the wrong
//! way). So each node holds its key in the high half of a `u64` and the
//! key's input position in the low half: all distinct, ordered by key,
//! and the keys read back are the same as a sort of the bare keys gives.
//!
//! # Parallelism
//!
//! Sorting forks the two halves (sorted in opposite directions, so that
//! together they are bitonic), then merges; merging walks, then forks the
//! two half merges. Sequences of at most [`CUTOFF`] keys run on the
//! calling thread. `benches/sting/sting.c` is the same algorithm for
//! OpenMP.

use super::variants::Fork;
use std::mem;

/// Sequences of at most this many keys are sorted or merged without
/// forking.
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

/// Sorts `a` (its length a power of two) ascending: builds the tree,
/// sorts it, and reads it back.
#[allow(dead_code)] // the tests' entry; the benchmark times `Tree::sort` alone
pub fn sort<F: Fork>(f: &F, a: &mut [u32]) {
    let mut tree = Tree::new(a);
    tree.sort(f);
    tree.write_to(a);
}

/// A sequence of `2^k` keys as a bitonic tree (see the module docs).
pub struct Tree {
    /// `None` for a sequence of one key (the spare alone).
    root: Option<Box<Node>>,
    spare: u64,
    len: usize,
}

/// A key with its input position (see "Why it is adaptive"); the node is
/// no larger than with a bare `u32` key (two pointers and padding).
type Tagged = u64;

fn tag(key: u32, position: usize) -> Tagged {
    (u64::from(key) << 32) | position as u64
}

fn key_of(t: Tagged) -> u32 {
    (t >> 32) as u32
}

struct Node {
    key: Tagged,
    left: Option<Box<Node>>,
    right: Option<Box<Node>>,
}

impl Tree {
    /// The tree of `keys`, in their order.
    ///
    /// # Panics
    /// If the number of keys is not a power of two.
    pub fn new(keys: &[u32]) -> Tree {
        assert!(
            keys.len().is_power_of_two(),
            "bitonic sort needs 2^k keys, not {}",
            keys.len()
        );
        assert!(keys.len() <= 1 << 32, "positions are tagged in 32 bits");
        let tagged: Vec<Tagged> = keys.iter().enumerate().map(|(i, &k)| tag(k, i)).collect();
        let (body, spare) = tagged.split_at(tagged.len() - 1);
        Tree {
            root: build(body),
            spare: spare[0],
            len: keys.len(),
        }
    }

    /// Sorts the keys ascending, forking through `f`.
    pub fn sort<F: Fork>(&mut self, f: &F) {
        if let Some(root) = self.root.as_deref_mut() {
            self.spare = sort_dir(f, root, self.spare, self.len, true);
        }
    }

    /// Writes the keys, in order, into `out` (as long as the tree).
    pub fn write_to(&self, out: &mut [u32]) {
        assert_eq!(out.len(), self.len, "one slot per key");
        let mut at = 0;
        if let Some(root) = self.root.as_deref() {
            in_order(root, out, &mut at);
        }
        out[at] = key_of(self.spare);
    }

    /// The keys, in order.
    pub fn to_vec(&self) -> Vec<u32> {
        let mut v = vec![0; self.len];
        self.write_to(&mut v);
        v
    }
}

/// The complete tree holding `keys` (`2^j - 1` of them) in order.
fn build(keys: &[Tagged]) -> Option<Box<Node>> {
    if keys.is_empty() {
        return None;
    }
    let mid = keys.len() / 2;
    Some(Box::new(Node {
        key: keys[mid],
        left: build(&keys[..mid]),
        right: build(&keys[mid + 1..]),
    }))
}

fn in_order(node: &Node, out: &mut [u32], at: &mut usize) {
    if let Some(l) = node.left.as_deref() {
        in_order(l, out, at);
    }
    out[*at] = key_of(node.key);
    *at += 1;
    if let Some(r) = node.right.as_deref() {
        in_order(r, out, at);
    }
}

/// Whether `a` before `b` is out of order for direction `up`.
#[inline]
fn out_of_order(a: Tagged, b: Tagged, up: bool) -> bool {
    if up { a > b } else { a < b }
}

/// Runs `a` and `b`, forked when the sequence has more than `CUTOFF` keys.
#[inline]
fn fork<F: Fork, RA: Send, RB: Send>(
    f: &F,
    len: usize,
    a: impl FnOnce() -> RA + Send,
    b: impl FnOnce() -> RB + Send,
) -> (RA, RB) {
    if len > CUTOFF {
        f.join(a, b)
    } else {
        (a(), b())
    }
}

/// Sorts the sequence `root` (in order) + `spare`, `len` keys, in
/// direction `up`; returns the new spare.
fn sort_dir<F: Fork>(f: &F, root: &mut Node, spare: Tagged, len: usize, up: bool) -> Tagged {
    let Node { key, left, right } = root;
    let (Some(l), Some(r)) = (left.as_deref_mut(), right.as_deref_mut()) else {
        // Two keys: the node's and the spare.
        let mut spare = spare;
        if out_of_order(*key, spare, up) {
            mem::swap(key, &mut spare);
        }
        return spare;
    };
    let first_spare = *key;
    let (k, s) = fork(
        f,
        len,
        || sort_dir(f, l, first_spare, len / 2, up),
        || sort_dir(f, r, spare, len / 2, !up),
    );
    *key = k;
    merge(f, root, s, len, up)
}

/// Merges the bitonic sequence `root` (in order) + `spare`, `len` keys,
/// into direction `up`; returns the new spare.
fn merge<F: Fork>(f: &F, root: &mut Node, spare: Tagged, len: usize, up: bool) -> Tagged {
    let mut spare = spare;
    // The last pair of the halves: which end the run of swaps touches.
    let swap_right = out_of_order(root.key, spare, up);
    if swap_right {
        mem::swap(&mut root.key, &mut spare);
    }
    let Node { key, left, right } = root;
    let (Some(l), Some(r)) = (left.as_deref_mut(), right.as_deref_mut()) else {
        return spare;
    };
    swap_run(l, r, swap_right, up);
    let first_spare = *key;
    let (k, s) = fork(
        f,
        len,
        || merge(f, l, first_spare, len / 2, up),
        || merge(f, r, spare, len / 2, up),
    );
    *key = k;
    s
}

/// Walks the two halves' trees together and swaps every out-of-order pair
/// of the run that reaches their right end (`swap_right`) or left end,
/// whole subtrees at a time (see "Why it is adaptive").
fn swap_run(mut a: &mut Node, mut b: &mut Node, swap_right: bool, up: bool) {
    loop {
        let swap = out_of_order(a.key, b.key, up);
        if swap {
            mem::swap(&mut a.key, &mut b.key);
            // The run covers everything beyond this pair on its side.
            if swap_right {
                mem::swap(&mut a.right, &mut b.right);
            } else {
                mem::swap(&mut a.left, &mut b.left);
            }
        }
        // The run's other end lies left of this pair if the pair is
        // inside a run that touches the right end, or outside one that
        // touches the left end.
        let go_left = swap == swap_right;
        let next = if go_left {
            (a.left.as_deref_mut(), b.left.as_deref_mut())
        } else {
            (a.right.as_deref_mut(), b.right.as_deref_mut())
        };
        match next {
            (Some(x), Some(y)) => (a, b) = (x, y),
            _ => return,
        }
    }
}
