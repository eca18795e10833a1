//! The cgroup v2 backend against a directory fixture, and the fixture
//! against the kernel's unified hierarchy where this machine has one.

mod common;

use allot_enforce::cgroupfs::{CgroupFs, FixtureFs, FixtureLayout, KernelFs};
use allot_enforce::{Applied, Cgroup2, Enforcer};
use allot_topo::CpuSet;
use std::path::Path;
use std::sync::Arc;

#[test]
fn the_cells_weigh_together_only_in_allots_own_directory() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let weight = || {
        fs.read(&root.join("cpu.weight"))
            .unwrap()
            .trim()
            .to_string()
    };
    // A delegated subtree (the default): its weight is its owner's.
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    assert!(!b.set_together_weight(800).unwrap());
    assert_eq!(weight(), "100", "left as the kernel made it");
    // allot's own directory: written, within the kernel's range.
    let mut b = b.weighs_root(true);
    assert!(b.set_together_weight(800).unwrap());
    assert_eq!(weight(), "800");
    assert_eq!(b.max_weight(), 10_000);
    assert!(b.set_together_weight(25_600).unwrap());
    assert_eq!(weight(), "10000");
    b.cleanup().unwrap();
}

#[test]
fn manages_cells_in_a_fixture_tree() {
    let (dir, fs) = common::v2_fixture();
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
            weight: 200,
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
            weight: 200,
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
            weight: 200,
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
            weight: 200,
            bandwidth: None,
        },
    )
    .unwrap();
    assert_eq!(fs.read(&root.join("cell-3/cpu.max")).unwrap(), "max");
    std::fs::write(root.join("cell-3/cpu.stat"), "usage_usec 1500\n").unwrap();
    assert_eq!(b.usage_ns(3), Some(1_500_000));
    assert_eq!(
        b.cpu_pressure_us(3),
        Some(0),
        "a new cell has waited for nothing"
    );
    std::fs::write(
        root.join("cell-3/cpu.pressure"),
        "some avg10=1.50 avg60=0.20 avg300=0.05 total=2500\n\
         full avg10=0.00 avg60=0.00 avg300=0.00 total=700\n",
    )
    .unwrap();
    assert_eq!(b.cpu_pressure_us(3), Some(2500), "the `some` line's total");
    assert_eq!(b.cpu_pressure_us(9), None, "no such cell");
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
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    {
        let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
        b.create(9).unwrap();
        b.apply(9, &common::on_cpus(CpuSet::parse_list("1-2").unwrap()))
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
    // Where the kernel keeps pressure stall information, a new group's
    // `cpu.pressure` has the `some ... total=` line the backend reads.
    if let Ok(p) = fs.read(&d.join("cpu.pressure")) {
        let some = p
            .lines()
            .find(|l| l.starts_with("some "))
            .unwrap_or_default();
        assert!(
            some.split_whitespace().any(|f| f.starts_with("total=")),
            "{p}"
        );
    }
    // An empty CPU list is a value of its own ("its parent's"), and
    // writing one reaches the kernel (a write of no bytes would not).
    let first = fs
        .read(&d.join("cpuset.cpus.effective"))
        .ok()
        .and_then(|t| CpuSet::parse_list(t.trim()).ok())
        .and_then(|c| c.first());
    if let Some(cpu) = first {
        fs.write(&d.join("cpuset.cpus"), &cpu.to_string()).unwrap();
        assert_eq!(
            fs.read(&d.join("cpuset.cpus")).unwrap().trim(),
            cpu.to_string()
        );
        fs.write(&d.join("cpuset.cpus"), "").unwrap();
        assert_eq!(fs.read(&d.join("cpuset.cpus")).unwrap().trim(), "");
    }
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
    let (dir, fs) = common::v2_fixture();
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

#[test]
fn fixture_gate_writes_cgroup_freeze_and_remove_thaws() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(2)).unwrap();
    b.create(5).unwrap();
    let freeze = root.join("cell-5/cgroup.freeze");
    let mut gate = b.gate(5).unwrap().expect("cgroup.freeze gives a gate");
    gate.close().unwrap();
    assert_eq!(fs.read(&freeze).unwrap(), "1");
    gate.open().unwrap();
    assert_eq!(fs.read(&freeze).unwrap(), "0");
    std::fs::write(
        root.join("cell-5/cpu.stat"),
        "usage_usec 250\nuser_usec 1\n",
    )
    .unwrap();
    assert_eq!(gate.usage_ns(), Some(250_000));
    let events = root.join("cell-5/cgroup.events");
    std::fs::write(&events, "populated 1\nfrozen 0\n").unwrap();
    assert_eq!(gate.stopped(), Some(false), "still freezing");
    std::fs::write(&events, "populated 1\nfrozen 1\n").unwrap();
    assert_eq!(gate.stopped(), Some(true));
    gate.close().unwrap();
    b.adopt(5, &[]).unwrap();
    assert_eq!(
        fs.read(&freeze).unwrap(),
        "1",
        "adopting leaves a paused cell frozen: the broker decides"
    );
    gate.close().unwrap();
    b.remove(5).unwrap();
    b.cleanup().unwrap();
}

#[test]
fn live_v2_gate_stops_and_resumes_a_spinning_process() {
    // The v2 freezer (`cgroup.freeze`) exists in every non-root cgroup of
    // a unified hierarchy, with or without controllers, so it is tested
    // live wherever one is mounted and writable.
    let mounts = allot_enforce::detect::Mounts::read();
    if !allot_testkit::prerequisite(mounts.cgroup2.is_some(), "a cgroup2 mount")
        || !allot_testkit::prerequisite(allot_testkit::is_root(), "root, to write cgroup2")
    {
        return;
    }
    let unified = mounts.cgroup2.expect("checked");
    let dir = unified.join(common::unique("gate"));
    std::fs::create_dir(&dir).unwrap();
    let _guard = common::CgroupDirs(vec![dir.clone()]);
    if !allot_testkit::prerequisite(
        dir.join("cgroup.freeze").exists(),
        "the cgroup v2 freezer (kernel 5.2 or later)",
    ) {
        return;
    }
    let mut spin = allot_testkit::Proc(
        std::process::Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    let pid = spin.pid();
    std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
    let mut gate = allot_enforce::gate::CgroupGate::v2(Arc::new(KernelFs), &dir).unwrap();
    use allot_enforce::Gate;

    gate.close().unwrap();
    assert!(
        common::eventually(std::time::Duration::from_secs(2), || gate.stopped()
            == Some(true)),
        "the gate reports the cgroup frozen"
    );
    let t0 = common::cpu_time(pid);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert_eq!(
        common::cpu_time(pid),
        t0,
        "a frozen process gets no CPU time"
    );

    gate.open().unwrap();
    assert_eq!(gate.stopped(), Some(false), "thawed");
    assert!(
        common::eventually(std::time::Duration::from_secs(2), || common::cpu_time(pid)
            > t0 + 5),
        "an open gate lets it run again"
    );
    assert!(gate.usage_ns().is_some_and(|u| u > 0), "cpu.stat is read");
    spin.kill9();
}

#[test]
fn io_weights_go_to_the_cells_io_weight_file() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    assert!(
        fs.read(&root.join("cgroup.subtree_control"))
            .unwrap()
            .contains("+io"),
        "the io controller is enabled where it is available"
    );
    b.create(4).unwrap();
    let weights: allot_enforce::IoWeights = [("259:0".to_string(), 300)].into_iter().collect();
    assert!(b.set_io_weights(4, &weights).unwrap());
    assert_eq!(
        fs.read(&root.join("cell-4/io.weight")).unwrap(),
        "259:0 300"
    );
    assert!(b.set_io_weights(4, &Default::default()).unwrap());
    assert_eq!(
        fs.read(&root.join("cell-4/io.weight")).unwrap(),
        "259:0 default"
    );
    b.remove(4).unwrap();
    b.cleanup().unwrap();
}

/// A launcher gets the cell's directory to start its program inside
/// (`clone3(CLONE_INTO_CGROUP)`), and the broker's later move of a process
/// already listed in the cell is skipped.
#[test]
fn the_join_file_is_the_cells_directory_and_a_process_inside_is_not_moved_again() {
    use std::os::fd::AsFd;
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    b.create(5).unwrap();
    let files = b.join_files(5, std::process::id()).unwrap();
    assert_eq!(files.len(), 1);
    let st = rustix::fs::fstat(files[0].as_fd()).unwrap();
    let by_path = rustix::fs::stat(root.join("cell-5")).unwrap();
    assert_eq!((st.st_dev, st.st_ino), (by_path.st_dev, by_path.st_ino));

    b.attach(5, 77).unwrap();
    assert_eq!(b.pids(5), vec![77]);
    // Listed already (as a process created inside would be): no second
    // write, which the fixture would record as a second line.
    b.attach(5, 77).unwrap();
    assert_eq!(
        fs.read(&root.join("cell-5/cgroup.procs"))
            .unwrap()
            .lines()
            .count(),
        1
    );
}

/// Whether the broker moves a process it is told of: not when
/// `/proc/PID/cgroup` names the cell already (forked inside), nor when the
/// process has ended (a zombie is in no group; the move would only wait
/// for the kernel's lock); a process elsewhere is moved.
#[test]
fn a_process_inside_or_ended_is_not_moved_one_elsewhere_is() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let proc = dir.path().join("proc");
    for (pid, group, state) in [(81, "/allot/cell-6", 'S'), (82, "/", 'Z'), (83, "/", 'S')] {
        std::fs::create_dir_all(proc.join(pid.to_string())).unwrap();
        std::fs::write(proc.join(format!("{pid}/cgroup")), format!("0::{group}\n")).unwrap();
        std::fs::write(
            proc.join(format!("{pid}/stat")),
            format!("{pid} (a prog) {state} 1 1 1 0"),
        )
        .unwrap();
    }
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8))
        .unwrap()
        .with_proc_root(proc);
    b.create(6).unwrap();
    for pid in [81, 82, 83] {
        b.attach(6, pid).unwrap();
    }
    assert_eq!(b.pids(6), vec![83], "only the process elsewhere was moved");
    b.remove(6).unwrap();
    b.cleanup().unwrap();
}

#[test]
fn the_broker_leaves_the_top_of_its_delegated_subtree_on_the_kernel() {
    use allot_enforce::delegation::{Layout, own_cgroup, settle};
    let mounts = allot_enforce::detect::Mounts::read();
    if !allot_testkit::prerequisite(mounts.cgroup2.is_some(), "a cgroup2 mount")
        || !allot_testkit::prerequisite(allot_testkit::is_root(), "root, to write cgroup2")
    {
        return;
    }
    let unified = mounts.cgroup2.expect("checked");
    // A stand-in for the unit's cgroup, holding a process this test started.
    let name = common::unique("unit");
    let unit = unified.join(&name);
    let _guard = common::CgroupDirs(vec![unit.clone()]);
    std::fs::create_dir(&unit).unwrap();
    let broker = common::sleeper();
    KernelFs
        .write(&unit.join("cgroup.procs"), &broker.pid().to_string())
        .unwrap();
    let layout = Layout::Delegated {
        unit: unit.clone(),
        cells: unit.join("cells"),
        broker: Some(unit.join("broker")),
    };
    assert!(settle(&KernelFs, &layout, broker.pid()).unwrap());
    let seen = std::fs::read_to_string(format!("/proc/{}/cgroup", broker.pid())).unwrap();
    assert_eq!(
        own_cgroup(&seen).as_deref(),
        Some(format!("/{name}/broker").as_str()),
        "{seen}"
    );
    assert_eq!(
        KernelFs.read(&unit.join("cgroup.procs")).unwrap().trim(),
        "",
        "the unit's own cgroup holds no process any more"
    );
    // Where the hierarchy's root already enables cpuset for its children
    // (a pure v2 machine), the emptied unit may now enable it for cells.
    let root_enables = KernelFs
        .read(&unified.join("cgroup.subtree_control"))
        .unwrap_or_default();
    if root_enables.split_whitespace().any(|c| c == "cpuset") {
        KernelFs
            .write(&unit.join("cgroup.subtree_control"), "+cpuset")
            .unwrap();
    }
}

#[test]
fn fixture_memory_goes_to_the_cells_memory_files_and_reads_back() {
    use allot_spec::MemoryUse;
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(4)).unwrap();
    // The memory controller is enabled with cpuset and cpu where the
    // parent offers it (the fixture's does).
    for d in [dir.path(), root.as_path()] {
        let on = fs.read(&d.join("cgroup.subtree_control")).unwrap();
        assert!(on.contains("+memory") && on.contains("+cpuset"), "{on}");
    }
    b.create(2).unwrap();
    let cell = root.join("cell-2");
    let m = allot_spec::Memory {
        min: 1 << 30,
        max: 4 << 30,
    };
    assert!(b.set_memory(2, &m).unwrap());
    assert_eq!(fs.read(&cell.join("memory.min")).unwrap(), "1073741824");
    assert_eq!(fs.read(&cell.join("memory.max")).unwrap(), "4294967296");
    fs.write(&cell.join("memory.current"), "65536\n").unwrap();
    fs.write(
        &cell.join("memory.events"),
        "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n",
    )
    .unwrap();
    assert_eq!(
        b.memory_use(2),
        Some(MemoryUse {
            current: 65536,
            limit: 4 << 30,
            at_limit: 3,
            oom_kills: 1,
            pressure: Some(0.0),
        })
    );
    // No limit: "max" again, and no guarantee.
    assert!(b.set_memory(2, &allot_spec::Memory::default()).unwrap());
    assert_eq!(fs.read(&cell.join("memory.max")).unwrap(), "max");
    assert_eq!(fs.read(&cell.join("memory.min")).unwrap(), "0");
    assert_eq!(b.memory_use(2).unwrap().limit, 0);
    b.remove(2).unwrap();
    b.cleanup().unwrap();
}

/// A launcher's cgroup (Slurm's step `user` group, its tasks in
/// `task_T` below it): the cell's CPUs and weight go there too, from the
/// grant of the moment on; no process moves; its processes and those
/// below it count as the cell's; when the cell ends the group gets its
/// parent's CPUs back (an empty list) and stays the launcher's.
#[test]
fn a_launcher_group_follows_the_cell_and_stays_the_launchers() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    let mut task = dir.path().to_path_buf();
    for d in [
        "system.slice",
        "slurmstepd.scope",
        "job_42",
        "step_0",
        "user",
        "task_0",
    ] {
        task.push(d);
        fs.mkdir(&task).unwrap();
    }
    let user = task.parent().unwrap().to_path_buf();
    fs.write(&task.join("cgroup.procs"), "5151\n").unwrap();
    let grant = |cpus: &str| Applied {
        cpus: CpuSet::parse_list(cpus).unwrap(),
        weight: 200,
        bandwidth: None,
    };
    b.create(3).unwrap();
    b.apply(3, &grant("2-5")).unwrap();
    assert!(b.include_group(3, &user).unwrap());
    assert_eq!(fs.read(&user.join("cpuset.cpus")).unwrap(), "2-5");
    assert_eq!(fs.read(&user.join("cpu.weight")).unwrap(), "200");
    assert_eq!(
        b.pids(3),
        vec![5151],
        "the task below the group is the cell's"
    );
    b.apply(3, &grant("6-7")).unwrap();
    assert_eq!(fs.read(&user.join("cpuset.cpus")).unwrap(), "6-7");
    assert!(b.include_group(3, &user).unwrap(), "twice is once");
    assert_eq!(b.pids(3), vec![5151]);
    assert_eq!(
        fs.read(&task.join("cgroup.procs")).unwrap().trim(),
        "5151",
        "the task was not moved"
    );

    // What cannot be a launcher group, each refused with its reason.
    let nocpu = user.parent().unwrap().join("nocpu");
    fs.mkdir(&nocpu).unwrap();
    std::fs::remove_file(nocpu.join("cpuset.cpus")).unwrap();
    let other = tempfile::tempdir().unwrap();
    for (bad, says) in [
        (root.join("cell-3"), "allot's own cgroup"),
        (dir.path().to_path_buf(), "holds allot's own cgroup"),
        (Path::new("user").to_path_buf(), "not an absolute path"),
        (user.join(".."), "'.' or '..'"),
        (
            other.path().to_path_buf(),
            "not in allot's cgroup v2 hierarchy",
        ),
        (user.join("task_9"), "not a cgroup"),
        (nocpu, "cpuset controller is not enabled"),
    ] {
        let e = b.include_group(3, &bad).unwrap_err().to_string();
        assert!(e.contains(says), "{}: {e}", bad.display());
    }
    assert_eq!(
        fs.read(&user.join("cpuset.cpus")).unwrap(),
        "6-7",
        "a refusal changes nothing"
    );

    // Pausing (and time windows) reach the group: its tasks stop with the cell.
    let mut gate = b.gate(3).unwrap().expect("the fixture has a freezer");
    gate.close().unwrap();
    for d in [root.join("cell-3"), user.clone()] {
        assert_eq!(
            fs.read(&d.join("cgroup.freeze")).unwrap(),
            "1",
            "{}",
            d.display()
        );
    }
    gate.open().unwrap();
    assert_eq!(fs.read(&user.join("cgroup.freeze")).unwrap(), "0");
    gate.close().unwrap();

    b.remove(3).unwrap();
    assert_eq!(
        fs.read(&user.join("cgroup.freeze")).unwrap(),
        "0",
        "thawed when the cell ends"
    );
    assert_eq!(
        fs.read(&user.join("cpuset.cpus")).unwrap(),
        "",
        "the launcher's CPUs again (an empty list: its parent's)"
    );
    assert!(fs.exists(&user), "the group stays the launcher's");
    assert_eq!(fs.read(&task.join("cgroup.procs")).unwrap().trim(), "5151");
    b.cleanup().unwrap();
}

/// On a pure cgroup v2 machine (the hierarchy's root enables cpuset: the
/// 16-CPU machine's `scripts/bench-16cpu.sh --tests`): a process a
/// "launcher" keeps in a group of its own runs on the cell's CPUs once the
/// cell includes the group, without moving, and gets the launcher's CPUs
/// back when the cell ends. Elsewhere (a hybrid hierarchy, as on a v1
/// machine) cpuset is not there to write, and the fixture test above is
/// what runs.
#[test]
fn live_a_launcher_group_confines_a_process_that_stays_where_it_is() {
    let mounts = allot_enforce::detect::Mounts::read();
    if !allot_testkit::prerequisite(mounts.cgroup2.is_some(), "a cgroup2 mount")
        || !allot_testkit::prerequisite(allot_testkit::is_root(), "root, to write cgroup2")
    {
        return;
    }
    let unified = mounts.cgroup2.expect("checked");
    let enabled = KernelFs
        .read(&unified.join("cgroup.subtree_control"))
        .unwrap_or_default();
    let usable = KernelFs
        .read(&unified.join("cpuset.cpus.effective"))
        .ok()
        .and_then(|t| CpuSet::parse_list(t.trim()).ok());
    let (true, Some(usable)) = (enabled.split_whitespace().any(|c| c == "cpuset"), usable) else {
        eprintln!(
            "not a pure cgroup v2 machine (no cpuset at its root): the fixture test covers it"
        );
        return;
    };
    if usable.len() < 2 {
        eprintln!("one CPU: nothing to confine to");
        return;
    }
    let launcher = unified.join(common::unique("launcher"));
    let root = unified.join(common::unique("allot-groups"));
    let _guard = common::CgroupDirs(vec![launcher.clone(), root.clone()]);
    std::fs::create_dir(&launcher).unwrap();
    KernelFs
        .write(&launcher.join("cgroup.subtree_control"), "+cpuset")
        .unwrap();
    let _ = KernelFs.write(&launcher.join("cgroup.subtree_control"), "+cpu");
    let user = launcher.join("user");
    std::fs::create_dir(&user).unwrap();
    let mut task = common::sleeper();
    let pid = task.pid();
    KernelFs
        .write(&user.join("cgroup.procs"), &pid.to_string())
        .unwrap();
    // `sleep` has one thread: its mask is the process's.
    let allowed = || CpuSet::parse_list(&common::thread_masks(pid)[0].1).unwrap();
    assert_eq!(allowed(), usable);

    let mut b = Cgroup2::new(Arc::new(KernelFs), root.clone(), usable).unwrap();
    b.create(1).unwrap();
    let first = usable.take_first(1);
    b.apply(1, &common::on_cpus(first)).unwrap();
    assert!(b.include_group(1, &user).unwrap());
    assert!(
        common::eventually(std::time::Duration::from_secs(2), || allowed() == first),
        "the task runs on the cell's CPU {first}: {}",
        allowed()
    );
    let at = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    assert!(at.trim_end().ends_with("/user"), "not moved: {at}");
    assert!(b.pids(1).contains(&pid));

    b.remove(1).unwrap();
    assert!(
        common::eventually(std::time::Duration::from_secs(2), || allowed() == usable),
        "the launcher's CPUs again: {}",
        allowed()
    );
    task.kill9();
    b.cleanup().unwrap();
}

/// As on v1: a process another cgroup confines to fewer CPUs than allot
/// manages is not moved into a cell for a user who could not move it out
/// themselves; the paths are read against the hierarchy's mount.
#[test]
fn fixture_a_process_confined_elsewhere_is_not_taken_out_for_a_user() {
    let (dir, fs) = common::v2_fixture();
    let job = dir.path().join("slurm/job_7/step_0");
    std::fs::create_dir_all(dir.path().join("slurm/job_7")).unwrap();
    fs.populate(&dir.path().join("slurm")).unwrap();
    fs.populate(&dir.path().join("slurm/job_7")).unwrap();
    fs.populate(&job).unwrap();
    std::fs::write(job.join("cpuset.cpus.effective"), "2-3\n").unwrap();
    let proc = tempfile::tempdir().unwrap();
    for (pid, group) in [
        (20, "/slurm/job_7/step_0"),
        (21, "/allot/cell-4"),
        (22, "/"),
    ] {
        std::fs::create_dir_all(proc.path().join(pid.to_string())).unwrap();
        std::fs::write(
            proc.path().join(format!("{pid}/cgroup")),
            format!("0::{group}\n"),
        )
        .unwrap();
    }
    let b = Cgroup2::new(fs.clone(), dir.path().join("allot"), CpuSet::first_n(4))
        .unwrap()
        .with_proc_root(proc.path().to_path_buf());
    let why = b.confined_elsewhere(20, 1000).expect("refused");
    assert!(why.contains("/slurm/job_7/step_0"), "{why}");
    assert_eq!(b.confined_elsewhere(20, 0), None);
    assert_eq!(b.confined_elsewhere(21, 1000), None);
    assert_eq!(b.confined_elsewhere(22, 1000), None);
}

/// The next cell's directory is made ahead below the root and taken by
/// `create`; made ahead for an id no cell took, it goes when the next id
/// is made ahead, and at cleanup.
#[test]
fn a_directory_made_ahead_serves_the_next_cell_and_is_removed_unused() {
    let (dir, fs) = common::v2_fixture();
    let root = dir.path().join("allot");
    let mut b = Cgroup2::new(fs.clone(), root.clone(), CpuSet::first_n(8)).unwrap();
    assert!(b.make_ahead(1).unwrap());
    assert!(root.join("cell-1").is_dir());
    assert!(b.make_ahead(1).unwrap());
    assert!(b.make_ahead(2).unwrap());
    assert!(!root.join("cell-1").exists());
    b.create(2).unwrap();
    b.apply(2, &common::on_cpus(CpuSet::parse_list("3").unwrap()))
        .unwrap();
    assert_eq!(
        fs.read(&root.join("cell-2/cpuset.cpus")).unwrap().trim(),
        "3"
    );
    assert!(b.make_ahead(3).unwrap());
    assert!(root.join("cell-2").is_dir());
    // Someone else's directory: not made ahead, not removed.
    fs.populate(&root.join("cell-4")).unwrap();
    assert!(!b.make_ahead(4).unwrap());
    assert!(!root.join("cell-3").exists());
    assert!(root.join("cell-4").is_dir());
    fs.rmdir(&root.join("cell-4")).unwrap();
    b.remove(2).unwrap();
    assert!(b.make_ahead(5).unwrap());
    b.cleanup().unwrap();
    assert!(!root.join("cell-5").exists());
}
