//! Exclusive cells as cpuset partitions in the cgroup v2 backend, against
//! a directory fixture: with `cpuset.cpus.exclusive` (kernel 6.7 and
//! later) the partition is the cell's own directory; before it, a
//! directory beside allot's root (`apart_dir`). The backend's other
//! fixture and live tests are in `cgroup2.rs`.

mod common;

use allot_enforce::cgroupfs::{CgroupFs, FixtureFs, FixtureLayout};
use allot_enforce::{Cgroup2, Enforcer};
use allot_topo::CpuSet;
use std::sync::Arc;

/// An exclusive cell made a cpuset partition (fixture: a kernel with
/// `cpuset.cpus.exclusive`, allot's root a child of the hierarchy's root):
/// made over its grant, undone before its CPUs change and when it is
/// removed; under a deeper root none is tried.
#[test]
fn fixture_partitions_follow_the_cell_and_are_undone_before_a_change() {
    use allot_enforce::Partitioning::{self, Isolated};
    let (dir, fs) = common::v2_fixture();
    // The hierarchy's root has no cpuset.cpus, .exclusive or .partition of
    // its own.
    for f in [
        "cpuset.cpus",
        "cpuset.cpus.exclusive",
        "cpuset.cpus.partition",
    ] {
        std::fs::remove_file(dir.path().join(f)).unwrap();
    }
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    b.create(1).unwrap();
    let two = CpuSet::parse_list("2-3").unwrap();
    b.apply(1, &common::on_cpus(two)).unwrap();
    assert_eq!(b.set_partition(1, Some(two)).unwrap(), Isolated);
    let cell = root.join("cell-1");
    assert_eq!(
        fs.read(&cell.join("cpuset.cpus.partition")).unwrap(),
        "isolated"
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus.exclusive")).unwrap(), "2-3");
    // New CPUs: a plain cell first.
    b.apply(1, &common::on_cpus(CpuSet::parse_list("3").unwrap()))
        .unwrap();
    assert_eq!(
        fs.read(&cell.join("cpuset.cpus.partition")).unwrap(),
        "member"
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus.exclusive")).unwrap(), "");
    assert_eq!(
        b.set_partition(1, Some(CpuSet::parse_list("3").unwrap()))
            .unwrap(),
        Isolated
    );
    assert_eq!(b.set_partition(1, None).unwrap(), Partitioning::Plain);
    assert_eq!(
        fs.read(&cell.join("cpuset.cpus.partition")).unwrap(),
        "member"
    );
    assert_eq!(
        b.set_partition(1, Some(CpuSet::parse_list("3").unwrap()))
            .unwrap(),
        Isolated
    );
    b.remove(1).unwrap();
    assert_eq!(fs.read(&root.join("cpuset.cpus.exclusive")).unwrap(), "");
    // A root below someone else's cgroup: no partition is tried.
    let deeper = root.join("unit");
    fs.mkdir(&deeper).unwrap();
    let mut d = Cgroup2::new(fs.clone(), deeper.join("cells"), CpuSet::first_n(4)).unwrap();
    d.create(2).unwrap();
    match d.set_partition(2, Some(two)).unwrap() {
        Partitioning::Unavailable(why) => {
            assert!(why.contains("not the hierarchy's root"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// A fixture hierarchy of a kernel before 6.7: no `cpuset.cpus.exclusive`
/// anywhere, and a root with no cpuset files of its own, as the kernel's.
fn fixture_before_6_7() -> (tempfile::TempDir, Arc<FixtureFs>) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FixtureFs::new(FixtureLayout::V2).without(&["cpuset.cpus.exclusive"]));
    fs.populate(dir.path()).unwrap();
    for f in ["cpuset.cpus", "cpuset.cpus.partition"] {
        std::fs::remove_file(dir.path().join(f)).unwrap();
    }
    (dir, fs)
}

/// Before 6.7 (no `cpuset.cpus.exclusive`): an exclusive cell is made
/// beside allot's root and becomes a partition there once the root has
/// given its CPUs up; a cell made plain cannot be one; a new backend (a
/// restarted broker) finds the cell beside the root; removal hands the
/// CPUs back and leaves nothing beside the root.
#[test]
fn fixture_before_6_7_an_exclusive_cell_is_a_partition_beside_the_root() {
    use allot_enforce::Partitioning;
    use allot_enforce::partition::apart_dir;
    let (dir, fs) = fixture_before_6_7();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    b.create_exclusive(1).unwrap();
    b.create(2).unwrap();
    let apart = apart_dir(&root, 1);
    assert!(apart.join("cpuset.cpus").exists(), "made beside the root");
    assert!(!root.join("cell-1").exists());
    let two = CpuSet::parse_list("2-3").unwrap();
    b.apply(1, &common::on_cpus(two)).unwrap();
    b.attach(1, 4242).unwrap();
    assert_eq!(
        b.set_partition(1, Some(two)).unwrap(),
        Partitioning::Isolated
    );
    assert_eq!(
        fs.read(&apart.join("cpuset.cpus.partition")).unwrap(),
        "isolated"
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-1");
    assert_eq!(b.pids(1), vec![4242]);
    // A cell made plain (it became exclusive later) cannot be one here.
    match b
        .set_partition(2, Some(CpuSet::parse_list("1").unwrap()))
        .unwrap()
    {
        Partitioning::Unavailable(why) => assert!(why.contains("before 6.7"), "{why}"),
        other => panic!("{other:?}"),
    }
    // A broker killed and started again: the cell is found beside the
    // root, made plain, and its CPUs are the root's again until the new
    // broker partitions it.
    drop(b); // no clean-up: a kill
    let mut again = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    assert_eq!(again.existing(), vec![1, 2]);
    // Its processes are found before it is adopted (a broker whose journal
    // lost the cell asks first).
    assert_eq!(again.pids(1), vec![4242]);
    assert_eq!(again.adopt(1, &[4242]).unwrap(), Some(two));
    assert_eq!(
        fs.read(&apart.join("cpuset.cpus.partition")).unwrap(),
        "member"
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-3");
    assert_eq!(
        again.set_partition(1, Some(two)).unwrap(),
        Partitioning::Isolated
    );
    fs.write(&apart.join("cgroup.procs"), "").unwrap();
    again.remove(1).unwrap();
    assert!(!apart.exists(), "removed");
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-3");
}

/// Before 6.7: a partition beside the root left by a killed broker, whose
/// cell ended while no broker ran, is made plain when the next broker
/// removes it unadopted, and the root has every CPU again.
#[test]
fn fixture_before_6_7_a_partition_left_by_a_killed_broker_gives_its_cpus_back() {
    use allot_enforce::Partitioning;
    use allot_enforce::partition::apart_dir;
    let (dir, fs) = fixture_before_6_7();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    b.create_exclusive(5).unwrap();
    let one = CpuSet::parse_list("3").unwrap();
    b.apply(5, &common::on_cpus(one)).unwrap();
    assert_eq!(
        b.set_partition(5, Some(one)).unwrap(),
        Partitioning::Isolated
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-2");
    drop(b); // killed
    let mut again = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    // The kernel refused the new backend's write of every CPU to the root
    // while the partition stood (the fixture does not refuse: as if).
    fs.write(&root.join("cpuset.cpus"), "0-2").unwrap();
    assert_eq!(again.existing(), vec![5]);
    again.remove(5).unwrap();
    assert!(!apart_dir(&root, 5).exists());
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-3");
}
