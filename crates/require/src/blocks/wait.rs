//! Waiting inside the blocks: for a batch of arrivals to gather (the
//! process's own, or every process's at the broker), for an
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

/// The quiet-spell rule, shared with the broker's gathering across
/// processes: a request in a quiet spell ([`QUIET_WINDOWS`] without one)
/// waits [`PROBE_PART`] of the window for company. At light load every
/// request is alone, and a whole window paid by each raised the image
/// server's mean latency by a quarter (docs/require.md); a burst after a
/// quiet spell still divides (Poli-C's four requests on 64 cores, 16
/// each) when its second request comes within that part (125 µs of the
/// default window; a longer window widens it).
pub use allot_proto::gather::{PROBE_PART, QUIET_WINDOWS};

/// The longest a request alone in a quiet spell spins for company before
/// it sleeps (its part of a window up to 1.6 ms is all spin).
const MAX_SPIN: std::time::Duration = std::time::Duration::from_micros(200);

/// How long a request of a policy that divides among concurrent arrivals
/// waits for company while its batch has no other request: `None` (no
/// batch) when the window is zero; the whole window when it joins an
/// `open` batch or the last such request arrived `since` ago within
/// [`QUIET_WINDOWS`] windows (`None`: the first request ever); else (a
/// quiet spell) [`PROBE_PART`] of it. A batch that gains a second request
/// stays open for the whole window from its first.
fn alone_wait(
    open: bool,
    since: Option<std::time::Duration>,
    window: std::time::Duration,
) -> Option<std::time::Duration> {
    if window.is_zero() {
        return None;
    }
    if open || since.is_none_or(|d| d < window * QUIET_WINDOWS) {
        Some(window)
    } else {
        Some(window / PROBE_PART)
    }
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

/// What a reader spins past an eighth of the window for the broker's
/// answer (its wake-up and the reply's way back).
const SPIN_SLACK: std::time::Duration = std::time::Duration::from_micros(100);

/// Receives one answer on `reader`: looks without blocking for up to
/// `spin`, then blocks (up to the socket's timeout).
fn spin_then_recv(
    reader: &mut allot_proto::Conn,
    spin: std::time::Duration,
) -> Result<allot_proto::Reply, allot_proto::CallError> {
    let until = std::time::Instant::now() + spin;
    loop {
        match reader.try_recv() {
            Ok(Some(r)) => return Ok(r),
            Ok(None) if std::time::Instant::now() < until => std::hint::spin_loop(),
            Ok(None) => return reader.recv().map(|(r, _)| r),
            Err(e) => return Err(e),
        }
    }
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
    /// policy runs. A batch opened in a quiet spell ([`QUIET_WINDOWS`]
    /// without a request) closes after [`PROBE_PART`] of the window unless
    /// another request joins it ([`alone_wait`]). With a broker, the
    /// broker keeps the batch, of every process's arrivals, by the same
    /// rule, and lets them choose in turn (`Blocks::gather_at_broker`);
    /// without one, or when it cannot be asked, the batch is this
    /// process's threads. Takes and returns the lock guard.
    pub(super) fn gather<'s>(&'s self, mut st: Locked<'s>, tid: Tid) -> Locked<'s> {
        if st.link.is_some() && !st.gather_window.is_zero() {
            // With a broker, it gathers every process's arrivals.
            let (back, gathered) = self.gather_at_broker(st, tid);
            st = back;
            if gathered {
                return st;
            }
        }
        let now = std::time::Instant::now();
        let window = st.gather_window;
        let Some(alone) = alone_wait(
            !st.gathering.is_empty(),
            st.last_gathering.map(|t| now.duration_since(t)),
            window,
        ) else {
            return st;
        };
        st.last_gathering = Some(now);
        let opened = st.gathering.first().map_or(now, |&(_, at)| at);
        st.gathering.push((tid, now));
        if alone < window {
            // Alone in a quiet spell: it spins through its part of the
            // window (at most MAX_SPIN of it), the lock let go between
            // looks, instead of sleeping; a sleep and its wake-up cost the
            // image server's requests more than the part itself
            // (docs/require.md). What a longer part leaves, it sleeps.
            let spin_until = opened + alone.min(MAX_SPIN);
            while st.gathering.len() == 1 && std::time::Instant::now() < spin_until {
                drop(st);
                for _ in 0..64 {
                    std::hint::spin_loop();
                }
                st = self.lock();
            }
        }
        // Then it waits for the batch to close: the whole window from its
        // first request once it has company (or when it was not opened in
        // a quiet spell), else the rest of its part.
        loop {
            let now = std::time::Instant::now();
            let closes = opened
                + if st.gathering.len() > 1 {
                    window
                } else {
                    alone
                };
            if now >= closes {
                return st;
            }
            st = self.sleep(st, Some(closes - now));
        }
    }

    /// Gathers `tid`'s arriving request of a dividing policy at the
    /// broker, with every process's (`ledger::Gatherer`): sends the
    /// arrival and waits for its turn, reading answers for the process's
    /// other threads too while no other thread reads. Then
    /// [`State::gathered`] has the others of its batch for its policy,
    /// until it has chosen ([`Blocks::chose`]). False when there is no
    /// broker to gather with (the process gathers its own threads), or the
    /// broker did not answer within `ledger::GATHER_GIVE_UP`.
    fn gather_at_broker<'s>(&'s self, mut st: Locked<'s>, tid: Tid) -> (Locked<'s>, bool) {
        if st.gatherer.is_none() && !st.gatherer_tried {
            st.gatherer_tried = true;
            st.gatherer = st
                .link
                .as_ref()
                .and_then(|l| ledger::Gatherer::connect(l.socket()));
        }
        let window = st.gather_window;
        let Some(arrival) = st.gatherer.as_mut().and_then(|g| g.arrive(window)) else {
            st.gatherer = None;
            return (st, false);
        };
        let give_up = std::time::Instant::now() + ledger::GATHER_GIVE_UP;
        // A lone arrival in a quiet spell is answered after an eighth of
        // the window (and the broker's wake-up): the reader spins that
        // long on the socket before it sleeps, as a process alone spins
        // through its part ([`Blocks::gather`]), since a sleep and its wake-up
        // cost more than the wait.
        let spin = (window / PROBE_PART).min(MAX_SPIN) + SPIN_SLACK;
        loop {
            let Some(g) = st.gatherer.as_mut() else {
                return (st, false);
            };
            if let Some(others) = g.answer(arrival) {
                st.gathered.insert(tid, (arrival, others));
                return (st, true);
            }
            let now = std::time::Instant::now();
            if now >= give_up {
                g.chosen(arrival);
                return (st, false);
            }
            match g.take_reader() {
                Some(mut reader) => {
                    drop(st);
                    let got = spin_then_recv(&mut reader, spin);
                    st = self.lock();
                    let kept = st.gatherer.as_mut().is_some_and(|g| g.file(reader, got));
                    if !kept {
                        st.gatherer = None;
                    }
                    if st.sleepers > 0 {
                        self.cond.notify_all();
                    }
                }
                None => st = self.sleep(st, Some(give_up - now)),
            }
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
    use super::{alone_wait, parse_window};
    use std::time::Duration;

    #[test]
    fn a_request_in_a_quiet_spell_waits_a_part_of_the_window_for_company() {
        let ms = Duration::from_millis;
        assert_eq!(
            alone_wait(false, None, ms(1)),
            Some(ms(1)),
            "the first ever"
        );
        assert_eq!(
            alone_wait(false, Some(ms(3)), ms(1)),
            Some(ms(1)),
            "arrivals close together"
        );
        assert_eq!(
            alone_wait(false, Some(ms(10)), ms(8)),
            Some(ms(8)),
            "a window and a bit of quiet is no spell"
        );
        assert_eq!(
            alone_wait(false, Some(ms(10)), ms(1)),
            Some(Duration::from_micros(125)),
            "ten windows of quiet: an eighth"
        );
        assert_eq!(
            alone_wait(true, Some(ms(50)), ms(1)),
            Some(ms(1)),
            "an open batch is joined for its window"
        );
        assert_eq!(alone_wait(true, None, Duration::ZERO), None, "batching off");
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
