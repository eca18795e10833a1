//! A broker of one's own: `allot daemon` on a private socket, state
//! directory and cgroup name, for a live test or an experiment.
//!
//! Tests and experiments never use a broker someone else started. The
//! broker runs in a process group of its own (a terminal's Ctrl-C reaches
//! the jobs it confines before it) and with a parent-death signal (it
//! stops even when its starter is killed outright). Its standard error goes
//! to `broker.log` in its directory. A broker stopped with no cell removes
//! the cgroups it made; [`remove_leftovers`] removes what one stopped
//! mid-way left under its own cgroup name, and nothing else.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a starting broker may take to accept connections (unless
/// [`BrokerProcess::come_up`] says otherwise).
pub const COME_UP: Duration = Duration::from_secs(10);

/// An `allot daemon` process and its private socket, directory and cgroup
/// name. Not started by [`BrokerProcess::new`]: set it up, then
/// [`BrokerProcess::spawn`] (again after [`BrokerProcess::kill9`], as a
/// restart would: same socket, journal and cgroup name).
#[derive(Debug)]
pub struct BrokerProcess {
    /// The `allot` binary run as `allot daemon`.
    pub allot: PathBuf,
    /// Holds the socket, the journal and `broker.log`; removed on drop.
    pub dir: tempfile::TempDir,
    /// The broker's socket (in `dir`).
    pub socket: PathBuf,
    /// The name of the broker's top-level cgroup (`--cgroup-name`).
    pub cgroup: String,
    /// The backend asked for (`--backend`; the broker may report another
    /// for `auto`).
    pub backend: String,
    /// Arguments after the socket, backend and cgroup name.
    pub args: Vec<String>,
    /// Open-file limit (soft and hard) the broker runs under, if set.
    pub nofile: Option<u64>,
    /// Variables set in the broker's environment (beside the inherited).
    pub env: Vec<(String, String)>,
    /// How long `spawn` waits for the broker to accept connections
    /// ([`COME_UP`]; longer on an emulated machine).
    pub come_up: Duration,
    /// The running broker, between `spawn` and `stop` or `kill9`.
    pub child: Option<Child>,
}

impl BrokerProcess {
    /// A broker of `allot` enforcing with `backend` under top-level cgroup
    /// `cgroup`, its directory made in the system's temporary directory.
    pub fn new(allot: &Path, backend: &str, cgroup: String) -> Result<BrokerProcess, String> {
        let dir = tempfile::Builder::new()
            .prefix("allot-broker-")
            .tempdir()
            .map_err(|e| format!("cannot make the broker's directory: {e}"))?;
        Ok(BrokerProcess {
            allot: allot.to_path_buf(),
            socket: dir.path().join("allot.sock"),
            dir,
            cgroup,
            backend: backend.to_string(),
            args: Vec::new(),
            nofile: None,
            env: Vec::new(),
            come_up: COME_UP,
            child: None,
        })
    }

    /// Replaces the extra arguments (for the next `spawn`).
    pub fn set_args(&mut self, args: &[&str]) {
        self.args = args.iter().map(|s| s.to_string()).collect();
    }

    /// Starts the broker and waits until it accepts connections; an error
    /// carries its log.
    pub fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|e| format!("cannot open the broker's log: {e}"))?;
        let mut cmd = Command::new(&self.allot);
        cmd.args(["daemon", "--socket"])
            .arg(&self.socket)
            .args(["--backend", &self.backend, "--cgroup-name", &self.cgroup])
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        let nofile = self.nofile;
        // SAFETY: the closure runs in the child between fork and exec and
        // makes only async-signal-safe system calls (prctl, setrlimit).
        unsafe {
            cmd.pre_exec(move || {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))?;
                if let Some(n) = nofile {
                    let l = rustix::process::Rlimit {
                        current: Some(n),
                        maximum: Some(n),
                    };
                    rustix::process::setrlimit(rustix::process::Resource::Nofile, l)?;
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.allot.display()))?;
        self.child = Some(child);
        let t = Instant::now();
        while !accepts(&self.socket) {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(Child::try_wait) {
                self.child = None;
                return Err(format!("the broker exited ({st}): {}", self.log()));
            }
            if t.elapsed() > self.come_up {
                return Err(format!("the broker did not come up: {}", self.log()));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(())
    }

    /// Kills the broker outright (SIGKILL), as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the broker (SIGTERM) and waits for it; its exit code, `None`
    /// when it was not running or died of a signal.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        c.wait().ok()?.code()
    }

    /// The broker's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Where its standard error goes.
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("broker.log")
    }

    /// What it has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Whether a broker accepts connections on `socket` (a seqpacket socket).
pub fn accepts(socket: &Path) -> bool {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType, connect, socket as new};
    let Ok(addr) = SocketAddrUnix::new(socket) else {
        return false;
    };
    new(AddressFamily::UNIX, SocketType::SEQPACKET, None)
        .is_ok_and(|fd| connect(&fd, &addr).is_ok())
}

/// Removes what a stopped broker with cgroup name `cgroup` left (its
/// cells' groups and its own) in the v1 hierarchies and on the cgroup2
/// mounts (`/sys/fs/cgroup` itself on a pure v2 machine, `unified` beside
/// v1); returns whether nothing was left.
pub fn remove_leftovers(cgroup: &str) -> bool {
    let mut clean = true;
    let dirs = [
        "cpuset", "cpu", "cpuacct", "freezer", "blkio", "unified", "",
    ]
    .map(|h| Path::new("/sys/fs/cgroup").join(h).join(cgroup));
    // Exclusive cells on a cgroup v2 kernel before 6.7 live beside the
    // broker's directory, named after it (`<cgroup>.cell-N`).
    let apart = ["unified", ""].into_iter().flat_map(|h| {
        let top = Path::new("/sys/fs/cgroup").join(h);
        let prefix = format!("{cgroup}.cell-");
        std::fs::read_dir(&top)
            .into_iter()
            .flatten()
            .flatten()
            .filter(move |e| e.file_name().to_string_lossy().starts_with(&prefix))
            .map(|e| e.path())
    });
    for d in dirs.into_iter().chain(memory_dir(cgroup)).chain(apart) {
        if d.join("cgroup.procs").exists() {
            clean = false;
            if let Ok(rd) = std::fs::read_dir(&d) {
                for e in rd.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(&d);
        }
    }
    clean
}

/// Where a broker started by this process keeps its v1 memory groups
/// named `cgroup`: below this process's own memory group (the broker nests
/// there). `None` without a v1 memory hierarchy.
pub fn memory_dir(cgroup: &str) -> Option<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let group = own.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls.split(',').any(|c| c == "memory").then_some(path)
    })?;
    let mount = Path::new("/sys/fs/cgroup/memory");
    mount
        .exists()
        .then(|| mount.join(group.trim_start_matches('/')).join(cgroup))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_that_cannot_start_says_why() {
        let mut b =
            BrokerProcess::new(Path::new("/nonexistent/allot"), "affinity", "x".into()).unwrap();
        let err = b.spawn().unwrap_err();
        assert!(err.contains("/nonexistent/allot"), "{err}");
        assert_eq!(b.pid(), None);
        assert!(!accepts(&b.socket));
        // A program that exits at once is reported with its status.
        b.allot = PathBuf::from("/bin/false");
        let err = b.spawn().unwrap_err();
        assert!(err.contains("exited"), "{err}");
    }
}
