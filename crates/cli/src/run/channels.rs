//! `allot run --channel NAME:send|recv`: channel ends the program inherits.
//!
//! Each end is opened through the broker on a connection of its own that
//! this process keeps until the program exits, so the broker counts the end
//! open exactly as long as the program can use it, and tells the other
//! side when it exits or is killed. The descriptors are made inheritable
//! and named in `ALLOT_CHANNELS` (`allot_client::inherited`).

use allot_client::inherited::{self, Entry};
use allot_client::{ChannelEnd, ChannelKeeper};
use rustix::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// One `--channel` argument.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelArg {
    pub name: String,
    pub send: bool,
}

impl std::str::FromStr for ChannelArg {
    type Err = String;
    fn from_str(s: &str) -> Result<ChannelArg, String> {
        let (name, end) = s
            .rsplit_once(':')
            .ok_or_else(|| format!("{s:?}: say which end, NAME:send or NAME:recv"))?;
        let send = match end {
            "send" => true,
            "recv" | "receive" => false,
            _ => return Err(format!("{s:?}: the end is send or recv, not {end:?}")),
        };
        allot_channel::check_name(name)?;
        Ok(ChannelArg {
            name: name.into(),
            send,
        })
    }
}

/// The open ends: kept until the program exits (and handed back to a
/// broker that restarts meanwhile).
pub struct Held {
    _conn: ChannelKeeper,
    _fds: Vec<OwnedFd>,
    /// `ALLOT_CHANNELS` for the program.
    pub var: String,
}

/// Opens every end in `wanted` through the broker at `socket`.
pub fn open(socket: &Path, wanted: &[ChannelArg]) -> anyhow::Result<Held> {
    use anyhow::Context;
    let conn = ChannelKeeper::connect(socket).context("cannot reach the broker for --channel")?;
    let mut fds = Vec::new();
    let mut entries = Vec::new();
    for w in wanted {
        let end = if w.send {
            ChannelEnd::Send
        } else {
            ChannelEnd::Receive
        };
        let ch = conn
            .open(&w.name, end, 0, 0)
            .with_context(|| format!("--channel {}", w.name))?;
        let mut nums = [0; 3];
        for (i, fd) in ch.fds().iter().enumerate() {
            let inheritable = rustix::io::fcntl_dupfd_cloexec(fd, 3)?;
            rustix::io::fcntl_setfd(&inheritable, rustix::io::FdFlags::empty())?;
            nums[i] = inheritable.as_raw_fd();
            fds.push(inheritable);
        }
        entries.push(Entry {
            name: w.name.clone(),
            send: w.send,
            fds: nums,
        });
    }
    Ok(Held {
        _conn: conn,
        _fds: fds,
        var: inherited::encode(&entries),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_name_an_end() {
        let a: ChannelArg = "frames.in:recv".parse().unwrap();
        assert_eq!((a.name.as_str(), a.send), ("frames.in", false));
        assert!("jobs:send".parse::<ChannelArg>().unwrap().send);
        for bad in ["jobs", "jobs:both", "a/b:send", ":send"] {
            assert!(bad.parse::<ChannelArg>().is_err(), "{bad}");
        }
    }
}
