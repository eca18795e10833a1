//! Channels a program inherited from `allot run --channel NAME:send|recv`.
//!
//! `allot run` opens each channel end through the broker, keeps it open
//! for as long as the program runs (the broker counts the end against
//! `allot run`'s connection, so the other side learns when the program
//! exits or is killed), and passes the three descriptors to the program,
//! named in [`allot_proto::env::CHANNELS`]: `NAME:send:M,D,S;…`. The
//! program takes each end once with [`sender`] or [`receiver`]; the memory
//! is checked like any channel's (`allot_channel::Channel::open`).

use crate::ClientError;
use allot_channel::{Channel, Receiver, Sender};
use rustix::fd::{FromRawFd, OwnedFd, RawFd};
use std::collections::HashSet;
use std::sync::Mutex;

/// One inherited end, as the variable names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The channel's name.
    pub name: String,
    /// The sending end (else the receiving end).
    pub send: bool,
    /// Descriptor numbers: memory, data doorbell, space doorbell.
    pub fds: [RawFd; 3],
}

/// The variable's value for `entries`.
pub fn encode(entries: &[Entry]) -> String {
    entries
        .iter()
        .map(|e| {
            format!(
                "{}:{}:{},{},{}",
                e.name,
                if e.send { "send" } else { "recv" },
                e.fds[0],
                e.fds[1],
                e.fds[2]
            )
        })
        .collect::<Vec<_>>()
        .join(";")
}

/// Reads the variable's value.
pub fn parse(value: &str) -> Result<Vec<Entry>, String> {
    value
        .split(';')
        .filter(|s| !s.is_empty())
        .map(|item| {
            let bad = || {
                format!(
                    "{}: {item:?} is not NAME:send|recv:M,D,S",
                    allot_proto::env::CHANNELS
                )
            };
            let mut parts = item.split(':');
            let (Some(name), Some(end), Some(fds), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let send = match end {
                "send" => true,
                "recv" => false,
                _ => return Err(bad()),
            };
            let fds: Vec<RawFd> = fds
                .split(',')
                .map(|f| f.parse::<RawFd>().ok().filter(|f| *f >= 0))
                .collect::<Option<_>>()
                .ok_or_else(bad)?;
            let fds: [RawFd; 3] = fds.try_into().map_err(|_| bad())?;
            if name.is_empty() {
                return Err(bad());
            }
            Ok(Entry {
                name: name.into(),
                send,
                fds,
            })
        })
        .collect()
}

/// Ends already taken by this process (each descriptor is owned once).
static TAKEN: Mutex<Option<HashSet<(String, bool)>>> = Mutex::new(None);

fn take(name: &str, send: bool) -> Result<Channel, ClientError> {
    let missing = |why: String| ClientError::Protocol(why);
    let value = std::env::var(allot_proto::env::CHANNELS).map_err(|_| {
        missing(format!(
            "no inherited channels ({} is not set; run the program with allot run --channel {name}:{})",
            allot_proto::env::CHANNELS,
            if send { "send" } else { "recv" }
        ))
    })?;
    let entries = parse(&value).map_err(missing)?;
    let e = entries
        .into_iter()
        .find(|e| e.name == name && e.send == send)
        .ok_or_else(|| {
            missing(format!(
                "channel {name} was not passed for {} (allot run --channel {name}:{})",
                if send { "sending" } else { "receiving" },
                if send { "send" } else { "recv" }
            ))
        })?;
    let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
    if !taken
        .get_or_insert_with(HashSet::new)
        .insert((name.into(), send))
    {
        return Err(missing(format!(
            "channel {name}'s inherited end was taken already"
        )));
    }
    for fd in e.fds {
        // SAFETY: only reads the flags of a descriptor number; an unused
        // number fails with EBADF, nothing else happens.
        let open = unsafe { rustix::io::fcntl_getfd(rustix::fd::BorrowedFd::borrow_raw(fd)) };
        if open.is_err() {
            return Err(missing(format!(
                "channel {name}: descriptor {fd} is not open in this process"
            )));
        }
    }
    // SAFETY: the descriptors are open (checked above), were passed to
    // this process for this end, and are taken once (`TAKEN`).
    let [m, d, s] = e.fds.map(|fd| unsafe { OwnedFd::from_raw_fd(fd) });
    for fd in [&m, &d, &s] {
        // Not to be inherited further.
        let _ = rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC);
    }
    Ok(Channel::open(m, d, s)?)
}

/// The sending end of channel `name` that `allot run` passed.
pub fn sender(name: &str) -> Result<Sender, ClientError> {
    Ok(take(name, true)?.managed_sender())
}

/// The receiving end of channel `name` that `allot run` passed.
pub fn receiver(name: &str) -> Result<Receiver, ClientError> {
    Ok(take(name, false)?.managed_receiver())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_bad_values_are_named() {
        let es = vec![
            Entry {
                name: "jobs".into(),
                send: true,
                fds: [3, 4, 5],
            },
            Entry {
                name: "out.1".into(),
                send: false,
                fds: [6, 7, 8],
            },
        ];
        assert_eq!(encode(&es), "jobs:send:3,4,5;out.1:recv:6,7,8");
        assert_eq!(parse(&encode(&es)).unwrap(), es);
        assert_eq!(parse("").unwrap(), vec![]);
        for bad in [
            "jobs",
            "jobs:both:3,4,5",
            "jobs:send:3,4",
            "jobs:send:a,4,5",
            "x:send:3,4,5:9",
            ":send:3,4,5",
            "j:send:-1,4,5",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("NAME:send|recv"), "{bad}: {e}");
        }
    }
}
