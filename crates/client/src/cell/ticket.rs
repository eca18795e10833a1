//! Tickets: one cell shared by processes a launcher starts at different
//! times (the steps of one batch job on a node).
//!
//! A [`Ticket`] is a registered cell's id and token, the secret the broker
//! gave its registrant. Whoever holds it and may act on the cell (its user,
//! or root) can [`Cell::attach`]: the broker hands that process the cell's
//! grant page (`Rejoin`) and makes it a member (`AddMember`), so the
//! children it starts afterwards run in the cell. Keep a ticket where only
//! that user can read it. An attached cell is [`Mode::Joined`]: dropping it
//! leaves the cell to its processes, which end it when they are gone.
//!
//! Text form: `ID:TOKEN`, both decimal.

use super::{Cell, Link, Mode};
use crate::conn::{Client, ClientError};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

/// A registered cell's id and token.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Ticket {
    /// The cell's id.
    pub cell: u64,
    /// Its token (a secret).
    pub token: u64,
}

impl fmt::Debug for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a secret: never in logs.
        write!(f, "Ticket {{ cell: {}, token: … }}", self.cell)
    }
}

impl fmt::Display for Ticket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.cell, self.token)
    }
}

impl FromStr for Ticket {
    type Err = String;
    fn from_str(s: &str) -> Result<Ticket, String> {
        // Not echoed: a malformed ticket may still hold most of a secret.
        let bad = || "not a ticket: expected ID:TOKEN, two decimal numbers above 0".to_string();
        let (cell, token) = s.trim().split_once(':').ok_or_else(bad)?;
        let cell: u64 = cell.parse().map_err(|_| bad())?;
        let token: u64 = token.parse().map_err(|_| bad())?;
        if cell == 0 || token == 0 {
            return Err(bad());
        }
        Ok(Ticket { cell, token })
    }
}

impl Cell {
    /// The ticket of a cell this process registered (`None` for other
    /// modes).
    pub fn ticket(&self) -> Option<Ticket> {
        if self.mode() != Mode::Registered {
            return None;
        }
        let token = self.inner.token.load(std::sync::atomic::Ordering::Acquire);
        (token != 0).then(|| Ticket {
            cell: self.id(),
            token,
        })
    }

    /// Makes this process a member of the cell `ticket` names at the broker
    /// on `socket`, and returns it ([`Mode::Joined`]). Errors: the broker's
    /// (`UnknownCell` once the cell ended, `PermissionDenied` for a wrong
    /// token or another user's cell, `Invalid` when this process already
    /// is in a cell), or the connection's.
    pub fn attach(socket: &Path, ticket: Ticket) -> Result<Cell, ClientError> {
        Cell::attach_with(socket, ticket, true)
    }

    /// [`Cell::attach`] for a process that stays in the cgroup it is in
    /// (see `Options::stays_put`): it gets the cell's grant page and is
    /// not made a member; the cell reaches its launcher's processes
    /// through the cgroups given with [`include_group`].
    pub fn attach_in_place(socket: &Path, ticket: Ticket) -> Result<Cell, ClientError> {
        Cell::attach_with(socket, ticket, false)
    }

    fn attach_with(socket: &Path, ticket: Ticket, member: bool) -> Result<Cell, ClientError> {
        let mut client = Client::connect(socket)?;
        let page = client.rejoin(ticket.cell, ticket.token, None)?;
        if member {
            client.add_member(ticket.cell, std::process::id())?;
        }
        Ok(Cell::from_parts(
            Mode::Joined,
            Arc::new(page),
            Link {
                id: ticket.cell,
                socket: Some(socket.to_path_buf()),
                ..Link::default()
            },
            None,
            None,
        ))
    }
}

/// Makes the cell `ticket` names at the broker on `socket` also confine
/// `dir`, a cgroup v2 directory a launcher made for its processes (Slurm's
/// step `user` group): the broker writes the cell's CPUs there and moves
/// no process. Root only; errors say why the directory cannot be one
/// (not a cgroup, allot's own, another hierarchy, no cpuset controller,
/// a backend without cgroup v2).
pub fn include_group(socket: &Path, ticket: Ticket, dir: &Path) -> Result<(), ClientError> {
    // cgroup names are UTF-8 in practice; a path that is not cannot name
    // a cgroup once converted, and the broker says so.
    Client::connect(socket)?.include_group(ticket.cell, ticket.token, &dir.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_reads_back_what_it_writes_and_refuses_anything_else() {
        let t = Ticket {
            cell: 7,
            token: 123456789,
        };
        assert_eq!(t.to_string().parse::<Ticket>(), Ok(t));
        assert_eq!(" 7:123456789\n".parse::<Ticket>(), Ok(t));
        for bad in ["", "7", "7:", ":5", "0:5", "7:0", "x:1", "7:1:2", "-1:3"] {
            assert!(bad.parse::<Ticket>().is_err(), "{bad:?}");
        }
        assert!(!format!("{t:?}").contains("123456789"));
    }
}
