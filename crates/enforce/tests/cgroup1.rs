//! The cgroup v1 backend, live on this machine's v1 hierarchies (skipped
//! where they are absent or not writable), and against a fixture everywhere.

mod common;

use allot_enforce::cgroupfs::{FixtureFs, FixtureLayout, KernelFs};
use allot_enforce::{Applied, Cgroup1, Enforcer, V1Mounts};
use allot_topo::CpuSet;
use common::*;
use std::sync::Arc;
use std::time::Duration;

#[test]
fn fixture_tree() {
    let dir = tempfile::tempdir().unwrap();
    let cpuset = FixtureFs::new(FixtureLayout::V1Cpuset);
    cpuset.populate(&dir.path().join("cpuset")).unwrap();
    std::fs::write(dir.path().join("cpuset/cpuset.mems"), "0\n").unwrap();
    let mounts = V1Mounts {
        cpuset: dir.path().join("cpuset"),
        cpu: None,
        cpuacct: None,
    };
    let mut b = Cgroup1::new(Arc::new(cpuset), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    b.create(1).unwrap();
    let leaf = dir.path().join("cpuset/allot/cell-1");
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.mems")).unwrap(),
        "0"
    );
    b.apply(
        1,
        &Applied {
            cpus: CpuSet::parse_list("1,3").unwrap(),
            weight: 1,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
        "1,3"
    );
    b.remove(1).unwrap();
    b.cleanup().unwrap();
    assert!(!dir.path().join("cpuset/allot").exists());
}

#[test]
fn live_cells_confine_every_thread_and_follow_grant_changes() {
    if !allot_testkit::prerequisite(
        v1_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        return;
    }
    let all = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(all.len() >= 2, "needs two CPUs") {
        return;
    }
    let mounts = allot_enforce::detect::Mounts::read().v1().unwrap();
    let name = unique("v1");
    let mut dirs = vec![mounts.cpuset.join(&name)];
    dirs.extend(mounts.cpu.iter().map(|d| d.join(&name)));
    if mounts.cpuacct != mounts.cpu {
        dirs.extend(mounts.cpuacct.iter().map(|d| d.join(&name)));
    }
    let _guard = CgroupDirs(dirs.clone());
    let p = threaded(2, 2, 400);
    let pid = p.pid();

    let mut b = Cgroup1::new(Arc::new(KernelFs), &mounts, &name, all).unwrap();
    b.create(7).unwrap();
    let first = all.take_first(1);
    b.apply(
        7,
        &Applied {
            cpus: first,
            weight: 1,
            bandwidth: None,
        },
    )
    .unwrap();
    b.attach(7, pid).unwrap();
    assert_eq!(b.pids(7), vec![pid]);
    // Every thread, including the two started after the move, runs on `first`.
    assert!(eventually(Duration::from_secs(5), || thread_masks(pid)
        .len()
        >= 5));
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, first.to_string(), "thread {tid}");
    }
    // A grant change rewrites cpuset.cpus; the kernel moves every thread.
    let second: CpuSet = all.iter().skip(1).take(1).collect();
    b.apply(
        7,
        &Applied {
            cpus: second,
            weight: 2,
            bandwidth: None,
        },
    )
    .unwrap();
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, second.to_string(), "thread {tid} after the change");
    }
    if let Some(cpu) = &mounts.cpu {
        assert_eq!(
            std::fs::read_to_string(cpu.join(&name).join("cell-7/cpu.shares"))
                .unwrap()
                .trim(),
            "2048"
        );
    }
    assert!(b.usage_ns(7).is_some() || mounts.cpuacct.is_none());
    // A time cell's CPU-time cap: the kernel takes the period and quota,
    // including a period its old quota would not fit, and lifts it again.
    if let Some(cpu) = &mounts.cpu {
        let cell = cpu.join(&name).join("cell-7");
        let read = |f: &str| {
            std::fs::read_to_string(cell.join(f))
                .unwrap()
                .trim()
                .to_string()
        };
        for (quota_us, period_us) in [(3_000, 10_000), (250_000, 1_000_000), (1_000, 2_000)] {
            b.apply(
                7,
                &Applied {
                    cpus: second,
                    weight: 2,
                    bandwidth: Some(allot_enforce::Bandwidth {
                        quota_us,
                        period_us,
                    }),
                },
            )
            .unwrap();
            assert_eq!(read("cpu.cfs_period_us"), period_us.to_string());
            assert_eq!(read("cpu.cfs_quota_us"), quota_us.to_string());
        }
        b.apply(
            7,
            &Applied {
                cpus: second,
                weight: 2,
                bandwidth: None,
            },
        )
        .unwrap();
        assert_eq!(read("cpu.cfs_quota_us"), "-1");
    }
    // Removing the cell while the process runs releases it: it leaves
    // allot's cgroups and runs on every CPU again.
    b.remove(7).unwrap();
    assert!(eventually(Duration::from_secs(2), || thread_masks(pid)
        .iter()
        .all(|(_, m)| *m == all.to_string())));
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(!cg.contains(&name), "still in allot's cgroups: {cg}");
    b.cleanup().unwrap();
    drop(p);
    for d in &dirs {
        assert!(!d.exists(), "{} left behind", d.display());
    }
}
