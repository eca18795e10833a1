//! Synchronisation primitives: [`Event`], [`Latch`], and the pool's
//! internal latches.
//!
//! [`Event`] is a one-shot flag any number of threads wait on. A waiter
//! spins for a bounded time (`EVENT_SPIN`) and then blocks on a
//! mutex/condvar pair. The states:
//!
//! ```text
//!   UNSET ──set()──────────────► SET          (fast path: nobody blocked)
//!   UNSET ──waiter blocks──► WAITING ──set() under the lock──► SET
//! ```
//!
//! Invariant that makes an `Event` safe to keep on a stack: `set` touches
//! the mutex only when a waiter announced itself (`WAITING`), and in that
//! case stores `SET` *while holding the lock*; a blocked waiter returns
//! only after re-acquiring the lock and seeing `SET`, hence after `set` is
//! done with the event. A spinning waiter can see `SET` only from the fast
//! path, where `set` never touches the event again.
//!
//! `CoreLatch` is the latch of `join` and `scope` when the waiter is a pool
//! worker: the waiter works while it waits and sleeps on its own doorbell,
//! so setting the latch wakes the bell of the worker recorded at creation
//! (see `sleep/README.md`, "Latch set while the joiner sleeps").

use crate::loom::hint;
use crate::loom::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use crate::loom::sync::{Condvar, Mutex};
use crate::loom::time::Instant;
use crate::sleep::Sleep;
use crate::task::Signal;
use std::time::Duration;

const UNSET: u32 = 0;
const SET: u32 = 1;
const WAITING: u32 = 2;

/// How long a waiter spins before it blocks: about one blocking wake-up.
pub const EVENT_SPIN: Duration = Duration::from_micros(20);

/// A one-shot event: `set` once, `wait` from any number of threads.
///
/// Waiting spins for up to [`EVENT_SPIN`], then blocks. It blocks the
/// calling thread even on a pool worker; inside pool tasks prefer
/// `join`/`scope`/`JoinHandle::join`, which run other tasks while waiting.
#[derive(Debug)]
pub struct Event {
    state: AtomicU32,
    lock: Mutex<()>,
    cv: Condvar,
}

impl Default for Event {
    fn default() -> Self {
        Event::new()
    }
}

impl Event {
    /// An unset event.
    pub fn new() -> Event {
        Event {
            state: AtomicU32::new(UNSET),
            lock: Mutex::new(()),
            cv: Condvar::new(),
        }
    }

    /// Whether the event is set (acquire).
    #[inline]
    pub fn is_set(&self) -> bool {
        self.state.load(Ordering::Acquire) == SET
    }

    /// Sets the event and wakes every waiter. Idempotent.
    pub fn set(&self) {
        match self
            .state
            .compare_exchange(UNSET, SET, Ordering::SeqCst, Ordering::SeqCst)
        {
            Ok(_) | Err(SET) => {}
            Err(_) => {
                let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
                self.state.store(SET, Ordering::SeqCst);
                self.cv.notify_all();
            }
        }
    }

    /// Clears a set event. Only sound to call when no thread waits.
    pub fn reset(&self) {
        self.state.store(UNSET, Ordering::SeqCst);
    }

    /// Waits until the event is set.
    pub fn wait(&self) {
        self.wait_inner(None);
    }

    /// Waits at most `timeout`; returns whether the event is set.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.wait_inner(Some(timeout))
    }

    fn wait_inner(&self, timeout: Option<Duration>) -> bool {
        if self.spin(EVENT_SPIN) {
            return true;
        }
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let _blocked = crate::blocking::Blocked::begin();
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Err(SET) =
                self.state
                    .compare_exchange(UNSET, WAITING, Ordering::SeqCst, Ordering::SeqCst)
            {
                return true;
            }
            match deadline {
                None => g = self.cv.wait(g).unwrap_or_else(|p| p.into_inner()),
                Some(d) => {
                    let left = d.saturating_duration_since(std::time::Instant::now());
                    if left.is_zero() {
                        return self.is_set();
                    }
                    g = wait_timeout(&self.cv, g, left);
                }
            }
        }
    }

    /// Spins up to `budget`; returns whether the event got set.
    pub(crate) fn spin(&self, budget: Duration) -> bool {
        let start = Instant::now();
        let mut i = 0u32;
        loop {
            if self.is_set() {
                return true;
            }
            i = i.wrapping_add(1);
            if i.is_multiple_of(64) && start.elapsed() >= budget {
                return false;
            }
            hint::spin_loop();
            #[cfg(loom)]
            if i > 2 {
                return false;
            }
        }
    }
}

#[cfg(not(loom))]
fn wait_timeout<'a>(
    cv: &Condvar,
    g: std::sync::MutexGuard<'a, ()>,
    d: Duration,
) -> std::sync::MutexGuard<'a, ()> {
    cv.wait_timeout(g, d)
        .map(|r| r.0)
        .unwrap_or_else(|p| p.into_inner().0)
}

#[cfg(loom)]
fn wait_timeout<'a>(
    cv: &Condvar,
    g: crate::loom::sync::MutexGuard<'a, ()>,
    _d: Duration,
) -> crate::loom::sync::MutexGuard<'a, ()> {
    cv.wait(g).unwrap_or_else(|p| p.into_inner())
}

/// A count-down latch: `wait` returns once `count_down` was called
/// `count` times.
#[derive(Debug)]
pub struct Latch {
    left: AtomicUsize,
    done: Event,
}

impl Latch {
    /// A latch that opens after `count` calls to [`Latch::count_down`]
    /// (immediately if `count` is 0).
    pub fn new(count: usize) -> Latch {
        let l = Latch {
            left: AtomicUsize::new(count),
            done: Event::new(),
        };
        if count == 0 {
            l.done.set();
        }
        l
    }

    /// Counts down by one; the last call opens the latch.
    ///
    /// # Panics
    /// If called more often than the count.
    pub fn count_down(&self) {
        let prev = self.left.fetch_sub(1, Ordering::AcqRel);
        assert!(prev > 0, "Latch counted down below zero");
        if prev == 1 {
            self.done.set();
        }
    }

    /// Calls left before the latch opens.
    pub fn count(&self) -> usize {
        self.left.load(Ordering::Acquire)
    }

    /// Whether the latch is open.
    pub fn is_open(&self) -> bool {
        self.done.is_set()
    }

    /// Waits until the latch opens (spin, then block).
    pub fn wait(&self) {
        self.done.wait()
    }

    /// Waits at most `timeout`; returns whether the latch is open.
    pub fn wait_timeout(&self, timeout: Duration) -> bool {
        self.done.wait_timeout(timeout)
    }
}

impl Signal for Event {
    unsafe fn signal(this: *const Self) {
        // SAFETY: `this` is live on entry; `set` honours the "no touch
        // after publishing" rule documented at the top of this module.
        unsafe { (*this).set() }
    }
}

/// The latch of a `join`/`scope` whose waiter is the pool worker `owner`.
#[derive(Debug)]
pub(crate) struct CoreLatch {
    state: AtomicU32,
    owner: usize,
    sleep: *const Sleep,
}

// SAFETY: `sleep` points into the pool registry, which outlives every job
// of the pool (workers hold the registry while they run jobs).
unsafe impl Send for CoreLatch {}
// SAFETY: see `Send`; the state is atomic.
unsafe impl Sync for CoreLatch {}

impl CoreLatch {
    pub(crate) fn new(owner: usize, sleep: &Sleep) -> CoreLatch {
        CoreLatch {
            state: AtomicU32::new(UNSET),
            owner,
            sleep,
        }
    }

    /// Whether the latch is set (`SeqCst`: part of the sleep re-check).
    #[inline]
    pub(crate) fn probe(&self) -> bool {
        self.state.load(Ordering::SeqCst) == SET
    }

    /// Sets the latch and wakes the owner if it sleeps.
    ///
    /// # Safety
    /// `this` is live on entry; it may be freed as soon as the state is
    /// published, so only copies are used afterwards.
    pub(crate) unsafe fn set(this: *const Self) {
        // SAFETY: live on entry (caller contract).
        let (owner, sleep) = unsafe { ((*this).owner, (*this).sleep) };
        // SAFETY: as above; nothing reads `*this` after this store.
        unsafe { (*this).state.store(SET, Ordering::SeqCst) };
        // SAFETY: the registry outlives the latch (type-level comment).
        unsafe { (*sleep).notify_worker(owner) };
    }
}

impl Signal for CoreLatch {
    unsafe fn signal(this: *const Self) {
        // SAFETY: forwarded caller contract.
        unsafe { CoreLatch::set(this) }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn latch_counts_down() {
        let l = Arc::new(Latch::new(3));
        let hs: Vec<_> = (0..3)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || l.count_down())
            })
            .collect();
        l.wait();
        assert!(l.is_open());
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert!(Latch::new(0).is_open());
    }

    #[test]
    fn event_blocks_then_wakes() {
        let e = Arc::new(Event::new());
        let e2 = e.clone();
        let h = std::thread::spawn(move || e2.wait());
        std::thread::sleep(Duration::from_millis(10));
        e.set();
        h.join().unwrap();
        assert!(!Event::new().wait_timeout(Duration::from_millis(1)));
    }
}
