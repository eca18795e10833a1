//! The affinity backend on real processes: every thread of every process in
//! the cell, threads and children created later included.

mod common;

use allot_enforce::os::{FakeOs, RealOs};
use allot_enforce::{Affinity, Enforcer};
use allot_topo::CpuSet;
use common::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn confines_threads_and_later_threads() {
    let all = allot_topo::allowed_cpus().unwrap();
    let p = threaded(2, 2, 400);
    let pid = p.pid();
    let mut b = Affinity::new(Arc::new(RealOs));
    b.create(1).unwrap();
    let first = all.take_first(1);
    b.apply(1, &on_cpus(first)).unwrap();
    b.attach(1, pid).unwrap();
    assert!(eventually(Duration::from_secs(5), || thread_masks(pid)
        .len()
        >= 3));
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, first.to_string(), "thread {tid}");
    }
    // Threads created after the change inherit it.
    assert!(eventually(Duration::from_secs(5), || thread_masks(pid)
        .len()
        >= 5));
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, first.to_string(), "late thread {tid}");
    }
    if all.len() >= 2 {
        let second: CpuSet = all.iter().skip(1).take(1).collect();
        b.apply(1, &on_cpus(second)).unwrap();
        for (tid, mask) in thread_masks(pid) {
            assert_eq!(mask, second.to_string(), "thread {tid} after the change");
        }
    }
    assert!(b.usage_ns(1).is_some());
    assert_eq!(b.pids(1), vec![pid]);
    // Released processes get every CPU back.
    let mut b = b.restore_on_remove(all);
    b.remove(1).unwrap();
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, all.to_string(), "thread {tid} after release");
    }
}

#[test]
fn confines_children_of_members() {
    let all = allot_topo::allowed_cpus().unwrap();
    let p = forking(3);
    let pid = p.pid();
    assert!(eventually(
        Duration::from_secs(5),
        || allot_enforce::os::process_tree(&RealOs, &[pid]).len() == 4
    ));
    let mut b = Affinity::new(Arc::new(RealOs));
    b.create(2).unwrap();
    b.attach(2, pid).unwrap();
    let one = all.take_first(1);
    b.apply(2, &on_cpus(one)).unwrap();
    let tree = b.pids(2);
    assert_eq!(tree.len(), 4);
    for p in tree {
        for (tid, mask) in thread_masks(p) {
            assert_eq!(mask, one.to_string(), "process {p} thread {tid}");
        }
    }
}

#[test]
fn fake_tree_is_confined_whole() {
    let all = CpuSet::first_n(4);
    let os = FakeOs::new();
    os.spawn(10, 0, 2, &all);
    os.spawn(20, 10, 3, &all);
    let mut b = Affinity::new(Arc::new(os.clone()));
    b.create(1).unwrap();
    b.attach(1, 10).unwrap();
    let two = CpuSet::parse_list("2-3").unwrap();
    b.apply(1, &on_cpus(two)).unwrap();
    use allot_enforce::os::Os;
    for t in [10, 11, 20, 21, 22] {
        assert_eq!(os.affinity(t).unwrap(), two);
    }
    // A child forked later inherits the parent's mask.
    os.spawn(30, 20, 1, &all);
    assert_eq!(os.affinity(30).unwrap(), two);
    os.burn(20, 5_000);
    assert_eq!(b.usage_ns(1), Some(5_000));
}
