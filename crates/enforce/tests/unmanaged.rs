//! The system minimum for processes that asked for nothing
//! (`allot_enforce::unmanaged`): against a fixture, and live with a source
//! cgroup the test makes for processes it starts (never the machine's own
//! processes: see DEVELOPERS.md).

mod common;

use allot_enforce::cgroupfs::{CgroupFs, FixtureFs, FixtureLayout, KernelFs};
use allot_enforce::unmanaged::Unmanaged;
use allot_topo::CpuSet;
use common::*;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

fn procs(fs: &dyn CgroupFs, dir: &std::path::Path) -> Vec<u32> {
    let mut v: Vec<u32> = fs
        .read(&dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn fixture_sweeps_the_source_into_the_reserve_and_gives_back() {
    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FixtureFs::new(FixtureLayout::V1Cpuset));
    let root = dir.path().join("cpuset");
    fs.populate(&root).unwrap();
    std::fs::write(root.join("cpuset.mems"), "0\n").unwrap();
    std::fs::write(root.join("cgroup.procs"), "100\n200\n300\n").unwrap();
    let allot = root.join("allot");
    fs.mkdir(&allot).unwrap();
    std::fs::write(allot.join("cpuset.mems"), "0").unwrap();
    let mut u = Unmanaged::new(fs.clone(), root.clone(), &allot);
    let reserve = CpuSet::parse_list("0").unwrap();
    let moved = u.sweep(&reserve, &BTreeSet::from([200])).unwrap();
    assert_eq!(moved, 2);
    let group = allot.join("system");
    assert_eq!(procs(fs.as_ref(), &group), [100, 300]);
    assert_eq!(procs(fs.as_ref(), &root), [200], "a holder is exempt");
    assert_eq!(fs.read(&group.join("cpuset.cpus")).unwrap(), "0");
    assert_eq!(fs.read(&group.join("cpuset.mems")).unwrap(), "0");
    // 300 acquires resources of its own: back to the source.
    u.release(300);
    assert_eq!(procs(fs.as_ref(), &root), [200, 300]);
    // Holding nothing again, the next sweep takes it.
    assert_eq!(u.sweep(&reserve, &BTreeSet::from([200])).unwrap(), 1);
    assert_eq!(procs(fs.as_ref(), &group), [100, 300]);
    u.release_all().unwrap();
    assert!(!group.exists());
    assert_eq!(procs(fs.as_ref(), &root), [100, 200, 300]);
    assert!(
        u.sweep(&CpuSet::new(), &BTreeSet::new()).is_err(),
        "no reserve"
    );
}

#[test]
fn live_processes_of_the_source_and_their_children_run_on_the_reserve() {
    let Some((mounts, all)) = live_v1(2) else {
        return;
    };
    let name = unique("v1min");
    // The test's own "outside": a cgroup holding only its processes.
    let source = mounts.cpuset.join(format!("{name}-outside"));
    let allot = mounts.cpuset.join(&name);
    let _guard =
        allot_testkit::CgroupDirs(vec![allot.join("system"), allot.clone(), source.clone()]);
    let mems = std::fs::read_to_string(mounts.cpuset.join("cpuset.mems")).unwrap();
    for d in [&source, &allot] {
        std::fs::create_dir(d).unwrap();
        std::fs::write(d.join("cpuset.cpus"), all.to_string()).unwrap();
        std::fs::write(d.join("cpuset.mems"), mems.trim()).unwrap();
    }
    // One process that forks a child later, one that holds (exempt).
    let mut parent = std::process::Command::new("sh")
        .args(["-c", "sleep 0.5; sleep 30 & wait"])
        .spawn()
        .unwrap();
    let mut holder = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    for p in [parent.id(), holder.id()] {
        std::fs::write(source.join("cgroup.procs"), p.to_string()).unwrap();
    }
    let reserve = all.take_first(1);
    let mut u = Unmanaged::new(Arc::new(KernelFs), source.clone(), &allot);
    let moved = u.sweep(&reserve, &BTreeSet::from([holder.id()])).unwrap();
    assert_eq!(moved, 1);
    let allowed = |pid: u32| {
        allot_testkit::thread_masks(pid)
            .into_iter()
            .map(|(_, m)| m)
            .next()
            .unwrap_or_default()
    };
    assert_eq!(allowed(parent.id()), reserve.to_string());
    assert_eq!(allowed(holder.id()), all.to_string(), "a holder is exempt");
    // The child forked after the sweep is born confined.
    let child = || {
        std::fs::read_to_string(format!(
            "/proc/{}/task/{}/children",
            parent.id(),
            parent.id()
        ))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse::<u32>().ok())
        .find(|&c| {
            std::fs::read_to_string(format!("/proc/{c}/comm")).is_ok_and(|n| n.trim() == "sleep")
        })
    };
    assert!(eventually(Duration::from_secs(5), || child().is_some_and(
        |c| allowed(c) == reserve.to_string() && !allowed(c).is_empty()
    )));
    u.release_all().unwrap();
    assert_eq!(allowed(parent.id()), all.to_string(), "given back");
    if let Some(c) = child() {
        assert_eq!(allowed(c), all.to_string());
        let _ = std::process::Command::new("kill")
            .arg(c.to_string())
            .status();
    }
    let _ = parent.kill();
    let _ = holder.kill();
    let _ = parent.wait();
    let _ = holder.wait();
}
