//! Start-up's steps, in the order `Broker::start` takes them, and why
//! start-up can fail ([`StartError`]): each step either gives the broker
//! what it needs or says what stopped it and what to do.
//!
//! Invariant: nothing is created or removed beside a path a user named
//! until that path was found to be free or the broker's own (a socket of
//! ours that no broker answers is replaced; anything else is refused).

use super::activation;
use crate::config::Config;
use crate::journal::Journal;
use crate::log::{info, warn};
use allot_proto::dirs::TrustedDir;
use allot_proto::transport;
use rustix::fd::OwnedFd;
use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why the broker could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Another broker serves the socket.
    #[error("another broker is already serving {0}")]
    AlreadyRunning(PathBuf),
    /// Another broker holds the state directory, serving another socket.
    #[error(
        "another broker already keeps its journal in {dir} and serves {serving}: talk to it \
         (ALLOT_SOCKET={serving}), or give this broker a state directory of its own \
         (--state-dir)"
    )]
    StateDirTaken {
        /// The state directory.
        dir: PathBuf,
        /// The socket the other broker serves, as its lock file says.
        serving: String,
    },
    /// Anything else, with what to do about it.
    #[error("{0}")]
    Other(String),
}

pub(super) fn other(what: impl std::fmt::Display) -> StartError {
    StartError::Other(what.to_string())
}

/// Takes the state directory's lock (`broker.lock`, an flock held for
/// the broker's lifetime: one broker per state directory) and writes the
/// socket it serves into it, so that a broker refused the lock can say
/// which one holds it.
fn lock_state_dir(cfg: &Config) -> Result<OwnedFd, StartError> {
    use rustix::fs::{FlockOperation, Mode, OFlags};
    let lock_path = cfg.state_dir.join("broker.lock");
    let lock = rustix::fs::open(
        &lock_path,
        OFlags::CREATE | OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW,
        Mode::from_raw_mode(0o600),
    )
    .map_err(|e| other(format!("cannot open {}: {e}", lock_path.display())))?;
    if rustix::fs::flock(&lock, FlockOperation::NonBlockingLockExclusive).is_err() {
        let serving = std::fs::read_to_string(&lock_path).unwrap_or_default();
        let serving = serving.trim();
        let same = serving.is_empty() || Path::new(serving) == cfg.socket;
        return Err(if same {
            StartError::AlreadyRunning(cfg.socket.clone())
        } else {
            StartError::StateDirTaken {
                dir: cfg.state_dir.clone(),
                serving: serving.to_string(),
            }
        });
    }
    let _ = rustix::fs::ftruncate(&lock, 0);
    let _ = rustix::io::pwrite(&lock, cfg.socket.as_os_str().as_encoded_bytes(), 0);
    Ok(lock)
}

/// The socket's path and the state directory, claimed for this broker.
pub(super) struct Claimed {
    /// The socket systemd passed, to be served as it is.
    pub activated: Option<OwnedFd>,
    /// A user's broker (not root's): its socket and directory are private.
    pub private: bool,
    /// The state directory's lock, held for the broker's lifetime.
    pub lock: OwnedFd,
}

/// Claims the socket's path and the state directory. A socket passed by
/// systemd is served as it is (it is not ours to remove or re-mode).
/// Otherwise the path must be free or hold a socket of ours: a file a user
/// named by mistake is refused before anything is created beside it, and a
/// stale socket of ours (a broker that died) is replaced, while one that
/// answers is another broker's.
pub(super) fn claim(cfg: &Config) -> Result<Claimed, StartError> {
    let activated = activation::inherited(&cfg.socket).map_err(other)?;
    if activated.is_none() {
        allot_proto::dirs::check_socket_path(&cfg.socket).map_err(other)?;
    }
    let dir = allot_proto::dirs::socket_parent(&cfg.socket).to_path_buf();
    let private = !rustix::process::geteuid().is_root();
    // The socket's and the journal's directories must be the broker's
    // own and writable by nobody else (see allot_proto::dirs); a user's
    // broker keeps them private, root's lets every user reach the socket.
    TrustedDir::create(&dir, if private { 0o700 } else { 0o755 })
        .map_err(|e| other(format!("refusing the socket directory: {e}")))?;
    TrustedDir::create(&cfg.state_dir, 0o700)
        .map_err(|e| other(format!("refusing the state directory: {e}")))?;
    let lock = lock_state_dir(cfg)?;
    if activated.is_none() && allot_proto::dirs::check_socket_path(&cfg.socket).map_err(other)? {
        if allot_proto::Conn::connect(&cfg.socket).is_ok() {
            return Err(StartError::AlreadyRunning(cfg.socket.clone()));
        }
        let _ = std::fs::remove_file(&cfg.socket);
    }
    Ok(Claimed {
        activated,
        private,
        lock,
    })
}

/// Opens the journal; a damaged one is kept up to its damage, loudly.
pub(super) fn open_journal(cfg: &Config) -> Result<Journal, StartError> {
    let opened = Journal::open(&cfg.journal_path()).map_err(|e| {
        other(format!(
            "cannot use the journal {}: {e}",
            cfg.journal_path().display()
        ))
    })?;
    if let Some(d) = &opened.damaged {
        warn!(
            "THE JOURNAL {} IS DAMAGED at line {}: kept the {} records before it{}; cells \
             it no longer lists are recovered from the backend where it still holds them",
            cfg.journal_path().display(),
            d.line,
            d.kept,
            match &d.copy {
                Some(c) => format!("; the damaged file is kept as {}", c.display()),
                None => "; could not keep a copy of it".into(),
            }
        );
    }
    Ok(opened.journal)
}

/// The listening socket: the one systemd passed, or a new one at the
/// configured path. Root's broker serves every user (peer credentials
/// decide what each may do); a user's broker serves that user only.
/// Returns it with the new socket's inode (none for a passed one).
pub(super) fn listen(
    cfg: &Config,
    activated: Option<OwnedFd>,
    private: bool,
) -> Result<(OwnedFd, Option<u64>), StartError> {
    if let Some(fd) = activated {
        info!(
            "serving the socket systemd passed for {}",
            cfg.socket.display()
        );
        return Ok((fd, None));
    }
    let listener = transport::listen(&cfg.socket)
        .map_err(|e| other(format!("cannot listen on {}: {e}", cfg.socket.display())))?;
    use std::os::unix::fs::PermissionsExt;
    let mode = if private { 0o600 } else { 0o666 };
    let _ = std::fs::set_permissions(&cfg.socket, std::fs::Permissions::from_mode(mode));
    let ino = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&cfg.socket).map_err(other)?);
    Ok((listener, Some(ino)))
}

/// The monitor's periodic timer (every `tick`), and the gathering timer:
/// one-shot, armed for the next gathered arrival due
/// (`Broker::arm_gather_timer`): its window is a fraction of a
/// millisecond, finer than the monitor tick or epoll's timeout.
pub(super) fn timers(tick: Duration) -> Result<(OwnedFd, OwnedFd), StartError> {
    let flags = TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK;
    let timer = rustix::time::timerfd_create(TimerfdClockId::Monotonic, flags).map_err(other)?;
    let ts = Timespec {
        tv_sec: tick.as_secs() as i64,
        tv_nsec: tick.subsec_nanos() as _,
    };
    rustix::time::timerfd_settime(
        &timer,
        TimerfdTimerFlags::empty(),
        &Itimerspec {
            it_interval: ts,
            it_value: ts,
        },
    )
    .map_err(other)?;
    let gather = rustix::time::timerfd_create(TimerfdClockId::Monotonic, flags).map_err(other)?;
    Ok((timer, gather))
}
