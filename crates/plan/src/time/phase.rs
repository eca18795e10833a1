//! Phases: where in its period each time-triggered cell's window sits, so
//! that several triggered cells can share a CPU without their windows
//! ever meeting.
//!
//! All triggered cells' windows are laid on one time base (the broker's
//! epoch): cell `c`'s window `k` occupies
//! `[phase + k·period, phase + k·period + budget)` µs after it. Two cells
//! on one CPU must keep [`WINDOW_GAP_US`] between any window of one and
//! any window of the other.
//!
//! # The test is exact
//!
//! The start of a window of `b` minus the start of a window of `a` takes
//! exactly the values `(phase_b − phase_a) + j·g`, `j` any integer, where
//! `g = gcd(period_a, period_b)` (Bézout). With `d` the one in `[0, g)`,
//! the windows never come closer than the gap if and only if `b` starts at
//! least `budget_a + gap` after `a` (`d ≥ budget_a + gap`) and ends at
//! least a gap before `a`'s next start (`d + budget_b + gap ≤ g`). No
//! pair closer than that, no overlap at all: the condition is pairwise,
//! so a set of cells is schedulable on a CPU exactly when every pair is
//! ([`Periodic::apart`]). Periods need not divide each other; when they
//! are coprime in µs (`g` = 1) no two cells fit, which is the truth.
//!
//! # Searching for a phase
//!
//! If a phase works, sliding it back until it touches a constraint gives
//! one that works and sits exactly a gap after the end of some other
//! cell's window, modulo that pair's `g`; so the candidates are 0 and
//! `end_k + gap + j·g_k` for every window `k` already on the CPUs in
//! question ([`candidates`]). The search is exact up to [`MAX_SHIFTS`]
//! shifts per neighbour (a 10 s period beside a 1 ms one has 10 000).

use allot_spec::{MAX_PERIOD_US, PPM, TimeContract};

/// Time kept free between two windows on one CPU, µs: the broker's
/// window timer acts tens of microseconds off an edge on a loaded
/// machine, so windows placed back to back would overlap by that much.
pub const WINDOW_GAP_US: u32 = 200;

/// Shifts by a neighbour's `g` tried per neighbour in the phase search.
pub const MAX_SHIFTS: u64 = 4_096;

/// One triggered cell's windows on the common time base, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Periodic {
    /// Period, µs: the window repeats every `period_us`.
    pub period_us: u32,
    /// Window length, µs: the cell's budget per period, at most `period_us`.
    pub budget_us: u32,
    /// Start of window 0 after the epoch, below the period.
    pub phase_us: u32,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Periodic {
    /// The windows of a contract at `phase_us`: a time-triggered cell's
    /// budget every period, and a time-fraction cell's share of a period
    /// ([`fraction_windows`]: its threads run together, Tessellation's
    /// gang, in pieces no shorter than its slice). `None` for other
    /// contracts, and for a fraction whose period would pass
    /// [`MAX_PERIOD_US`].
    pub fn of(contract: &TimeContract, phase_us: u32) -> Option<Periodic> {
        let (period_us, budget_us) = match *contract {
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => (period_us, budget_us),
            TimeContract::Fraction { ppm, .. } if ppm > 0 && ppm < PPM => {
                fraction_windows(ppm, contract.slice_us())?
            }
            _ => return None,
        };
        (period_us > 0).then(|| Periodic {
            period_us,
            budget_us,
            phase_us: phase_us % period_us,
        })
    }

    /// Whether no window of `self` comes within [`WINDOW_GAP_US`] of a
    /// window of `other` (see the module notes: exact).
    pub fn apart(&self, other: &Periodic) -> bool {
        let gap = u64::from(WINDOW_GAP_US);
        let g = gcd(u64::from(self.period_us), u64::from(other.period_us));
        let d = (u64::from(other.phase_us) % g + g - u64::from(self.phase_us) % g) % g;
        d >= u64::from(self.budget_us) + gap && d + u64::from(other.budget_us) + gap <= g
    }
}

/// The shortest time-fraction period; every fraction's period is this
/// times a power of two.
pub const FRACTION_PERIOD_US: u32 = 16_000;

/// A time-fraction cell's `(period, budget)` in µs for `ppm` millionths
/// in slices of at least `slice_us`: the shortest period of
/// [`FRACTION_PERIOD_US`] times a power of two in which its share is a
/// whole slice, and its share of that period (rounded up). Fractions that
/// share a period pack like intervals (their budgets and gaps need only
/// fit one period), and periods of one series divide each other; with
/// periods of `slice / f` they would rarely fit together (4 ms and 8 ms
/// periods leave no 3.6 ms gap beside 2 ms windows every 4 ms). `None`
/// past [`MAX_PERIOD_US`].
pub fn fraction_windows(ppm: u32, slice_us: u32) -> Option<(u32, u32)> {
    let natural = (u64::from(slice_us) * u64::from(PPM)).div_ceil(u64::from(ppm.max(1)));
    let base = u64::from(FRACTION_PERIOD_US);
    let period = natural.div_ceil(base).max(1).checked_next_power_of_two()? * base;
    if period > u64::from(MAX_PERIOD_US) {
        return None;
    }
    let budget = (period * u64::from(ppm)).div_ceil(u64::from(PPM));
    Some((period as u32, budget as u32))
}

/// Phases worth trying for windows of `period_us` beside `neighbours`, in
/// increasing order, without duplicates (see the module notes).
pub fn candidates(period_us: u32, neighbours: &[Periodic]) -> Vec<u32> {
    let p = u64::from(period_us.max(1));
    let gap = u64::from(WINDOW_GAP_US);
    let mut out = vec![0u32];
    for n in neighbours {
        let g = gcd(p, u64::from(n.period_us));
        let end = u64::from(n.phase_us) + u64::from(n.budget_us) + gap;
        for j in 0..(p / g).min(MAX_SHIFTS) {
            out.push(((end + j * g) % p) as u32);
        }
    }
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(period_us: u32, budget_us: u32, phase_us: u32) -> Periodic {
        Periodic {
            period_us,
            budget_us,
            phase_us,
        }
    }

    /// Walks both schedules over their common period, µs by µs window
    /// starts: the reference the closed form must agree with.
    fn reference(a: &Periodic, b: &Periodic) -> bool {
        let gap = i64::from(WINDOW_GAP_US);
        let (pa, pb) = (i64::from(a.period_us), i64::from(b.period_us));
        let lcm = pa / gcd(pa as u64, pb as u64) as i64 * pb;
        let starts = |x: &Periodic, p: i64| -> Vec<i64> {
            (-2..=lcm / p + 2)
                .map(|k| i64::from(x.phase_us) + k * p)
                .collect()
        };
        for sa in starts(a, pa) {
            for sb in starts(b, pb) {
                let (ea, eb) = (sa + i64::from(a.budget_us), sb + i64::from(b.budget_us));
                // Apart: one ends at least a gap before the other starts.
                if !(ea + gap <= sb || eb + gap <= sa) {
                    return false;
                }
            }
        }
        true
    }

    #[test]
    fn the_closed_form_agrees_with_walking_the_schedules() {
        let periods = [1_000, 1_500, 2_000, 3_000, 4_000];
        let budgets = [100, 300, 500, 900];
        let mut apart = 0;
        for &pa in &periods {
            for &pb in &periods {
                for &ba in &budgets {
                    for &bb in &budgets {
                        for phase in (0..pb).step_by(250) {
                            let (a, b) = (w(pa, ba, 0), w(pb, bb, phase));
                            assert_eq!(a.apart(&b), reference(&a, &b), "{a:?} {b:?}");
                            assert_eq!(a.apart(&b), b.apart(&a), "symmetric: {a:?} {b:?}");
                            apart += usize::from(a.apart(&b));
                        }
                    }
                }
            }
        }
        assert!(apart > 100, "the sample has pairs that fit: {apart}");
    }

    #[test]
    fn equal_periods_fit_back_to_back_with_the_gap() {
        let a = w(10_000, 3_000, 0);
        assert!(a.apart(&w(10_000, 3_000, 3_200)));
        assert!(!a.apart(&w(10_000, 3_000, 3_100)), "inside the gap");
        assert!(a.apart(&w(10_000, 6_600, 3_200)));
        assert!(
            !a.apart(&w(10_000, 6_700, 3_200)),
            "no gap before a's next window"
        );
        // Coprime periods (in µs) always meet somewhere.
        assert!(!w(1_000, 1, 0).apart(&w(1_001, 1, 500)));
    }

    #[test]
    fn a_candidate_phase_is_found_whenever_one_exists() {
        // Brute force over every phase against the search's candidates.
        let hosts = [
            vec![w(10_000, 3_000, 0)],
            vec![w(10_000, 3_000, 0), w(20_000, 2_000, 3_200)],
            vec![w(4_000, 1_000, 500), w(8_000, 1_000, 1_700)],
            vec![w(3_000, 1_000, 0)],
        ];
        for host in &hosts {
            for (period, budget) in [
                (10_000, 2_000),
                (20_000, 4_000),
                (6_000, 1_500),
                (8_000, 900),
            ] {
                let ok = |phase: u32| host.iter().all(|h| h.apart(&w(period, budget, phase)));
                let exists = (0..period).step_by(1).any(ok);
                let found = candidates(period, host).into_iter().any(ok);
                assert_eq!(found, exists, "{host:?} + {period}/{budget}");
            }
        }
    }
}
