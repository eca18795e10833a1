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

use allot_client::Client;
use allot_proto::dirs::{DirError, TrustedDir};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds an auto-started broker lingers with nothing to do.
pub const IDLE_EXIT_SECS: u64 = 2;
/// How long to wait for a started broker's socket.
const START_TIMEOUT: Duration = Duration::from_secs(5);

/// Why no broker could be had.
#[derive(Debug)]
pub enum NoBroker {
    /// The socket's directory could be controlled by another user: nothing
    /// in it may be trusted, and `allot run` refuses to go on.
    Untrusted(DirError),
    /// Something that is not a broker's socket sits at the socket path:
    /// `allot run` refuses (the user named the wrong path).
    NotASocket(String),
    /// Anything else: the program may run unconfined.
    Failed(String),
}

impl std::fmt::Display for NoBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoBroker::Untrusted(e) => write!(f, "{e}"),
            NoBroker::NotASocket(e) => f.write_str(e),
            NoBroker::Failed(e) => f.write_str(e),
        }
    }
}

fn checked(e: DirError) -> NoBroker {
    if e.is_untrusted() {
        NoBroker::Untrusted(e)
    } else {
        NoBroker::Failed(e.to_string())
    }
}

/// The last line the broker wrote to its log (its reason for exiting).
fn last_error(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty())?;
    Some(line.trim().trim_start_matches("allot: ").to_string())
}

/// A connection to the broker on `socket`, starting one if none answers
/// and `start` allows it. The socket's directory is checked first
/// (`allot_proto::dirs`): a broker is only ever talked to, or started, in
/// a directory of the user's or root's. The connection is the one the
/// caller registers its cell over (no separate probe).
pub fn ensure_broker(socket: &Path, start: bool) -> Result<Client, NoBroker> {
    let dir_path = allot_proto::dirs::socket_parent(socket);
    // Connecting checks the directory first (a socket another user could
    // plant is never talked to).
    match Client::connect(socket) {
        Ok(c) => return Ok(c),
        Err(allot_client::ClientError::Untrusted { reason, .. }) => {
            return Err(NoBroker::Untrusted(reason));
        }
        Err(_) => {}
    }
    if !start {
        return Err(NoBroker::Failed(format!(
            "no broker answers on {} (and --no-start)",
            socket.display()
        )));
    }
    // Starting one: the socket path must be free or a stale socket of the
    // user's, and the directory the user's own.
    allot_proto::dirs::check_socket_path(socket).map_err(NoBroker::NotASocket)?;
    let dir = TrustedDir::create(dir_path, 0o700).map_err(checked)?;
    let exe = std::env::current_exe()
        .map_err(|e| NoBroker::Failed(format!("cannot find the allot binary: {e}")))?;
    let log = dir.append("broker.log").map_err(|e| {
        NoBroker::Failed(format!(
            "cannot open {}: {e}",
            dir.join("broker.log").display()
        ))
    })?;
    let mut cmd = Command::new(exe);
    cmd.arg("daemon")
        .arg("--socket")
        .arg(socket)
        .arg("--idle-exit")
        .arg(IDLE_EXIT_SECS.to_string());
    if let Ok(b) = std::env::var(allot_proto::env::BACKEND) {
        cmd.args(["--backend", &b]);
    }
    if let Ok(n) = std::env::var(allot_proto::env::CGROUP_NAME) {
        cmd.args(["--cgroup-name", &n]);
    }
    cmd.stdin(Stdio::null())
        .stdout(
            log.try_clone()
                .map_err(|e| NoBroker::Failed(e.to_string()))?,
        )
        .stderr(log);
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            rustix::process::setsid().map(|_| ()).map_err(Into::into)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| NoBroker::Failed(format!("cannot start a broker: {e}")))?;
    let start = Instant::now();
    while start.elapsed() < START_TIMEOUT {
        if let Ok(c) = Client::connect(socket) {
            // Reap it later from a thread so it never lingers as a zombie
            // while this process runs.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            return Ok(c);
        }
        if let Ok(Some(st)) = child.try_wait() {
            // Another broker won the race for this socket: wait for it.
            if st.code() != Some(crate::cmd::daemon::EXIT_ALREADY_SERVED) {
                let log = dir.join("broker.log");
                return Err(NoBroker::Failed(format!(
                    "the broker it started exited ({st}): {} (from {})",
                    last_error(&log).unwrap_or_else(|| "it said nothing".into()),
                    log.display()
                )));
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Err(NoBroker::Failed(format!(
        "no broker came up on {} within {START_TIMEOUT:?}",
        socket.display()
    )))
}
