//! The grant page: a 4 KiB shared-memory page through which the broker tells
//! one cell what it holds, readable without a system call.
//!
//! # Layout (little-endian, all fields naturally aligned)
//!
//! ```text
//! offset size field       meaning
//!      0    4 magic       PAGE_MAGIC ("ALOT")
//!      4    4 version     PAGE_VERSION of the writer
//!      8    4 size        PAGE_SIZE
//!     12    4 futex       bumped after every publish; FUTEX_WAIT on it
//!     16    8 seq         seqlock: odd while the broker writes
//!     24    8 cell        cell id
//!     32    8 generation  grant generation; only grows
//!     40    8 instance    broker instance that wrote it
//!     48    4 threads     recommended worker count
//!     52    4 flags       FLAG_* bits
//!     56    4 entitled    CPUs the cell is entitled to
//!     60    4 ncpus       CPUs in `cpus`
//!     64    4 share_milli fair share in thousandths of a CPU
//!     68    4 home        stacked cells: first CPU (index into `cpus`)
//!                         for pinned workers; 0 otherwise
//!     72    8 win_origin  time-triggered cells: when window 0 opens,
//!                         CLOCK_MONOTONIC ns (see `crate::window`)
//!     80    4 win_period  window period, µs; 0 = the cell has no windows
//!     84    4 win_budget  window length, µs
//!     88   40 reserved    zero
//!    128  128 cpus        CPU bitmap (bit i of word w = CPU 64w+i)
//!    256  128 lent        bitmap of the lent subset of `cpus`
//!    384 3712 reserved    zero
//! ```
//!
//! # Protocol
//!
//! One writer (the broker, through the only writable mapping) and any number
//! of readers (read-only mappings of the same sealed memfd).
//!
//! Writer: `seq` rounded up to even, then `+1` (odd), release fence, store
//! the fields, `+1` again (even, release), then `futex += 1` and
//! `FUTEX_WAKE` all waiters. The rounding lets a writer that takes over a
//! page from one that died mid-publish restore the parity.
//!
//! Reader: load `seq` (acquire); if odd, retry; load the fields (relaxed);
//! acquire fence; reload `seq`; if it changed, retry. A reader therefore
//! never acts on a torn grant. All fields are atomics, so concurrent access
//! is defined behaviour even though the writer is another process.
//!
//! Waiting: read `futex`, read the grant, act, then `FUTEX_WAIT(futex, seen)`:
//! a publish between the read and the wait changes the word and the wait
//! returns at once, so no change is missed.
//!
//! **Changing this layout requires bumping [`PAGE_VERSION`].** The one C
//! copy, `crates/capi/shim/grant_page.h` (used by the OpenMP shim), is
//! checked against [`LAYOUT`] and the constants here by
//! `crates/capi/tests/c_layout.rs`, which compiles it.

/// Version of the page layout. Independent of the message protocol: the
/// OpenMP shim and programs that only read their page depend on this alone.
pub const PAGE_VERSION: u32 = 2;
use crate::window::Window;
use allot_topo::{CPUSET_WORDS, CpuSet};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};
use std::time::Duration;

/// "ALOT" in little-endian.
pub const PAGE_MAGIC: u32 = u32::from_le_bytes(*b"ALOT");

/// Size of the page in bytes.
pub const PAGE_SIZE: usize = 4096;

/// The cell shares the stacked pool with other cells.
pub const FLAG_STACKED: u32 = 1;
/// The cell has ended; the grant is final.
pub const FLAG_RELEASED: u32 = 2;

/// The page as laid out in memory.
#[repr(C)]
#[derive(Debug)]
pub struct GrantPage {
    magic: AtomicU32,
    version: AtomicU32,
    size: AtomicU32,
    futex: AtomicU32,
    seq: AtomicU64,
    cell: AtomicU64,
    generation: AtomicU64,
    instance: AtomicU64,
    threads: AtomicU32,
    flags: AtomicU32,
    entitled: AtomicU32,
    ncpus: AtomicU32,
    share_milli: AtomicU32,
    home: AtomicU32,
    win_origin: AtomicU64,
    win_period: AtomicU32,
    win_budget: AtomicU32,
    _reserved: [AtomicU32; 10],
    cpus: [AtomicU64; CPUSET_WORDS],
    lent: [AtomicU64; CPUSET_WORDS],
    _tail: [u8; PAGE_SIZE - 384],
}

/// Every field of the page: name (as the C copy spells it), byte offset,
/// byte size. The table the C copy is tested against.
pub const LAYOUT: &[(&str, usize, usize)] = &[
    field("magic", std::mem::offset_of!(GrantPage, magic), 4),
    field("version", std::mem::offset_of!(GrantPage, version), 4),
    field("size", std::mem::offset_of!(GrantPage, size), 4),
    field("futex", std::mem::offset_of!(GrantPage, futex), 4),
    field("seq", std::mem::offset_of!(GrantPage, seq), 8),
    field("cell", std::mem::offset_of!(GrantPage, cell), 8),
    field("generation", std::mem::offset_of!(GrantPage, generation), 8),
    field("instance", std::mem::offset_of!(GrantPage, instance), 8),
    field("threads", std::mem::offset_of!(GrantPage, threads), 4),
    field("flags", std::mem::offset_of!(GrantPage, flags), 4),
    field("entitled", std::mem::offset_of!(GrantPage, entitled), 4),
    field("ncpus", std::mem::offset_of!(GrantPage, ncpus), 4),
    field(
        "share_milli",
        std::mem::offset_of!(GrantPage, share_milli),
        4,
    ),
    field("home", std::mem::offset_of!(GrantPage, home), 4),
    field("win_origin", std::mem::offset_of!(GrantPage, win_origin), 8),
    field("win_period", std::mem::offset_of!(GrantPage, win_period), 4),
    field("win_budget", std::mem::offset_of!(GrantPage, win_budget), 4),
    field(
        "reserved",
        std::mem::offset_of!(GrantPage, _reserved),
        4 * 10,
    ),
    field(
        "cpus",
        std::mem::offset_of!(GrantPage, cpus),
        8 * CPUSET_WORDS,
    ),
    field(
        "lent",
        std::mem::offset_of!(GrantPage, lent),
        8 * CPUSET_WORDS,
    ),
];

const fn field(name: &'static str, offset: usize, size: usize) -> (&'static str, usize, usize) {
    (name, offset, size)
}

const _: () = assert!(std::mem::size_of::<GrantPage>() == PAGE_SIZE);
const _: () = assert!(std::mem::offset_of!(GrantPage, futex) == 12);
const _: () = assert!(std::mem::offset_of!(GrantPage, seq) == 16);
const _: () = assert!(std::mem::offset_of!(GrantPage, share_milli) == 64);
const _: () = assert!(std::mem::offset_of!(GrantPage, home) == 68);
const _: () = assert!(std::mem::offset_of!(GrantPage, win_origin) == 72);
const _: () = assert!(std::mem::offset_of!(GrantPage, cpus) == 128);
const _: () = assert!(std::mem::offset_of!(GrantPage, lent) == 256);

/// A consistent copy of a grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Grant {
    /// The broker's id of the cell the page belongs to, as `Registered` carried it.
    pub cell: u64,
    /// Generation; grows with every change.
    pub generation: u64,
    /// Broker instance that wrote it.
    pub instance: u64,
    /// Recommended worker count.
    pub threads: u32,
    /// `FLAG_*` bits.
    pub flags: u32,
    /// CPUs the cell is entitled to.
    pub entitled: u32,
    /// Fair share in thousandths of a CPU.
    pub share_milli: u32,
    /// For a stacked cell, the index in `cpus` (in CPU order) where a
    /// runtime that pins fewer workers than `cpus` holds should start, so
    /// that the cells sharing the stacked pool spread over it; 0
    /// otherwise. Older brokers leave it 0.
    pub home: u32,
    /// A time-triggered cell's windows; unset (all zero) otherwise.
    pub window: Window,
    /// CPUs the cell may run on.
    pub cpus: CpuSet,
    /// The lent part of `cpus`.
    pub lent: CpuSet,
}

/// Why a mapped page is not a valid grant page.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PageError {
    /// The first word is not `PAGE_MAGIC` ("ALOT"); carries the word found.
    #[error("not an allot grant page (magic 0x{0:08x})")]
    Magic(u32),
    /// Another layout version.
    #[error(
        "grant page version {0} differs from this library's {PAGE_VERSION}; use matching allot versions"
    )]
    Version(u32),
    /// The header's size field is not `PAGE_SIZE`; carries the size it claims.
    #[error("grant page claims {0} bytes, expected {PAGE_SIZE}")]
    Size(u32),
}

impl GrantPage {
    /// Writes the constant header. The broker calls this once, before the
    /// page is shared.
    pub fn init(&self, cell: u64, instance: u64) {
        self.magic.store(PAGE_MAGIC, Ordering::Relaxed);
        self.version.store(PAGE_VERSION, Ordering::Relaxed);
        self.size.store(PAGE_SIZE as u32, Ordering::Relaxed);
        self.cell.store(cell, Ordering::Relaxed);
        self.instance.store(instance, Ordering::Relaxed);
        fence(Ordering::Release);
    }

    /// Checks the constant header (readers call this once after mapping).
    pub fn validate(&self) -> Result<(), PageError> {
        let magic = self.magic.load(Ordering::Acquire);
        if magic != PAGE_MAGIC {
            return Err(PageError::Magic(magic));
        }
        let v = self.version.load(Ordering::Relaxed);
        if v != PAGE_VERSION {
            return Err(PageError::Version(v));
        }
        let s = self.size.load(Ordering::Relaxed);
        if s as usize != PAGE_SIZE {
            return Err(PageError::Size(s));
        }
        Ok(())
    }

    /// Publishes `g` (single writer only). Wakes every waiter.
    pub fn publish(&self, g: &Grant) {
        // Round up to even first: a writer that died mid-publish (a broker
        // killed between the two stores) leaves `seq` odd, and a new writer
        // resuming the page must still make it odd while it writes and even
        // after.
        let s = self.seq.load(Ordering::Relaxed).wrapping_add(1) & !1;
        self.seq.store(s.wrapping_add(1), Ordering::Relaxed);
        fence(Ordering::Release);
        self.cell.store(g.cell, Ordering::Relaxed);
        self.generation.store(g.generation, Ordering::Relaxed);
        self.instance.store(g.instance, Ordering::Relaxed);
        self.threads.store(g.threads, Ordering::Relaxed);
        self.flags.store(g.flags, Ordering::Relaxed);
        self.entitled.store(g.entitled, Ordering::Relaxed);
        self.ncpus.store(g.cpus.len() as u32, Ordering::Relaxed);
        self.share_milli.store(g.share_milli, Ordering::Relaxed);
        self.home.store(g.home, Ordering::Relaxed);
        self.win_origin.store(g.window.origin_ns, Ordering::Relaxed);
        self.win_period.store(g.window.period_us, Ordering::Relaxed);
        self.win_budget.store(g.window.budget_us, Ordering::Relaxed);
        for i in 0..CPUSET_WORDS {
            self.cpus[i].store(g.cpus.words()[i], Ordering::Relaxed);
            self.lent[i].store(g.lent.words()[i], Ordering::Relaxed);
        }
        self.seq.store(s.wrapping_add(2), Ordering::Release);
        self.futex.fetch_add(1, Ordering::Release);
        // Waking can only fail on a bad address, which a mapped page is not.
        let _ = rustix::thread::futex::wake(
            &self.futex,
            rustix::thread::futex::Flags::empty(),
            i32::MAX as u32,
        );
    }

    /// The current grant, consistent (see the module docs). No system call.
    pub fn read(&self) -> Grant {
        loop {
            if let Some(g) = self.try_read() {
                return g;
            }
            std::hint::spin_loop();
        }
    }

    /// One attempt at a consistent read; `None` if a write was in progress.
    pub fn try_read(&self) -> Option<Grant> {
        let s1 = self.seq.load(Ordering::Acquire);
        if s1 & 1 == 1 {
            return None;
        }
        let mut cpus = [0u64; CPUSET_WORDS];
        let mut lent = [0u64; CPUSET_WORDS];
        for i in 0..CPUSET_WORDS {
            cpus[i] = self.cpus[i].load(Ordering::Relaxed);
            lent[i] = self.lent[i].load(Ordering::Relaxed);
        }
        let g = Grant {
            cell: self.cell.load(Ordering::Relaxed),
            generation: self.generation.load(Ordering::Relaxed),
            instance: self.instance.load(Ordering::Relaxed),
            threads: self.threads.load(Ordering::Relaxed),
            flags: self.flags.load(Ordering::Relaxed),
            entitled: self.entitled.load(Ordering::Relaxed),
            share_milli: self.share_milli.load(Ordering::Relaxed),
            home: self.home.load(Ordering::Relaxed),
            window: Window {
                origin_ns: self.win_origin.load(Ordering::Relaxed),
                period_us: self.win_period.load(Ordering::Relaxed),
                budget_us: self.win_budget.load(Ordering::Relaxed),
            },
            cpus: CpuSet::from_words(cpus),
            lent: CpuSet::from_words(lent),
        };
        fence(Ordering::Acquire);
        (self.seq.load(Ordering::Relaxed) == s1).then_some(g)
    }

    /// The generation alone (one load; for cheap "did anything change" checks).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The recommended thread count alone (one load). May be one publish
    /// stale relative to `cpus`; use [`GrantPage::read`] when both matter.
    pub fn threads(&self) -> u32 {
        self.threads.load(Ordering::Acquire)
    }

    /// The wake-up word's current value, to pass to [`GrantPage::wait`].
    pub fn futex_word(&self) -> u32 {
        self.futex.load(Ordering::Acquire)
    }

    /// Wakes every thread waiting on this page (in any process that maps
    /// it) without publishing: they see no change and wait again, or notice
    /// why they were woken (a process shutting down its waiters). Needs only
    /// read access to the page.
    pub fn wake_waiters(&self) {
        let _ = rustix::thread::futex::wake(
            &self.futex,
            rustix::thread::futex::Flags::empty(),
            i32::MAX as u32,
        );
    }

    /// Blocks until the wake-up word differs from `seen` or `timeout`
    /// passes. Returns true if it changed.
    pub fn wait(&self, seen: u32, timeout: Option<Duration>) -> bool {
        use rustix::thread::futex;
        let ts = timeout.map(|t| rustix::time::Timespec {
            tv_sec: t.as_secs() as i64,
            tv_nsec: t.subsec_nanos() as _,
        });
        loop {
            if self.futex.load(Ordering::Acquire) != seen {
                return true;
            }
            match futex::wait(&self.futex, futex::Flags::empty(), seen, ts.as_ref()) {
                Ok(()) => {}
                Err(rustix::io::Errno::AGAIN) => return true,
                Err(rustix::io::Errno::INTR) => {}
                Err(rustix::io::Errno::TIMEDOUT) => {
                    return self.futex.load(Ordering::Acquire) != seen;
                }
                Err(_) => return self.futex.load(Ordering::Acquire) != seen,
            }
            if timeout.is_some() {
                // A spurious wake-up with a timeout: report what we see
                // rather than restarting the full timeout.
                return self.futex.load(Ordering::Acquire) != seen;
            }
        }
    }
}

impl Grant {
    /// The grant of a process without a broker: the CPUs it may use now
    /// (one CPU if they cannot be read), all its own, generation 1, never
    /// changing. A standalone cell's grant and a pool's default source
    /// without the broker client.
    pub fn allowed() -> Grant {
        let cpus = allot_topo::allowed_cpus().unwrap_or_else(|_| CpuSet::first_n(1));
        let n = cpus.len() as u32;
        Grant {
            generation: 1,
            threads: n,
            entitled: n,
            cpus,
            ..Grant::default()
        }
    }

    /// Whether the cell shares the stacked pool.
    pub fn stacked(&self) -> bool {
        self.flags & FLAG_STACKED != 0
    }
    /// Whether the cell has ended.
    pub fn released(&self) -> bool {
        self.flags & FLAG_RELEASED != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_table_tiles_the_header_without_gaps() {
        let mut at = 0;
        for &(name, offset, size) in LAYOUT {
            assert_eq!(offset, at, "{name} starts where the previous field ends");
            at += size;
        }
        assert_eq!(at, 384, "the header and both bitmaps");
    }

    #[test]
    fn a_writer_that_died_mid_publish_leaves_a_recoverable_page() {
        let page: Box<GrantPage> = {
            // SAFETY: GrantPage is atomics and bytes; all-zero is a valid value.
            unsafe { Box::new(std::mem::zeroed()) }
        };
        page.init(1, 1);
        let g = Grant {
            generation: 3,
            threads: 2,
            cpus: CpuSet::first_n(2),
            ..Default::default()
        };
        page.publish(&g);
        // The old writer dies after its first store.
        page.seq.fetch_add(1, Ordering::Relaxed);
        assert!(page.try_read().is_none(), "a torn page is not readable");
        // A new writer takes over: the next publish makes the page readable
        // and consistent again.
        let g2 = Grant {
            generation: 4,
            threads: 1,
            cpus: CpuSet::first_n(1),
            ..Default::default()
        };
        page.publish(&g2);
        assert_eq!(page.seq.load(Ordering::Relaxed) % 2, 0);
        assert_eq!(page.try_read(), Some(g2));
    }
}
