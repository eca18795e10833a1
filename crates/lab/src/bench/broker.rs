//! The experiment's own broker.
//!
//! Benchmarks and the demo never use a broker someone else started: they
//! start one on a private socket with a private cgroup name
//! ([`allot_testkit::broker::BrokerProcess`], the harness the live tests
//! use too), and stop it when done, on every path out (drop, error,
//! Ctrl-C — `Drop` runs while unwinding, and the lab stops the experiment
//! on SIGINT before exiting; see `interrupt`). A broker stopped with no
//! cell removes the cgroups it made; the guard checks that, and removes
//! leftovers of its own cgroup name if a job was still being torn down.

use allot_testkit::broker::BrokerProcess;
pub use allot_testkit::broker::remove_leftovers;
use std::path::Path;
use std::time::Duration;

/// A running private broker.
#[derive(Debug)]
pub struct PrivateBroker {
    process: BrokerProcess,
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
        Self::start_patient(allot, backend, extra, &[], 1.0)
    }

    /// As [`PrivateBroker::start_with`], with `env` in the broker's
    /// environment, waiting `patience` times as long for every start (an
    /// emulated machine's).
    pub fn start_patient(
        allot: &Path,
        backend: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        patience: f64,
    ) -> Result<PrivateBroker, String> {
        let cgroup = format!("allot-bench-{}", std::process::id());
        Self::start_in(cgroup, allot, backend, extra, env, patience)
    }

    /// As [`PrivateBroker::start`], under a cgroup name of its own made with
    /// `tag` (`allot-bench-<pid>-<tag>`): a second broker of the same
    /// experiment, running at the same time as the first.
    pub fn start_tagged(allot: &Path, backend: &str, tag: &str) -> Result<PrivateBroker, String> {
        let cgroup = format!("allot-bench-{}-{tag}", std::process::id());
        Self::start_in(cgroup, allot, backend, &[], &[], 1.0)
    }

    fn start_in(
        cgroup: String,
        allot: &Path,
        backend: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        patience: f64,
    ) -> Result<PrivateBroker, String> {
        let mut process = BrokerProcess::new(allot, backend, cgroup)?;
        process.set_args(extra);
        process.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        process.come_up = allot_testkit::broker::COME_UP.mul_f64(patience);
        process.spawn()?;
        Ok(PrivateBroker { process })
    }

    /// Starts the broker process again after [`PrivateBroker::kill9`]
    /// (same socket, state directory and cgroup name, as a restart would).
    pub fn spawn(&mut self) -> Result<(), String> {
        self.process.spawn()
    }

    /// Kills the broker outright (SIGKILL), as a crash would.
    pub fn kill9(&mut self) {
        self.process.kill9();
    }

    /// The broker's pid, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.pid()
    }

    /// Its cgroup name.
    pub fn cgroup(&self) -> &str {
        &self.process.cgroup
    }

    /// Its directory (socket, journal, log).
    pub fn dir(&self) -> &Path {
        self.process.dir.path()
    }

    /// Path of its private socket (`allot.sock` in `dir`); the same after a restart.
    pub fn socket(&self) -> &Path {
        &self.process.socket
    }

    /// The backend it enforces with (as reported by the broker).
    pub fn backend(&self) -> String {
        allot_client::Client::connect(self.socket())
            .and_then(|mut c| c.hello("bench"))
            .map(|w| w.backend)
            .unwrap_or_else(|_| self.process.backend.clone())
    }

    /// The broker's log so far.
    pub fn log(&self) -> String {
        self.process.log()
    }

    /// Waits until the broker has no cell (jobs' cells are released).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        allot_testkit::eventually(timeout, || {
            allot_client::Client::connect(self.socket())
                .and_then(|mut c| c.status())
                .is_ok_and(|s| s.cells.is_empty())
        })
    }

    /// Stops the broker; returns whether everything it made is gone.
    pub fn stop(&mut self) -> bool {
        if self.process.child.is_none() {
            return true;
        }
        self.process.stop();
        remove_leftovers(&self.process.cgroup)
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        self.stop();
    }
}
