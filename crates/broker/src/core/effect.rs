//! What the state machine tells the event loop: the [`Effect`]s every
//! entry point of `Engine` returns (records for the journal; replies, with
//! the descriptors they carry; processes and doorbells to watch).

use crate::journal::Record;
use crate::peer::SessionId;
use allot_proto::msg::{ErrorCode, Reply};

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
