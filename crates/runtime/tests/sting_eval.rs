//! The Sting benchmark's algorithms (`benches/sting/`) at tiny sizes under
//! every policy it measures, on an allot pool: every answer must match a
//! sequential reference. No timing is asserted.

#![cfg(not(loom))]

#[allow(dead_code)]
#[path = "../benches/sting/abisort.rs"]
mod abisort;
#[allow(dead_code)]
#[path = "../benches/sting/knapsack.rs"]
mod knapsack;
#[allow(dead_code)]
#[path = "../benches/sting/queens.rs"]
mod queens;
#[allow(dead_code)]
#[path = "../benches/sting/variants.rs"]
mod variants;

use allot_client::Cell;
use allot_runtime::{PolicySpec, Pool, WorkerStats};
use std::sync::Arc;
use variants::{Allot, AllotSpawner, POLICIES, Seq};

fn pool(spec: &str) -> Arc<Pool> {
    let spec: PolicySpec = spec.parse().expect("the benchmark's policies parse");
    Arc::new(
        Pool::builder()
            .cell(Cell::standalone())
            .policy(spec)
            .name("sting-test")
            .build()
            .expect("pool"),
    )
}

#[test]
fn the_sequential_references_agree_with_each_other() {
    // The bitonic sort against the standard library's sort.
    for log2 in [0, 1, 5, 12] {
        let mut k = abisort::keys(1 << log2, 3);
        let mut want = k.clone();
        want.sort_unstable();
        abisort::sort(&Seq, &mut k);
        assert_eq!(k, want, "2^{log2} keys");
    }
    // The queens search against the known counts.
    for n in 1..=9 {
        assert_eq!(
            queens::count(&Seq, n),
            queens::SOLUTIONS[n as usize],
            "n={n}"
        );
    }
    // Branch and bound against dynamic programming.
    for n in [1, 5, 20, 30] {
        let inst = knapsack::instance(n, 11);
        assert_eq!(knapsack::search_seq(&inst).0, inst.optimum(), "{n} items");
    }
}

/// The adaptive bitonic sort's subtree swaps assume the swapped pairs of
/// a merge form one run; ties (few distinct keys) and already ordered or
/// reversed input are where a wrong walk would show.
#[test]
fn the_adaptive_bitonic_sort_sorts_ties_runs_and_every_size() {
    for log2 in 0..=11 {
        let n = 1usize << log2;
        for seed in 0..8 {
            let random = abisort::keys(n, seed);
            let inputs = [
                random.clone(),
                random.iter().map(|k| k % 2).collect(),
                random.iter().map(|k| k % 3).collect(),
                random.iter().map(|k| k % 17).collect(),
                (0..n as u32).collect(),
                (0..n as u32).rev().collect(),
                vec![7; n],
            ];
            for input in inputs {
                let mut k = input.clone();
                abisort::sort(&Seq, &mut k);
                let mut want = input;
                want.sort_unstable();
                assert_eq!(k, want, "2^{log2} keys, seed {seed}");
            }
        }
    }
    // A tree reads back what it was built from, and sorting keeps the
    // multiset.
    let keys = abisort::keys(64, 1);
    let mut tree = abisort::Tree::new(&keys);
    assert_eq!(tree.to_vec(), keys);
    tree.sort(&Seq);
    assert!(abisort::is_sorted(&tree.to_vec()));
}

#[test]
fn every_policy_gives_the_sequential_answers() {
    let keys = abisort::keys(1 << 13, 5);
    let mut sorted = keys.clone();
    abisort::sort(&Seq, &mut sorted);
    let queens = queens::count(&Seq, 8);
    let inst = knapsack::instance(30, 9);
    let (optimum, _) = knapsack::search_seq(&inst);
    for spec in POLICIES {
        let pool = pool(spec);
        let mut k = keys.clone();
        pool.install(|| abisort::sort(&Allot, &mut k));
        assert!(k == sorted, "{spec}: abisort");
        assert_eq!(
            pool.install(|| queens::count(&Allot, 8)),
            queens,
            "{spec}: queens"
        );
        let (best, nodes) = knapsack::search_par(&inst, AllotSpawner(pool.clone()));
        assert_eq!(best, optimum, "{spec}: knapsack");
        assert!(nodes > 0, "{spec}: knapsack expanded no node");
        // The search's tasks were spawned on the pool and ran there.
        let total = WorkerStats::total(&pool.worker_stats());
        assert!(
            total.tasks_run > 0 && total.tasks_created > 0,
            "{spec}: {total:?}"
        );
    }
}
