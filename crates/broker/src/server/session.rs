//! Serving connections: requests read within each user's turn, replies
//! queued and flushed (see the module docs of [`super`]).

use super::accept::{held_back, pidfd_ended};
use super::{Broker, SESSION};
use crate::core::Effect;
use crate::log::{debug, warn};
use crate::peer::SessionId;
use allot_proto::msg::{ErrorCode, MAX_MESSAGE, Reply, Request, header_kind, kind_expects_reply};
use allot_proto::transport;
use rustix::event::epoll::{self, EventData, EventFlags};
use rustix::fd::AsFd;
use rustix::time::Timespec;
use std::time::Instant;

/// Request units served per user per loop iteration, across its
/// connections.
pub const USER_TURN: u32 = 32;
/// Units a status or kind listing counts (cheap requests count one).
pub const EXPENSIVE: u32 = 8;

fn cost(req: &Request) -> u32 {
    match req {
        Request::Status | Request::KindList { .. } => EXPENSIVE,
        _ => 1,
    }
}

/// Bytes of replies queued for a session that does not read before it is
/// dropped (a status document of thousands of cells fits).
pub const MAX_QUEUED_BYTES: usize = 2 << 20;

impl Broker {
    pub(super) fn on_session(&mut self, id: SessionId, flags: EventFlags) {
        if flags.contains(EventFlags::OUT) {
            self.flush(id);
        }
        if !flags.intersects(EventFlags::IN | EventFlags::HUP | EventFlags::RDHUP | EventFlags::ERR)
        {
            return;
        }
        loop {
            let Some(s) = self.sessions.get(&id) else {
                return;
            };
            let mut peer = s.peer;
            if self.turn.get(&peer.uid).copied().unwrap_or(0) >= USER_TURN {
                break; // this user's turn is over; the rest waits
            }
            let got = transport::recv(s.sock.as_fd(), &mut self.buf, true);
            let d = match got {
                Ok(Some(d)) => d,
                Ok(None) if peer_gone(s.sock.as_fd()) => return self.close(id),
                Ok(None) => {
                    let reply = Reply::error(
                        ErrorCode::Malformed,
                        0,
                        "an empty message is not a request (every message starts with a 12-byte header)",
                    );
                    self.apply(vec![Effect::Reply {
                        session: id,
                        reply,
                        fds: vec![],
                    }]);
                    *self.turn.entry(peer.uid).or_default() += 1;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    debug!("session {id}: {e}");
                    return self.close(id);
                }
            };
            // Whether the process that connected still runs, as of this
            // message (see `Peer::runs`).
            peer.runs = s.pidfd.as_ref().map(|fd| !pidfd_ended(fd));
            let mut units = 1;
            // A datagram whose header names a one-way kind is never
            // answered, even when the rest of it is wrong (see
            // `header_kind`).
            let named = header_kind(&self.buf[..d.len.min(self.buf.len())]);
            let one_way = named.is_some_and(|k| !kind_expects_reply(k));
            let effects = if (d.truncated || d.len > MAX_MESSAGE) && one_way {
                debug!("session {id}: an oversized one-way message was dropped");
                vec![]
            } else if d.truncated || d.len > MAX_MESSAGE {
                vec![Effect::Reply {
                    session: id,
                    reply: Reply::error(
                        ErrorCode::Oversized,
                        0,
                        format!("message exceeds the {MAX_MESSAGE}-byte limit"),
                    ),
                    fds: vec![],
                }]
            } else {
                match Request::decode(&self.buf[..d.len]) {
                    Ok(Request::ChannelRejoin { name, send }) => {
                        self.core.channel_rejoin(id, peer, &name, send, d.fds)
                    }
                    Ok(req) => {
                        units = cost(&req);
                        let fd = if matches!(req, Request::Rejoin { .. }) {
                            d.fds.into_iter().next()
                        } else {
                            None
                        };
                        if matches!(req, Request::Register { .. }) {
                            self.catch_up_journal();
                        }
                        self.core.handle(id, peer, req, fd)
                    }
                    Err(e) => {
                        debug!("session {id}: bad message: {e}");
                        if one_way
                            || (e.request_kind() != 0 && !kind_expects_reply(e.request_kind()))
                        {
                            vec![] // one-way: never answered
                        } else {
                            vec![Effect::Reply {
                                session: id,
                                reply: Reply::error(e.code(), e.request_kind(), e.to_string()),
                                fds: vec![],
                            }]
                        }
                    }
                }
            };
            *self.turn.entry(peer.uid).or_default() += units;
            self.apply(effects);
        }
    }

    pub(super) fn close(&mut self, id: SessionId) {
        if let Some(s) = self.sessions.remove(&id) {
            let _ = epoll::delete(&self.epoll, &s.sock);
            if let Some(n) = self.conns.get_mut(&s.peer.uid) {
                *n -= 1;
                if *n == 0 {
                    self.conns.remove(&s.peer.uid);
                }
            }
            debug!("session {id} closed");
        }
        let effects = self.core.session_closed(id);
        self.apply(effects);
    }

    pub(super) fn apply(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Journal(recs) => self.record(&recs),
                Effect::Reply {
                    session,
                    reply,
                    fds,
                } => {
                    let Some(s) = self.sessions.get_mut(&session) else {
                        continue;
                    };
                    let bytes = reply.encode();
                    if s.out_bytes + bytes.len() > MAX_QUEUED_BYTES {
                        let uid = s.peer.uid;
                        if let Some(held) = self.slow_log.allow(Instant::now()) {
                            warn!(
                                "session {session} (uid {uid}) is not reading its replies; \
                                 disconnecting it{}",
                                held_back(held)
                            );
                        }
                        self.close(session);
                        continue;
                    }
                    s.out_bytes += bytes.len();
                    s.out.push_back((bytes, fds));
                    self.flush(session);
                }
                Effect::Watch(pid) => self.watch(pid),
                Effect::WatchDoorbell { cell, fds } => self.watch_doorbells(cell, fds),
                Effect::ForgetDoorbell(cell) => self.forget_doorbells(cell),
                Effect::Unwatch(pid) => {
                    self.polled.remove(&pid);
                    if let Some(fd) = self.pidfds.remove(&pid) {
                        let _ = epoll::delete(&self.epoll, &fd);
                    }
                }
            }
        }
    }

    pub(super) fn flush(&mut self, id: SessionId) {
        let Some(s) = self.sessions.get_mut(&id) else {
            return;
        };
        while let Some((bytes, fds)) = s.out.front() {
            let fds: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
            match transport::send_fds(s.sock.as_fd(), bytes, &fds) {
                Ok(()) => {
                    s.out_bytes -= bytes.len();
                    s.out.pop_front();
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    debug!("session {id}: send failed: {e}");
                    s.out.clear();
                    s.out_bytes = 0;
                    break;
                }
            }
        }
        let want = !s.out.is_empty();
        if want != s.writable_wanted {
            s.writable_wanted = want;
            let flags = if want {
                EventFlags::IN | EventFlags::RDHUP | EventFlags::OUT
            } else {
                EventFlags::IN | EventFlags::RDHUP
            };
            let _ = epoll::modify(
                &self.epoll,
                &s.sock,
                EventData::new_u64(SESSION | id),
                flags,
            );
        }
    }
}

/// Whether the peer of `sock` has closed its end (a zero-length read was
/// end of stream, not an empty datagram).
pub(super) fn peer_gone(sock: rustix::fd::BorrowedFd<'_>) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = [PollFd::new(&sock, PollFlags::RDHUP)];
    match rustix::event::poll(
        &mut fds,
        Some(&Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    ) {
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
        Err(_) => true,
    }
}
