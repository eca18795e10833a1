//! Who the broker talks to: a connection's id ([`SessionId`]) and the
//! credentials of the process at its other end ([`Peer`]). Defined below
//! every part that keeps per-connection state (the engine, channels, the
//! status), so none of them reaches up into another for it.

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
    /// Whether the connecting process still ran as the message in hand was
    /// taken up, where the connection keeps the kernel's pidfd for it
    /// (`SO_PEERPIDFD`, Linux 6.5): asked of the pidfd, one system call,
    /// and exact (a pidfd names one process, never a later one at the same
    /// pid). `None`: no pidfd; whether it runs is read from `/proc`
    /// against `start`.
    pub runs: Option<bool>,
}

impl Peer {
    /// Whether the per-user limits apply to this peer (everyone but root).
    pub fn limited(&self) -> bool {
        self.uid != 0
    }
}
