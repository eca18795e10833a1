//! Cooperative windows: a pool in a time-triggered cell takes new tasks
//! only inside the cell's windows.
//!
//! The broker suspends the whole cell between windows (the freezer), so a
//! task started just before a window closes is cut in two by the
//! suspension, holding whatever it holds (a lock, a half-filled buffer)
//! for the rest of the period. The pool avoids that where it can: a
//! worker checks the window before it looks for its next task, and
//! between windows it sleeps until the next one opens instead of taking
//! one (with [`allot_proto::window::sleep_until`], which a suspension
//! cannot make miss the opening), and looks again when it wakes: woken
//! after that window already closed, it sleeps until the next (at most
//! [`LATE_WAKES`] times in a row). Tasks are never dropped or moved: they wait in their queues and
//! run in the next window. Tasks already running finish (or are suspended
//! by the freezer) as before; the check is cooperative.
//!
//! The schedule comes from the grant page ([`allot_proto::Window`]); the
//! monitor stores it here on every grant. A pool outside a
//! time-triggered cell has no window and the check is one relaxed load.

use allot_proto::window::{monotonic_ns, sleep_until};
use allot_proto::{Phase, Window};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// How many wake-ups in a row that came after the window they waited for
/// had closed a worker sleeps past before it takes a task anyway.
const LATE_WAKES: u32 = 3;

/// The window schedule the pool follows (all zero: none).
#[derive(Debug, Default)]
pub(crate) struct PoolWindows {
    origin_ns: AtomicU64,
    /// Period and budget, µs, packed (period in the high half): one load
    /// tells whether there are windows.
    terms: AtomicU64,
    /// Times a worker waited for a window to open.
    pub(crate) waits: AtomicU32,
}

impl PoolWindows {
    /// Follows `w` from now on (an unset window lifts the schedule).
    pub(crate) fn set(&self, w: Window) {
        self.origin_ns.store(w.origin_ns, Ordering::Relaxed);
        let terms = if w.is_set() {
            (u64::from(w.period_us) << 32) | u64::from(w.budget_us)
        } else {
            0
        };
        self.terms.store(terms, Ordering::Release);
    }

    /// The schedule now, if any.
    pub(crate) fn get(&self) -> Option<Window> {
        let terms = self.terms.load(Ordering::Acquire);
        (terms != 0).then(|| Window {
            origin_ns: self.origin_ns.load(Ordering::Relaxed),
            period_us: (terms >> 32) as u32,
            budget_us: terms as u32,
        })
    }

    /// Called by a worker before it takes a task: between windows, sleeps
    /// until the next one opens, and looks again when it wakes: a wake-up
    /// later than the window's end (a loaded machine) waits for the next
    /// window rather than start a task between windows. After
    /// [`LATE_WAKES`] such wake-ups in a row it goes on all the same, so a
    /// machine whose wake-ups always come later than a window lasts still
    /// runs the pool's tasks. Returns whether it waited.
    pub(crate) fn hold(&self) -> bool {
        let mut slept = 0;
        loop {
            let Some(w) = self.get() else {
                return slept > 0;
            };
            match sleep_for(w.phase(monotonic_ns()), slept) {
                None => return slept > 0,
                Some(opens_ns) => {
                    self.waits.fetch_add(1, Ordering::Relaxed);
                    sleep_until(opens_ns);
                    slept += 1;
                }
            }
        }
    }
}

/// Until when a worker sleeps before it takes a task, in window phase
/// `phase`, having slept `slept` times for it already (each wake-up after
/// the first is a late one: it slept until an opening and found the window
/// closed); `None`: it takes the task now.
fn sleep_for(phase: Phase, slept: u32) -> Option<u64> {
    match phase {
        Phase::Open { .. } => None,
        Phase::Closed { .. } if slept > LATE_WAKES => None,
        Phase::Closed { opens_ns } => Some(opens_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn without_a_schedule_a_worker_never_waits() {
        let w = PoolWindows::default();
        assert!(!w.hold());
        w.set(Window::default());
        assert!(w.get().is_none());
        assert!(!w.hold());
    }

    #[test]
    fn between_windows_a_worker_sleeps_until_the_next_opens() {
        let w = PoolWindows::default();
        // Windows of 1 ms every 50 ms, the next opening 30 ms from now.
        let origin = monotonic_ns() + 30_000_000;
        w.set(Window {
            origin_ns: origin,
            period_us: 50_000,
            budget_us: 1_000,
        });
        let t = Instant::now();
        assert!(w.hold());
        assert!(
            monotonic_ns() >= origin,
            "it woke at the opening, not before"
        );
        assert!(t.elapsed() >= Duration::from_millis(29));
        assert_eq!(w.waits.load(Ordering::Relaxed), 1);
        // Lifting the schedule lets it go on at once.
        w.set(Window::default());
        assert!(!w.hold());
    }

    #[test]
    fn a_wake_up_after_the_window_closed_waits_for_the_next_but_not_forever() {
        let closed = Phase::Closed { opens_ns: 7 };
        assert_eq!(sleep_for(closed, 0), Some(7), "between windows: sleep");
        assert_eq!(sleep_for(closed, 1), Some(7), "woke after it closed: again");
        assert_eq!(sleep_for(closed, LATE_WAKES), Some(7));
        assert_eq!(
            sleep_for(closed, LATE_WAKES + 1),
            None,
            "late every time: go on all the same"
        );
        let open = Phase::Open { closes_ns: 9 };
        assert_eq!(sleep_for(open, 0), None);
        assert_eq!(sleep_for(open, 2), None, "woke inside the window");
    }
}
