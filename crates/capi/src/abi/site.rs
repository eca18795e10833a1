//! What the `allot_require_*` family shares (the blocks, their policies'
//! views, the requests and the thread hooks): the C forms of a call site
//! ([`CSite`], shown as [`At`]) and of an outcome ([`COutcome`]), the
//! fatal error of a misused block ([`fatal`]), and the mark of a thread
//! inside liballot's require code ([`Busy`]), during which the preload
//! shim's thread hooks do nothing (see `require`, "Re-entry").

use allot_require::policy::Outcome;
use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::fmt;
use std::mem::size_of;

/// `allot_outcome_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct COutcome {
    /// How many CPUs the policy obtained (the bits set in `cpus`); 0 if it reports none.
    pub ncores: u32,
    /// NUMA nodes obtained.
    pub nnodes: u32,
    /// Bit `c % 64` of word `c / 64` set for each CPU `c` obtained (CPUs 0 to 1023).
    pub cpus: [u64; 16],
    /// Node bitmap (kernel ids).
    pub nodes: [u64; 16],
}

impl COutcome {
    /// The C form of a policy's outcome.
    pub fn from_outcome(o: &Outcome) -> COutcome {
        let mut c = COutcome {
            ncores: o.ncores,
            cpus: *o.cpus.words(),
            ..COutcome::default()
        };
        for &n in &o.nodes {
            if (n as usize) < 1024 && c.nodes[n as usize / 64] & (1 << (n % 64)) == 0 {
                c.nodes[n as usize / 64] |= 1 << (n % 64);
                c.nnodes += 1;
            }
        }
        c
    }
}

/// `allot_site_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CSite {
    /// `__FILE__`.
    pub file: *const c_char,
    /// `__LINE__`.
    pub line: c_int,
    /// The call site's cache (`require`'s `SiteCache`), set by liballot.
    pub cache: *mut c_void,
}

const _: () = assert!(size_of::<COutcome>() == 264);
const _: () = assert!(size_of::<CSite>() == 24);

thread_local! {
    /// How deep this thread is in liballot's require code.
    static BUSY: Cell<u32> = const { Cell::new(0) };
}

/// Marks the calling thread as inside liballot's require code while it
/// lives (the thread hooks do nothing meanwhile).
#[derive(Debug)]
pub(crate) struct Busy(());

impl Busy {
    pub(crate) fn new() -> Busy {
        BUSY.with(|b| b.set(b.get() + 1));
        Busy(())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        BUSY.with(|b| b.set(b.get() - 1));
    }
}

/// Whether the calling thread is inside liballot's require code.
pub(crate) fn busy() -> bool {
    BUSY.with(|b| b.get() > 0)
}

/// A call site as `file:line`, for messages.
#[derive(Clone, Copy)]
pub(crate) struct At(pub(crate) *const CSite);

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_null() {
            return write!(f, "(a require without a call site)");
        }
        // SAFETY: a non-null site is a live allot_site_t (the C contract:
        // static storage), whose `file` is NULL or a NUL-terminated string.
        let (file, line) = unsafe { ((*self.0).file, (*self.0).line) };
        let file = if file.is_null() {
            "?".into()
        } else {
            // SAFETY: as above.
            unsafe { CStr::from_ptr(file) }.to_string_lossy()
        };
        write!(f, "{file}:{line}")
    }
}

/// Prints `at: allot_require: what` to stderr and aborts (a programming
/// error, Poli-C's choice).
pub(crate) fn fatal(at: At, what: &str) -> ! {
    eprintln!("{at}: allot_require: {what}");
    std::process::abort()
}
