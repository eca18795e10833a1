//! The windows of a time-triggered cell: the one definition of *when* such
//! a cell runs, shared by the broker (which opens and closes the windows)
//! and by everything that reads a grant page (the runtime, the C shim).
//!
//! A [`Window`] is an origin on `CLOCK_MONOTONIC` (a clock every process on
//! the machine reads alike), a period and a budget: window *k* opens at
//! `origin + k·period` and closes `budget` later. [`Window::phase`] is a
//! pure function of the window and the time, so a reader needs nothing but
//! the published window and the clock to know whether the cell is in a
//! window now and when the next edge comes.
//!
//! The broker's actual openings may differ slightly from this schedule: an
//! opening is late by the activation latency, and a window after an overrun
//! (the previous window ran past its end because suspending the cell took
//! time) is shortened by the overrun. Readers use the schedule as the
//! cooperative boundary: stop taking work at its close, resume at its next
//! opening.
//!
//! # Waiting for a window
//!
//! [`sleep_until`] is how a thread of a time-triggered cell waits for its
//! next opening. Between windows the broker suspends the cell (the
//! freezer). A thread asleep in `clock_nanosleep` is in a *freezable*
//! sleep: the kernel freezes it in place, and when its timer expires
//! during the suspension what happens at the thaw depends on the kernel
//! version's freezer; when the thaw comes first, the thread still waits
//! for its timer and runs a timer wake-up after the opening. `sleep_until`
//! sleeps instead in `read` on a `timerfd` armed for an absolute time
//! [`WAIT_MARGIN_NS`] before the opening. That sleep is not freezable: a
//! suspension interrupts it, the thread waits in the freezer itself, and
//! the thaw resumes it; the read restarts and, the timer having expired
//! meanwhile, returns at once. So a suspended waiter runs as soon as its
//! window opens, and the short spin after the timer (at most the margin)
//! makes it return exactly at the opening when the cell is not suspended.
//! (docs/time-mechanisms.md, "Late threads around a freeze", measures
//! both ways of waiting.)

use std::time::Duration;

/// The schedule of a time-triggered cell's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Window {
    /// When window 0 opens, `CLOCK_MONOTONIC` nanoseconds.
    pub origin_ns: u64,
    /// Period, µs (> 0).
    pub period_us: u32,
    /// Window length, µs (0 < budget ≤ period).
    pub budget_us: u32,
}

/// Where a time is relative to a cell's windows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Inside a window that closes at `closes_ns`.
    Open {
        /// End of the current window, `CLOCK_MONOTONIC` ns.
        closes_ns: u64,
    },
    /// Between windows; the next opens at `opens_ns`.
    Closed {
        /// Start of the next window, `CLOCK_MONOTONIC` ns.
        opens_ns: u64,
    },
}

impl Window {
    /// Whether the window describes a schedule (a page of a cell without
    /// windows holds all zeros).
    pub fn is_set(&self) -> bool {
        self.period_us > 0 && self.budget_us > 0
    }

    /// Period in nanoseconds.
    pub fn period_ns(&self) -> u64 {
        u64::from(self.period_us) * 1000
    }

    /// Budget in nanoseconds.
    pub fn budget_ns(&self) -> u64 {
        u64::from(self.budget_us) * 1000
    }

    /// The start of the window that contains `now_ns` or, between windows,
    /// of the one before (the origin before the first). Requires
    /// [`Window::is_set`].
    pub fn start_at_or_before(&self, now_ns: u64) -> u64 {
        if now_ns <= self.origin_ns {
            return self.origin_ns;
        }
        let p = self.period_ns();
        self.origin_ns + (now_ns - self.origin_ns) / p * p
    }

    /// The start of the first window that opens after `now_ns` (inside a
    /// window: the next one), or `None` without a schedule.
    pub fn next_opening(&self, now_ns: u64) -> Option<u64> {
        if !self.is_set() {
            return None;
        }
        Some(match self.phase(now_ns) {
            Phase::Closed { opens_ns } => opens_ns,
            Phase::Open { .. } => self.start_at_or_before(now_ns) + self.period_ns(),
        })
    }

    /// Where `now_ns` falls. A window without a schedule is always open
    /// (`closes_ns` = `u64::MAX`).
    pub fn phase(&self, now_ns: u64) -> Phase {
        if !self.is_set() {
            return Phase::Open {
                closes_ns: u64::MAX,
            };
        }
        if now_ns < self.origin_ns {
            return Phase::Closed {
                opens_ns: self.origin_ns,
            };
        }
        let start = self.start_at_or_before(now_ns);
        let budget = self.budget_ns().min(self.period_ns());
        if now_ns < start + budget {
            Phase::Open {
                closes_ns: start + budget,
            }
        } else {
            Phase::Closed {
                opens_ns: start + self.period_ns(),
            }
        }
    }
}

/// How long before the time it waits for [`sleep_until`]'s timer fires;
/// it spins the rest. About the timer wake-up latency of a small VM.
pub const WAIT_MARGIN_NS: u64 = 50_000;

thread_local! {
    /// This thread's timer for [`sleep_until`], made on first use, with the
    /// process it was made in: a child forked from this thread shares the
    /// parent's timer (one open file), so it makes its own.
    static TIMER: std::cell::RefCell<Option<(rustix::process::Pid, rustix::fd::OwnedFd)>> =
        const { std::cell::RefCell::new(None) };
}

/// Returns at `at_ns` on `CLOCK_MONOTONIC` (at once if it has passed),
/// sleeping in a way that a suspension of the thread's cell cannot
/// prolong (see the module docs, "Waiting for a window"): a `timerfd`
/// read until [`WAIT_MARGIN_NS`] before, then a spin. Each thread that
/// waits keeps one timer descriptor for its life (a forked child makes its
/// own). Falls back to `clock_nanosleep` when the thread cannot have a
/// timer (out of file descriptors), sleeping again after a signal.
pub fn sleep_until(at_ns: u64) {
    use rustix::time::{
        Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec, timerfd_create,
        timerfd_settime,
    };
    let wake = at_ns.saturating_sub(WAIT_MARGIN_NS);
    if monotonic_ns() < wake {
        let ts = |ns: u64| Timespec {
            tv_sec: (ns / 1_000_000_000) as i64,
            tv_nsec: (ns % 1_000_000_000) as _,
        };
        let slept = TIMER.with(|t| {
            let mut t = t.borrow_mut();
            let me = rustix::process::getpid();
            if t.as_ref().is_none_or(|(pid, _)| *pid != me) {
                // (Made again on failure next time: descriptors free up.)
                *t = timerfd_create(TimerfdClockId::Monotonic, TimerfdFlags::CLOEXEC)
                    .ok()
                    .map(|fd| (me, fd));
            }
            let Some((_, fd)) = t.as_ref() else {
                return false;
            };
            let spec = Itimerspec {
                it_interval: ts(0),
                it_value: ts(wake),
            };
            if timerfd_settime(fd, TimerfdTimerFlags::ABSTIME, &spec).is_err() {
                return false;
            }
            let mut expirations = [0u8; 8];
            loop {
                match rustix::io::read(fd, &mut expirations) {
                    Ok(_) => return true,
                    Err(rustix::io::Errno::INTR) => continue,
                    Err(_) => return false,
                }
            }
        });
        if !slept {
            // An absolute sleep: a signal only cuts it short.
            while rustix::thread::clock_nanosleep_absolute(
                rustix::thread::ClockId::Monotonic,
                &ts(wake),
            ) == Err(rustix::io::Errno::INTR)
            {}
        }
    }
    while monotonic_ns() < at_ns {
        std::hint::spin_loop();
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds, one clock for every process of
/// the machine: the clock windows are defined on, and the one a gathered
/// arrival is stamped with (`KindGather`'s `sent_ns`).
pub fn monotonic_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The time from `now_ns` to `then_ns` (zero if `then_ns` has passed).
pub fn until(now_ns: u64, then_ns: u64) -> Duration {
    Duration::from_nanos(then_ns.saturating_sub(now_ns))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn w() -> Window {
        Window {
            origin_ns: 100 * MS,
            period_us: 10_000,
            budget_us: 3_000,
        }
    }

    #[test]
    fn windows_open_every_period_for_the_budget() {
        let w = w();
        assert_eq!(w.phase(0), Phase::Closed { opens_ns: 100 * MS });
        assert_eq!(
            w.phase(100 * MS),
            Phase::Open {
                closes_ns: 103 * MS
            }
        );
        assert_eq!(
            w.phase(103 * MS - 1),
            Phase::Open {
                closes_ns: 103 * MS
            }
        );
        assert_eq!(w.phase(103 * MS), Phase::Closed { opens_ns: 110 * MS });
        assert_eq!(w.phase(109 * MS), Phase::Closed { opens_ns: 110 * MS });
    }

    /// The phase computed the slow way: walk the windows from the origin.
    fn reference(w: &Window, now: u64) -> Phase {
        if now < w.origin_ns {
            return Phase::Closed {
                opens_ns: w.origin_ns,
            };
        }
        let mut start = w.origin_ns;
        while start + w.period_ns() <= now {
            start += w.period_ns();
        }
        if now < start + w.budget_ns() {
            Phase::Open {
                closes_ns: start + w.budget_ns(),
            }
        } else {
            Phase::Closed {
                opens_ns: start + w.period_ns(),
            }
        }
    }

    #[test]
    fn the_phase_matches_walking_the_windows() {
        let w = Window {
            origin_ns: 7 * MS + 333,
            period_us: 2_500,
            budget_us: 700,
        };
        for t in (0..60 * MS).step_by(12_347) {
            assert_eq!(w.phase(t), reference(&w, t), "at {t}");
        }
    }

    #[test]
    fn a_window_without_a_schedule_is_always_open() {
        assert_eq!(
            Window::default().phase(42),
            Phase::Open {
                closes_ns: u64::MAX
            }
        );
    }

    #[test]
    fn a_budget_equal_to_the_period_never_closes_between_periods() {
        let w = Window {
            origin_ns: 0,
            period_us: 1000,
            budget_us: 1000,
        };
        for t in (0..10 * MS).step_by(77_777) {
            assert!(matches!(w.phase(t), Phase::Open { .. }), "at {t}");
        }
    }

    #[test]
    fn the_next_opening_is_the_following_window_start() {
        let w = w();
        assert_eq!(w.next_opening(0), Some(100 * MS), "before the origin");
        assert_eq!(w.next_opening(100 * MS), Some(110 * MS), "at an opening");
        assert_eq!(w.next_opening(102 * MS), Some(110 * MS), "inside");
        assert_eq!(w.next_opening(105 * MS), Some(110 * MS), "between");
        assert_eq!(w.next_opening(110 * MS - 1), Some(110 * MS));
        assert_eq!(Window::default().next_opening(5), None);
    }

    #[test]
    fn sleep_until_returns_at_the_time_and_not_before() {
        for ahead in [0, 30_000, 2 * MS, 7 * MS] {
            let at = monotonic_ns() + ahead;
            sleep_until(at);
            assert!(monotonic_ns() >= at, "{ahead} ns ahead");
        }
        // A time in the past returns at once.
        let t = std::time::Instant::now();
        sleep_until(monotonic_ns() - MS);
        assert!(t.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn the_clock_is_monotonic() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(b >= a && a > 0);
        assert_eq!(until(b, a), Duration::ZERO);
    }
}
