//! The memory and the doorbells behind a channel: a sealed memfd that
//! holds the ring ([`crate::layout`]) and two eventfds.
//!
//! The creator sizes the memfd, writes the header and seals the size
//! (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) before anyone else sees
//! it, so no end can truncate the memory under another (a `SIGBUS`). An
//! end handed the descriptors (by `SCM_RIGHTS`, or inherited) checks the
//! seals, the size and the header before it maps anything, and keeps the
//! geometry it read in its own memory.
//!
//! The doorbells are eventfds, which a program can `poll`: `data` (the
//! receiver waits on it; a counter) and `space` (senders blocked on a full
//! ring wait on it; a semaphore, one wake-up per waiting sender).

use crate::layout::{Geometry, HEADER_SIZE, Header, MAGIC, VERSION};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::ptr::NonNull;
use std::sync::atomic::{Ordering, fence};
use std::time::{Duration, Instant};

/// Why a channel could not be made or opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// The step that failed (such as "memfd_create" or "seal channel"), for the message.
        what: &'static str,
        /// The system call's error.
        source: std::io::Error,
    },
    /// The sizes asked for, or found in the memory, are not a valid ring.
    #[error(transparent)]
    Geometry(#[from] crate::layout::GeometryError),
    /// The memory is not a channel this version can use.
    #[error("not a channel: {0}")]
    NotAChannel(String),
}

fn os(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> OpenError {
    move |e| OpenError::Os {
        what,
        source: e.into(),
    }
}

const SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

/// A mapped ring and its doorbells. Unmapped on drop.
#[derive(Debug)]
pub(crate) struct Memory {
    base: NonNull<u8>,
    pub(crate) geometry: Geometry,
    pub(crate) mem: OwnedFd,
    pub(crate) data: OwnedFd,
    pub(crate) space: OwnedFd,
}

// SAFETY: the mapping is shared memory touched only through atomics and
// byte copies bounded by `geometry`; it lives as long as `Memory`.
unsafe impl Send for Memory {}
// SAFETY: as for `Send`.
unsafe impl Sync for Memory {}

impl Memory {
    /// A new ring of `geometry`, its memory sealed.
    pub(crate) fn create(geometry: Geometry) -> Result<Memory, OpenError> {
        let mem = rustix::fs::memfd_create(
            "allot-channel",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(os("memfd_create"))?;
        rustix::fs::ftruncate(&mem, geometry.bytes() as u64).map_err(os("ftruncate channel"))?;
        let base = map(mem.as_fd(), geometry.bytes())?;
        let m = Memory {
            base,
            geometry,
            mem,
            data: eventfd(EventfdFlags::empty())?,
            space: eventfd(EventfdFlags::SEMAPHORE)?,
        };
        let h = m.header();
        h.version.store(VERSION, Ordering::Relaxed);
        h.slot_size
            .store(geometry.slot_size as u32, Ordering::Relaxed);
        h.slots.store(geometry.slots as u32, Ordering::Relaxed);
        for i in 0..geometry.slots as u64 {
            m.slot(i).seq.store(i, Ordering::Relaxed);
        }
        h.magic.store(MAGIC, Ordering::Release);
        rustix::fs::fcntl_add_seals(&m.mem, SEALS).map_err(os("seal channel"))?;
        Ok(m)
    }

    /// Opens the ring in `mem` with its doorbells, after checking that the
    /// memory is sealed, as long as its header says, and of this version.
    pub(crate) fn open(mem: OwnedFd, data: OwnedFd, space: OwnedFd) -> Result<Memory, OpenError> {
        let seals = rustix::fs::fcntl_get_seals(&mem)
            .map_err(|_| OpenError::NotAChannel("the memory is not a sealable memfd".into()))?;
        if !seals.contains(SEALS) {
            return Err(OpenError::NotAChannel(
                "the memory is not sealed against resizing".into(),
            ));
        }
        let len = rustix::fs::fstat(&mem).map_err(os("stat channel"))?.st_size as usize;
        if len < HEADER_SIZE {
            return Err(OpenError::NotAChannel(format!(
                "{len} bytes, shorter than a header"
            )));
        }
        check_eventfd(&data, "data doorbell")?;
        check_eventfd(&space, "space doorbell")?;
        // Map the header alone first, read the geometry, then the whole.
        let head = map(mem.as_fd(), HEADER_SIZE)?;
        // SAFETY: `head` maps HEADER_SIZE bytes, the header fits in them.
        let h = unsafe { head.cast::<Header>().as_ref() };
        let magic = h.magic.load(Ordering::Acquire);
        let version = h.version.load(Ordering::Relaxed);
        let (slots, slot_size) = (
            h.slots.load(Ordering::Relaxed) as usize,
            h.slot_size.load(Ordering::Relaxed) as usize,
        );
        // SAFETY: unmapping the header mapping made above; `h` is not used
        // after this.
        unsafe { rustix::mm::munmap(head.as_ptr().cast(), HEADER_SIZE) }
            .map_err(os("munmap channel header"))?;
        if magic != MAGIC {
            return Err(OpenError::NotAChannel("no channel header".into()));
        }
        if version != VERSION {
            return Err(OpenError::NotAChannel(format!(
                "layout version {version}, this end speaks {VERSION}: update both ends"
            )));
        }
        let geometry = Geometry::check(slots, slot_size, len)?;
        let base = map(mem.as_fd(), geometry.bytes())?;
        Ok(Memory {
            base,
            geometry,
            mem,
            data,
            space,
        })
    }

    pub(crate) fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a header and outlives `&self`.
        unsafe { self.base.cast::<Header>().as_ref() }
    }

    pub(crate) fn slot(&self, pos: u64) -> &crate::layout::SlotHeader {
        // SAFETY: `slot_offset` is inside the mapping for any `pos`
        // (`Geometry::check`), and slots are 16-byte aligned (the base is
        // page aligned, slot sizes are powers of two ≥ 64).
        unsafe {
            self.base
                .add(self.geometry.slot_offset(pos))
                .cast::<crate::layout::SlotHeader>()
                .as_ref()
        }
    }

    /// The message bytes of the slot that holds `pos`.
    pub(crate) fn payload(&self, pos: u64) -> *mut u8 {
        // SAFETY: in bounds as `slot`; `message_max` bytes follow.
        unsafe {
            self.base
                .add(self.geometry.slot_offset(pos) + crate::layout::SLOT_HEADER)
                .as_ptr()
        }
    }

    /// The waiting side of the data doorbell ("Waiting" in the crate
    /// docs): takes an old ring, says the receiver waits, fences, and
    /// looks once more; returns false — and takes the flag back — when
    /// `nothing_to_wait_for` then holds (a message, or no sender left).
    pub(crate) fn arm_data(&self, nothing_to_wait_for: impl FnOnce() -> bool) -> bool {
        let h = self.header();
        Memory::take(self.data.as_fd());
        h.receiver_waiting.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if nothing_to_wait_for() {
            h.receiver_waiting.store(0, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// Rings `bell` `n` times (adds `n` to the eventfd).
    pub(crate) fn ring(bell: BorrowedFd<'_>, n: u64) {
        // An eventfd write fails only when the counter would overflow, and
        // then the bell is ringing anyway.
        let _ = rustix::io::write(bell, &n.to_ne_bytes());
    }

    /// Takes what rang on `bell` (one unit for a semaphore, all for a
    /// counter); false if nothing had.
    pub(crate) fn take(bell: BorrowedFd<'_>) -> bool {
        let mut b = [0u8; 8];
        rustix::io::read(bell, &mut b).is_ok()
    }

    /// Waits until `bell` rings or `deadline` passes (`None`: forever).
    pub(crate) fn wait(bell: BorrowedFd<'_>, deadline: Option<Instant>) {
        let timeout = deadline.map(|d| {
            let left = d.saturating_duration_since(Instant::now());
            rustix::time::Timespec::try_from(left.max(Duration::from_micros(1))).unwrap_or(
                rustix::time::Timespec {
                    tv_sec: i64::MAX / 2,
                    tv_nsec: 0,
                },
            )
        });
        let mut fds = [PollFd::new(&bell, PollFlags::IN)];
        // EINTR and timeouts return to the caller's loop, which re-checks.
        let _ = rustix::event::poll(&mut fds, timeout.as_ref());
    }
}

impl Drop for Memory {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `create`/`open`, of that length; no
        // reference into it outlives `self`.
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.geometry.bytes()) };
    }
}

fn map(fd: BorrowedFd<'_>, len: usize) -> Result<NonNull<u8>, OpenError> {
    // SAFETY: a fresh shared mapping (null hint) of `len` bytes of a file
    // at least that long (made so, or checked, by the caller).
    let p = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            len,
            ProtFlags::READ | ProtFlags::WRITE,
            MapFlags::SHARED,
            fd,
            0,
        )
    }
    .map_err(os("mmap channel"))?;
    NonNull::new(p.cast::<u8>()).ok_or_else(|| OpenError::NotAChannel("null mapping".into()))
}

fn eventfd(extra: EventfdFlags) -> Result<OwnedFd, OpenError> {
    rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK | extra)
        .map_err(os("eventfd"))
}

/// Checks that `fd` is a non-blocking eventfd (its fdinfo says so).
fn check_eventfd(fd: &OwnedFd, which: &str) -> Result<(), OpenError> {
    use rustix::fd::AsRawFd;
    let info =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).map_err(|e| {
            OpenError::Os {
                what: "read fdinfo",
                source: e,
            }
        })?;
    if !info.contains("eventfd-count") {
        return Err(OpenError::NotAChannel(format!(
            "the {which} is not an eventfd"
        )));
    }
    let flags = rustix::fs::fcntl_getfl(fd).map_err(os("fcntl doorbell"))?;
    if !flags.contains(rustix::fs::OFlags::NONBLOCK) {
        return Err(OpenError::NotAChannel(format!(
            "the {which} is not non-blocking"
        )));
    }
    Ok(())
}
