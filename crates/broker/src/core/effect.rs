//! What the state machine tells the event loop, and who it talks to: the
//! [`Effect`]s every entry point of `Engine` returns (records for the
//! journal; replies, with the descriptors they carry; processes and
//! doorbells to watch), sessions and their peers' credentials.

use crate::journal::Record;
use allot_proto::msg::{ErrorCode, Reply};

/// Identifies a client connection.
pub type SessionId = u64;

/// The credentials of a connected client (`SO_PEERCRED`), and the
/// connecting process pinned: its pid alone would name whichever process
/// reuses the number once it ends, while the connection lives on in a child
/// that inherited it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Process id at connect time.
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// The connecting process's start time (clock ticks after boot), read
    /// when the broker accepted the connection, through the pidfd the
    /// kernel hands for the peer where it can (`SO_PEERPIDFD`, Linux 6.5):
    /// `pid` names the connecting process only while the process at `pid`
    /// started then. `None`: it had ended before the broker accepted.
    pub start: Option<u64>,
}

impl Peer {
    /// Whether the per-user limits apply to this peer (everyone but root).
    pub fn limited(&self) -> bool {
        self.uid != 0
    }
}

/// Something the event loop must do.
#[derive(Debug)]
pub enum Effect {
    /// Append these records to the journal, before any later effect of
    /// the same step, then tell the engine whether it is behind
    /// (`Engine::journaled`). Always an entry point's first effect.
    Journal(Vec<Record>),
    /// Send `reply` (with `fds` attached) on `session`.
    Reply {
        session: SessionId,
        reply: Reply,
        /// File descriptors to pass (at most `transport::MAX_FDS`).
        fds: Vec<rustix::fd::OwnedFd>,
    },
    /// Start watching `pid` for exit.
    Watch(u32),
    /// Stop watching `pid`.
    Unwatch(u32),
    /// Poll these doorbells (a channel's data eventfd, never read) and
    /// call `Engine::doorbell(cell)` when one rings (`core::message`).
    WatchDoorbell {
        /// The idle message-triggered cell they wake.
        cell: u64,
        /// Copies of the doorbells.
        fds: Vec<rustix::fd::OwnedFd>,
    },
    /// Stop polling cell `.0`'s doorbells.
    ForgetDoorbell(u64),
}

/// A reply to `session`, without a descriptor.
pub(crate) fn answer(session: SessionId, reply: Reply) -> Effect {
    Effect::Reply {
        session,
        reply,
        fds: vec![],
    }
}

pub(crate) fn err(code: ErrorCode, req: u16, msg: impl Into<String>) -> Reply {
    Reply::error(code, req, msg)
}
