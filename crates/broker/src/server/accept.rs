//! New connections: peer credentials, the per-user connection limit, and
//! what the broker does when it runs out of file descriptors (see the
//! module docs of [`super`]).

use super::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, Broker, LISTENER, Paused, SESSION, Session, add,
};
use crate::log::{debug, warn};
use crate::peer::Peer;
use allot_enforce::os::Os;
use allot_proto::msg::{ErrorCode, Reply};
use allot_proto::transport;
use rustix::event::epoll::{self, EventFlags};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::collections::VecDeque;
use std::time::Instant;

impl Broker {
    pub(super) fn accept(&mut self) {
        loop {
            let sock = match rustix::net::accept_with(
                &self.listener,
                rustix::net::SocketFlags::CLOEXEC | rustix::net::SocketFlags::NONBLOCK,
            ) {
                Ok(s) => s,
                Err(rustix::io::Errno::AGAIN) => {
                    self.backoff = ACCEPT_BACKOFF_MIN;
                    return;
                }
                Err(rustix::io::Errno::INTR | rustix::io::Errno::CONNABORTED) => continue,
                Err(
                    e @ (rustix::io::Errno::MFILE
                    | rustix::io::Errno::NFILE
                    | rustix::io::Errno::NOBUFS
                    | rustix::io::Errno::NOMEM),
                ) => return self.out_of_descriptors(e),
                Err(e) => {
                    if let Some(held) = self.fd_log.allow(Instant::now()) {
                        warn!("accept: {e}{}", held_back(held));
                    }
                    return;
                }
            };
            let pidfd = peer_pidfd(&sock);
            let peer = match rustix::net::sockopt::socket_peercred(&sock) {
                Ok(c) => {
                    let pid = c.pid.as_raw_nonzero().get() as u32;
                    Peer {
                        pid,
                        uid: c.uid.as_raw(),
                        gid: c.gid.as_raw(),
                        start: pinned_start(pidfd.as_ref(), pid, self.core.os().as_ref()),
                        runs: None,
                    }
                }
                Err(e) => {
                    debug!("cannot read peer credentials ({e}); closing the connection");
                    continue;
                }
            };
            let open = self.conns.get(&peer.uid).copied().unwrap_or(0);
            let limit = self.cfg.limits.connections;
            if peer.limited() && open >= limit {
                if let Some(held) = self.limit_log.allow(Instant::now()) {
                    warn!(
                        "uid {} reached its {limit} connections (limits.connections); refusing more{}",
                        peer.uid,
                        held_back(held)
                    );
                }
                refuse(
                    &sock,
                    ErrorCode::Limit,
                    format!(
                        "uid {} has {open} connections to the broker open, the limit per user \
                         (limits.connections); close some and retry",
                        peer.uid
                    ),
                );
                continue;
            }
            let id = self.next_session;
            self.next_session += 1;
            if let Err(e) = add(
                &self.epoll,
                &sock,
                SESSION | id,
                EventFlags::IN | EventFlags::RDHUP,
            ) {
                warn!("epoll add: {e}");
                continue;
            }
            *self.conns.entry(peer.uid).or_default() += 1;
            debug!("session {id}: pid {} uid {}", peer.pid, peer.uid);
            self.sessions.insert(
                id,
                Session {
                    sock,
                    peer,
                    pidfd,
                    out: VecDeque::new(),
                    out_bytes: 0,
                    writable_wanted: false,
                },
            );
        }
    }

    /// No descriptor left for a new connection: tell every waiting client
    /// why (the reserve descriptor makes room for one at a time), then stop
    /// listening for a while.
    pub(super) fn out_of_descriptors(&mut self, e: rustix::io::Errno) {
        if let Some(spare) = self.spare.take() {
            drop(spare);
            let mut told = 0u32;
            while let Ok(sock) =
                rustix::net::accept_with(&self.listener, rustix::net::SocketFlags::CLOEXEC)
            {
                refuse(
                    &sock,
                    ErrorCode::Internal,
                    "the broker has run out of file descriptors; retry in a moment \
                     (its log says more)",
                );
                told += 1;
            }
            self.spare = open_spare();
            debug!("told {told} waiting client(s) that descriptors ran out");
        }
        let now = Instant::now();
        if let Some(held) = self.fd_log.allow(now) {
            warn!(
                "cannot accept connections: {e} ({} open); pausing for up to {ACCEPT_BACKOFF_MAX:?}{}",
                self.sessions.len(),
                held_back(held)
            );
        }
        let _ = epoll::delete(&self.epoll, &self.listener);
        self.paused = Some(Paused {
            until: now + self.backoff,
        });
        self.backoff = (self.backoff * 2).min(ACCEPT_BACKOFF_MAX);
    }

    pub(super) fn resume_listener(&mut self, now: Instant) {
        if let Some(p) = self.paused
            && now >= p.until
        {
            self.paused = None;
            if let Err(e) = add(&self.epoll, &self.listener, LISTENER, EventFlags::IN) {
                warn!("cannot listen again: {e}");
            }
        }
    }
}

/// The start time of the process that connected a socket (its pid `pid`
/// from `SO_PEERCRED`, its `pidfd` from `SO_PEERPIDFD` where the kernel
/// hands one), so that later requests can tell it from a process that
/// reuses the pid ([`Peer::start`]).
///
/// With a pidfd the time read from `/proc` is proven the connecting
/// process's: its pidfd not yet readable after the read means it had not
/// exited, so the pid could not have been reused. On older kernels the
/// time is read as the connection is accepted; a process that connects and
/// ends before that (the connection waiting in the listen queue) could lend
/// its pid to whichever process starts next at that number, a race this
/// leaves open there. `None`: the connecting process has ended.
fn pinned_start(pidfd: Option<&OwnedFd>, pid: u32, os: &dyn Os) -> Option<u64> {
    let Some(pidfd) = pidfd else {
        return os.start_time(pid);
    };
    let start = os.start_time(pid)?;
    (!pidfd_ended(pidfd)).then_some(start)
}

/// Whether the process `pidfd` names has ended (its pidfd is readable then;
/// an error counts as ended).
pub(super) fn pidfd_ended(pidfd: &OwnedFd) -> bool {
    let mut fds = [PollFd::new(pidfd, PollFlags::IN)];
    rustix::event::poll(&mut fds, Some(&Timespec::default())).map_or(true, |n| n > 0)
}

/// A pidfd for the process that connected `sock` (`SO_PEERPIDFD`); `None`
/// where the kernel has no such option.
fn peer_pidfd(sock: &OwnedFd) -> Option<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` and `len` are valid for writes of a c_int and its size,
    // as getsockopt(2) requires; the descriptor it returns is new and ours.
    let r = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &mut len,
        )
    };
    // SAFETY: on success `fd` is a descriptor the kernel just opened for us.
    (r == 0 && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// " (N more held back)" for a throttled log line, or nothing.
pub(super) fn held_back(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} more like this held back)")
    }
}

/// Answers a connection the broker will not serve, then drops it.
pub(super) fn refuse(sock: &OwnedFd, code: ErrorCode, msg: impl Into<String>) {
    let _ = transport::send(sock.as_fd(), &Reply::error(code, 0, msg).encode(), None);
}

/// A descriptor held in reserve (`/dev/null`).
pub(super) fn open_spare() -> Option<OwnedFd> {
    rustix::fs::open(
        "/dev/null",
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_enforce::os::RealOs;

    /// Whether this kernel is at least `major.minor` (`uname -r`).
    fn kernel_at_least(major: u32, minor: u32) -> bool {
        let release = rustix::system::uname()
            .release()
            .to_string_lossy()
            .into_owned();
        let mut parts = release.split(|c: char| !c.is_ascii_digit());
        let n = |p: Option<&str>| p.and_then(|s| s.parse::<u32>().ok()).unwrap_or(0);
        (n(parts.next()), n(parts.next())) >= (major, minor)
    }

    /// Live: the peer of one end of a socket pair is this process; its
    /// start time is pinned through the kernel's pidfd where it has one.
    #[test]
    fn the_connecting_process_is_pinned_by_its_start_time() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let sock: OwnedFd = a.into();
        let me = std::process::id();
        if kernel_at_least(6, 5) {
            assert!(peer_pidfd(&sock).is_some(), "SO_PEERPIDFD from 6.5 on");
        }
        let pidfd = peer_pidfd(&sock);
        let start = pinned_start(pidfd.as_ref(), me, &RealOs);
        assert!(start.is_some());
        assert_eq!(start, RealOs.start_time(me));
        if let Some(fd) = &pidfd {
            assert!(!pidfd_ended(fd), "this process runs");
        }
    }
}
