//! New connections: peer credentials, the per-user connection limit, and
//! what the broker does when it runs out of file descriptors (see the
//! module docs of [`super`]).

use super::{
    ACCEPT_BACKOFF_MAX, ACCEPT_BACKOFF_MIN, Broker, LISTENER, Paused, SESSION, Session, add,
};
use crate::core::Peer;
use crate::{debug, warn};
use allot_proto::msg::{ErrorCode, Reply};
use allot_proto::transport;
use rustix::event::epoll::{self, EventFlags};
use rustix::fd::{AsFd, OwnedFd};
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
            let peer = match rustix::net::sockopt::socket_peercred(&sock) {
                Ok(c) => Peer {
                    pid: c.pid.as_raw_nonzero().get() as u32,
                    uid: c.uid.as_raw(),
                    gid: c.gid.as_raw(),
                },
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
