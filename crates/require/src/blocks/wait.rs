//! Waiting inside the blocks: for a batch of arrivals to gather, for an
//! allocation to be given back (the *epoch* moves), and to retake what a
//! blocked thread gave back. Every wait sleeps on the one condition
//! variable through [`Blocks::sleep`], which keeps `sleepers` exact: a
//! release wakes nobody (no system call) when nobody sleeps.

use super::*;

/// How long the requests of a policy that divides among concurrent
/// arrivals (`fair_cores`, `fair_numa`) wait for the others of their
/// batch: Poli-C's four requests arriving together on 64 cores get 16
/// each, not 64 for the first and nothing for the rest. Every such entry
/// pays up to this much before its policy runs.
pub const DEFAULT_GATHER_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

/// A request that arrives when no batch is open and none arrived for this
/// many windows opens no batch: it is alone, and waiting for company that
/// does not come only delays it (measured on the image server: a 1 ms
/// window paid by every request at light load raised the mean latency by
/// a quarter; docs/require.md).
pub const QUIET_WINDOWS: u32 = 10;

/// Whether a request that divides among concurrent arrivals waits for a
/// batch: it joins one that is `open`; otherwise it opens one unless the
/// window is zero or the last such request arrived `since` ago, at least
/// [`QUIET_WINDOWS`] windows (`None`: the first request ever opens one).
fn waits_for_batch(
    open: bool,
    since: Option<std::time::Duration>,
    window: std::time::Duration,
) -> bool {
    if window.is_zero() {
        return false;
    }
    open || since.is_none_or(|d| d < window * QUIET_WINDOWS)
}

/// The gathering window the process starts with: `ALLOT_GATHER_WINDOW`
/// (`0`, `500us`, `2ms`), or [`DEFAULT_GATHER_WINDOW`]. A value that does
/// not parse is reported once on stderr and the default kept.
pub(super) fn gather_window_from_env() -> std::time::Duration {
    static WINDOW: std::sync::OnceLock<std::time::Duration> = std::sync::OnceLock::new();
    *WINDOW.get_or_init(|| {
        let Ok(v) = std::env::var(allot_proto::env::GATHER_WINDOW) else {
            return DEFAULT_GATHER_WINDOW;
        };
        parse_window(&v).unwrap_or_else(|e| {
            eprintln!(
                "allot: {}={v:?} ignored: {e}; the window stays {DEFAULT_GATHER_WINDOW:?}",
                allot_proto::env::GATHER_WINDOW
            );
            DEFAULT_GATHER_WINDOW
        })
    })
}

/// A window as `ALLOT_GATHER_WINDOW` spells it: `0`, or a number with
/// `us` or `ms`, at most one second.
fn parse_window(text: &str) -> Result<std::time::Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(std::time::Duration::ZERO);
    }
    let (num, unit) = if let Some(n) = t.strip_suffix("us") {
        (n, 1u64)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1000)
    } else {
        return Err("give 0, or a number of us or ms (500us, 2ms)".into());
    };
    let n: u64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{num:?} is not a whole number"))?;
    let us = n.saturating_mul(unit);
    if us > 1_000_000 {
        return Err("a window above one second would stall every such block".into());
    }
    Ok(std::time::Duration::from_micros(us))
}

impl Blocks {
    /// Sleeps on the condition variable (at most `timeout`, `None`: until
    /// woken), counted in `sleepers` meanwhile. Takes and returns the lock
    /// guard; may return early (callers look again).
    fn sleep<'s>(&'s self, mut st: Locked<'s>, timeout: Option<std::time::Duration>) -> Locked<'s> {
        st.sleepers += 1;
        st.wait_on(&self.cond, timeout);
        st.sleepers -= 1;
        st
    }

    /// Sleeps until the epoch moves (an allocation given back).
    fn until_epoch_moves<'s>(&'s self, mut st: Locked<'s>) -> Locked<'s> {
        let seen = st.epoch;
        while st.epoch == seen {
            st = self.sleep(st, None);
        }
        st
    }

    /// Joins the batch of arrivals whose policies divide among themselves
    /// (the first opens it), and waits until the batch's window closes,
    /// so that every request of the batch is counted when each one's
    /// policy runs. A request arriving in a quiet spell ([`QUIET_WINDOWS`]
    /// without one) opens no batch and goes on at once. Takes and returns
    /// the lock guard.
    pub(super) fn gather<'s>(&'s self, mut st: Locked<'s>, tid: Tid) -> Locked<'s> {
        let now = std::time::Instant::now();
        let waits = waits_for_batch(
            !st.gathering.is_empty(),
            st.last_gathering.map(|t| now.duration_since(t)),
            st.gather_window,
        );
        st.last_gathering = Some(now);
        if !waits {
            return st;
        }
        let opened = st.gathering.first().map_or(now, |&(_, at)| at);
        st.gathering.push((tid, now));
        let closes = opened + st.gather_window;
        loop {
            let now = std::time::Instant::now();
            if now >= closes {
                return st;
            }
            st = self.sleep(st, Some(closes - now));
        }
    }

    /// How long a batch of requests whose policies divide among
    /// concurrent arrivals stays open (default [`DEFAULT_GATHER_WINDOW`]):
    /// each waits until the window of the batch it joined closes. Zero
    /// turns batching off (the first takes its share of what is free then).
    pub fn set_gather_window(&self, window: std::time::Duration) {
        self.lock().gather_window = window;
    }

    /// Gives back what `tid` holds, waits for a release, retakes.
    pub(super) fn wait<'s>(&'s self, mut st: Locked<'s>, tid: Tid, devs: &[Dev]) -> Locked<'s> {
        for d in devs {
            *st.waiting.entry(*d).or_default() += 1;
        }
        st.total_waiting += 1;
        // Giving back what the thread holds may let a sleeper proceed, so
        // it wakes them. A thread that holds nothing changes nothing for
        // the others by starting to wait: waking them then made every
        // waiter that failed again wake all the others in turn, a storm
        // that kept waiting threads busy on the CPUs the running ones need.
        let gives_back = st.trees.holds_any(tid);
        st.trees.block(tid);
        if gives_back {
            st.epoch += 1;
            if st.sleepers > 0 {
                self.cond.notify_all();
            }
        }
        self.watch_ledger(&mut st);
        st = self.until_epoch_moves(st);
        for d in devs {
            if let Some(w) = st.waiting.get_mut(d) {
                *w -= 1;
                if *w == 0 {
                    st.waiting.remove(d);
                }
            }
        }
        st.total_waiting -= 1;
        self.retake(st, tid)
    }

    /// Retakes `tid`'s allocations after it was blocked, waiting as needed.
    pub(super) fn retake<'s>(&'s self, mut st: Locked<'s>, tid: Tid) -> Locked<'s> {
        loop {
            match st.trees.unblock(tid) {
                Ok(()) => return st,
                Err(_) => st = self.until_epoch_moves(st),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{parse_window, waits_for_batch};
    use std::time::Duration;

    #[test]
    fn a_request_in_a_quiet_spell_opens_no_batch() {
        let ms = Duration::from_millis;
        assert!(
            waits_for_batch(false, None, ms(1)),
            "the first ever opens one"
        );
        assert!(
            waits_for_batch(false, Some(ms(3)), ms(1)),
            "arrivals close together"
        );
        assert!(
            !waits_for_batch(false, Some(ms(10)), ms(1)),
            "ten windows of quiet"
        );
        assert!(
            waits_for_batch(true, Some(ms(50)), ms(1)),
            "an open batch is joined"
        );
        assert!(!waits_for_batch(true, None, Duration::ZERO), "batching off");
    }

    #[test]
    fn windows_parse_with_their_unit_and_a_bound() {
        assert_eq!(parse_window("0"), Ok(Duration::ZERO));
        assert_eq!(parse_window("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_window(" 2ms "), Ok(Duration::from_millis(2)));
        assert!(parse_window("2").unwrap_err().contains("us or ms"));
        assert!(
            parse_window("fast ms")
                .unwrap_err()
                .contains("whole number")
        );
        assert!(parse_window("2000ms").unwrap_err().contains("one second"));
    }
}
