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
//!     │                      │ notify (CAS by waker) │
//!     └──── park returns ◄── NOTIFIED ◄──────────────┘
//!
//!   AWAKE ── announce_dormant() ──► DORMANT ── notify_worker (CAS) ──► NOTIFIED
//! ```
//!
//! Invariants:
//! - only the owning worker moves its bell out of `NOTIFIED`, into `SLEEPY`
//!   or into `DORMANT`; only wakers move it into `NOTIFIED`, with a CAS,
//!   so exactly one waker "owns" each wake-up;
//! - `sleepers` counts bells in `SLEEPY`: incremented by the owner before
//!   its final re-check, decremented by whoever moves the bell out of
//!   `SLEEPY` (the owner cancelling, or the waker that won the CAS);
//! - a worker parks only after publishing `SLEEPY` and then re-checking
//!   every wake condition (queues, latch, its assignment, shutdown) with a
//!   `SeqCst` fence between, and every condition setter publishes its
//!   condition, fences, and then looks at the bells (Dekker's pattern):
//!   one of the two always sees the other;
//! - dormant workers (no CPU assigned) are not counted as sleepers and are
//!   never woken for work, only by [`Sleep::notify_worker`].

use crate::loom::sync::Mutex;
use crate::loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering, fence};
use crate::loom::thread::{self, Thread};
use crossbeam_utils::CachePadded;

const AWAKE: u32 = 0;
const SLEEPY: u32 = 1;
const NOTIFIED: u32 = 2;
const DORMANT: u32 = 3;

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

    /// Like [`Sleep::announce`] for a worker without a CPU: it will be woken
    /// only by [`Sleep::notify_worker`].
    pub(crate) fn announce_dormant(&self, index: usize) -> Sleepy {
        let prev = self.bells[index].state.swap(DORMANT, Ordering::SeqCst);
        debug_assert_eq!(prev, AWAKE);
        fence(Ordering::SeqCst);
        Sleepy {
            index,
            dormant: true,
        }
    }

    /// A wake condition held at the re-check: back to `AWAKE`.
    pub(crate) fn cancel(&self, s: Sleepy) {
        let bell = &self.bells[s.index];
        let from = if s.dormant { DORMANT } else { SLEEPY };
        if bell
            .state
            .compare_exchange(from, AWAKE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok()
        {
            if !s.dormant {
                self.sleepers.fetch_sub(1, Ordering::SeqCst);
            }
        } else {
            // A waker won the race and already counted us out.
            bell.state.store(AWAKE, Ordering::SeqCst);
        }
    }

    /// Blocks until a waker moves the bell to `NOTIFIED`; spurious
    /// unparks are absorbed here.
    pub(crate) fn park(&self, s: Sleepy) {
        let bell = &self.bells[s.index];
        while bell.state.load(Ordering::SeqCst) != NOTIFIED {
            thread::park();
        }
        bell.state.store(AWAKE, Ordering::SeqCst);
    }

    /// Wakes worker `index` if it is sleepy or dormant. Callers publish
    /// their condition (and fence) first. Returns whether it was woken.
    pub(crate) fn notify_worker(&self, index: usize) -> bool {
        // Orders the caller's condition store before the bell load (the
        // waker's half of the Dekker pair; `SeqCst` accesses alone would do
        // in C++'s model, but loom only checks fences).
        fence(Ordering::SeqCst);
        let bell = &self.bells[index];
        let mut cur = bell.state.load(Ordering::SeqCst);
        loop {
            if cur != SLEEPY && cur != DORMANT {
                return false;
            }
            match bell
                .state
                .compare_exchange(cur, NOTIFIED, Ordering::SeqCst, Ordering::SeqCst)
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

    /// New work was queued: wake one sleepy worker if there is one,
    /// trying `prefer` first.
    ///
    /// `external` must be true when the pushing thread will not run the
    /// work itself (it is not a worker, or it queued somewhere it does not
    /// pop): then a full fence orders the push before the sleeper check, so
    /// no wake-up is lost. A worker pushing to its own queue skips the
    /// fence; a wake-up lost there only delays the task until its owner
    /// pops it (see README, "local pushes").
    #[inline]
    pub(crate) fn new_work(&self, external: bool, prefer: Option<usize>) {
        if external {
            fence(Ordering::SeqCst);
        }
        if self.sleepers.load(Ordering::SeqCst) == 0 {
            return;
        }
        self.wake_one(prefer);
    }

    #[cold]
    fn wake_one(&self, prefer: Option<usize>) -> bool {
        if let Some(p) = prefer
            && p < self.bells.len()
            && self.try_wake_sleepy(p)
        {
            return true;
        }
        let n = self.bells.len();
        let start = self.rotor.fetch_add(1, Ordering::Relaxed) % n.max(1);
        (0..n).any(|k| self.try_wake_sleepy((start + k) % n))
    }

    fn try_wake_sleepy(&self, index: usize) -> bool {
        let bell = &self.bells[index];
        if bell.state.load(Ordering::SeqCst) != SLEEPY {
            return false;
        }
        if bell
            .state
            .compare_exchange(SLEEPY, NOTIFIED, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
        {
            return false;
        }
        self.sleepers.fetch_sub(1, Ordering::SeqCst);
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
        s.cancel(a);
        assert_eq!(s.sleepers(), 0);
        assert!(!s.notify_worker(0));
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
                    s2.cancel(a);
                    return;
                }
                s2.park(a);
            }
        });
        std::thread::sleep(std::time::Duration::from_millis(5));
        flag.store(true, Ordering::SeqCst);
        s.new_work(true, None);
        h.join().unwrap();
    }
}
