//! The link between a process's require runtime and the broker's ledger.
//!
//! With a broker, each device's root in the process starts empty and holds
//! only what the broker granted. A request the root cannot cover asks the
//! broker for the shortfall (all of a request's shortfalls at once); a root
//! left with no allocation gives its amount back. Both travel on one
//! connection used under the runtime's lock; releases are sent without
//! waiting for a reply (the broker answers only if one is malformed).
//!
//! A thread that must wait for the broker is woken by a *watcher* thread
//! which parks a `KindWatch` at the broker and, when the ledger changes,
//! bumps the runtime's epoch so every waiting thread tries again. It runs
//! only while threads of this process wait.

use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use allot_proto::{Conn, DeviceDef};
use std::path::{Path, PathBuf};

/// A connection to the broker's ledger.
#[derive(Debug)]
pub struct Link {
    socket: PathBuf,
    conn: Conn,
}

/// Why the broker did not grant something.
#[derive(Debug, Clone, PartialEq)]
pub enum Denied {
    /// Not available now (the broker's reason).
    NotNow(String),
    /// The broker cannot be reached.
    Gone(String),
}

impl Link {
    /// Connects to the broker at `socket`.
    pub fn connect(socket: &Path) -> Option<Link> {
        let conn = Conn::connect(socket).ok()?;
        conn.set_timeout(Some(std::time::Duration::from_secs(10)))
            .ok()?;
        Some(Link {
            socket: socket.to_path_buf(),
            conn,
        })
    }

    /// The socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Receives the reply to the last call, skipping late errors about
    /// earlier releases.
    fn reply(&mut self) -> Result<Reply, Denied> {
        loop {
            match self.conn.recv() {
                Ok((Reply::Error { request: 0x0D, .. }, _)) => continue,
                Ok((r, _)) => return Ok(r),
                Err(e) => return Err(Denied::Gone(e.to_string())),
            }
        }
    }

    /// Takes `items` for this process, all or nothing.
    pub fn acquire(&mut self, items: Vec<LedgerItem>) -> Result<(), Denied> {
        self.conn
            .send(&Request::KindAcquire { items })
            .map_err(|e| Denied::Gone(e.to_string()))?;
        match self.reply()? {
            Reply::Ok => Ok(()),
            Reply::Error {
                code: ErrorCode::Refused,
                message,
                ..
            } => Err(Denied::NotNow(message)),
            Reply::Error { message, .. } => Err(Denied::Gone(message)),
            other => Err(Denied::Gone(format!("unexpected reply {other:?}"))),
        }
    }

    /// Gives `items` back (no reply awaited).
    pub fn release(&mut self, items: Vec<LedgerItem>) {
        let _ = self.conn.send(&Request::KindRelease { items });
    }

    /// Defines a virtual kind for every process.
    pub fn define(&mut self, name: &str, devices: Vec<DeviceDef>) -> Result<(), String> {
        self.conn
            .send(&Request::KindDefine {
                name: name.into(),
                devices,
            })
            .map_err(|e| e.to_string())?;
        match self.reply() {
            Ok(Reply::Ok) => Ok(()),
            Ok(Reply::Error { message, .. }) => Err(message),
            Ok(other) => Err(format!("unexpected reply {other:?}")),
            Err(Denied::Gone(e) | Denied::NotNow(e)) => Err(e),
        }
    }
}

/// Waits until the ledger's epoch passes `epoch` (a blocking call on a
/// connection of its own). Returns the new epoch and the system-wide
/// waiters, or `None` if the broker went away.
pub fn watch(socket: &Path, epoch: u64, waiting: u32) -> Option<(u64, u32)> {
    let mut conn = Conn::connect(socket).ok()?;
    conn.send(&Request::KindWatch { epoch, waiting }).ok()?;
    match conn.recv().ok()?.0 {
        Reply::Changed { epoch, waiters } => Some((epoch, waiters)),
        _ => None,
    }
}
