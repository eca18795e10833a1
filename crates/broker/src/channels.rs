//! Named channels (Tessellation's inter-cell channels): the broker makes
//! them, decides who may open them, hands out their descriptors and tells
//! each end when the other is gone.
//!
//! A channel is an `allot_channel::Channel` kept under a name. `open`
//! creates it on first use (bounded per user: `limits.channels` channels
//! and `limits.channel_mib` MiB of memory) and counts the end for the
//! opening session; the ends the broker hands out are *managed*
//! (`Channel::managed_sender`), so their counts change only here: when the
//! session closes the end (`ChannelClose`), and when the session closes —
//! which a process that dies does without asking. The other side then
//! sees the end gone (`Disconnected`), with its doorbell rung.
//!
//! Who may open: the creator's user, root, and the users a
//! `[[channel_acl]]` entry of the configuration names for that channel.
//! There is one receiver at a time. A channel is dropped when no session
//! holds an end and no message waits in it.
//!
//! Invariant: every end counted in a channel's memory by the broker is
//! one entry of `ends` for a live session (checked by the tests below).

use crate::config::{ChannelAcl, Limits};
use crate::peer::SessionId;
use allot_channel::{Channel, Geometry};
use allot_proto::msg::ErrorCode;
use rustix::fd::OwnedFd;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Slots of a channel whose opener did not say.
pub const DEFAULT_SLOTS: usize = 64;

/// Longest message of a channel whose opener did not say: a slot of 4 KiB.
pub const DEFAULT_MESSAGE_MAX: usize = 4096 - allot_channel::layout::SLOT_HEADER;

use allot_channel::check_name;

#[derive(Debug)]
struct Named {
    uid: u32,
    channel: Channel,
    /// (session, sending end) per end the broker counted.
    ends: Vec<(SessionId, bool)>,
    /// The cell whose process opened the receiving end, while it is open
    /// (a message-triggered cell is woken by its channels' doorbells).
    receiver_cell: Option<u64>,
    /// Adopted after a broker restart: until then, ends may still come
    /// back (`adopt`), and the counts in memory are the old broker's.
    adopting_until: Option<Instant>,
}

/// How long after a broker adopts a channel its other ends may come back
/// before the counts in its memory are set to the ends that did.
pub const REJOIN_GRACE: Duration = Duration::from_secs(2);

/// The broker's named channels, and who besides their creators may open
/// them.
#[derive(Debug, Default)]
pub struct Channels {
    named: BTreeMap<String, Named>,
    acl: Vec<ChannelAcl>,
}

/// Whether `uid` may open channel `name`, which uid `owner` created: root,
/// the owner, and those a `[[channel_acl]]` entry lists for it.
fn may_open(acl: &[ChannelAcl], uid: u32, owner: u32, name: &str) -> bool {
    uid == 0 || uid == owner || acl.iter().any(|a| a.name == name && a.uids.contains(&uid))
}

/// An end handed out: the channel's geometry and its three descriptors.
#[derive(Debug)]
pub struct Opened {
    pub geometry: Geometry,
    pub fds: Vec<OwnedFd>,
}

/// What the status shows of a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown {
    pub name: String,
    pub uid: u32,
    pub geometry: Geometry,
    pub senders: u32,
    pub receiver: bool,
    pub waiting: usize,
}

impl Channels {
    /// No channels yet; `acl` names who besides a channel's creator may
    /// open it.
    pub fn new(acl: Vec<ChannelAcl>) -> Channels {
        Channels {
            named: BTreeMap::new(),
            acl,
        }
    }

    /// Opens an end of `name` for `session` of user `uid`, creating the
    /// channel if needed (`slots`, `message_max`: 0 for the default, or
    /// whatever an existing channel has). Errors carry the code and what
    /// to do.
    #[allow(clippy::too_many_arguments)]
    pub fn open(
        &mut self,
        session: SessionId,
        uid: u32,
        cell: Option<u64>,
        name: &str,
        send: bool,
        slots: u32,
        message_max: u32,
        limits: &Limits,
    ) -> Result<Opened, (ErrorCode, String)> {
        check_name(name).map_err(|e| (ErrorCode::Malformed, e))?;
        if !self.named.contains_key(name) {
            let want = Geometry::new(
                if slots == 0 {
                    DEFAULT_SLOTS
                } else {
                    slots as usize
                },
                if message_max == 0 {
                    DEFAULT_MESSAGE_MAX
                } else {
                    message_max as usize
                },
            )
            .map_err(|e| (ErrorCode::Malformed, format!("channel {name}: {e}")))?;
            self.check_limits(uid, want, limits)?;
            let g = want;
            let channel = Channel::create(g.slots, g.message_max())
                .map_err(|e| (ErrorCode::Internal, format!("channel {name}: {e}")))?;
            self.named.insert(
                name.to_string(),
                Named {
                    uid,
                    channel,
                    ends: Vec::new(),
                    receiver_cell: None,
                    adopting_until: None,
                },
            );
        }
        let n = self.named.get_mut(name).expect("inserted above");
        if !may_open(&self.acl, uid, n.uid, name) {
            return Err((
                ErrorCode::PermissionDenied,
                format!(
                    "channel {name} belongs to uid {}; its owner's configuration must list you \
                     in a [[channel_acl]] entry for it",
                    n.uid
                ),
            ));
        }
        let g = n.channel.geometry();
        if slots as usize > g.slots || message_max as usize > g.message_max() {
            return Err((
                ErrorCode::Refused,
                format!(
                    "channel {name} exists with {} slots of messages up to {} bytes; ask for \
                     those (or 0)",
                    g.slots,
                    g.message_max()
                ),
            ));
        }
        if send {
            n.channel.attach_sender();
        } else if !n.channel.attach_receiver() {
            return Err((
                ErrorCode::Refused,
                format!("channel {name} has a receiver already (there is one at a time)"),
            ));
        }
        let fds = n
            .channel
            .fds()
            .iter()
            .map(|f| f.try_clone_to_owned())
            .collect::<Result<Vec<_>, _>>();
        let fds = match fds {
            Ok(fds) => fds,
            Err(e) => {
                detach(n, send);
                return Err((ErrorCode::Internal, format!("channel {name}: {e}")));
            }
        };
        n.ends.push((session, send));
        if !send {
            n.receiver_cell = cell;
        }
        Ok(Opened { geometry: g, fds })
    }

    fn check_limits(
        &self,
        uid: u32,
        g: Geometry,
        limits: &Limits,
    ) -> Result<(), (ErrorCode, String)> {
        if uid == 0 {
            return Ok(());
        }
        let mine: Vec<&Named> = self.named.values().filter(|n| n.uid == uid).collect();
        if mine.len() >= limits.channels as usize {
            return Err((
                ErrorCode::Limit,
                format!(
                    "you have {} named channels, the most one user may (limits.channels); close \
                     some first",
                    mine.len()
                ),
            ));
        }
        let bytes: usize = mine
            .iter()
            .map(|n| n.channel.geometry().bytes())
            .sum::<usize>()
            + g.bytes();
        if bytes > (limits.channel_mib as usize) << 20 {
            return Err((
                ErrorCode::Limit,
                format!(
                    "{} MiB of channel memory with this one, over the {} MiB one user may \
                     (limits.channel_mib); ask for fewer or smaller slots",
                    bytes.div_ceil(1 << 20),
                    limits.channel_mib
                ),
            ));
        }
        Ok(())
    }

    /// Takes back an end that was open before a broker restart: its
    /// holder hands over the channel's descriptors. The channel is adopted
    /// under `name` if this broker does not know it (its memory checked
    /// like any channel's), or must be the very channel it knows. The end
    /// was counted in the memory by the old broker and is not counted
    /// again; [`Channels::settle`] later sets the counts to the ends that
    /// came back.
    #[allow(clippy::too_many_arguments)]
    pub fn adopt(
        &mut self,
        session: SessionId,
        uid: u32,
        cell: Option<u64>,
        name: &str,
        send: bool,
        fds: Vec<OwnedFd>,
        limits: &Limits,
        now: Instant,
    ) -> Result<(), (ErrorCode, String)> {
        check_name(name).map_err(|e| (ErrorCode::Malformed, e))?;
        let [mem, data, space]: [OwnedFd; 3] = fds.try_into().map_err(|v: Vec<OwnedFd>| {
            (
                ErrorCode::Malformed,
                format!(
                    "ChannelRejoin carries the channel's 3 descriptors, not {}",
                    v.len()
                ),
            )
        })?;
        let channel = Channel::open(mem, data, space)
            .map_err(|e| (ErrorCode::Invalid, format!("channel {name}: {e}")))?;
        if !self.named.contains_key(name) {
            // Adopting makes the broker keep (and map) it: bounded per
            // user like creating.
            self.check_limits(uid, channel.geometry(), limits)?;
        }
        let n = self.named.entry(name.to_string()).or_insert_with(|| Named {
            uid,
            channel: channel.clone(),
            ends: Vec::new(),
            receiver_cell: None,
            adopting_until: Some(now + REJOIN_GRACE),
        });
        if n.channel.identity() != channel.identity() {
            return Err((
                ErrorCode::Refused,
                format!("another channel is named {name} now; open it again under another name"),
            ));
        }
        if !may_open(&self.acl, uid, n.uid, name) {
            return Err((
                ErrorCode::PermissionDenied,
                format!("channel {name} belongs to uid {}", n.uid),
            ));
        }
        if !send && n.ends.iter().any(|e| !e.1) {
            return Err((
                ErrorCode::Refused,
                format!("channel {name} has a receiver already (there is one at a time)"),
            ));
        }
        // Within the grace the old broker's count includes this end; after
        // it (or on a channel this broker made) the end is counted now.
        if n.adopting_until.is_none() {
            if send {
                n.channel.attach_sender();
            } else {
                n.channel.attach_receiver();
            }
        }
        n.ends.push((session, send));
        if !send {
            n.receiver_cell = cell;
        }
        Ok(())
    }

    /// Sets the counts of channels adopted at least [`REJOIN_GRACE`] ago
    /// to the ends that came back (those that did not are gone: their
    /// other side is told).
    pub fn settle(&mut self, now: Instant) {
        let due: Vec<String> = self
            .named
            .iter()
            .filter(|(_, n)| n.adopting_until.is_some_and(|t| now >= t))
            .map(|(k, _)| k.clone())
            .collect();
        for name in due {
            let n = self.named.get_mut(&name).expect("listed above");
            n.adopting_until = None;
            let senders = n.ends.iter().filter(|e| e.1).count() as u32;
            let receiver = n.ends.iter().any(|e| !e.1);
            n.channel.reset_ends(senders, receiver);
            self.drop_unused(&name);
        }
    }

    /// Closes one end `session` opened of `name`; false if it holds none.
    pub fn close(&mut self, session: SessionId, name: &str, send: bool) -> bool {
        let Some(n) = self.named.get_mut(name) else {
            return false;
        };
        let Some(i) = n.ends.iter().position(|e| *e == (session, send)) else {
            return false;
        };
        n.ends.swap_remove(i);
        detach(n, send);
        self.drop_unused(name);
        true
    }

    /// Closes every end `session` held (it closed, or its process died).
    pub fn session_closed(&mut self, session: SessionId) {
        let names: Vec<String> = self
            .named
            .iter()
            .filter(|(_, n)| n.ends.iter().any(|e| e.0 == session))
            .map(|(k, _)| k.clone())
            .collect();
        for name in names {
            let n = self.named.get_mut(&name).expect("listed above");
            let mine: Vec<bool> = n
                .ends
                .iter()
                .filter(|e| e.0 == session)
                .map(|e| e.1)
                .collect();
            n.ends.retain(|e| e.0 != session);
            for send in mine {
                detach(n, send);
            }
            self.drop_unused(&name);
        }
    }

    fn drop_unused(&mut self, name: &str) {
        if self
            .named
            .get(name)
            .is_some_and(|n| n.ends.is_empty() && n.channel.is_empty())
        {
            self.named.remove(name);
        }
    }

    /// The channels whose receiving end a process of `cell` holds.
    pub fn receiving(&self, cell: u64) -> Vec<&Channel> {
        self.named
            .values()
            .filter(|n| n.receiver_cell == Some(cell))
            .map(|n| &n.channel)
            .collect()
    }

    /// The channels `viewer` may see (`None`: all).
    pub fn shown(&self, viewer: Option<u32>) -> Vec<Shown> {
        self.named
            .iter()
            .filter(|(_, n)| viewer.is_none_or(|v| v == n.uid))
            .map(|(name, n)| {
                let (senders, receiver) = n.channel.ends();
                Shown {
                    name: name.clone(),
                    uid: n.uid,
                    geometry: n.channel.geometry(),
                    senders,
                    receiver,
                    waiting: n.channel.len(),
                }
            })
            .collect()
    }
}

fn detach(n: &mut Named, send: bool) {
    if send {
        n.channel.detach_sender();
    } else {
        n.channel.detach_receiver();
        n.receiver_cell = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_channel::{Full, RecvError, SendError};

    fn open(
        c: &mut Channels,
        s: SessionId,
        uid: u32,
        name: &str,
        send: bool,
    ) -> Result<Channel, (ErrorCode, String)> {
        let o = c.open(s, uid, Some(7), name, send, 0, 0, &Limits::default())?;
        let [m, d, sp]: [OwnedFd; 3] = o.fds.try_into().unwrap();
        Ok(Channel::open(m, d, sp).unwrap())
    }

    /// The invariant: the counts in memory are the broker's entries.
    fn check_counts(c: &Channels) {
        for n in c.named.values() {
            let senders = n.ends.iter().filter(|e| e.1).count() as u32;
            let receivers = n.ends.iter().filter(|e| !e.1).count();
            assert!(receivers <= 1);
            assert_eq!(n.channel.ends(), (senders, receivers == 1));
        }
    }

    #[test]
    fn a_dead_session_s_ends_are_closed_for_the_other_side() {
        let mut c = Channels::default();
        let tx = open(&mut c, 1, 1000, "jobs", true).unwrap();
        let rx = open(&mut c, 2, 1000, "jobs", false).unwrap();
        check_counts(&c);
        let mut r = rx.managed_receiver();
        tx.managed_sender().send(b"hello", Full::Fail).unwrap();
        // Session 1 (the sender) dies: the message stays, then the
        // receiver sees it gone.
        c.session_closed(1);
        check_counts(&c);
        let mut buf = Vec::new();
        r.try_recv(&mut buf).unwrap();
        assert_eq!(buf, b"hello");
        assert_eq!(r.try_recv(&mut buf), Err(RecvError::Disconnected));
        // The receiver's session dies too: nothing holds it, it is empty,
        // so it is gone; a sender that kept the memory learns the receiver
        // is gone.
        c.session_closed(2);
        assert!(c.named.is_empty());
        assert_eq!(
            tx.managed_sender().try_send(b"x"),
            Err(SendError::Disconnected)
        );
    }

    #[test]
    fn one_receiver_same_user_or_the_acl_and_sizes_are_the_creator_s() {
        let mut c = Channels::default();
        open(&mut c, 1, 1000, "q", false).unwrap();
        let e = open(&mut c, 2, 1000, "q", false).unwrap_err();
        assert_eq!(e.0, ErrorCode::Refused);
        let e = open(&mut c, 3, 1001, "q", true).unwrap_err();
        assert_eq!(e.0, ErrorCode::PermissionDenied);
        assert!(e.1.contains("channel_acl"), "{}", e.1);
        let acl = [ChannelAcl {
            name: "q".into(),
            uids: vec![1001],
        }];
        c.acl = acl.to_vec();
        c.open(3, 1001, None, "q", true, 0, 0, &Limits::default())
            .unwrap();
        open(&mut c, 4, 0, "q", true).unwrap();
        let e = c
            .open(5, 1000, None, "q", true, 1 << 16, 0, &Limits::default())
            .unwrap_err();
        assert_eq!(e.0, ErrorCode::Refused);
        assert!(e.1.contains("exists with 64 slots"), "{}", e.1);
        check_counts(&c);
        assert_eq!(c.receiving(7).len(), 1, "the receiver's cell");
        // Closing by request: only what the session holds.
        assert!(!c.close(1, "q", true));
        assert!(c.close(1, "q", false));
        assert!(c.receiving(7).is_empty());
        open(&mut c, 2, 1000, "q", false).unwrap();
        check_counts(&c);
    }

    #[test]
    fn a_restarted_broker_adopts_ends_that_come_back_and_settles_the_rest() {
        // The old broker: a receiver (session 1) and a sender (session 2).
        let mut old = Channels::default();
        let rx = open(&mut old, 1, 1000, "q", false).unwrap();
        let tx = open(&mut old, 2, 1000, "q", true).unwrap();
        let fds = |ch: &Channel| -> Vec<OwnedFd> {
            ch.fds()
                .iter()
                .map(|f| f.try_clone_to_owned().unwrap())
                .collect()
        };
        let (rx_fds, tx_fds) = (fds(&rx), fds(&tx));
        drop(old); // killed: nothing was closed
        let mut new = Channels::default();
        let t0 = Instant::now();
        // Only the receiver comes back.
        new.adopt(5, 1000, Some(9), "q", false, rx_fds, &Limits::default(), t0)
            .unwrap();
        assert_eq!(new.receiving(9).len(), 1);
        // A different channel cannot take the name, nor a second receiver.
        let other = Channel::create(2, 8).unwrap();
        let e = new
            .adopt(
                6,
                1000,
                None,
                "q",
                true,
                fds(&other),
                &Limits::default(),
                t0,
            )
            .unwrap_err();
        assert_eq!(e.0, ErrorCode::Refused);
        assert!(e.1.contains("another channel"), "{}", e.1);
        let e = new
            .adopt(6, 1000, None, "q", false, fds(&rx), &Limits::default(), t0)
            .unwrap_err();
        assert!(e.1.contains("receiver already"), "{}", e.1);
        let e = new
            .adopt(6, 1001, None, "q", true, fds(&rx), &Limits::default(), t0)
            .unwrap_err();
        assert_eq!(e.0, ErrorCode::PermissionDenied);
        // During the grace the old counts stand (the sender may come back).
        new.settle(t0 + REJOIN_GRACE / 2);
        assert_eq!(rx.ends(), (1, true));
        // It did not: after the grace its count goes, and the receiver
        // learns every sender is gone.
        new.settle(t0 + REJOIN_GRACE);
        assert_eq!(rx.ends(), (0, true));
        let mut r = rx.managed_receiver();
        assert_eq!(r.try_recv(&mut Vec::new()), Err(RecvError::Disconnected));
        // A sender that comes back late is counted again, and its leaving
        // counted once.
        new.adopt(8, 1000, None, "q", true, tx_fds, &Limits::default(), t0)
            .unwrap();
        assert_eq!(rx.ends(), (1, true));
        new.session_closed(8);
        assert_eq!(rx.ends(), (0, true));
        // Adopting is bounded per user like creating.
        let none = Limits {
            channels: 0,
            ..Limits::default()
        };
        let e = new
            .adopt(7, 1000, None, "other", true, fds(&other), &none, t0)
            .unwrap_err();
        assert_eq!(e.0, ErrorCode::Limit);
    }

    #[test]
    fn names_and_limits_are_checked_before_anything_is_made() {
        let mut c = Channels::default();
        for bad in ["", "a/b", "../x", &"n".repeat(65), "sp ace"] {
            let e = open(&mut c, 1, 1000, bad, true).unwrap_err();
            assert_eq!(e.0, ErrorCode::Malformed, "{bad:?}");
        }
        let limits = Limits {
            channels: 2,
            channel_mib: 1,
            ..Limits::default()
        };
        let mut open_l =
            |s, name: &str, slots| c.open(s, 1000, None, name, true, slots, 0, &limits);
        open_l(1, "a", 0).unwrap();
        // 1024 slots of 4 KiB: 4 MiB, over 1 MiB.
        let e = open_l(1, "b", 1024).unwrap_err();
        assert_eq!(e.0, ErrorCode::Limit);
        assert!(e.1.contains("limits.channel_mib"), "{}", e.1);
        open_l(1, "b", 0).unwrap();
        let e = open_l(1, "c", 0).unwrap_err();
        assert!(e.1.contains("limits.channels"), "{}", e.1);
        // Root is exempt.
        c.open(1, 0, None, "c", true, 0, 0, &limits).unwrap();
        assert!(c.named.len() == 3);
    }
}
