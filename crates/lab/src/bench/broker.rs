//! The experiment's own broker.
//!
//! Benchmarks and the demo never use a broker someone else started: they
//! start one on a private socket with a private cgroup name, and stop it
//! when done, on every path out (drop, error, Ctrl-C — `Drop` runs while
//! unwinding, and the CLI stops the experiment on SIGINT before exiting;
//! see `interrupt`). The broker runs in its own process group, so that a
//! terminal's Ctrl-C does not stop it before the jobs it confines, and
//! with a parent-death signal, so that it stops even if the experiment is
//! killed outright.
//! A broker stopped with no cell removes the cgroups it made; the guard
//! checks that, and removes leftovers of its own cgroup name if a job was
//! still being torn down.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running private broker.
#[derive(Debug)]
pub struct PrivateBroker {
    child: Option<Child>,
    dir: tempfile::TempDir,
    socket: PathBuf,
    cgroup: String,
    backend: String,
    allot: PathBuf,
    extra: Vec<String>,
}

impl PrivateBroker {
    /// Starts `allot daemon` with `backend` on a private socket.
    pub fn start(allot: &Path, backend: &str) -> Result<PrivateBroker, String> {
        Self::start_with(allot, backend, &[])
    }

    /// Starts `allot daemon` with `backend` and `extra` arguments on a
    /// private socket.
    pub fn start_with(
        allot: &Path,
        backend: &str,
        extra: &[&str],
    ) -> Result<PrivateBroker, String> {
        let dir = tempfile::Builder::new()
            .prefix("allot-bench-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        let mut b = PrivateBroker {
            child: None,
            socket: dir.path().join("allot.sock"),
            dir,
            cgroup: format!("allot-bench-{}", std::process::id()),
            backend: backend.to_string(),
            allot: allot.to_path_buf(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        b.spawn()?;
        Ok(b)
    }

    /// Starts the broker process (again, after [`PrivateBroker::kill9`]:
    /// same socket, state directory and cgroup name, as a restart would).
    pub fn spawn(&mut self) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("broker.log"))
            .map_err(|e| e.to_string())?;
        let mut cmd = Command::new(&self.allot);
        cmd.args(["daemon", "--socket"])
            .arg(&self.socket)
            .args(["--backend", &self.backend, "--cgroup-name", &self.cgroup])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .process_group(0);
        super::interrupt::die_with_parent(&mut cmd, rustix::process::Signal::TERM);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the broker: {e}"))?;
        self.child = Some(child);
        let t = Instant::now();
        while !allot_client::broker_alive(&self.socket) {
            if let Some(Ok(Some(st))) = self.child.as_mut().map(|c| c.try_wait()) {
                return Err(format!("the broker exited ({st}): {}", self.log()));
            }
            if t.elapsed() > Duration::from_secs(10) {
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

    /// The broker's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Its cgroup name.
    pub fn cgroup(&self) -> &str {
        &self.cgroup
    }

    /// Its directory (socket, journal, log).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The backend it enforces with (as reported by the broker).
    pub fn backend(&self) -> String {
        allot_client::Client::connect(&self.socket)
            .and_then(|mut c| c.hello("bench"))
            .map(|w| w.backend)
            .unwrap_or_else(|_| self.backend.clone())
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("broker.log")).unwrap_or_default()
    }

    /// Waits until the broker has no cell (jobs' cells are released).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < timeout {
            let idle = allot_client::Client::connect(&self.socket)
                .and_then(|mut c| c.status())
                .is_ok_and(|s| s.cells.is_empty());
            if idle {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Stops the broker; returns whether everything it made is gone.
    pub fn stop(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return true;
        };
        if let Some(p) = rustix::process::Pid::from_raw(c.id() as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
        }
        let _ = c.wait();
        remove_leftovers(&self.cgroup)
    }
}

/// Removes what a stopped broker with cgroup name `cgroup` left (its
/// cells' groups and its own) in the v1 hierarchies and on the cgroup2
/// mounts (`/sys/fs/cgroup` itself on a pure v2 machine, `unified` beside
/// v1); returns whether nothing was left.
pub fn remove_leftovers(cgroup: &str) -> bool {
    let mut clean = true;
    for h in ["cpuset", "cpu", "cpuacct", "freezer", "unified", ""] {
        let d = Path::new("/sys/fs/cgroup").join(h).join(cgroup);
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

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.stop();
    }
}
