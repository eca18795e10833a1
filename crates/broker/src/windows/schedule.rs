//! One time-triggered cell's windows as a pure state machine: given the
//! time (and the cell's CPU time so far), which edge comes next and what
//! the last period delivered. The driver thread (`super`) owns one
//! [`Slot`] per cell and performs the edges on the cell's gate.
//!
//! Per period *k* (opening at `origin + k·P`):
//!
//! - the window opens at the scheduled time (as late as the driver wakes)
//!   and closes `B − debt` after the *scheduled* opening, so a late
//!   opening never pushes the window into the next period;
//! - at the next opening, the CPU time the cell used since the previous
//!   opening is the period's delivery (against `B × cpus`: the gang runs
//!   on `cpus` CPUs); what exceeds the budget — a freeze takes effect
//!   only when the threads next return to user space — becomes the
//!   `debt` that shortens the next window (never carried further);
//! - a window whose closing time has passed before the driver woke is
//!   *missed*: it stays closed and the period is not accounted;
//! - [`CHECK_AFTER_NS`] after a close, the driver asks the gate whether
//!   every thread stopped; a straggler (the kernel now and then lets a
//!   thread asleep at the freeze run on, see `allot_enforce::gate`) gets
//!   the close again, checked again after twice the wait, until the
//!   window opens.
//!
//! A contract whose budget fills its period has no edges: the cell is
//! always open.

use allot_proto::Window;
use std::collections::VecDeque;

/// Openings kept for the latency percentiles.
pub const LATENCY_SAMPLES: usize = 256;

/// How long after a close the driver first checks that every thread of
/// the cell stopped, ns. A freeze takes tens of microseconds to land, and
/// the driver may perform an edge up to its lead early
/// (`super::MAX_LEAD`, 250 µs): twice that keeps checks after the
/// freeze had its time.
pub const CHECK_AFTER_NS: u64 = 500_000;

/// A period is *under* (or *over*) budget when its delivery is below (or
/// above) the budget by more than this fraction.
pub const TOLERANCE: f64 = 0.10;

/// What the driver must do now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// Open the gate (the window scheduled at `scheduled_ns` starts).
    Open {
        /// The window's scheduled start.
        scheduled_ns: u64,
    },
    /// Close the gate.
    Close,
    /// Check that the last close stopped every thread.
    Check,
}

/// What the cell was delivered so far.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Delivery {
    /// CPU time due per period: budget × CPUs, ns.
    pub budget_ns: u64,
    /// Periods accounted.
    pub periods: u64,
    /// Periods delivered less than the budget by more than [`TOLERANCE`]
    /// (the cell idled, or the machine could not give it its window).
    pub under: u64,
    /// Periods delivered more than the budget by more than [`TOLERANCE`]
    /// (a late freeze; the next window was shortened).
    pub over: u64,
    /// Windows not opened at all: the driver woke after their end.
    pub missed: u64,
    /// Closes sent again because a thread still ran after the first.
    pub resent: u64,
    /// CPU time in the last accounted period, ns.
    pub last_used_ns: u64,
    /// Sum over accounted periods of |delivered − budget| / budget.
    pub error_sum: f64,
    /// Scheduled opening → gate opened, ns, most recent last.
    pub latencies: VecDeque<u64>,
}

impl Delivery {
    /// Mean per-period delivery error, as a fraction of the budget.
    pub fn mean_error(&self) -> f64 {
        if self.periods == 0 {
            0.0
        } else {
            self.error_sum / self.periods as f64
        }
    }

    /// The `q` quantile (0..=1) of the recent opening latencies, ns.
    pub fn latency_quantile(&self, q: f64) -> Option<u64> {
        quantile(&self.latencies, q)
    }

    fn account(&mut self, used_ns: u64) {
        self.periods += 1;
        self.last_used_ns = used_ns;
        let b = self.budget_ns.max(1) as f64;
        let rel = (used_ns as f64 - b) / b;
        self.error_sum += rel.abs();
        if rel < -TOLERANCE {
            self.under += 1;
        } else if rel > TOLERANCE {
            self.over += 1;
        }
    }
}

/// The `q` quantile (0..=1) of `samples` (the sample whose rank is
/// nearest to `q·(n−1)`); `None` for no samples.
pub fn quantile(samples: &VecDeque<u64>, q: f64) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    let mut v: Vec<u64> = samples.iter().copied().collect();
    v.sort_unstable();
    let i = ((v.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(v[i])
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Open {
        closes_ns: u64,
    },
    Closed {
        opens_ns: u64,
        /// When to check that the last close stopped every thread.
        check_ns: Option<u64>,
    },
    Always,
}

impl State {
    fn closed_until(opens_ns: u64) -> State {
        State::Closed {
            opens_ns,
            check_ns: None,
        }
    }
}

/// One cell's windows.
#[derive(Debug, Clone)]
pub struct Slot {
    window: Window,
    cpus: u32,
    state: State,
    /// The wait before the next check (doubles while a close does not
    /// land).
    check_wait_ns: u64,
    debt_ns: u64,
    /// CPU time at the last opening, to account the period it started.
    opened_usage: Option<u64>,
    delivery: Delivery,
}

impl Slot {
    /// A cell with `window` on `cpus` CPUs; its first window opens at the
    /// first window start at or after `now_ns` (closed until then).
    pub fn new(window: Window, cpus: u32, now_ns: u64) -> Slot {
        let state = if window.budget_us >= window.period_us {
            State::Always
        } else {
            let start = window.start_at_or_before(now_ns);
            State::closed_until(if start >= now_ns {
                start
            } else {
                start + window.period_ns()
            })
        };
        Slot {
            window,
            cpus: cpus.max(1),
            state,
            check_wait_ns: CHECK_AFTER_NS,
            debt_ns: 0,
            opened_usage: None,
            delivery: Delivery {
                budget_ns: window.budget_ns() * u64::from(cpus.max(1)),
                ..Delivery::default()
            },
        }
    }

    /// Whether the cell is between windows now (its gate should be shut).
    pub fn closed(&self) -> bool {
        matches!(self.state, State::Closed { .. })
    }

    /// When the next edge is due; `None` for a cell that is always open.
    pub fn next_edge(&self) -> Option<u64> {
        match self.state {
            State::Open { closes_ns } => Some(closes_ns),
            State::Closed { opens_ns, check_ns } => {
                Some(check_ns.map_or(opens_ns, |c| c.min(opens_ns)))
            }
            State::Always => None,
        }
    }

    /// Whether the next edge opens the window (rather than closing it or
    /// checking a close).
    pub fn opens_next(&self) -> bool {
        matches!(self.state, State::Closed { opens_ns, check_ns }
            if check_ns.is_none_or(|c| c >= opens_ns))
    }

    /// What was delivered so far.
    pub fn delivery(&self) -> &Delivery {
        &self.delivery
    }

    /// Advances to `now_ns` (at or after [`Slot::next_edge`]), with the
    /// cell's CPU time so far when the backend can tell. Returns the edge
    /// to perform, or `None` when the due window was missed or has no
    /// length left after an overrun (the slot then waits for the next).
    pub fn due(&mut self, now_ns: u64, usage_ns: Option<u64>) -> Option<Edge> {
        match self.state {
            State::Always => None,
            State::Open { closes_ns } => {
                debug_assert!(now_ns >= closes_ns);
                let opens_ns = self.next_start_after(closes_ns);
                self.check_wait_ns = CHECK_AFTER_NS;
                self.state = State::Closed {
                    opens_ns,
                    check_ns: Some(closes_ns + CHECK_AFTER_NS).filter(|c| *c < opens_ns),
                };
                Some(Edge::Close)
            }
            State::Closed {
                opens_ns,
                check_ns: Some(check_ns),
            } if check_ns < opens_ns && now_ns < opens_ns => {
                debug_assert!(now_ns >= check_ns);
                self.state = State::closed_until(opens_ns);
                Some(Edge::Check)
            }
            State::Closed { opens_ns, .. } => {
                debug_assert!(now_ns >= opens_ns);
                // The period that started at the previous opening ends now.
                if let (Some(before), Some(now)) = (self.opened_usage.take(), usage_ns) {
                    let used = now.saturating_sub(before);
                    self.delivery.account(used);
                    self.debt_ns =
                        used.saturating_sub(self.delivery.budget_ns) / u64::from(self.cpus);
                }
                let length = self.window.budget_ns().saturating_sub(self.debt_ns);
                self.debt_ns = 0;
                let closes_ns = opens_ns + length;
                if length == 0 {
                    // The whole window went to the last one's overrun.
                    self.state = State::closed_until(opens_ns + self.window.period_ns());
                    return None;
                }
                if now_ns >= closes_ns {
                    self.delivery.missed += 1;
                    self.state = State::closed_until(self.next_start_after(now_ns));
                    return None;
                }
                self.opened_usage = usage_ns;
                self.state = State::Open { closes_ns };
                Some(Edge::Open {
                    scheduled_ns: opens_ns,
                })
            }
        }
    }

    /// Records that the gate opened at `done_ns` for the window scheduled
    /// at `scheduled_ns`.
    pub fn opened(&mut self, scheduled_ns: u64, done_ns: u64) {
        let d = &mut self.delivery;
        if d.latencies.len() == LATENCY_SAMPLES {
            d.latencies.pop_front();
        }
        d.latencies.push_back(done_ns.saturating_sub(scheduled_ns));
    }

    /// Records that a check at `now_ns` found a thread still running and
    /// the close was sent again: checks again after twice the last wait,
    /// if that comes before the window opens.
    pub fn resent(&mut self, now_ns: u64) {
        self.delivery.resent += 1;
        if let State::Closed { opens_ns, .. } = self.state {
            self.check_wait_ns = self.check_wait_ns.saturating_mul(2);
            self.state = State::Closed {
                opens_ns,
                check_ns: Some(now_ns + self.check_wait_ns).filter(|c| *c < opens_ns),
            };
        }
    }

    fn next_start_after(&self, t: u64) -> u64 {
        self.window.start_at_or_before(t) + self.window.period_ns()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    fn slot(cpus: u32) -> Slot {
        Slot::new(
            Window {
                origin_ns: 100 * MS,
                period_us: 10_000,
                budget_us: 3_000,
            },
            cpus,
            100 * MS,
        )
    }

    /// Drives a slot as the driver would: every edge exactly on time, the
    /// cell using `use_per_window` CPU time in each window.
    fn run(s: &mut Slot, windows: u32, use_per_window: u64) -> Vec<(u64, Edge)> {
        let mut usage = 0;
        let mut out = vec![];
        for _ in 0..3 * windows {
            let t = s.next_edge().unwrap();
            let e = s.due(t, Some(usage));
            if e == Some(Edge::Check) {
                continue;
            }
            if let Some(Edge::Open { scheduled_ns }) = e {
                s.opened(scheduled_ns, t + 50 * US);
                usage += use_per_window;
            }
            if let Some(e) = e {
                out.push((t, e));
            }
        }
        out
    }

    #[test]
    fn windows_open_every_period_for_the_budget() {
        let mut s = slot(1);
        assert!(s.closed());
        let edges = run(&mut s, 3, 3 * MS);
        assert_eq!(
            edges,
            vec![
                (
                    100 * MS,
                    Edge::Open {
                        scheduled_ns: 100 * MS
                    }
                ),
                (103 * MS, Edge::Close),
                (
                    110 * MS,
                    Edge::Open {
                        scheduled_ns: 110 * MS
                    }
                ),
                (113 * MS, Edge::Close),
                (
                    120 * MS,
                    Edge::Open {
                        scheduled_ns: 120 * MS
                    }
                ),
                (123 * MS, Edge::Close),
            ]
        );
        let d = s.delivery();
        assert_eq!(d.periods, 2, "a period is accounted at the next opening");
        assert_eq!((d.under, d.over, d.missed), (0, 0, 0));
        assert_eq!(d.last_used_ns, 3 * MS);
        assert_eq!(d.latency_quantile(0.5), Some(50 * US));
    }

    #[test]
    fn a_close_is_checked_and_sent_again_with_doubling_waits_until_the_opening() {
        let mut s = slot(1);
        assert!(s.opens_next());
        assert!(matches!(s.due(100 * MS, Some(0)), Some(Edge::Open { .. })));
        assert_eq!(s.due(103 * MS, Some(3 * MS)), Some(Edge::Close));
        assert!(!s.opens_next(), "a check comes first");
        assert_eq!(s.next_edge(), Some(103 * MS + CHECK_AFTER_NS));
        assert_eq!(s.due(103 * MS + CHECK_AFTER_NS, None), Some(Edge::Check));
        // A thread ran on: the close goes again, checked after 1 ms, then
        // 2 ms; the next (4 ms) would pass the opening.
        let mut t = 103 * MS + CHECK_AFTER_NS;
        let mut waits = vec![];
        loop {
            s.resent(t);
            let next = s.next_edge().unwrap();
            if next == 110 * MS {
                break;
            }
            waits.push(next - t);
            assert_eq!(s.due(next, None), Some(Edge::Check));
            t = next;
        }
        assert_eq!(waits, vec![1_000 * US, 2_000 * US]);
        assert_eq!(s.delivery().resent, 3);
        assert!(s.opens_next());
        // The next close starts from the first wait again.
        assert!(matches!(
            s.due(110 * MS, Some(3 * MS)),
            Some(Edge::Open { .. })
        ));
        assert_eq!(s.due(113 * MS, Some(6 * MS)), Some(Edge::Close));
        assert_eq!(s.next_edge(), Some(113 * MS + CHECK_AFTER_NS));
        // A check still due when the window should open gives way to it.
        assert!(matches!(
            s.due(120 * MS, Some(6 * MS)),
            Some(Edge::Open { .. })
        ));
    }

    #[test]
    fn a_new_cell_waits_for_the_next_window_start() {
        let s = Slot::new(
            Window {
                origin_ns: 100 * MS,
                period_us: 10_000,
                budget_us: 3_000,
            },
            1,
            101 * MS,
        );
        assert_eq!(s.next_edge(), Some(110 * MS));
        assert!(s.closed());
    }

    #[test]
    fn an_overrun_shortens_the_next_window_only() {
        let mut s = slot(2);
        // Window 0: the gang of two used 7 ms (budget 2 × 3 ms): 1 ms over,
        // 0.5 ms per CPU.
        assert!(matches!(s.due(100 * MS, Some(0)), Some(Edge::Open { .. })));
        assert_eq!(s.due(103 * MS, Some(5 * MS)), Some(Edge::Close));
        assert!(matches!(
            s.due(110 * MS, Some(7 * MS)),
            Some(Edge::Open { .. })
        ));
        assert_eq!(s.next_edge(), Some(110 * MS + 2_500 * US));
        assert_eq!(s.delivery().over, 1);
        assert_eq!(s.due(112_500 * US, Some(11 * MS)), Some(Edge::Close));
        // Window 1 used exactly 6 ms: window 2 has its full length again.
        assert!(matches!(
            s.due(120 * MS, Some(13 * MS)),
            Some(Edge::Open { .. })
        ));
        assert_eq!(s.next_edge(), Some(123 * MS));
        assert_eq!(s.delivery().periods, 2);
        assert!((s.delivery().mean_error() - (1.0 / 6.0) / 2.0).abs() < 1e-9);
    }

    #[test]
    fn a_window_whose_end_has_passed_is_missed_not_opened() {
        let mut s = slot(1);
        // The driver wakes 4 ms after the scheduled opening (window over).
        assert_eq!(s.due(104 * MS, Some(0)), None);
        assert_eq!(s.delivery().missed, 1);
        assert_eq!(s.next_edge(), Some(110 * MS));
        // A late but still useful wake-up opens, and the window still ends
        // on schedule.
        assert_eq!(
            s.due(111 * MS, Some(0)),
            Some(Edge::Open {
                scheduled_ns: 110 * MS
            })
        );
        assert_eq!(s.next_edge(), Some(113 * MS));
    }

    #[test]
    fn an_idle_cell_is_under_budget_and_a_budget_filling_the_period_never_closes() {
        let mut s = slot(1);
        run(&mut s, 4, 0);
        assert_eq!(s.delivery().under, 3);
        let always = Slot::new(
            Window {
                origin_ns: 0,
                period_us: 1000,
                budget_us: 1000,
            },
            1,
            5,
        );
        assert_eq!(always.next_edge(), None);
        assert!(!always.closed());
    }
}
