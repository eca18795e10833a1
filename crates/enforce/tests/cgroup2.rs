//! The cgroup v2 backend against a directory fixture, and the fixture
//! against the kernel's unified hierarchy where this machine has one.

mod common;

use allot_enforce::cgroupfs::{CgroupFs, FixtureFs, FixtureLayout, KernelFs};
use allot_enforce::{Applied, Cgroup2, Enforcer};
use allot_topo::CpuSet;
use std::path::Path;
use std::sync::Arc;

fn fixture() -> (tempfile::TempDir, Arc<FixtureFs>) {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FixtureFs::new(FixtureLayout::V2));
    fs.populate(dir.path()).unwrap();
    (dir, fs)
}

#[test]
fn manages_cells_in_a_fixture_tree() {
    let (dir, fs) = fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    assert!(
        fs.read(&dir.path().join("cgroup.subtree_control"))
            .unwrap()
            .contains("+cpuset")
    );
    assert_eq!(fs.read(&root.join("cpuset.cpus")).unwrap(), "0-7");
    b.create(3).unwrap();
    b.attach(3, 4242).unwrap();
    assert_eq!(b.pids(3), vec![4242]);
    b.apply(
        3,
        &Applied {
            cpus: CpuSet::parse_list("2-5").unwrap(),
            weight: 2,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(fs.read(&root.join("cell-3/cpuset.cpus")).unwrap(), "2-5");
    assert_eq!(fs.read(&root.join("cell-3/cpu.weight")).unwrap(), "200");
    b.apply(
        3,
        &Applied {
            cpus: CpuSet::parse_list("2").unwrap(),
            weight: 2,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(
        fs.read(&root.join("cell-3/cpuset.cpus")).unwrap(),
        "2",
        "rewritten in place, not appended"
    );
    b.apply(
        3,
        &Applied {
            cpus: CpuSet::parse_list("2").unwrap(),
            weight: 2,
            bandwidth: Some(allot_enforce::Bandwidth {
                quota_us: 2_000,
                period_us: 8_000,
            }),
        },
    )
    .unwrap();
    assert_eq!(fs.read(&root.join("cell-3/cpu.max")).unwrap(), "2000 8000");
    b.apply(
        3,
        &Applied {
            cpus: CpuSet::parse_list("2").unwrap(),
            weight: 2,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(fs.read(&root.join("cell-3/cpu.max")).unwrap(), "max");
    std::fs::write(root.join("cell-3/cpu.stat"), "usage_usec 1500\n").unwrap();
    assert_eq!(b.usage_ns(3), Some(1_500_000));
    // Removing a populated cell moves its processes out of allot's subtree.
    b.remove(3).unwrap();
    assert!(!root.join("cell-3").exists());
    assert_eq!(
        fs.read(&dir.path().join("cgroup.procs")).unwrap().trim(),
        "4242"
    );
    b.cleanup().unwrap();
    assert!(
        !root.exists(),
        "the root allot created is removed when empty"
    );
}

#[test]
fn adopts_existing_cells_after_restart() {
    let (dir, fs) = fixture();
    let root = dir.path().join("allot");
    {
        let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
        b.create(9).unwrap();
        b.apply(
            9,
            &Applied {
                cpus: CpuSet::parse_list("1-2").unwrap(),
                weight: 1,
                bandwidth: None,
            },
        )
        .unwrap();
    }
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    assert_eq!(
        b.adopt(9, &[]).unwrap(),
        Some(CpuSet::parse_list("1-2").unwrap())
    );
    assert!(b.adopt(10, &[]).is_err());
}

#[test]
fn refuses_a_hierarchy_without_cpuset() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cgroup.controllers"), "memory io\n").unwrap();
    let fs = Arc::new(FixtureFs::new(FixtureLayout::V2));
    let err = Cgroup2::new(fs, dir.path().join("allot"), CpuSet::first_n(2)).unwrap_err();
    assert!(
        err.to_string()
            .contains("cpuset controller is not available"),
        "{err}"
    );
}

/// The fixture behaves like the kernel for what the backend relies on:
/// mkdir creates `cgroup.procs`, a written pid is listed, a populated
/// directory cannot be removed, an empty one can.
fn fs_contract(fs: &dyn CgroupFs, parent: &Path, pid: u32) {
    let d = parent.join(common::unique("contract"));
    fs.mkdir(&d).unwrap();
    assert!(fs.exists(&d.join("cgroup.procs")));
    fs.write(&d.join("cgroup.procs"), &pid.to_string()).unwrap();
    let listed: Vec<u32> = fs
        .read(&d.join("cgroup.procs"))
        .unwrap()
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(listed, vec![pid]);
    assert!(fs.rmdir(&d).is_err(), "populated cgroups cannot be removed");
    // Move it back out, then remove.
    fs.write(&parent.join("cgroup.procs"), &pid.to_string())
        .unwrap();
    if fs.read(&d.join("cgroup.procs")).unwrap().trim() == pid.to_string() {
        // The fixture does not model migration; empty it by hand.
        std::fs::write(d.join("cgroup.procs"), "").unwrap();
    }
    fs.rmdir(&d).unwrap();
    assert!(!d.exists());
}

#[test]
fn fixture_matches_the_kernel_unified_hierarchy() {
    let (dir, fs) = fixture();
    fs_contract(fs.as_ref(), dir.path(), 1234);

    let mounts = allot_enforce::detect::Mounts::read();
    if !allot_testkit::prerequisite(mounts.cgroup2.is_some(), "a cgroup2 mount")
        || !allot_testkit::prerequisite(allot_testkit::is_root(), "root, to write cgroup2")
    {
        return;
    }
    let unified = mounts.cgroup2.expect("checked");
    let child = common::sleeper();
    let _guard = common::CgroupDirs(vec![]);
    fs_contract(&KernelFs, &unified, child.pid());
}

#[test]
fn live_unified_hierarchy_is_refused_with_a_clear_reason_when_it_lacks_cpuset() {
    let mounts = allot_enforce::detect::Mounts::read();
    let Some(unified) = mounts.cgroup2 else {
        return;
    };
    let controllers =
        std::fs::read_to_string(unified.join("cgroup.controllers")).unwrap_or_default();
    if controllers.split_whitespace().any(|c| c == "cpuset") {
        return; // a full v2 machine: nothing to refuse
    }
    let root = unified.join(common::unique("v2"));
    let _guard = common::CgroupDirs(vec![root.clone()]);
    let err = Cgroup2::new(Arc::new(KernelFs), root.clone(), CpuSet::first_n(1)).unwrap_err();
    assert!(
        err.to_string()
            .contains("cpuset controller is not available"),
        "{err}"
    );
    assert!(
        !root.exists(),
        "nothing is created when the hierarchy is refused"
    );
}
