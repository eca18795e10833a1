//! N-queens: the number of ways to place `n` queens on an n×n board, by
//! bitmask backtracking. The top `depth` rows fork (the free columns of a
//! row split in halves, each half a task); rows below are searched
//! sequentially. `benches/sting/sting.c` is the same algorithm for OpenMP.

use super::variants::Fork;

/// Rows searched in parallel (forking) before the sequential cutoff.
pub const FORK_ROWS: u32 = 3;

/// Known solution counts for n = 0..=15, to check every run.
pub const SOLUTIONS: [u64; 16] = [
    1, 1, 0, 0, 2, 10, 4, 40, 92, 352, 724, 2680, 14200, 73712, 365596, 2279184,
];

/// Counts the solutions for an n×n board (n ≤ 15).
pub fn count<F: Fork>(f: &F, n: u32) -> u64 {
    assert!(n <= 15);
    rows(f, n, 0, 0, 0, 0)
}

/// Solutions below a partial placement: occupied columns and the two
/// diagonal masks, `row` rows placed.
fn rows<F: Fork>(f: &F, n: u32, cols: u32, d1: u32, d2: u32, row: u32) -> u64 {
    let all = (1u32 << n) - 1;
    if cols == all {
        return 1;
    }
    let free = all & !(cols | d1 | d2);
    if row >= FORK_ROWS {
        return rows_seq(all, cols, d1, d2);
    }
    split(f, n, free, cols, d1, d2, row)
}

/// Places a queen on each column of `free` (forking in halves).
fn split<F: Fork>(f: &F, n: u32, free: u32, cols: u32, d1: u32, d2: u32, row: u32) -> u64 {
    match free.count_ones() {
        0 => 0,
        1 => rows(
            f,
            n,
            cols | free,
            (d1 | free) << 1,
            (d2 | free) >> 1,
            row + 1,
        ),
        k => {
            // The lowest k/2 set bits go left, the others right.
            let mut left = 0u32;
            let mut rest = free;
            for _ in 0..k / 2 {
                let bit = rest & rest.wrapping_neg();
                left |= bit;
                rest &= !bit;
            }
            let (a, b) = f.join(
                || split(f, n, left, cols, d1, d2, row),
                || split(f, n, rest, cols, d1, d2, row),
            );
            a + b
        }
    }
}

fn rows_seq(all: u32, cols: u32, d1: u32, d2: u32) -> u64 {
    if cols == all {
        return 1;
    }
    let mut free = all & !(cols | d1 | d2);
    let mut total = 0;
    while free != 0 {
        let bit = free & free.wrapping_neg();
        free &= !bit;
        total += rows_seq(all, cols | bit, ((d1 | bit) << 1) & all, (d2 | bit) >> 1);
    }
    total
}
