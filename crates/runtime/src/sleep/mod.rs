//! Parking idle workers and waking them: the sleep protocol.
//!
//! The design note with the races this module prevents is
//! [`README.md`](https://example.invalid/allot/crates/runtime/src/sleep/README.md)
//! beside this file; read it before changing anything here.
//!
//! Each worker slot owns a [`Doorbell`], a small state machine:
//!
//! ```text
//!            announce()                park()
//!   AWAKE ─────────────► SLEEPY ───────────────► (parked while SLEEPY)
//!     ▲  ◄─── cancel() ────┘ │                      │
//!     │                      │ CAS by a waker:       │
//!     │                      │  notify_worker → NOTIFIED
//!     │                      │  wake for work → NUDGED
//!     └──── park returns ◄── NOTIFIED / NUDGED ◄────┘
//!
//!   AWAKE ── announce_dormant() ──► DORMANT ── notify_worker (CAS) ──► NOTIFIED
//! ```
//!
//! Invariants:
//! - only the owning worker moves its bell out of `NOTIFIED`/`NUDGED`, into
//!   `SLEEPY` or into `DORMANT`; only wakers move it into `NOTIFIED` or
//!   `NUDGED`, with a CAS, so exactly one waker "owns" each wake-up;
//! - `sleepers` counts bells in `SLEEPY`: incremented by the owner before
//!   its final re-check, decremented by whoever moves the bell out of
//!   `SLEEPY` (the owner cancelling, or the waker that won the CAS);
//! - a worker parks only after publishing `SLEEPY` (or `DORMANT`) and then
//!   re-checking every wake condition (queues, latch, its assignment,
//!   shutdown) with a `SeqCst` fence between, and every condition setter
//!   publishes its condition, fences, and then looks at the bells (Dekker's
//!   pattern): one of the two always sees the other;
//! - `DORMANT` bells are not counted as sleepers and are never woken for
//!   work, only by [`Sleep::notify_worker`]: workers without a CPU, and
//!   workers whose CPU was revoked while they wait inside a task (they will
//!   not run new work, so work is never handed to them);
//! - a wake-up for work (`NUDGED`) that its sleeper cannot use — it was
//!   waiting inside a task and its wait ended — is passed on
//!   ([`Sleep::pass_on`]), so no work is left with every worker asleep.

use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering, fence};
use crate::loom::thread::{self, Thread};
use crate::policy::Wake;
use crossbeam_utils::CachePadded;

const AWAKE: u32 = 0;
const SLEEPY: u32 = 1;
const NOTIFIED: u32 = 2;
const DORMANT: u32 = 3;
const NUDGED: u32 = 4;

/// One worker's parking spot.
#[derive(Debug)]
struct Doorbell {
    state: AtomicU32,
    thread: Mutex<Option<Thread>>,
}

/// Proof that a worker announced it is about to sleep; must be given to
/// [`Sleep::cancel`] or [`Sleep::park`].
#[derive(Debug)]
#[must_use = "an announced sleep must be cancelled or parked"]
pub(crate) struct Sleepy {
    index: usize,
    dormant: bool,
}

/// What ended a sleep, as [`Sleep::cancel`] and [`Sleep::park`] report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "a wake-up for work must be passed on if it is not used"]
pub(crate) enum Woken {
    /// Nobody woke the worker (it cancelled its own sleep in time).
    Not,
    /// A targeted wake-up: latch, claimable work, assignment, shutdown.
    Notified,
    /// A wake-up for new work, which the worker now owes to the pool: it
    /// must look for work, or [`Sleep::pass_on`] the wake-up.
    ForWork,
}

/// The bells of all worker slots of one pool.
#[derive(Debug)]
pub(crate) struct Sleep {
    sleepers: CachePadded<AtomicUsize>,
    rotor: AtomicUsize,
    bells: Box<[CachePadded<Doorbell>]>,
}

impl Sleep {
    pub(crate) fn new(slots: usize) -> Sleep {
        Sleep {
            sleepers: CachePadded::new(AtomicUsize::new(0)),
            rotor: AtomicUsize::new(0),
            bells: (0..slots)
                .map(|_| {
                    CachePadded::new(Doorbell {
                        state: AtomicU32::new(AWAKE),
                        thread: Mutex::new(None),
                    })
                })
                .collect(),
        }
    }

    /// Records the thread that serves slot `index` (before it first parks).
    pub(crate) fn register(&self, index: usize, t: Thread) {
        *self.bells[index]
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(t);
    }

    /// Workers announced sleepy and not yet woken.
    #[cfg(test)]
    pub(crate) fn sleepers(&self) -> usize {
        self.sleepers.load(Ordering::SeqCst)
    }

    /// Step 1 of going to sleep: publish `SLEEPY`. The caller must then
    /// re-check every wake condition and call [`Sleep::cancel`] if one
    /// holds, else [`Sleep::park`].
    pub(crate) fn announce(&self, index: usize) -> Sleepy {
        self.sleepers.fetch_add(1, Ordering::SeqCst);
        let prev = self.bells[index].state.swap(SLEEPY, Ordering::SeqCst);
        debug_assert_eq!(prev, AWAKE);
        fence(Ordering::SeqCst);
        Sleepy {
            index,
            dormant: false,
        }
    }

    /// Like [`Sleep::announce`] for a worker that will not run new work
    /// (no CPU): it will be woken only by [`Sleep::notify_worker`].
    pub(crate) fn announce_dormant(&self, index: usize) -> Sleepy {
        let prev = self.bells[index].state.swap(DORMANT, Ordering::SeqCst);
        debug_assert_eq!(prev, AWAKE);
        fence(Ordering::SeqCst);
        Sleepy {
            index,
            dormant: true,
        }
    }

    /// A wake condition held at the re-check: back to `AWAKE`. Reports a
    /// wake-up that arrived meanwhile.
    pub(crate) fn cancel(&self, s: Sleepy) -> Woken {
        let bell = &self.bells[s.index];
        let from = if s.dormant { DORMANT } else { SLEEPY };
        match bell
            .state
            .compare_exchange(from, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) => {
                if !s.dormant {
                    self.sleepers.fetch_sub(1, Ordering::SeqCst);
                }
                Woken::Not
            }
            // A waker won the race and already counted us out.
            Err(now) => {
                bell.state.store(AWAKE, Ordering::SeqCst);
                woken(now)
            }
        }
    }

    /// Blocks until a waker moves the bell to `NOTIFIED` or `NUDGED`;
    /// spurious unparks are absorbed here.
    pub(crate) fn park(&self, s: Sleepy) -> Woken {
        let bell = &self.bells[s.index];
        let _blocked = crate::blocking::Blocked::begin();
        loop {
            let now = bell.state.load(Ordering::SeqCst);
            if now == NOTIFIED || now == NUDGED {
                bell.state.store(AWAKE, Ordering::SeqCst);
                return woken(now);
            }
            thread::park();
        }
    }

    /// Wakes worker `index` if it is sleepy or dormant (a targeted
    /// wake-up: its latch, claimable work, its assignment, shutdown).
    /// Callers publish their condition first. Returns whether it was woken.
    pub(crate) fn notify_worker(&self, index: usize) -> bool {
        // Orders the caller's condition store before the bell load (the
        // waker's half of the Dekker pair; `SeqCst` accesses alone would do
        // in C++'s model, but loom only checks fences).
        fence(Ordering::SeqCst);
        self.ring(index, NOTIFIED)
    }

    /// New work was queued: unless the policy says the work is covered
    /// (`choose`, called only if some worker sleeps), wake one sleepy
    /// worker, the preferred one first.
    ///
    /// `external` must be true when the pushing thread may not run the work
    /// itself (it is not a worker, or it queued somewhere it does not pop):
    /// then a full fence orders the push before the sleeper check, so no
    /// wake-up is lost. A worker pushing to its own queue skips the fence;
    /// a wake-up lost there only delays the task until its owner pops it
    /// (see README, "local pushes").
    #[inline]
    pub(crate) fn wake_for_work(&self, external: bool, choose: impl FnOnce() -> Wake) {
        if external {
            fence(Ordering::SeqCst);
        }
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        match choose() {
            Wake::Nobody => {}
            Wake::Any => self.wake_one(None),
            Wake::Prefer(i) => self.wake_one(Some(i)),
        }
    }

    /// Passes on a wake-up for work ([`Woken::ForWork`]) its sleeper did
    /// not use: the work it was for is still queued somewhere.
    pub(crate) fn pass_on(&self) {
        self.wake_for_work(true, || Wake::Any);
    }

    #[cold]
    fn wake_one(&self, prefer: Option<usize>) {
        if let Some(p) = prefer
            && p < self.bells.len()
            && self.ring(p, NUDGED)
        {
            return;
        }
        let n = self.bells.len();
        let start = self.rotor.fetch_add(1, Ordering::Relaxed) % n.max(1);
        let _ = (0..n).any(|k| self.ring((start + k) % n, NUDGED));
    }

    /// Moves bell `index` to `to` (`NOTIFIED`: from `SLEEPY` or `DORMANT`;
    /// `NUDGED`: from `SLEEPY` only) and unparks its thread; the one place
    /// a waker takes a wake-up. Returns whether this call took it.
    fn ring(&self, index: usize, to: u32) -> bool {
        let bell = &self.bells[index];
        let mut cur = bell.state.load(Ordering::SeqCst);
        loop {
            if cur != SLEEPY && !(cur == DORMANT && to == NOTIFIED) {
                return false;
            }
            match bell
                .state
                .compare_exchange(cur, to, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        if cur == SLEEPY {
            self.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
        self.unpark(index);
        true
    }

    fn unpark(&self, index: usize) {
        if let Some(t) = self.bells[index]
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            t.unpark();
        }
    }
}

fn woken(state: u32) -> Woken {
    if state == NUDGED {
        Woken::ForWork
    } else {
        Woken::Notified
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn cancel_after_notify_keeps_count() {
        let s = Sleep::new(2);
        s.register(0, std::thread::current());
        let a = s.announce(0);
        assert_eq!(s.sleepers(), 1);
        assert!(s.notify_worker(0));
        assert_eq!(s.sleepers(), 0);
        assert_eq!(s.cancel(a), Woken::Notified);
        assert_eq!(s.sleepers(), 0);
        assert!(!s.notify_worker(0));
    }

    #[test]
    fn wake_for_work_nudges_sleepy_never_dormant() {
        let s = Sleep::new(2);
        s.register(0, std::thread::current());
        s.register(1, std::thread::current());
        let d = s.announce_dormant(0);
        let a = s.announce(1);
        s.wake_for_work(true, || Wake::Prefer(0));
        assert_eq!(s.sleepers(), 0, "the sleepy worker took it");
        assert_eq!(s.cancel(a), Woken::ForWork);
        s.wake_for_work(true, || Wake::Any);
        assert_eq!(
            s.cancel(d),
            Woken::Not,
            "dormant bells are not woken for work"
        );
    }

    #[test]
    fn park_and_wake() {
        let s = Arc::new(Sleep::new(1));
        let flag = Arc::new(AtomicBool::new(false));
        let (s2, f2) = (s.clone(), flag.clone());
        let h = std::thread::spawn(move || {
            s2.register(0, std::thread::current());
            loop {
                let a = s2.announce(0);
                if f2.load(Ordering::SeqCst) {
                    let _ = s2.cancel(a);
                    return;
                }
                let _ = s2.park(a);
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        flag.store(true, Ordering::SeqCst);
        s.wake_for_work(true, || Wake::Any);
        h.join().unwrap();
    }
}
