//! Socket activation: serving a listening socket that systemd (or
//! `systemd-socket-activate`) opened and passed as descriptor 3.
//!
//! The protocol is systemd's: `LISTEN_PID` names the process the sockets
//! are for, `LISTEN_FDS` how many follow descriptor 2. allot expects exactly
//! one, a listening `SOCK_SEQPACKET` Unix socket bound to the path the
//! broker is configured to serve (`ListenSequentialPacket=` in
//! `allotd.socket`); anything else is refused with what to change, rather
//! than served half right. The variables are removed once read, so no
//! child takes the socket for its own.
//!
//! An activated broker does not remove the socket file when it stops:
//! systemd keeps listening and starts it again on the next connection.

use rustix::fd::{BorrowedFd, FromRawFd, OwnedFd};
use rustix::net::{SocketType, sockopt};
use std::path::Path;

/// The first passed descriptor (after stdin, stdout, stderr).
const FIRST: i32 = 3;

/// What the environment says was passed to this process, if anything.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Passed {
    /// Nothing (no variables, or they name another process).
    Nothing,
    /// `n` descriptors from [`FIRST`] on.
    Sockets(u32),
}

/// Reads `LISTEN_PID` and `LISTEN_FDS` as given (pure: the caller passes
/// the variables and its pid).
pub(super) fn passed(
    listen_pid: Option<&str>,
    listen_fds: Option<&str>,
    pid: u32,
) -> Result<Passed, String> {
    let (Some(p), Some(n)) = (listen_pid, listen_fds) else {
        return Ok(Passed::Nothing);
    };
    if p.trim().parse::<u32>().ok() != Some(pid) {
        return Ok(Passed::Nothing);
    }
    n.trim()
        .parse::<u32>()
        .map(Passed::Sockets)
        .map_err(|_| format!("LISTEN_FDS={n:?} is not a number"))
}

/// The listening socket passed for `path`, if this process was activated.
pub(super) fn inherited(path: &Path) -> Result<Option<OwnedFd>, String> {
    let pid = std::process::id();
    let how = passed(
        std::env::var("LISTEN_PID").ok().as_deref(),
        std::env::var("LISTEN_FDS").ok().as_deref(),
        pid,
    )?;
    let n = match how {
        Passed::Nothing => return Ok(None),
        Passed::Sockets(n) => n,
    };
    // SAFETY: called once at start-up, before the broker starts any
    // thread; nothing else reads the environment concurrently.
    unsafe {
        std::env::remove_var("LISTEN_PID");
        std::env::remove_var("LISTEN_FDS");
        std::env::remove_var("LISTEN_FDNAMES");
    }
    if n != 1 {
        return Err(format!(
            "{n} sockets were passed; allotd.socket must list exactly one \
             (ListenSequentialPacket={})",
            path.display()
        ));
    }
    // SAFETY: descriptor 3 is only borrowed to be checked; it is owned
    // below only once it is known to be open.
    let fd = unsafe { BorrowedFd::borrow_raw(FIRST) };
    rustix::io::fcntl_getfd(fd).map_err(|e| {
        format!("LISTEN_FDS=1 but descriptor {FIRST} is not open ({e}); was the broker started by systemd?")
    })?;
    check(fd, path)?;
    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)
        .map_err(|e| format!("cannot mark the passed socket close-on-exec: {e}"))?;
    rustix::fs::fcntl_setfl(fd, rustix::fs::OFlags::NONBLOCK)
        .map_err(|e| format!("cannot make the passed socket non-blocking: {e}"))?;
    // SAFETY: FIRST is open (checked above), was passed to this process to
    // own, and nothing else in it refers to it.
    Ok(Some(unsafe { OwnedFd::from_raw_fd(FIRST) }))
}

/// The passed descriptor must be a listening seqpacket socket bound to
/// `path`.
fn check(fd: BorrowedFd<'_>, path: &Path) -> Result<(), String> {
    let fix = format!(
        "allotd.socket needs ListenSequentialPacket={} (the path the broker serves)",
        path.display()
    );
    let ty = sockopt::socket_type(fd)
        .map_err(|e| format!("the passed descriptor is not a socket ({e}); {fix}"))?;
    if ty != SocketType::SEQPACKET {
        return Err(format!(
            "the passed socket is not a seqpacket socket; {fix}"
        ));
    }
    if !sockopt::socket_acceptconn(fd).unwrap_or(false) {
        return Err(format!("the passed socket is not listening; {fix}"));
    }
    let bound = rustix::net::getsockname(fd).map_err(|e| format!("getsockname: {e}"))?;
    let bound = rustix::net::SocketAddrUnix::try_from(bound)
        .map_err(|_| format!("the passed socket is not a Unix socket; {fix}"))?;
    match bound.path() {
        Some(p) if p.to_bytes() == path.as_os_str().as_encoded_bytes() => Ok(()),
        Some(p) => Err(format!(
            "the passed socket is bound to {}, not {}; {fix}, or start the broker with \
             --socket {}",
            p.to_string_lossy(),
            path.display(),
            p.to_string_lossy()
        )),
        None => Err(format!("the passed socket has no path; {fix}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variables_are_for_this_process_only() {
        assert_eq!(passed(None, None, 7), Ok(Passed::Nothing));
        assert_eq!(passed(Some("7"), None, 7), Ok(Passed::Nothing));
        assert_eq!(passed(Some("8"), Some("1"), 7), Ok(Passed::Nothing));
        assert_eq!(passed(Some("7"), Some("1"), 7), Ok(Passed::Sockets(1)));
        assert_eq!(passed(Some(" 7 "), Some("2"), 7), Ok(Passed::Sockets(2)));
        assert!(
            passed(Some("7"), Some("x"), 7)
                .unwrap_err()
                .contains("LISTEN_FDS")
        );
    }

    #[test]
    fn a_socket_bound_elsewhere_or_of_another_type_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("allot.sock");
        let sock = allot_proto::transport::listen(&good).unwrap();
        use rustix::fd::AsFd;
        check(sock.as_fd(), &good).unwrap();
        let e = check(sock.as_fd(), &dir.path().join("other.sock")).unwrap_err();
        assert!(e.contains("bound to") && e.contains("--socket"), "{e}");
        let stream =
            rustix::net::socket(rustix::net::AddressFamily::UNIX, SocketType::STREAM, None)
                .unwrap();
        let e = check(stream.as_fd(), &good).unwrap_err();
        assert!(e.contains("not a seqpacket socket"), "{e}");
    }
}
