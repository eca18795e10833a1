//! Blocking: a thread inside a block that waits gives back what no other
//! running thread uses, and retakes it before it goes on (Poli-C §2.7).
//! The preload shim's wrappers call these through liballot's `allot_rq_*`
//! hooks.
//!
//! Which waits give back is the thread's choice ([`release_on`]), by kind
//! of wait ([`Wait`]). The default is the paper's: every wait but I/O
//! ([`Waits::PAPER`]: joins, condition and semaphore waits, futex waits,
//! contended mutexes, sleeps), so a block that waits on a socket keeps
//! what it holds, exclusivity included. `ALLOT_RELEASE_ON` sets the
//! process's default; a thread started inside a block takes its creator's
//! setting. Each time a thread gives its allocation back it counts it
//! ([`given_back`]), so a program can always know whether the exclusivity
//! its block promised was interrupted (§3.4).
//!
//! A thread-local flag filters the calls of threads that never held
//! anything (liballot's own threads, a program's threads outside every
//! block): set when the thread enters a scope or starts as a child of one,
//! never cleared, it lets them return without the runtime's lock. Holding
//! requires one of those two events, so the filter never skips a thread
//! that holds something.

use super::*;
use std::cell::Cell;
use std::sync::OnceLock;

thread_local! {
    static MAY_HOLD: Cell<bool> = const { Cell::new(false) };
    /// The thread's [`Waits`] bits; [`UNSET`] until it chooses or asks.
    static RELEASE_ON: Cell<u32> = const { Cell::new(UNSET) };
    static GIVEN_BACK: Cell<u64> = const { Cell::new(0) };
}

const UNSET: u32 = u32::MAX;

/// A kind of wait, as the shim's wrappers classify blocking calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Wait {
    /// Waiting for another thread: joins, condition and semaphore waits,
    /// futex waits, a contended mutex.
    Sync = 1,
    /// Sleeping for a time: `nanosleep`, `clock_nanosleep`, `sleep`,
    /// `usleep`.
    Sleep = 2,
    /// Waiting for a descriptor: blocking reads of pipes, sockets and
    /// devices, `recv*`, `accept*`, `poll`, `select`, `epoll_wait`.
    Io = 4,
}

impl Wait {
    /// The kind with these bits (the C ABI's `ALLOT_WAIT_*`).
    pub fn from_bits(bits: u32) -> Option<Wait> {
        [Wait::Sync, Wait::Sleep, Wait::Io]
            .into_iter()
            .find(|w| *w as u32 == bits)
    }
}

/// A set of [`Wait`] kinds: those during which a thread gives its
/// allocation back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Waits(u32);

impl Waits {
    /// No wait gives back: a block keeps what it holds, whatever it
    /// waits for (it may deadlock if it waits for a thread that needs it).
    pub const NONE: Waits = Waits(0);
    /// Only waits for other threads.
    pub const SYNC: Waits = Waits(Wait::Sync as u32);
    /// Every wait but I/O: Poli-C's rule, the default.
    pub const PAPER: Waits = Waits(Wait::Sync as u32 | Wait::Sleep as u32);
    /// Every wait, I/O included.
    pub const ALL: Waits = Waits(Wait::Sync as u32 | Wait::Sleep as u32 | Wait::Io as u32);

    /// Whether `w` is in the set.
    pub fn contains(self, w: Wait) -> bool {
        self.0 & w as u32 != 0
    }

    /// The set with `w` added.
    pub fn with(self, w: Wait) -> Waits {
        Waits(self.0 | w as u32)
    }

    /// The set's bits (`ALLOT_WAIT_*` or'ed together).
    pub fn bits(self) -> u32 {
        self.0
    }

    /// The set with these bits; `None` if a bit names no kind.
    pub fn from_bits(bits: u32) -> Option<Waits> {
        (bits & !Waits::ALL.0 == 0).then_some(Waits(bits))
    }

    /// Parses `ALLOT_RELEASE_ON`'s forms: `paper` (the default), `all`,
    /// `none`, or kinds joined by commas (`sync,sleep,io`).
    pub fn parse(text: &str) -> Result<Waits, String> {
        let t = text.trim();
        match t {
            "paper" | "" => return Ok(Waits::PAPER),
            "all" => return Ok(Waits::ALL),
            "none" => return Ok(Waits::NONE),
            _ => {}
        }
        t.split(',').try_fold(Waits::NONE, |set, word| {
            let w = match word.trim() {
                "sync" => Wait::Sync,
                "sleep" => Wait::Sleep,
                "io" => Wait::Io,
                other => {
                    return Err(format!(
                        "{other:?} is no kind of wait: expected paper, all, none, or sync, \
                         sleep and io joined by commas"
                    ));
                }
            };
            Ok(set.with(w))
        })
    }
}

impl std::fmt::Display for Waits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = [
            (Wait::Sync, "sync"),
            (Wait::Sleep, "sleep"),
            (Wait::Io, "io"),
        ]
        .into_iter()
        .filter(|(w, _)| self.contains(*w))
        .map(|(_, n)| n)
        .collect();
        if names.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&names.join(","))
        }
    }
}

/// The process's default: `ALLOT_RELEASE_ON`, or the paper's rule. A value
/// that does not parse is reported once on stderr and the paper's rule
/// kept (a library cannot refuse to start its program).
fn default_release_on() -> Waits {
    static DEFAULT: OnceLock<Waits> = OnceLock::new();
    *DEFAULT.get_or_init(|| match std::env::var(allot_proto::env::RELEASE_ON) {
        Err(_) => Waits::PAPER,
        Ok(v) => Waits::parse(&v).unwrap_or_else(|e| {
            eprintln!(
                "allot: {}={v:?} ignored: {e}; waits other than I/O give allocations back",
                allot_proto::env::RELEASE_ON
            );
            Waits::PAPER
        }),
    })
}

/// The waits during which the calling thread gives its allocation back.
pub fn releasing() -> Waits {
    let bits = RELEASE_ON.with(Cell::get);
    if bits == UNSET {
        default_release_on()
    } else {
        Waits(bits)
    }
}

/// Sets the waits during which the calling thread gives its allocation
/// back; returns the previous setting (to restore it after a region).
pub fn release_on(waits: Waits) -> Waits {
    let before = releasing();
    RELEASE_ON.with(|r| r.set(waits.0));
    before
}

/// Whether the calling thread gives its allocation back during a wait of
/// kind `w`: it may hold one and chose to. A thread-local read or two.
pub fn releases(w: Wait) -> bool {
    may_hold_current() && releasing().contains(w)
}

/// How many times the calling thread gave its allocation back while
/// waiting. A block that reads it on entry and again later knows whether
/// what it holds (an exclusive CPU, say) was someone else's meanwhile.
pub fn given_back() -> u64 {
    GIVEN_BACK.with(Cell::get)
}

fn count_given_back() {
    GIVEN_BACK.with(|g| g.set(g.get() + 1));
}

/// Whether the calling thread may hold allocations (it entered a scope or
/// started as a child of one). A thread-local read: cheap enough for a
/// wrapper around every blocking call.
pub fn may_hold_current() -> bool {
    MAY_HOLD.with(Cell::get)
}

/// Marks the calling thread as one that may hold allocations.
pub(super) fn mark_may_hold() {
    MAY_HOLD.with(|m| m.set(true));
}

impl Blocks {
    /// [`Blocks::block_current`], saying whether the thread is now blocked
    /// (so the caller calls [`Blocks::unblock_current`] after its wait only
    /// then): not when it holds nothing, nor when the wait is made inside
    /// the runtime's lock (`locked.rs`) — std's locks are futexes, so the
    /// shim's futex wrapper is reached from there, and so is a kind's
    /// callback that waits for a lock of the program's; taking the lock
    /// again would wait for ever.
    ///
    /// Any other wait gives back, waiting for the state lock if another
    /// thread holds it: a wait that gave nothing back because the lock
    /// was busy for a moment could keep a CPU that the thread it waits
    /// for needs, and then neither would ever run.
    pub fn try_block_current(&self) -> bool {
        if !may_hold_current() || locked::in_state() {
            return false;
        }
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return false;
        }
        st.trees.block(tid);
        self.lend_placement(&mut st, tid);
        count_given_back();
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
        true
    }

    /// The calling thread is about to wait in a call of kind `w`: it gives
    /// back what no other running thread uses if it releases on such waits
    /// ([`release_on`]). Returns whether it may have (then the caller calls
    /// [`Blocks::unblock_current`] after the wait).
    pub fn block_current_for(&self, w: Wait) -> bool {
        if !releases(w) {
            return false;
        }
        self.block_current();
        true
    }

    /// [`Blocks::try_block_current`] for a wait of kind `w`, if the thread
    /// releases on such waits.
    pub fn try_block_current_for(&self, w: Wait) -> bool {
        releases(w) && self.try_block_current()
    }

    /// The calling thread is about to block (an explicit
    /// [`blocking`](super::blocking) call, an idle worker's park): it gives
    /// back what no other running thread uses, whatever [`release_on`]
    /// says.
    pub fn block_current(&self) {
        self.try_block_current();
    }

    /// The calling thread continues after blocking: it retakes its
    /// allocations, waiting until it can.
    pub fn unblock_current(&self) {
        if !may_hold_current() || locked::in_state() {
            return;
        }
        let tid = current_tid();
        let st = self.lock();
        // A thread without frames was never blocked (see `block_current`);
        // leave it unregistered so waits of unrelated threads cost no entry.
        if !st.trees.holds_any(tid) {
            return;
        }
        let mut st = self.retake(st, tid);
        self.placed_again(&mut st, tid);
    }

    /// After `tid` retook its allocations: a thread that lent its
    /// placement for the wait is placed again, and a placed thread whose
    /// team ended while it waited (a join) gets its whole allocation back.
    fn placed_again(&self, st: &mut Locked<'_>, tid: Tid) {
        let due = st
            .threads
            .get_mut(&tid)
            .is_some_and(|t| std::mem::take(&mut t.lent) || (!t.placed.is_empty() && !t.in_team()));
        if due {
            self.apply(st, tid);
        }
    }

    /// Like [`Blocks::unblock_current`] but never waits: returns false
    /// (the thread stays blocked) if its allocations cannot be retaken now.
    /// For callers that hold a lock another thread may need before the
    /// allocations come back (a condition wait's mutex): they drop the
    /// lock, call `unblock_current`, and lock again.
    pub fn try_unblock_current(&self) -> bool {
        if !may_hold_current() || locked::in_state() {
            return true;
        }
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return true;
        }
        let retaken = st.trees.unblock(tid).is_ok();
        if retaken {
            self.placed_again(&mut st, tid);
        }
        retaken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_parse_and_print_every_form() {
        assert_eq!(Waits::parse("paper").unwrap(), Waits::PAPER);
        assert_eq!(Waits::parse("").unwrap(), Waits::PAPER);
        assert_eq!(Waits::parse("all").unwrap(), Waits::ALL);
        assert_eq!(Waits::parse("none").unwrap(), Waits::NONE);
        assert_eq!(Waits::parse(" sync , io").unwrap().to_string(), "sync,io");
        assert_eq!(Waits::NONE.to_string(), "none");
        let e = Waits::parse("sync,disk").unwrap_err();
        assert!(e.contains("\"disk\"") && e.contains("sleep"), "{e}");
        assert_eq!(Waits::from_bits(8), None, "no kind has bit 8");
        assert_eq!(Waits::from_bits(5), Some(Waits::SYNC.with(Wait::Io)));
        assert_eq!(Wait::from_bits(2), Some(Wait::Sleep));
        assert_eq!(Wait::from_bits(3), None, "one kind, not a set");
    }

    #[test]
    fn the_paper_gives_back_on_every_wait_but_io() {
        assert!(Waits::PAPER.contains(Wait::Sync) && Waits::PAPER.contains(Wait::Sleep));
        assert!(!Waits::PAPER.contains(Wait::Io));
    }

    /// A futex wait gives back even while another thread holds the state
    /// lock (it waits for the lock: giving nothing back could keep a CPU
    /// the awaited thread needs), and never from inside the lock, where
    /// the wait is the runtime's own.
    #[test]
    fn a_futex_wait_gives_back_past_a_busy_lock_but_not_from_inside_it() {
        let rt = Blocks::new(allot_topo::Machine::uniform(2), false).into_static();
        std::thread::spawn(move || {
            let scope = rt.enter(vec![Need::device("cpu", 0, 1.0)]).unwrap();
            let (held, holding) = std::sync::mpsc::channel();
            let holder = std::thread::spawn(move || {
                let st = rt.lock();
                held.send(()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(100));
                drop(st);
            });
            holding.recv().unwrap();
            let before = given_back();
            assert!(
                rt.try_block_current(),
                "it waited for the lock and gave back"
            );
            assert_eq!(given_back(), before + 1);
            rt.unblock_current();
            holder.join().unwrap();
            {
                let _st = rt.lock();
                assert!(locked::in_state());
                assert!(!rt.try_block_current(), "the runtime's own wait keeps");
                rt.unblock_current(); // returns at once: no second lock
            }
            assert!(!locked::in_state());
            assert_eq!(given_back(), before + 1);
            drop(scope);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_threads_choice_is_its_own_and_a_thread_that_never_held_releases_nothing() {
        std::thread::spawn(|| {
            assert!(!releases(Wait::Sync), "this thread never entered a block");
            let before = release_on(Waits::NONE);
            assert_eq!(releasing(), Waits::NONE);
            mark_may_hold();
            assert!(!releases(Wait::Sync), "it chose to keep");
            release_on(before);
            assert_eq!(releases(Wait::Sync), before.contains(Wait::Sync));
        })
        .join()
        .unwrap();
        std::thread::spawn(|| assert_eq!(releasing(), default_release_on()))
            .join()
            .unwrap();
    }
}
