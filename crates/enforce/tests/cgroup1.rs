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
    let (cpuset, mounts) = cpuset_fixture(dir.path());
    let mut b = Cgroup1::new(Arc::new(cpuset), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    b.create(1).unwrap();
    let leaf = dir.path().join("cpuset/allot/cell-1");
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.mems")).unwrap(),
        "0"
    );
    b.apply(1, &on_cpus(CpuSet::parse_list("1,3").unwrap()))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(leaf.join("cpuset.cpus")).unwrap(),
        "1,3"
    );
    b.remove(1).unwrap();
    b.cleanup().unwrap();
    assert!(!dir.path().join("cpuset/allot").exists());
}

/// A fixture of the v1 hierarchies named in `hierarchies` (always with
/// `cpuset`) under `dir`, one directory each, and their mounts; `cpuacct`
/// is co-mounted with `cpu`, as on most machines.
fn fixture_v1(dir: &std::path::Path, hierarchies: &[&str]) -> (FixtureFs, V1Mounts) {
    let fs = FixtureFs::new(FixtureLayout::V1All);
    for h in hierarchies {
        fs.populate(&dir.join(h)).unwrap();
    }
    std::fs::write(dir.join("cpuset/cpuset.mems"), "0\n").unwrap();
    let has = |h: &str| hierarchies.contains(&h).then(|| dir.join(h));
    let mounts = V1Mounts {
        cpuset: dir.join("cpuset"),
        cpu: has("cpu"),
        cpuacct: has("cpu"),
        freezer: has("freezer"),
        blkio: has("blkio"),
        // The broker runs in the memory group `/base` (as on a machine
        // whose memory hierarchy other software uses).
        memory: has("memory").map(|m| {
            fs.populate(&m.join("base")).unwrap();
            (m, "/base".to_string())
        }),
    };
    (fs, mounts)
}

#[test]
fn fixture_memory_groups_nest_below_the_brokers_and_take_only_its_processes() {
    use allot_spec::MemoryUse;
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu", "memory"]);
    // Two processes: 100 runs in the broker's memory group, 200 in one of
    // its own (a Slurm step's, say).
    let proc = dir.path().join("proc");
    for (pid, group) in [(100, "/base"), (200, "/base/job-7")] {
        std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
        std::fs::write(
            proc.join(format!("{pid}/cgroup")),
            format!("5:memory:{group}\n4:cpuset:/\n0::/\n"),
        )
        .unwrap();
    }
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4))
        .unwrap()
        .with_proc_root(proc);
    let groups = dir.path().join("memory/base/allot");
    assert!(
        groups.is_dir(),
        "allot's memory groups nest below the broker's"
    );
    assert!(
        !dir.path().join("memory/allot").exists(),
        "never at the top"
    );
    b.create(1).unwrap();
    let cell = groups.join("cell-1");
    let m = allot_spec::Memory {
        min: 1 << 30,
        max: 2 << 30,
    };
    assert!(b.set_memory(1, &m).unwrap());
    let read = |f: &str| std::fs::read_to_string(cell.join(f)).unwrap();
    assert_eq!(read("memory.limit_in_bytes"), "2147483648");
    assert_eq!(read("memory.soft_limit_in_bytes"), "1073741824");
    b.attach(1, 100).unwrap();
    b.attach(1, 200).unwrap();
    let procs = read("cgroup.procs");
    assert!(procs.split_whitespace().any(|p| p == "100"), "{procs}");
    assert!(
        !procs.split_whitespace().any(|p| p == "200"),
        "a process in a memory group of its own stays there: {procs}"
    );
    let cpuset =
        std::fs::read_to_string(dir.path().join("cpuset/allot/cell-1/cgroup.procs")).unwrap();
    assert!(cpuset.split_whitespace().any(|p| p == "200"), "{cpuset}");
    std::fs::write(cell.join("memory.usage_in_bytes"), "4096\n").unwrap();
    assert_eq!(
        b.memory_use(1),
        Some(MemoryUse {
            current: 4096,
            limit: 2 << 30,
            at_limit: 0,
            oom_kills: 0,
            pressure: None
        })
    );
    assert!(b.memory_capacity().is_some_and(|c| c > 0));
    // Leftovers go back to the broker's group, not to the top.
    b.remove(1).unwrap();
    let base = std::fs::read_to_string(dir.path().join("memory/base/cgroup.procs")).unwrap();
    assert!(base.split_whitespace().any(|p| p == "100"), "{base}");
    b.cleanup().unwrap();
    assert!(!groups.exists());
    assert!(
        dir.path().join("memory/base").is_dir(),
        "the broker's own group stays"
    );
}

/// The broker does not move a process `/proc/PID/cgroup` shows in every
/// one of the cell's groups already (forked inside by a launcher that
/// joined it), nor one that has ended; one in a group elsewhere is moved.
#[test]
fn fixture_a_process_inside_or_ended_is_not_moved_one_elsewhere_is() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu", "freezer"]);
    let proc = dir.path().join("proc");
    let inside = "3:freezer:/allot/cell-2\n2:cpu,cpuacct:/allot/cell-2\n1:cpuset:/allot/cell-2\n";
    let half = "3:freezer:/\n2:cpu,cpuacct:/allot/cell-2\n1:cpuset:/allot/cell-2\n";
    let root = "3:freezer:/\n2:cpu,cpuacct:/\n1:cpuset:/\n";
    for (pid, groups, state) in [
        (91, inside, 'R'),
        (92, root, 'Z'),
        (93, half, 'S'),
        (94, root, 'S'),
    ] {
        std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
        std::fs::write(proc.join(format!("{pid}/cgroup")), groups).unwrap();
        std::fs::write(
            proc.join(format!("{pid}/stat")),
            format!("{pid} (a (prog)) {state} 1 1 1 0"),
        )
        .unwrap();
    }
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4))
        .unwrap()
        .with_proc_root(proc);
    b.create(2).unwrap();
    for pid in [91, 92, 93, 94] {
        b.attach(2, pid).unwrap();
    }
    for h in ["cpuset", "cpu", "freezer"] {
        let procs =
            std::fs::read_to_string(dir.path().join(format!("{h}/allot/cell-2/cgroup.procs")))
                .unwrap();
        let moved: Vec<&str> = procs.split_whitespace().collect();
        assert_eq!(
            moved,
            ["93", "94"],
            "{h}: only the processes not wholly inside"
        );
    }
    b.remove(2).unwrap();
    b.cleanup().unwrap();
}

#[test]
fn fixture_gate_freezes_and_thaws_the_cell_and_remove_thaws_it() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu", "freezer", "blkio"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    b.create(3).unwrap();
    let state = dir.path().join("freezer/allot/cell-3/freezer.state");
    let mut gate = b
        .gate(3)
        .unwrap()
        .expect("a freezer hierarchy gives a gate");
    // The empty hold directory keeps the kernel's freezer key on.
    let hold = dir.path().join("freezer/allot/hold/freezer.state");
    assert_eq!(std::fs::read_to_string(&hold).unwrap(), "FROZEN");
    gate.close().unwrap();
    assert_eq!(std::fs::read_to_string(&state).unwrap(), "FROZEN");
    assert_eq!(gate.stopped(), Some(true));
    std::fs::write(&state, "FREEZING\n").unwrap();
    assert_eq!(gate.stopped(), Some(false), "a task has not stopped yet");
    gate.open().unwrap();
    assert_eq!(std::fs::read_to_string(&state).unwrap(), "THAWED");
    std::fs::write(dir.path().join("cpu/allot/cell-3/cpuacct.usage"), "1234\n").unwrap();
    assert_eq!(gate.usage_ns(), Some(1234));
    // A broker that dies leaves the cell frozen: adopting it (after a
    // restart) leaves it so, for the broker to decide; removing it thaws.
    gate.close().unwrap();
    b.adopt(3, &[]).unwrap();
    assert_eq!(std::fs::read_to_string(&state).unwrap(), "FROZEN");
    gate.close().unwrap();
    b.remove(3).unwrap();
    assert!(!state.exists(), "the freezer directory goes with the cell");
    b.cleanup().unwrap();
    assert!(!dir.path().join("freezer/allot").exists());

    // Without a freezer hierarchy there is no gate.
    let mounts = V1Mounts {
        freezer: None,
        ..mounts
    };
    let mut b = Cgroup1::new(
        Arc::new(FixtureFs::new(FixtureLayout::V1All)),
        &mounts,
        "allot",
        CpuSet::first_n(4),
    )
    .unwrap();
    b.create(4).unwrap();
    assert!(b.gate(4).unwrap().is_none());
    b.remove(4).unwrap();
    b.cleanup().unwrap();
}

#[test]
fn live_cells_confine_every_thread_and_follow_grant_changes() {
    let Some((mounts, all)) = live_v1(2) else {
        return;
    };
    let name = unique("v1");
    let dirs = v1_dirs(&mounts, &name);
    let _guard = CgroupDirs(dirs.clone());
    let p = threaded(2, 2, 400);
    let pid = p.pid();

    let mut b = Cgroup1::new(Arc::new(KernelFs), &mounts, &name, all).unwrap();
    b.create(7).unwrap();
    let first = all.take_first(1);
    b.apply(7, &on_cpus(first)).unwrap();
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
            weight: 200,
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
                    weight: 200,
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
                weight: 200,
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

#[test]
fn live_gate_freezes_every_thread_and_thaws_them() {
    let mounts = allot_enforce::detect::Mounts::read().v1();
    if !allot_testkit::prerequisite(
        v1_writable() && mounts.as_ref().is_some_and(|m| m.freezer.is_some()),
        "writable cgroup v1 cpuset and freezer hierarchies (root)",
    ) {
        return;
    }
    let mounts = mounts.expect("checked");
    let name = unique("v1gate");
    let _guard = CgroupDirs(v1_dirs(&mounts, &name));
    // Two spinning threads: a gang gate stops both.
    let mut spin = allot_testkit::Proc(
        std::process::Command::new("python3")
            .args([
                "-c",
                "import threading\n\
                 def s():\n    while True: pass\n\
                 threading.Thread(target=s, daemon=True).start()\ns()\n",
            ])
            .spawn()
            .unwrap(),
    );
    let pid = spin.pid();
    let all = allot_topo::allowed_cpus().unwrap();
    let mut b = Cgroup1::new(Arc::new(KernelFs), &mounts, &name, all).unwrap();
    b.create(9).unwrap();
    b.apply(9, &on_cpus(all)).unwrap();
    b.attach(9, pid).unwrap();
    let mut gate = b
        .gate(9)
        .unwrap()
        .expect("a freezer hierarchy gives a gate");
    let state = mounts
        .freezer
        .as_ref()
        .unwrap()
        .join(&name)
        .join("cell-9/freezer.state");

    gate.close().unwrap();
    assert!(
        eventually(Duration::from_secs(2), || gate.stopped() == Some(true)),
        "the gate reports the cell frozen"
    );
    assert_eq!(
        std::fs::read_to_string(&state).unwrap().trim(),
        "FROZEN",
        "as the freezer does"
    );
    let t0 = cpu_time(pid);
    let u0 = gate.usage_ns().expect("cpuacct is mounted here");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cpu_time(pid), t0, "no thread of a frozen cell runs");
    assert_eq!(
        gate.usage_ns(),
        Some(u0),
        "and the cell's usage stands still"
    );

    gate.open().unwrap();
    assert_eq!(gate.stopped(), Some(false), "thawed");
    assert!(
        eventually(Duration::from_secs(2), || cpu_time(pid) > t0 + 50_000_000),
        "an open gate lets it run again"
    );
    // Removing a frozen cell thaws it first, so its processes never stay
    // stopped outside allot.
    // (The kernel may refuse the directory's removal for a moment while
    // the thawed tasks leave it: the broker retries, and so does this.)
    gate.close().unwrap();
    let mut removed = b.remove(9);
    let t = std::time::Instant::now();
    while removed.as_ref().is_err_and(|e| e.is_busy()) && t.elapsed() < Duration::from_secs(2) {
        std::thread::sleep(Duration::from_millis(20));
        removed = b.remove(9);
    }
    removed.unwrap();
    let t1 = cpu_time(pid);
    assert!(
        eventually(Duration::from_secs(2), || cpu_time(pid) > t1 + 50_000_000),
        "a removed cell's processes run"
    );
    spin.kill9();
    b.cleanup().unwrap();
}

#[test]
fn fixture_io_weights_go_to_the_cells_blkio_group() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "blkio"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    b.create(2).unwrap();
    b.attach(2, 4242).unwrap();
    let group = dir.path().join("blkio/allot/cell-2");
    assert_eq!(
        std::fs::read_to_string(group.join("cgroup.procs"))
            .unwrap()
            .trim(),
        "4242",
        "a process joins the cell's blkio group too"
    );
    let file = group.join("blkio.bfq.weight_device");
    let w = |pairs: &[(&str, u32)]| -> allot_enforce::IoWeights {
        pairs.iter().map(|(d, w)| (d.to_string(), *w)).collect()
    };
    assert!(b.set_io_weights(2, &w(&[("8:0", 800)])).unwrap());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "8:0 800");
    // (The fixture keeps the last line written; the kernel keeps one per
    // device.) A device no longer listed goes back to the default.
    assert!(b.set_io_weights(2, &w(&[])).unwrap());
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "8:0 default");
    std::fs::write(group.join("cgroup.procs"), "").unwrap();
    b.remove(2).unwrap();
    b.cleanup().unwrap();
    assert!(!dir.path().join("blkio/allot").exists());
}

#[test]
fn fixture_the_cells_weigh_together_in_allots_cpu_directory() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    let shares = |p: &str| {
        std::fs::read_to_string(dir.path().join("cpu/allot").join(p))
            .unwrap()
            .trim()
            .to_string()
    };
    // Eight threads' worth: 1024 shares each.
    assert!(b.set_together_weight(800).unwrap());
    assert_eq!(shares("cpu.shares"), "8192");
    // A cell's weight in the same unit; the kernel's range bounds both.
    b.create(1).unwrap();
    b.apply(
        1,
        &Applied {
            cpus: CpuSet::first_n(4),
            weight: 400,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(shares("cell-1/cpu.shares"), "4096");
    assert_eq!(b.max_weight(), 25_600, "262144 shares");
    assert!(b.set_together_weight(1_000_000).unwrap());
    assert_eq!(shares("cpu.shares"), "262144");
    assert!(b.set_together_weight(0).unwrap());
    assert_eq!(shares("cpu.shares"), "2");
    b.remove(1).unwrap();
    b.cleanup().unwrap();
    // Without the cpu hierarchy there is nothing to weigh.
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    assert!(!b.set_together_weight(800).unwrap());
}

/// A cell's I/O weight on a loop device scheduled by BFQ, in the kernel's
/// blkio hierarchy; a device whose scheduler ignores weights refuses it.
#[test]
fn live_io_weights_reach_the_kernel() {
    let Some((mounts, all)) = live_v1(1) else {
        return;
    };
    if !allot_testkit::prerequisite(mounts.blkio.is_some(), "a cgroup v1 blkio hierarchy")
        || !allot_testkit::prerequisite(
            allot_testkit::loopdev::losetup_available(),
            "losetup and loop devices",
        )
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dev = allot_testkit::loopdev::LoopDevice::attach(tmp.path().join("disk"), 8 << 20, 0)
        .expect("a loop device");
    let name = unique("v1io");
    let _guard = CgroupDirs(v1_dirs(&mounts, &name));
    let mut b = Cgroup1::new(Arc::new(KernelFs), &mounts, &name, all).unwrap();
    b.create(5).unwrap();
    let weights: allot_enforce::IoWeights = [(dev.majmin(), 700)].into_iter().collect();
    if dev.set_scheduler("mq-deadline").is_ok() {
        assert!(
            b.set_io_weights(5, &weights).is_err(),
            "mq-deadline takes no weight"
        );
    }
    if !allot_testkit::prerequisite(dev.set_scheduler("bfq").is_ok(), "BFQ") {
        return;
    }
    assert!(b.set_io_weights(5, &weights).unwrap());
    let file = mounts
        .blkio
        .as_ref()
        .unwrap()
        .join(&name)
        .join("cell-5/blkio.bfq.weight_device");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains(&format!("{} 700", dev.majmin())), "{text}");
    assert!(b.set_io_weights(5, &Default::default()).unwrap());
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(!text.contains(&dev.majmin()), "{text}");
    b.remove(5).unwrap();
    b.cleanup().unwrap();
}

/// A fixture cpuset hierarchy with one memory node.
fn cpuset_fixture(dir: &std::path::Path) -> (FixtureFs, V1Mounts) {
    let cpuset = FixtureFs::new(FixtureLayout::V1Cpuset);
    cpuset.populate(&dir.join("cpuset")).unwrap();
    std::fs::write(dir.join("cpuset/cpuset.mems"), "0\n").unwrap();
    let mounts = V1Mounts {
        cpuset: dir.join("cpuset"),
        cpu: None,
        cpuacct: None,
        freezer: None,
        blkio: None,
        memory: None,
    };
    (cpuset, mounts)
}

#[test]
fn fixture_a_second_backend_is_refused_the_directory_the_first_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = cpuset_fixture(dir.path());
    let fs = Arc::new(fs);
    let mut first = Cgroup1::new(fs.clone(), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    first.create(1).unwrap();
    first
        .apply(1, &on_cpus(CpuSet::parse_list("1").unwrap()))
        .unwrap();
    // A second broker on the same name is refused before it writes
    // anything: the first one's directory keeps its CPUs and its cell.
    let e = Cgroup1::new(fs.clone(), &mounts, "allot", CpuSet::first_n(2)).unwrap_err();
    assert!(
        e.to_string().contains("another broker manages") && e.to_string().contains("--cgroup-name"),
        "{e}"
    );
    let allot = dir.path().join("cpuset/allot");
    assert_eq!(
        std::fs::read_to_string(allot.join("cpuset.cpus")).unwrap(),
        "0-3"
    );
    assert!(allot.join("cell-1").is_dir());
    // Another name is its own; the first's name is free once it is gone.
    Cgroup1::new(fs.clone(), &mounts, "allot-b", CpuSet::first_n(2)).unwrap();
    first.remove(1).unwrap();
    drop(first);
    Cgroup1::new(fs, &mounts, "allot", CpuSet::first_n(2)).unwrap();
}

#[test]
fn fixture_a_removed_directory_is_made_again_for_the_next_cell() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = cpuset_fixture(dir.path());
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    let allot = dir.path().join("cpuset/allot");
    std::fs::remove_dir_all(&allot).unwrap();
    b.create(2).unwrap();
    assert_eq!(
        std::fs::read_to_string(allot.join("cpuset.cpus")).unwrap(),
        "0-3"
    );
    assert_eq!(
        std::fs::read_to_string(allot.join("cpuset.mems")).unwrap(),
        "0"
    );
    assert_eq!(
        std::fs::read_to_string(allot.join("cgroup.clone_children")).unwrap(),
        "1"
    );
    b.apply(2, &on_cpus(CpuSet::parse_list("2").unwrap()))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(allot.join("cell-2/cpuset.cpus")).unwrap(),
        "2"
    );
}

/// A process another cgroup confines to fewer CPUs than allot manages
/// stays there for a user who could not move it out themselves: the
/// requester may move only what it could (root, a cgroup whose
/// cgroup.procs it may write, or a process at the root or in allot's own
/// tree).
#[test]
fn fixture_a_process_confined_elsewhere_is_not_taken_out_for_a_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = cpuset_fixture(dir.path());
    let jail = dir.path().join("cpuset/jail");
    fs.populate(&jail).unwrap();
    std::fs::write(jail.join("cpuset.effective_cpus"), "1\n").unwrap();
    let wide = dir.path().join("cpuset/wide");
    fs.populate(&wide).unwrap();
    std::fs::write(wide.join("cpuset.effective_cpus"), "0-3\n").unwrap();
    let proc = dir.path().join("proc");
    for (pid, group) in [
        (10, "/jail"),
        (11, "/wide"),
        (12, "/"),
        (13, "/allot/cell-1"),
    ] {
        std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
        std::fs::write(
            proc.join(format!("{pid}/cgroup")),
            format!("4:memory:/x\n3:cpuset:{group}\n"),
        )
        .unwrap();
    }
    let b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4))
        .unwrap()
        .with_proc_root(proc);
    let why = b.confined_elsewhere(10, 1000).expect("refused");
    assert!(why.contains("CPUs 1") && why.contains("/jail"), "{why}");
    assert_eq!(b.confined_elsewhere(10, 0), None, "root may");
    assert_eq!(b.confined_elsewhere(11, 1000), None, "not narrower");
    assert_eq!(b.confined_elsewhere(12, 1000), None, "at the root");
    assert_eq!(b.confined_elsewhere(13, 1000), None, "in allot's tree");
    // A cgroup the user may write is one they could leave themselves.
    // (Giving the file to uid 1000 needs root.)
    let procs = jail.join("cgroup.procs");
    if std::os::unix::fs::chown(&procs, Some(1000), None).is_ok() {
        std::fs::set_permissions(&procs, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(b.confined_elsewhere(10, 1000), None);
    }
}

/// The next cell's directories are made ahead in every hierarchy, ready
/// for `create`; made ahead for an id no cell took, they are removed when
/// the next id is made ahead, and at cleanup. A directory that existed
/// before is not the backend's to make ahead.
#[test]
fn fixture_groups_made_ahead_serve_the_next_cell_and_are_removed_unused() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu", "freezer", "blkio", "memory"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    let cells = |id: u64| -> Vec<std::path::PathBuf> {
        [
            "cpuset/allot",
            "cpu/allot",
            "freezer/allot",
            "blkio/allot",
            "memory/base/allot",
        ]
        .iter()
        .map(|h| dir.path().join(h).join(format!("cell-{id}")))
        .collect()
    };
    assert!(b.make_ahead(1).unwrap());
    for d in cells(1) {
        assert!(d.is_dir(), "{}", d.display());
    }
    assert_eq!(
        std::fs::read_to_string(dir.path().join("cpuset/allot/cell-1/cpuset.mems")).unwrap(),
        "0"
    );
    // Asked again for the same id: nothing changes.
    assert!(b.make_ahead(1).unwrap());
    // Id 1 went to no cell (a queued request that left, say): its
    // directories go when id 2 is made ahead.
    assert!(b.make_ahead(2).unwrap());
    for d in cells(1) {
        assert!(!d.exists(), "{}", d.display());
    }
    b.create(2).unwrap();
    b.apply(2, &on_cpus(CpuSet::parse_list("1").unwrap()))
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("cpuset/allot/cell-2/cpuset.cpus")).unwrap(),
        "1"
    );
    // A cell's directories are its own once taken: making the next id
    // ahead leaves them.
    assert!(b.make_ahead(3).unwrap());
    for d in cells(2).into_iter().chain(cells(3)) {
        assert!(d.is_dir(), "{}", d.display());
    }
    // Someone else's directory where id 4 would go: not made ahead, and
    // left alone.
    std::fs::create_dir(dir.path().join("cpu/allot/cell-4")).unwrap();
    assert!(!b.make_ahead(4).unwrap());
    assert!(!dir.path().join("cpuset/allot/cell-4").exists());
    assert!(!dir.path().join("cpuset/allot/cell-3").exists());
    assert!(dir.path().join("cpu/allot/cell-4").is_dir());
    b.remove(2).unwrap();
    // Made ahead and never taken: cleanup removes them with the rest.
    assert!(b.make_ahead(5).unwrap());
    std::fs::remove_dir(dir.path().join("cpu/allot/cell-4")).unwrap();
    b.cleanup().unwrap();
    assert!(!dir.path().join("cpuset/allot").exists());
    assert!(!dir.path().join("memory/base/allot").exists());
}

/// A cell's join files are its hierarchies' `tasks` files: those of a
/// cell made ahead were opened with its directories, others are opened
/// when asked for.
#[test]
fn fixture_join_files_are_the_cells_tasks_files_made_ahead_or_not() {
    use std::os::fd::AsFd;
    let dir = tempfile::tempdir().unwrap();
    let (fs, mounts) = fixture_v1(dir.path(), &["cpuset", "cpu", "freezer"]);
    let mut b = Cgroup1::new(Arc::new(fs), &mounts, "allot", CpuSet::first_n(4)).unwrap();
    let same = |f: &std::fs::File, p: std::path::PathBuf| {
        let a = rustix::fs::fstat(f.as_fd()).unwrap();
        let b = rustix::fs::stat(&p).unwrap();
        (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    };
    assert!(b.make_ahead(3).unwrap());
    b.create(3).unwrap();
    b.create(4).unwrap();
    for cell in [3, 4] {
        let files = b.join_files(cell, std::process::id()).unwrap();
        assert_eq!(files.len(), 3, "cell {cell}: cpuset, cpu and freezer");
        for h in ["cpuset", "cpu", "freezer"] {
            let tasks = dir.path().join(format!("{h}/allot/cell-{cell}/tasks"));
            assert!(
                files.iter().any(|f| same(f, tasks.clone())),
                "cell {cell}: {}",
                tasks.display()
            );
        }
    }
    // Taken once: asked again, they are opened afresh.
    assert_eq!(b.join_files(3, std::process::id()).unwrap().len(), 3);
    b.cleanup().unwrap();
}

/// On the kernel: a cell made ahead is a working cell (its CPUs reach a
/// process that joins it), and nothing is left after cleanup.
#[test]
fn live_a_cell_made_ahead_confines_its_process_and_cleanup_leaves_nothing() {
    let Some((mounts, all)) = live_v1(2) else {
        return;
    };
    let name = unique("v1-ahead");
    let dirs = v1_dirs(&mounts, &name);
    let _guard = CgroupDirs(dirs.clone());
    let p = threaded(1, 0, 400);
    let pid = p.pid();
    let mut b = Cgroup1::new(Arc::new(KernelFs), &mounts, &name, all).unwrap();
    assert!(b.make_ahead(3).unwrap());
    assert!(mounts.cpuset.join(&name).join("cell-3").is_dir());
    b.create(3).unwrap();
    let first = all.take_first(1);
    b.apply(3, &on_cpus(first)).unwrap();
    b.attach(3, pid).unwrap();
    assert_eq!(b.pids(3), vec![pid]);
    for (tid, mask) in thread_masks(pid) {
        assert_eq!(mask, first.to_string(), "thread {tid}");
    }
    assert!(b.make_ahead(4).unwrap());
    drop(p);
    assert!(eventually(Duration::from_secs(5), || b.pids(3).is_empty()));
    b.remove(3).unwrap();
    b.cleanup().unwrap();
    for d in &dirs {
        assert!(!d.exists(), "{} is left", d.display());
    }
}
