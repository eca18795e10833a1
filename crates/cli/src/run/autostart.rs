//! Starting a broker on first use.
//!
//! When nobody answers on the socket, `allot run` starts `allot daemon` for
//! the user, detached (its own session, stdio to `broker.log` beside the
//! socket), with `--idle-exit` so it goes away a few seconds after the last
//! cell ends — like an agent that starts on first use. Several `allot run`
//! starting at once are safe: the broker's state-directory lock lets one
//! win; the others wait for its socket.
//!
//! `ALLOT_BACKEND` and `ALLOT_CGROUP_NAME` pass a backend and cgroup name to
//! the started broker (tests and experiments use them).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds an auto-started broker lingers with nothing to do.
pub const IDLE_EXIT_SECS: u64 = 2;
/// How long to wait for a started broker's socket.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// Makes sure a broker answers on `socket`, starting one if needed.
pub fn ensure_broker(socket: &Path) -> Result<(), String> {
    if allot_client::broker_alive(socket) {
        return Ok(());
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the allot binary: {e}"))?;
    let dir = socket.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("broker.log"))
        .map_err(|e| format!("cannot open {}: {e}", dir.join("broker.log").display()))?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--idle-exit")
        .arg(IDLE_EXIT_SECS.to_string());
    if let Ok(b) = std::env::var("ALLOT_BACKEND") {
        cmd.args(["--backend", &b]);
    }
    if let Ok(n) = std::env::var("ALLOT_CGROUP_NAME") {
        cmd.args(["--cgroup-name", &n]);
    }
    cmd.stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::setsid().map(|_| ()).map_err(Into::into)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot start a broker: {e}"))?;
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if allot_client::broker_alive(socket) {
            // Reap it later from a thread so it never lingers as a zombie
            // while this process runs.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            return Ok(());
        }
        if let Ok(Some(st)) = child.try_wait() {
            // Exit 3: another broker won the race; wait for its socket.
            if st.code() != Some(3) {
                return Err(format!(
                    "the broker it started exited ({st}); see {}",
                    dir.join("broker.log").display()
                ));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(format!(
        "no broker came up on {} within {START_TIMEOUT:?}",
        socket.display()
    ))
}
