//! Arrivals (`core/arrival.rs` is the engine's side: when newcomers join,
//! and the groups made ahead): an admitted cell waiting for its processes
//! to join, and when the next cell's groups may be made ahead.

use crate::peer::SessionId;

/// An admitted cell whose member processes have not joined yet.
#[derive(Debug)]
pub(in crate::core) struct Arriving {
    pub(in crate::core) id: u64,
    pub(in crate::core) members: Vec<u32>,
    pub(in crate::core) session: SessionId,
    pub(in crate::core) token: u64,
    /// Its registering process moves itself in, through the join files
    /// sent with the reply, when the backend has them.
    pub(in crate::core) joins_itself: bool,
    /// The registering process and its start time as read when it
    /// connected: not read from `/proc` again.
    pub(in crate::core) registrant: Option<(u32, u64)>,
}

/// When the next cell's groups may be made ahead (`Enforcer::make_ahead`;
/// which id they are made for is the backend's to say,
/// `Enforcer::made_ahead`).
#[derive(Debug, Default)]
pub(in crate::core) struct Ahead {
    /// A cell whose registering process was handed its join files and
    /// has not yet added the program it starts: its moves take the
    /// kernel's cgroup lock, which making directories holds, so nothing
    /// is made until it adds the program or the next tick.
    joining: Option<u64>,
    /// Whether a failure to make them was logged (once is enough: the
    /// registration makes its groups itself and says why if it cannot).
    warned: bool,
}

impl Ahead {
    /// The cell whose registering process was handed its join files and
    /// has not added its program yet.
    pub(in crate::core) fn joining(&self) -> Option<u64> {
        self.joining
    }

    pub(in crate::core) fn set_joining(&mut self, cell: Option<u64>) {
        self.joining = cell;
    }

    /// Whether this failure to make groups ahead is the first (the one to
    /// log).
    pub(in crate::core) fn first_failure(&mut self) -> bool {
        !std::mem::replace(&mut self.warned, true)
    }
}
