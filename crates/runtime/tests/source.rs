//! A pool that follows a grant the program sets itself: no broker, no
//! cell, no grant page — a [`ManualGrants`] source. The pool resizes to
//! each grant it is given and reports nothing anywhere.

#![cfg(not(loom))]

use allot_proto::Grant;
use allot_runtime::{ManualGrants, Pool};
use allot_topo::CpuSet;
use std::sync::Arc;
use std::time::Duration;

fn grant_of(cpus: &CpuSet) -> Grant {
    Grant {
        cpus: *cpus,
        threads: cpus.len() as u32,
        ..Grant::default()
    }
}

#[test]
fn a_pool_follows_grants_set_by_the_program() {
    let allowed = allot_topo::allowed_cpus().unwrap();
    let first = allowed.take_first(1);
    let source = Arc::new(ManualGrants::new(grant_of(&allowed)));
    let pool = Pool::builder()
        .name("manual")
        .source(source.clone())
        .build()
        .unwrap();
    assert_eq!(pool.workers(), allowed.len());
    let limit = Duration::from_secs(10);
    let generation = source.set(grant_of(&first));
    assert!(pool.wait_resized(generation, limit), "shrunk to one CPU");
    assert_eq!(pool.workers(), 1);
    assert_eq!(pool.source().generation(), generation);
    let generation = source.set(grant_of(&allowed));
    assert!(pool.wait_resized(generation, limit), "grown back");
    assert_eq!(pool.workers(), allowed.len());
    // Work runs on whatever the grant gives.
    let sum: u64 = pool.install(|| (0..1000u64).sum());
    assert_eq!(sum, 499_500);
}

/// Without a broker client (the default source when the `cell` feature is
/// off), a pool runs on the CPUs the process may use, and its grant never
/// changes.
#[test]
fn the_allowed_source_is_the_process_cpus_and_never_changes() {
    let allowed = allot_topo::allowed_cpus().unwrap();
    let source = allot_runtime::Allowed::now();
    use allot_runtime::GrantSource;
    assert_eq!(source.grant().cpus, allowed);
    assert!(
        !source.follows(),
        "no monitor for a grant that never changes"
    );
    let g = source.wait_change(source.generation(), Some(Duration::from_millis(1)));
    assert_eq!(g.generation, source.generation());
    let pool = Pool::builder()
        .name("allowed")
        .source(Arc::new(source))
        .build()
        .unwrap();
    assert_eq!(pool.workers(), allowed.len());
    assert_eq!(pool.install(|| 6 * 7), 42);
}
