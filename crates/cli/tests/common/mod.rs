//! Live-test helpers of the `allot` command's tests: a broker the test
//! started, stopped and its cgroups removed on drop, even when the test
//! panics. Processes, waits and prerequisites come from `allot-testkit`.
#![allow(dead_code)]

use allot_testkit::broker::BrokerProcess;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

mod watched;
#[allow(unused_imports)]
pub use watched::*;

/// The `allot` binary. `allot demo` and `allot bench` hand over to
/// `allot-lab` beside it, a package of its own that this one does not
/// depend on: `cargo test --workspace` (the README's test command) builds
/// it, and `cargo test -p allot-cli` alone needs `cargo build -p allot-lab`
/// first (the hand-over says so when it is missing).
pub const ALLOT: &str = env!("CARGO_BIN_EXE_allot");

#[allow(unused_imports)]
pub use allot_testkit::{Proc, eventually, prerequisite, sleeper, spinner, v1_cpuset_writable};

/// `Cpus_allowed_list` of every thread of `pid`.
pub fn thread_masks(pid: u32) -> Vec<String> {
    allot_testkit::thread_masks(pid)
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// Live tests measure and share this machine's CPUs, and each runs its own
/// broker (which believes it owns them all): they take turns.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The machine for a test that runs brokers of its own (a benchmark run).
pub fn machine_turn() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|p| p.into_inner())
}

/// A broker started by the test on a private socket and cgroup name
/// ([`allot_testkit::broker::BrokerProcess`], ticking every 50 ms). Holds
/// the machine for the test's duration.
pub struct Daemon {
    process: BrokerProcess,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl std::ops::Deref for Daemon {
    type Target = BrokerProcess;
    fn deref(&self) -> &BrokerProcess {
        &self.process
    }
}

impl std::ops::DerefMut for Daemon {
    fn deref_mut(&mut self) -> &mut BrokerProcess {
        &mut self.process
    }
}

static COUNTER: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Daemon {
    pub fn start(backend: &str, extra: &[&str]) -> Daemon {
        let mut d = Daemon::start_later(backend, extra);
        d.spawn();
        d
    }

    /// A broker that may open at most `nofile` files.
    pub fn start_with_nofile(backend: &str, extra: &[&str], nofile: u64) -> Daemon {
        let mut d = Daemon::start_later(backend, extra);
        d.process.nofile = Some(nofile);
        d.spawn();
        d
    }

    /// Set up, not started (the test calls `spawn`).
    pub fn start_later(backend: &str, extra: &[&str]) -> Daemon {
        let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let turn = MACHINE.lock().unwrap_or_else(|p| p.into_inner());
        let cgroup = format!("allot-test-{}-{n}", std::process::id());
        let mut d = Daemon {
            _turn: turn,
            process: BrokerProcess::new(Path::new(ALLOT), backend, cgroup).unwrap(),
        };
        d.set_extra(extra);
        d
    }

    /// Replaces the extra arguments (for the next `spawn`).
    pub fn set_extra(&mut self, extra: &[&str]) {
        let mut args = vec!["--tick-ms", "50"];
        args.extend_from_slice(extra);
        self.process.set_args(&args);
    }

    /// Starts the broker; the test fails with its log if it cannot.
    pub fn spawn(&mut self) {
        if let Err(e) = self.process.spawn() {
            panic!("{e}");
        }
    }

    pub fn client(&self) -> allot_client::Client {
        allot_client::Client::connect(&self.socket).expect("connect")
    }

    pub fn status(&self) -> allot_proto::status::Status {
        self.client().status().expect("the broker's status")
    }

    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        ["cpuset", "cpu", "cpuacct", "freezer", "blkio"]
            .iter()
            .map(|h| Path::new("/sys/fs/cgroup").join(h).join(&self.cgroup))
            .chain(allot_testkit::broker::memory_dir(&self.cgroup))
            .collect()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
        // Whatever the test left (a failure mid-way): move processes out and
        // remove the directories. A process killed a moment ago may still
        // be exiting in one (the kernel refuses the removal meanwhile), so
        // this tries again for a while.
        for _ in 0..40 {
            for d in self.cgroup_dirs() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    for e in rd.flatten().filter(|e| e.path().is_dir()) {
                        let root = d.parent().unwrap().join("cgroup.procs");
                        if let Ok(p) = std::fs::read_to_string(e.path().join("cgroup.procs")) {
                            for pid in p.split_whitespace() {
                                let _ = std::fs::write(&root, pid);
                            }
                        }
                        let _ = std::fs::remove_dir(e.path());
                    }
                }
                let _ = std::fs::remove_dir(&d);
            }
            if self.cgroup_dirs().iter().all(|d| !d.exists()) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        eprintln!("warning: cannot remove {:?}", self.cgroup_dirs());
    }
}

/// The command line that runs this test binary as `role`: one `#[test]`
/// that acts only when its environment says so, for tests that need a
/// process of their own (`exe --exact ROLE --nocapture --test-threads 1`).
pub fn role(role: &str) -> Vec<std::ffi::OsString> {
    let exe = std::env::current_exe().unwrap();
    let mut argv = vec![exe.into_os_string()];
    argv.extend(["--exact", role, "--nocapture", "--test-threads", "1"].map(Into::into));
    argv
}

/// `allot run ARGS` against the test's broker.
pub fn allot_run(d: &Daemon, args: &[&str]) -> Command {
    let mut c = Command::new(ALLOT);
    c.arg("run").args(args).env("ALLOT_SOCKET", &d.socket);
    c
}

/// Runs `c` to its end, stdin closed.
pub fn run_out(mut c: Command) -> Output {
    c.stdin(Stdio::null()).output().expect("allot runs")
}

/// Runs `allot ARGS` (an experiment: `bench …`) within `limit`; it must
/// succeed (a failure shows both of its streams). Its standard output.
pub fn succeeds_within(args: &[&str], limit: Duration) -> String {
    let out = allot_testkit::output_within(Command::new(ALLOT).args(args), limit);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The backend live `allot run` tests use: cgroup v1 where it is writable.
pub fn backend() -> &'static str {
    if prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        "cgroup1"
    } else {
        "affinity"
    }
}

/// CLOCK_MONOTONIC in seconds (what the test programs stamp lines with).
pub fn now_mono() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// `allot run --name NAME ARGS -- timeout 10 sh -c SCRIPT`, in the
/// background, in a process group of its own (killed whole by [`Killed`]).
pub fn cell(d: &Daemon, name: &str, args: &[&str], script: &str) -> Child {
    cell_for(d, name, args, script, 10)
}

/// [`cell`] bounded by `secs` seconds instead of ten.
pub fn cell_for(d: &Daemon, name: &str, args: &[&str], script: &str, secs: u32) -> Child {
    let secs = secs.to_string();
    let mut full = vec!["--name", name];
    full.extend_from_slice(args);
    full.extend_from_slice(&["--", "timeout", &secs, "sh", "-c", script]);
    allot_run(d, &full)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .expect("allot run")
}

pub const SPIN: &str = "while :; do :; done";
pub const SPIN2: &str = "(while :; do :; done) & (while :; do :; done) & wait";

/// CPU time (ns) of cell `name`'s cgroup.
pub fn usage(d: &Daemon, name: &str) -> u64 {
    let st = d.status();
    let c = st
        .cells
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no cell {name}: {st:?}"));
    let p = format!(
        "/sys/fs/cgroup/cpuacct/{}/cell-{}/cpuacct.usage",
        d.cgroup, c.id
    );
    std::fs::read_to_string(&p)
        .unwrap_or_else(|e| panic!("{p}: {e}"))
        .trim()
        .parse()
        .unwrap()
}

/// `allot run` processes and everything they started, killed on drop:
/// `allot run` starts its program in a process group of its own, so the
/// processes in the test broker's cells are killed by pid first.
pub struct Killed<'d>(pub &'d Daemon, pub Vec<Child>);
impl Drop for Killed<'_> {
    fn drop(&mut self) {
        // A paused cell's processes are frozen, and a frozen process dies
        // only once thawed: thaw the test broker's cells first.
        let frozen = std::path::Path::new("/sys/fs/cgroup/freezer").join(&self.0.cgroup);
        for cell in std::fs::read_dir(&frozen).into_iter().flatten().flatten() {
            if cell.file_name().to_string_lossy().starts_with("cell-") {
                let _ = std::fs::write(cell.path().join("freezer.state"), "THAWED");
            }
        }
        let top = std::path::Path::new("/sys/fs/cgroup/cpuset").join(&self.0.cgroup);
        for cell in std::fs::read_dir(&top).into_iter().flatten().flatten() {
            let procs =
                std::fs::read_to_string(cell.path().join("cgroup.procs")).unwrap_or_default();
            for pid in procs
                .split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
            {
                if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        for c in &mut self.1 {
            if let Some(group) = rustix::process::Pid::from_raw(c.id() as i32) {
                let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
            }
            let _ = c.wait();
        }
    }
}

/// Whether this machine has writable cgroup v1 cpuset and cpu hierarchies
/// and two CPUs (the live tests that measure CPU shares need them).
pub fn cgroup1_here() -> bool {
    prerequisite(
        v1_cpuset_writable()
            && std::path::Path::new("/sys/fs/cgroup/cpu/cpu.cfs_quota_us").exists(),
        "writable cgroup v1 cpuset and cpu hierarchies (root)",
    ) && prerequisite(allot_testkit::cpus() >= 2, "two CPUs")
}
