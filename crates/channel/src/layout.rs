//! The channel's memory layout: the contract every end maps (defined once,
//! here; a C copy must be tested against these offsets).
//!
//! ```text
//! offset  size
//!      0  64     identity: magic, version, slot size, slot count (written
//!                once by the creator, before the memory is shared)
//!     64  64     tail: the next position a sender reserves
//!    128  64     head: the next position the receiver reads
//!    192   8     receiver_waiting (u32), senders_waiting (u32)
//!    256  16     receiver (u32 state), senders (u32 count), opened (u32 bits)
//!   4096  slots × slot_size
//! ```
//!
//! Each slot starts with its sequence number (u64) and the message length
//! (u32); the message follows at [`SLOT_HEADER`]. Positions only grow;
//! slot `i` of a ring of `n` holds positions `i, i + n, i + 2n, …`. A slot
//! whose sequence equals a position is free for that position; equal to
//! the position plus one, it holds that position's message (the bounded
//! queue of D. Vyukov, in its single-receiver form).
//!
//! Every field another process writes is read as untrusted: the sizes are
//! read once, checked against the sealed memory's length, and kept in the
//! reader's own memory; a length in a slot is checked before a byte is
//! copied.

use std::sync::atomic::{AtomicU32, AtomicU64};

/// "ALLOTCH" and a NUL, little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"ALLOTCH\0");

/// Layout version; an end refuses memory of another version.
pub const VERSION: u32 = 1;

/// Bytes before the first slot.
pub const HEADER_SIZE: usize = 4096;

/// Bytes of a slot before its message: the sequence number and the length.
pub const SLOT_HEADER: usize = 16;

/// The smallest slot, bytes (a cache line).
pub const MIN_SLOT: usize = 64;

/// The largest slot, bytes (1 MiB).
pub const MAX_SLOT: usize = 1 << 20;

/// The most slots a ring has.
pub const MAX_SLOTS: usize = 1 << 20;

/// The most memory one channel takes (slots and header), bytes: 256 MiB.
pub const MAX_BYTES: usize = 256 << 20;

/// `receiver` before any receiver opened the channel.
pub const RECEIVER_NONE: u32 = 0;
/// `receiver` while one is open (there is at most one).
pub const RECEIVER_OPEN: u32 = 1;
/// `receiver` once the receiver closed (or the broker saw it die): sends fail.
pub const RECEIVER_GONE: u32 = 2;

/// `opened` bit: a sender has opened the channel at least once (so no
/// senders left means they are gone, not that none came yet).
pub const OPENED_SENDER: u32 = 1;

/// The header at offset 0.
#[repr(C)]
pub(crate) struct Header {
    pub(crate) magic: AtomicU64,
    pub(crate) version: AtomicU32,
    pub(crate) slot_size: AtomicU32,
    pub(crate) slots: AtomicU32,
    _identity: [u8; 44],
    pub(crate) tail: AtomicU64,
    _tail: [u8; 56],
    pub(crate) head: AtomicU64,
    _head: [u8; 56],
    pub(crate) receiver_waiting: AtomicU32,
    pub(crate) senders_waiting: AtomicU32,
    _waiting: [u8; 56],
    pub(crate) receiver: AtomicU32,
    pub(crate) senders: AtomicU32,
    pub(crate) opened: AtomicU32,
}

/// The fixed part of a slot.
#[repr(C)]
pub(crate) struct SlotHeader {
    pub(crate) seq: AtomicU64,
    pub(crate) len: AtomicU32,
    _reserved: u32,
}

const _: () = {
    use std::mem::{offset_of, size_of};
    assert!(offset_of!(Header, magic) == 0);
    assert!(offset_of!(Header, version) == 8);
    assert!(offset_of!(Header, slot_size) == 12);
    assert!(offset_of!(Header, slots) == 16);
    assert!(offset_of!(Header, tail) == 64);
    assert!(offset_of!(Header, head) == 128);
    assert!(offset_of!(Header, receiver_waiting) == 192);
    assert!(offset_of!(Header, senders_waiting) == 196);
    assert!(offset_of!(Header, receiver) == 256);
    assert!(offset_of!(Header, senders) == 260);
    assert!(offset_of!(Header, opened) == 264);
    assert!(size_of::<Header>() <= HEADER_SIZE);
    assert!(size_of::<SlotHeader>() == SLOT_HEADER);
};

/// The geometry of a ring, as its creator chose it and every end checks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Slots in the ring (a power of two).
    pub slots: usize,
    /// Bytes per slot, its header included (a power of two).
    pub slot_size: usize,
}

/// Why a geometry (asked for, or read from memory) is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GeometryError {
    #[error("a channel needs at least 2 slots (asked for {0})")]
    TooFewSlots(usize),
    #[error("a channel has at most {MAX_SLOTS} slots (asked for {0})")]
    TooManySlots(usize),
    #[error("messages of {0} bytes are over the largest slot ({max} bytes of message)", max = MAX_SLOT - SLOT_HEADER)]
    MessageTooLarge(usize),
    #[error("{slots} slots of {slot_size} bytes need {bytes} bytes, over the {MAX_BYTES}-byte limit of one channel", bytes = slots * slot_size + HEADER_SIZE)]
    TooLarge { slots: usize, slot_size: usize },
    #[error("the memory says {slots} slots of {slot_size} bytes, which is not a valid ring")]
    Corrupt { slots: usize, slot_size: usize },
}

impl Geometry {
    /// The geometry for `slots` slots (rounded up to a power of two) of
    /// messages up to `message_max` bytes.
    pub fn new(slots: usize, message_max: usize) -> Result<Geometry, GeometryError> {
        if slots < 2 {
            return Err(GeometryError::TooFewSlots(slots));
        }
        if slots > MAX_SLOTS {
            return Err(GeometryError::TooManySlots(slots));
        }
        if message_max > MAX_SLOT - SLOT_HEADER {
            return Err(GeometryError::MessageTooLarge(message_max));
        }
        let g = Geometry {
            slots: slots.next_power_of_two(),
            slot_size: (message_max + SLOT_HEADER)
                .next_power_of_two()
                .max(MIN_SLOT),
        };
        if g.bytes() > MAX_BYTES {
            return Err(GeometryError::TooLarge {
                slots: g.slots,
                slot_size: g.slot_size,
            });
        }
        Ok(g)
    }

    /// Checks a geometry read from memory of `len` bytes.
    pub fn check(slots: usize, slot_size: usize, len: usize) -> Result<Geometry, GeometryError> {
        let g = Geometry { slots, slot_size };
        let valid = slots.is_power_of_two()
            && (2..=MAX_SLOTS).contains(&slots)
            && slot_size.is_power_of_two()
            && (MIN_SLOT..=MAX_SLOT).contains(&slot_size)
            && g.bytes() <= MAX_BYTES
            && g.bytes() == len;
        if valid {
            Ok(g)
        } else {
            Err(GeometryError::Corrupt { slots, slot_size })
        }
    }

    /// Bytes of memory the ring takes.
    pub fn bytes(&self) -> usize {
        HEADER_SIZE + self.slots * self.slot_size
    }

    /// The longest message a slot holds, bytes.
    pub fn message_max(&self) -> usize {
        self.slot_size - SLOT_HEADER
    }

    /// Offset of the slot that holds `pos`.
    pub fn slot_offset(&self, pos: u64) -> usize {
        HEADER_SIZE + (pos as usize & (self.slots - 1)) * self.slot_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn asked_geometry_is_rounded_and_bounded() {
        let g = Geometry::new(100, 64).unwrap();
        assert_eq!((g.slots, g.slot_size, g.message_max()), (128, 128, 112));
        assert_eq!(Geometry::new(2, 1).unwrap().slot_size, MIN_SLOT);
        assert_eq!(Geometry::new(1, 8), Err(GeometryError::TooFewSlots(1)));
        assert!(matches!(
            Geometry::new(8, MAX_SLOT),
            Err(GeometryError::MessageTooLarge(_))
        ));
        assert!(matches!(
            Geometry::new(MAX_SLOTS, 4096),
            Err(GeometryError::TooLarge { .. })
        ));
        let e = Geometry::new(MAX_SLOTS, 4096).unwrap_err().to_string();
        assert!(e.contains("limit of one channel"), "{e}");
    }

    proptest! {
        /// Whatever the memory claims, an accepted geometry keeps every
        /// slot, with its largest message, inside the memory.
        #[test]
        fn checked_geometry_keeps_slots_inside(slots in 0usize..(1 << 22), size in 0usize..(1 << 22), len in 0usize..(1 << 29), pos: u64) {
            if let Ok(g) = Geometry::check(slots, size, len) {
                let at = g.slot_offset(pos);
                prop_assert!(at >= HEADER_SIZE);
                prop_assert!(at + SLOT_HEADER + g.message_max() <= len);
            }
        }
    }
}
