//! Channels: bounded message rings in shared memory, with doorbells a
//! program can `poll`, between threads, processes and cells (Tessellation's
//! inter-cell channels).
//!
//! A channel is a sealed memfd holding a ring of fixed-size slots
//! ([`layout`]) and two eventfds ([`memory`]). Any number of [`Sender`]s
//! and one [`Receiver`] map it. A message is copied into a slot and out
//! again; it is never torn (the receiver sees a slot only once its sender
//! published it whole) and never lost while both ends live (a full ring
//! makes the sender wait or fail, as it chooses: [`Full`]).
//!
//! # Protocol
//!
//! - **Send**: reserve the tail position whose slot is free (CAS on
//!   `tail`), copy the message, publish it (the slot's sequence, release),
//!   then — after a full fence — ring `data` if the receiver said it
//!   waits (`receiver_waiting`, taken back by the ringing sender).
//! - **Receive**: the slot at `head` is ready when its sequence says so
//!   (acquire); copy it out, free the slot for the position one lap on,
//!   advance `head`; after a full fence, ring `space` once per sender
//!   that said it waits for room.
//! - **Waiting**: a receiver that found nothing says it waits, fences,
//!   looks once more, and only then polls `data`; a sender that found no
//!   room does the same with `senders_waiting` and `space`. The fence on
//!   each side makes a lost wake-up impossible: either the waiter's second
//!   look sees the message (or the room), or the other side sees the flag.
//! - **Ends**: `senders` counts open senders and `receiver` says whether
//!   the receiver is open. An end that closes updates them and rings the
//!   other side's bell. A receiver whose ring is empty after every sender
//!   closed gets [`RecvError::Disconnected`]; a sender whose receiver
//!   closed gets [`SendError::Disconnected`]. The broker does the same on
//!   behalf of an end whose process died.
//!
//! # Trust
//!
//! The ends may be different programs. An end checks the memory before
//! mapping it (sealed, as long as its header says, this layout version),
//! keeps the geometry in its own memory, and checks every length it reads
//! from a slot: a misbehaving peer can stall or garble its own channel,
//! never make an end read or write outside the ring.

pub mod call;
pub mod layout;
mod memory;

pub use layout::{Geometry, GeometryError};
pub use memory::OpenError;

use layout::{OPENED_SENDER, RECEIVER_GONE, RECEIVER_NONE, RECEIVER_OPEN};
use memory::Memory;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::time::Instant;

/// The longest channel name.
pub const MAX_NAME: usize = 64;

/// Checks a channel name: 1 to [`MAX_NAME`] of `A-Z a-z 0-9 . _ -`.
pub fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "channel name {name:?}: use 1 to {MAX_NAME} letters, digits, '.', '_' or '-'"
        ))
    }
}

/// What a send does when the ring is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Wait for room (until the deadline, if one is given).
    Wait,
    /// Return [`SendError::Full`] at once.
    Fail,
}

/// Why a message was not sent (it was not: nothing of it is in the ring).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The ring is full (and the sender chose not to wait, or its deadline
    /// passed).
    #[error("the channel is full")]
    Full,
    /// The message is longer than a slot holds.
    #[error("a {len}-byte message is over this channel's {max}-byte limit")]
    TooLong {
        /// The message's length.
        len: usize,
        /// The longest message the channel takes.
        max: usize,
    },
    /// The receiver closed (or died): nobody will read it.
    #[error("the receiver closed the channel")]
    Disconnected,
}

/// Why nothing was received.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecvError {
    /// Nothing arrived (before the deadline).
    #[error("no message")]
    Empty,
    /// Every sender closed (or died) and the ring is empty.
    #[error("every sender closed the channel")]
    Disconnected,
    /// The next message is longer than the buffer it was to be copied
    /// into; it stays in the channel.
    #[error("the next message has {len} bytes, more than the buffer's {cap}")]
    BufferTooSmall {
        /// The message's length.
        len: usize,
        /// The buffer's.
        cap: usize,
    },
    /// A slot held a length no message can have: a peer writes the ring
    /// other than by this protocol. The slot is skipped.
    #[error("a message of {len} bytes in a slot of {max}: the peer corrupts the channel")]
    Corrupt {
        /// The length the slot claimed.
        len: usize,
        /// The longest message a slot holds.
        max: usize,
    },
}

/// A channel: its memory and doorbells, shared by the ends made from it.
#[derive(Debug, Clone)]
pub struct Channel {
    mem: Arc<Memory>,
}

impl Channel {
    /// A new channel of at least `slots` slots (rounded up to a power of
    /// two) for messages of up to `message_max` bytes.
    pub fn create(slots: usize, message_max: usize) -> Result<Channel, OpenError> {
        let g = Geometry::new(slots, message_max)?;
        Ok(Channel {
            mem: Arc::new(Memory::create(g)?),
        })
    }

    /// Opens a channel from its descriptors (received with `SCM_RIGHTS`,
    /// or inherited), after checking them (see "Trust").
    pub fn open(mem: OwnedFd, data: OwnedFd, space: OwnedFd) -> Result<Channel, OpenError> {
        Ok(Channel {
            mem: Arc::new(Memory::open(mem, data, space)?),
        })
    }

    /// The descriptors to hand to another process: the memory, the data
    /// doorbell and the space doorbell, in the order [`Channel::open`]
    /// takes them.
    pub fn fds(&self) -> [BorrowedFd<'_>; 3] {
        [
            self.mem.mem.as_fd(),
            self.mem.data.as_fd(),
            self.mem.space.as_fd(),
        ]
    }

    /// The ring's geometry.
    pub fn geometry(&self) -> Geometry {
        self.mem.geometry
    }

    /// Messages waiting now (a snapshot).
    pub fn len(&self) -> usize {
        let h = self.mem.header();
        let head = h.head.load(Ordering::Acquire);
        let tail = h.tail.load(Ordering::Acquire);
        (tail.saturating_sub(head) as usize).min(self.mem.geometry.slots)
    }

    /// Whether no message waits now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A new sender, counted as an open end.
    pub fn sender(&self) -> Sender {
        self.attach_sender();
        Sender {
            mem: self.mem.clone(),
            counted: true,
        }
    }

    /// The receiver, counted as the open end, unless one is open already
    /// (there is one at a time).
    pub fn receiver(&self) -> Option<Receiver> {
        self.attach_receiver().then(|| Receiver {
            mem: self.mem.clone(),
            counted: true,
        })
    }

    /// A sender whose opening and closing someone else accounts for (the
    /// broker, for ends it hands out: it counts them when it opens them
    /// and when their connection closes, also when their process dies).
    pub fn managed_sender(&self) -> Sender {
        Sender {
            mem: self.mem.clone(),
            counted: false,
        }
    }

    /// The receiver, accounted for by someone else (see
    /// [`Channel::managed_sender`]).
    pub fn managed_receiver(&self) -> Receiver {
        Receiver {
            mem: self.mem.clone(),
            counted: false,
        }
    }

    /// Counts a sender as open.
    pub fn attach_sender(&self) {
        let h = self.mem.header();
        h.senders.fetch_add(1, Ordering::SeqCst);
        h.opened.fetch_or(OPENED_SENDER, Ordering::SeqCst);
    }

    /// Counts a sender as closed; the last one rings the receiver, which
    /// then sees [`RecvError::Disconnected`] once the ring is empty.
    pub fn detach_sender(&self) {
        let h = self.mem.header();
        let was = h
            .senders
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
        if was == Ok(1) {
            Memory::ring(self.mem.data.as_fd(), 1);
        }
    }

    /// Marks the receiver open; false if one is open already.
    pub fn attach_receiver(&self) -> bool {
        let h = self.mem.header();
        [RECEIVER_NONE, RECEIVER_GONE].into_iter().any(|from| {
            h.receiver
                .compare_exchange(from, RECEIVER_OPEN, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
        })
    }

    /// Marks the receiver closed: senders get [`SendError::Disconnected`],
    /// and those waiting for room are woken to see it.
    pub fn detach_receiver(&self) {
        let h = self.mem.header();
        h.receiver.store(RECEIVER_GONE, Ordering::SeqCst);
        let waiting = h.senders_waiting.load(Ordering::SeqCst);
        if waiting > 0 {
            Memory::ring(self.mem.space.as_fd(), u64::from(waiting));
        }
    }

    /// Messages sent into the channel so far (positions reserved; a
    /// snapshot that only grows).
    pub fn sent(&self) -> u64 {
        self.mem.header().tail.load(Ordering::Acquire)
    }

    /// For whoever wakes the receiver's program (the broker, for a
    /// message-triggered cell it suspends): takes any old ring, asks the
    /// next sender to ring the data doorbell, and returns false — asking
    /// nothing — when a message already waits. The doorbell then becomes
    /// readable with the next message; the taker must poll it without
    /// reading it, so that the receiver, once it runs, sees the ring too.
    pub fn arm_doorbell(&self) -> bool {
        self.mem.arm_data(|| !self.is_empty())
    }

    /// Sets the counts of open ends (for a broker that adopts a channel
    /// after a restart and learned which ends are still there), ringing
    /// the side that learns the other is gone.
    pub fn reset_ends(&self, senders: u32, receiver_open: bool) {
        let h = self.mem.header();
        let before = h.senders.swap(senders, Ordering::SeqCst);
        if senders == 0 && before != 0 {
            Memory::ring(self.mem.data.as_fd(), 1);
        }
        if receiver_open {
            h.receiver.store(RECEIVER_OPEN, Ordering::SeqCst);
        } else if h.receiver.load(Ordering::SeqCst) == RECEIVER_OPEN {
            self.detach_receiver();
        }
    }

    /// The memory's identity (device and inode of the memfd): two
    /// descriptors of one channel have the same.
    pub fn identity(&self) -> (u64, u64) {
        rustix::fs::fstat(&self.mem.mem).map_or((0, 0), |st| (st.st_dev, st.st_ino))
    }

    /// Open senders, and whether the receiver is open (a snapshot).
    pub fn ends(&self) -> (u32, bool) {
        let h = self.mem.header();
        (
            h.senders.load(Ordering::SeqCst),
            h.receiver.load(Ordering::SeqCst) == RECEIVER_OPEN,
        )
    }
}

/// One sender. Cloning makes another sender, counted like the original.
#[derive(Debug)]
pub struct Sender {
    mem: Arc<Memory>,
    counted: bool,
}

impl Clone for Sender {
    fn clone(&self) -> Sender {
        let s = Sender {
            mem: self.mem.clone(),
            counted: self.counted,
        };
        if s.counted {
            s.channel().attach_sender();
        }
        s
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        if self.counted {
            self.channel().detach_sender();
        }
    }
}

impl Sender {
    fn channel(&self) -> Channel {
        Channel {
            mem: self.mem.clone(),
        }
    }

    /// Sends `msg`; when the ring is full, waits for room or fails, as
    /// `full` says.
    pub fn send(&self, msg: &[u8], full: Full) -> Result<(), SendError> {
        self.send_until(msg, full, None)
    }

    /// [`Sender::send`], waiting for room at most until `deadline`.
    pub fn send_until(
        &self,
        msg: &[u8],
        full: Full,
        deadline: Option<Instant>,
    ) -> Result<(), SendError> {
        let max = self.mem.geometry.message_max();
        if msg.len() > max {
            return Err(SendError::TooLong {
                len: msg.len(),
                max,
            });
        }
        let h = self.mem.header();
        loop {
            match self.try_send(msg) {
                Err(SendError::Full) if full == Full::Wait => {}
                other => return other,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(SendError::Full);
            }
            h.senders_waiting.fetch_add(1, Ordering::SeqCst);
            fence(Ordering::SeqCst);
            let again = self.try_send(msg);
            if !matches!(again, Err(SendError::Full)) {
                h.senders_waiting.fetch_sub(1, Ordering::SeqCst);
                return again;
            }
            Memory::wait(self.mem.space.as_fd(), deadline);
            Memory::take(self.mem.space.as_fd());
            h.senders_waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Sends `msg` if there is room now.
    pub fn try_send(&self, msg: &[u8]) -> Result<(), SendError> {
        let m = &*self.mem;
        let h = m.header();
        if h.receiver.load(Ordering::Acquire) == RECEIVER_GONE {
            return Err(SendError::Disconnected);
        }
        let max = m.geometry.message_max();
        if msg.len() > max {
            return Err(SendError::TooLong {
                len: msg.len(),
                max,
            });
        }
        let mut pos = h.tail.load(Ordering::Relaxed);
        loop {
            let slot = m.slot(pos);
            let seq = slot.seq.load(Ordering::Acquire);
            match seq.wrapping_sub(pos) as i64 {
                0 => match h.tail.compare_exchange_weak(
                    pos,
                    pos + 1,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        // SAFETY: the slot is ours until we publish it (the
                        // CAS reserved position `pos`); the payload has
                        // room for `max ≥ msg.len()` bytes.
                        unsafe {
                            std::ptr::copy_nonoverlapping(msg.as_ptr(), m.payload(pos), msg.len())
                        };
                        slot.len.store(msg.len() as u32, Ordering::Relaxed);
                        slot.seq.store(pos + 1, Ordering::Release);
                        break;
                    }
                    Err(now) => pos = now,
                },
                d if d < 0 => return Err(SendError::Full),
                _ => pos = h.tail.load(Ordering::Relaxed),
            }
        }
        fence(Ordering::SeqCst);
        if h.receiver_waiting.load(Ordering::Relaxed) != 0
            && h.receiver_waiting.swap(0, Ordering::SeqCst) != 0
        {
            Memory::ring(m.data.as_fd(), 1);
        }
        Ok(())
    }
}

/// The receiver (one per channel at a time).
#[derive(Debug)]
pub struct Receiver {
    mem: Arc<Memory>,
    counted: bool,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if self.counted {
            Channel {
                mem: self.mem.clone(),
            }
            .detach_receiver();
        }
    }
}

impl Receiver {
    /// The data doorbell, for `poll`/`epoll`: call [`Receiver::arm`] and
    /// poll for reading only when it returns true (nothing is waiting);
    /// then receive until [`RecvError::Empty`].
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.mem.data.as_fd()
    }

    /// Asks the next sender to ring the data doorbell. Returns false, and
    /// asks nothing, when a message is already waiting (or every sender
    /// closed): receive instead of polling.
    pub fn arm(&self) -> bool {
        self.mem.arm_data(|| self.ready() || self.disconnected())
    }

    /// Receives the next message into `buf` (replacing its contents),
    /// waiting until one arrives, every sender closed, or `deadline`.
    pub fn recv(&mut self, buf: &mut Vec<u8>, deadline: Option<Instant>) -> Result<(), RecvError> {
        loop {
            match self.try_recv(buf) {
                Err(RecvError::Empty) => {}
                other => return other,
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RecvError::Empty);
            }
            self.wait_ready(deadline);
        }
    }

    /// Sleeps until a message may be waiting (the doorbell rang), every
    /// sender closed, or `deadline`; returns at once when a message waits.
    /// The next receive tells which.
    pub fn wait_ready(&self, deadline: Option<Instant>) {
        if self.arm() {
            Memory::wait(self.mem.data.as_fd(), deadline);
            self.mem
                .header()
                .receiver_waiting
                .store(0, Ordering::SeqCst);
        }
    }

    /// Receives the next message into `buf` if one is ready now.
    pub fn try_recv(&mut self, buf: &mut Vec<u8>) -> Result<(), RecvError> {
        self.try_recv_with(|msg| {
            buf.clear();
            buf.extend_from_slice(msg);
        })
    }

    /// Copies the next message, if one is ready now, into `buf` and
    /// returns its length; a message longer than `buf` stays in the channel
    /// ([`RecvError::BufferTooSmall`]).
    pub fn try_recv_slice(&mut self, buf: &mut [u8]) -> Result<usize, RecvError> {
        let m = &*self.mem;
        let pos = m.header().head.load(Ordering::Relaxed);
        let slot = m.slot(pos);
        if slot.seq.load(Ordering::Acquire) == pos + 1 {
            let len = slot.len.load(Ordering::Relaxed) as usize;
            if len <= m.geometry.message_max() && len > buf.len() {
                return Err(RecvError::BufferTooSmall {
                    len,
                    cap: buf.len(),
                });
            }
        }
        self.try_recv_with(|msg| {
            buf[..msg.len()].copy_from_slice(msg);
            msg.len()
        })
    }

    /// Calls `f` with the next message, in place in the ring, if one is
    /// ready now (the slot is freed when `f` returns).
    pub fn try_recv_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<R, RecvError> {
        let m = &*self.mem;
        let h = m.header();
        let pos = h.head.load(Ordering::Relaxed);
        let slot = m.slot(pos);
        if slot.seq.load(Ordering::Acquire) != pos + 1 {
            return Err(if self.disconnected() {
                RecvError::Disconnected
            } else {
                RecvError::Empty
            });
        }
        let len = slot.len.load(Ordering::Relaxed) as usize;
        let max = m.geometry.message_max();
        let out = if len <= max {
            // SAFETY: the slot was published for `pos` (acquire above) and
            // stays ours until we free it below; `len ≤ max` bytes of
            // payload are inside the mapping.
            let msg = unsafe { std::slice::from_raw_parts(m.payload(pos), len) };
            Ok(f(msg))
        } else {
            Err(RecvError::Corrupt { len, max })
        };
        slot.seq
            .store(pos + m.geometry.slots as u64, Ordering::Release);
        h.head.store(pos + 1, Ordering::Release);
        fence(Ordering::SeqCst);
        let waiting = h.senders_waiting.load(Ordering::Relaxed);
        if waiting > 0 {
            Memory::ring(m.space.as_fd(), u64::from(waiting));
        }
        out
    }

    /// Whether the message at the head is ready.
    fn ready(&self) -> bool {
        let m = &*self.mem;
        let pos = m.header().head.load(Ordering::Relaxed);
        m.slot(pos).seq.load(Ordering::Acquire) == pos + 1
    }

    /// Every sender that came has closed, and none is open.
    fn disconnected(&self) -> bool {
        let h = self.mem.header();
        h.senders.load(Ordering::SeqCst) == 0
            && h.opened.load(Ordering::SeqCst) & OPENED_SENDER != 0
            && !self.ready()
    }
}
