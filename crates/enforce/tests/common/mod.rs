//! Helpers of the enforcement tests; processes, cgroup clean-up and
//! prerequisites come from `allot-testkit`.
#![allow(dead_code, unused_imports)]

pub use allot_testkit::{
    CgroupDirs, Proc, eventually, forking, sleeper, thread_masks, threaded, unique,
};

/// A grant of `cpus` alone: one thread's weight, no cap on CPU time.
pub fn on_cpus(cpus: allot_topo::CpuSet) -> allot_enforce::Applied {
    allot_enforce::Applied {
        cpus,
        weight: allot_enforce::THREAD,
        bandwidth: None,
    }
}

/// Whether we may write the v1 cpuset hierarchy where this machine mounts it.
pub fn v1_writable() -> bool {
    let m = allot_enforce::detect::Mounts::read();
    match m.v1() {
        Some(v1) => allot_testkit::is_root() && v1.cpuset.join("cpuset.cpus").exists(),
        None => false,
    }
}

/// This machine's v1 mounts and allowed CPUs, for a live test that needs a
/// writable cpuset hierarchy and at least `cpus` CPUs; `None` (after the
/// prerequisite has said why) where it cannot run.
pub fn live_v1(cpus: usize) -> Option<(allot_enforce::V1Mounts, allot_topo::CpuSet)> {
    if !allot_testkit::prerequisite(
        v1_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        return None;
    }
    let all = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(all.len() >= cpus, &format!("needs {cpus} CPUs")) {
        return None;
    }
    Some((allot_enforce::detect::Mounts::read().v1().unwrap(), all))
}

/// CPU time of `pid` so far, ns (`/proc/PID/stat`, through the real OS
/// interface the backends use).
pub fn cpu_time(pid: u32) -> u64 {
    use allot_enforce::os::Os;
    allot_enforce::os::RealOs
        .cpu_time_ns(pid)
        .expect("the process exists")
}

/// allot's directories named `name` in every v1 hierarchy of `mounts`
/// (cpuset, cpu, cpuacct when it is separate, freezer, blkio).
pub fn v1_dirs(mounts: &allot_enforce::V1Mounts, name: &str) -> Vec<std::path::PathBuf> {
    let mut dirs = vec![mounts.cpuset.join(name)];
    dirs.extend(mounts.cpu.iter().map(|d| d.join(name)));
    if mounts.cpuacct != mounts.cpu {
        dirs.extend(mounts.cpuacct.iter().map(|d| d.join(name)));
    }
    dirs.extend(mounts.freezer.iter().map(|d| d.join(name)));
    dirs.extend(mounts.blkio.iter().map(|d| d.join(name)));
    dirs
}

/// A fixture tree of the cgroup v2 layout, populated, and the filesystem
/// over it (the directory lives as long as the returned guard).
pub fn v2_fixture() -> (
    tempfile::TempDir,
    std::sync::Arc<allot_enforce::cgroupfs::FixtureFs>,
) {
    use allot_enforce::cgroupfs::{FixtureFs, FixtureLayout};
    let dir = tempfile::tempdir().unwrap();
    let fs = std::sync::Arc::new(FixtureFs::new(FixtureLayout::V2));
    fs.populate(dir.path()).unwrap();
    (dir, fs)
}
