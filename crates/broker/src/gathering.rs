//! Gathering across processes: requests of policies that divide among
//! concurrent arrivals (`fair_cores`, `fair_numa`; Poli-C §7.2.1) from any
//! process, counted together so that four arriving at once on 64 free
//! CPUs take 16 each instead of the first taking all 64.
//!
//! A request *arrives* (`KindGather`) before its policy runs and is
//! answered (`Gathered`) with how many others of its batch have not
//! chosen yet; its policy divides what is free among itself and them. Its
//! client then says its policy has chosen (`KindChosen`): what it took is
//! in the ledger, or it waits in line.
//!
//! # The batch
//!
//! - An arrival while a batch is open (its window has not closed, or some
//!   of its arrivals are still unanswered) joins it; otherwise it opens a
//!   new one with its own window (cut to [`MAX_WINDOW`]).
//! - A batch opened in a *quiet spell* (no arrival for [`QUIET_WINDOWS`]
//!   of its window; the first ever is not one) closes after
//!   [`PROBE_PART`] of the window unless a second arrival joins; then,
//!   like any other batch, after the whole window from its opening, or
//!   sooner when the own window of one of its arrivals ends: no arrival
//!   waits past its own window for the batch to close.
//! - After the close the arrivals are answered **one at a time, in the
//!   order they arrived**, each with the number of the batch's arrivals
//!   still unanswered besides itself. The next is answered once the one
//!   before has chosen (`KindChosen`, a grant to its process, its
//!   connection's end), or after its own window if that one never says:
//!   the policies choose in turn, as the threads of one process do under
//!   its runtime's lock, so the second sees what the first took and the
//!   shares do not overlap.
//!
//! # Bounds
//!
//! No arrival waits longer than its own window for the close and its own
//! window for each arrival ahead of it in the batch that does not choose;
//! a connection has at most `limits.holdings` arrivals unanswered.
//!
//! This module only decides; the engine sends the answers and the event
//! loop wakes at [`Gathering::next_due`].

use allot_proto::gather::{MAX_WINDOW, PROBE_PART, QUIET_WINDOWS};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// One arrival waiting for its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Arrival {
    session: u64,
    pid: u32,
    /// The client's number for it.
    id: u64,
    at: Instant,
    window: Duration,
}

/// The arrival answered last, until it has chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Choosing {
    session: u64,
    pid: u32,
    id: u64,
    /// When it was answered.
    at: Instant,
}

/// An answer due: `others` to arrival `id` of `session`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer {
    /// The connection the arrival came on.
    pub session: u64,
    /// The client's number for the arrival.
    pub id: u64,
    /// Arrivals of its batch still unanswered, itself aside.
    pub others: u32,
}

/// Why an arrival was not taken.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotTaken {
    /// Wrong as sent (number 0, or one already waiting).
    Invalid(String),
    /// Past the connection's bound.
    Limit(String),
}

/// The open batch of arrivals and what is needed to open the next.
#[derive(Debug, Clone, Default)]
pub struct Gathering {
    /// Unanswered arrivals of the open batch, first come first.
    waiting: VecDeque<Arrival>,
    /// When the open batch opened, with its window and whether it opened
    /// in a quiet spell; `None` before the first arrival.
    opened: Option<(Instant, Duration, bool)>,
    /// Arrivals the open batch has had.
    size: u32,
    /// The last arrival's instant.
    last: Option<Instant>,
    /// The arrival answered last, until it chooses.
    choosing: Option<Choosing>,
}

impl Gathering {
    /// Arrival `id` of `session` (process `pid`) at `now` (when it was
    /// sent, which may be a little before the broker read it) with the
    /// client's `window`. Refused (the reason) when `session` already has
    /// `bound` arrivals unanswered or `id` is 0 or already waiting.
    pub fn arrive(
        &mut self,
        session: u64,
        pid: u32,
        id: u64,
        window: Duration,
        now: Instant,
        bound: usize,
    ) -> Result<(), NotTaken> {
        if id == 0 {
            return Err(NotTaken::Invalid(
                "arrival 0 is not a number a client may use".into(),
            ));
        }
        let mine = self.waiting.iter().filter(|a| a.session == session);
        if mine.clone().any(|a| a.id == id) {
            return Err(NotTaken::Invalid(format!(
                "arrival {id} already waits for its answer on this connection"
            )));
        }
        if mine.count() >= bound {
            return Err(NotTaken::Limit(format!(
                "this connection already has {bound} arrivals waiting (limits.holdings)"
            )));
        }
        let window = window.min(MAX_WINDOW);
        if !self.is_open(now) {
            let quiet = self
                .last
                .is_some_and(|t| now.saturating_duration_since(t) >= window * QUIET_WINDOWS);
            self.opened = Some((now, window, quiet));
            self.size = 0;
        }
        self.size += 1;
        self.last = Some(self.last.map_or(now, |l| l.max(now)));
        self.waiting.push_back(Arrival {
            session,
            pid,
            id,
            at: now,
            window,
        });
        Ok(())
    }

    /// Whether an arrival at `now` joins the open batch.
    fn is_open(&self, now: Instant) -> bool {
        !self.waiting.is_empty() || self.closes().is_some_and(|c| now < c)
    }

    /// When the open batch closes: its window from its opening (a part of
    /// it in a quiet spell while alone), or the end of the shortest own
    /// window among its waiting arrivals if that comes sooner.
    fn closes(&self) -> Option<Instant> {
        let (opened, window, quiet) = self.opened?;
        let closes = if quiet && self.size <= 1 {
            opened + window / PROBE_PART
        } else {
            opened + window
        };
        Some(
            self.waiting
                .iter()
                .map(|a| a.at + a.window)
                .fold(closes, Instant::min),
        )
    }

    /// When the first unanswered arrival is due (`None`: nothing waits).
    pub fn next_due(&self) -> Option<Instant> {
        let first = self.waiting.front()?;
        let closed = self.closes()?;
        Some(match self.choosing {
            Some(c) => closed.max(c.at + first.window),
            None => closed,
        })
    }

    /// The answers due at `now`, in order (at most one while the one
    /// answered before has not chosen).
    pub fn due(&mut self, now: Instant) -> Vec<Answer> {
        let mut out = Vec::new();
        while self.next_due().is_some_and(|t| t <= now) {
            let Some(a) = self.waiting.pop_front() else {
                break;
            };
            out.push(Answer {
                session: a.session,
                id: a.id,
                others: self.waiting.len() as u32,
            });
            self.choosing = Some(Choosing {
                session: a.session,
                pid: a.pid,
                id: a.id,
                at: now,
            });
        }
        out
    }

    /// Arrival `id` of `session` has chosen (`KindChosen`).
    pub fn chosen(&mut self, session: u64, id: u64) {
        if self
            .choosing
            .is_some_and(|c| c.session == session && c.id == id)
        {
            self.choosing = None;
        }
    }

    /// Process `pid` was granted something: the arrival answered last, if
    /// it is `pid`'s, has chosen.
    pub fn granted(&mut self, pid: u32) {
        if self.choosing.is_some_and(|c| c.pid == pid) {
            self.choosing = None;
        }
    }

    /// `session` closed: its arrivals leave, and one of it answered last
    /// no longer holds the next back.
    pub fn leave_session(&mut self, session: u64) {
        self.waiting.retain(|a| a.session != session);
        if self.choosing.is_some_and(|c| c.session == session) {
            self.choosing = None;
        }
    }

    /// Arrivals waiting for their answers.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn others(a: &[Answer]) -> Vec<(u64, u32)> {
        a.iter().map(|a| (a.session, a.others)).collect()
    }

    #[test]
    fn four_arrivals_together_are_answered_in_turn_each_counting_those_after_it() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        for s in 1..=4u64 {
            g.arrive(s, 100 + s as u32, 7, MS, t0 + MS / 10 * (s as u32 - 1), 8)
                .unwrap();
        }
        assert!(g.due(t0 + MS / 2).is_empty(), "the window is still open");
        assert_eq!(g.next_due(), Some(t0 + MS));
        assert_eq!(others(&g.due(t0 + MS)), vec![(1, 3)]);
        assert!(
            g.due(t0 + MS * 3 / 2).is_empty(),
            "the next waits until the first has chosen"
        );
        g.chosen(1, 7);
        assert_eq!(others(&g.due(t0 + MS * 3 / 2)), vec![(2, 2)]);
        g.granted(102);
        assert_eq!(others(&g.due(t0 + MS * 3 / 2)), vec![(3, 1)]);
        g.leave_session(3);
        assert_eq!(others(&g.due(t0 + MS * 3 / 2)), vec![(4, 0)]);
        assert_eq!(g.waiting(), 0);
        assert_eq!(g.next_due(), None);
    }

    #[test]
    fn a_lone_arrival_in_a_quiet_spell_waits_only_its_probe() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        g.arrive(1, 10, 1, MS, t0, 8).unwrap();
        assert_eq!(g.next_due(), Some(t0 + MS), "the first ever is not quiet");
        assert_eq!(others(&g.due(t0 + MS)), vec![(1, 0)]);
        g.chosen(1, 1);
        let later = t0 + MS * (QUIET_WINDOWS + 1);
        g.arrive(1, 10, 2, MS, later, 8).unwrap();
        assert_eq!(g.next_due(), Some(later + MS / PROBE_PART));
        // A second arrival within the probe keeps the batch open for the
        // whole window, and both count each other.
        g.arrive(2, 20, 1, MS, later + MS / 16, 8).unwrap();
        assert_eq!(g.next_due(), Some(later + MS));
        assert_eq!(others(&g.due(later + MS)), vec![(1, 1)]);
    }

    #[test]
    fn an_arrival_after_the_close_while_others_wait_joins_their_turns() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        g.arrive(1, 10, 1, MS, t0, 8).unwrap();
        g.arrive(2, 20, 1, MS, t0, 8).unwrap();
        assert_eq!(others(&g.due(t0 + MS)), vec![(1, 1)]);
        g.arrive(3, 30, 1, MS, t0 + MS * 2, 8).unwrap();
        g.chosen(1, 1);
        assert_eq!(others(&g.due(t0 + MS * 2)), vec![(2, 1)]);
        g.chosen(2, 1);
        assert_eq!(others(&g.due(t0 + MS * 2)), vec![(3, 0)]);
    }

    #[test]
    fn one_that_never_chooses_holds_the_next_back_for_the_next_ones_window() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        g.arrive(1, 10, 1, MS * 100, t0, 8).unwrap();
        g.arrive(2, 20, 1, MS * 2, t0, 8).unwrap();
        // The batch closes when the shorter own window (2 ms) ends.
        assert_eq!(g.next_due(), Some(t0 + MS * 2));
        assert_eq!(others(&g.due(t0 + MS * 2)), vec![(1, 1)]);
        // The first never says it chose: the second waits its own window.
        assert_eq!(g.next_due(), Some(t0 + MS * 4));
        assert!(g.due(t0 + MS * 3).is_empty());
        assert_eq!(others(&g.due(t0 + MS * 4)), vec![(2, 0)]);
    }

    #[test]
    fn no_arrival_waits_past_its_own_window_for_a_long_batch_to_close() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        g.arrive(1, 10, 1, Duration::from_secs(5), t0, 8).unwrap();
        // The opener's window was cut to MAX_WINDOW.
        assert_eq!(g.next_due(), Some(t0 + MAX_WINDOW));
        // A short-window arrival joining someone's long batch closes it
        // at the end of its own window.
        g.arrive(2, 20, 1, MS, t0 + MS, 8).unwrap();
        assert_eq!(g.next_due(), Some(t0 + MS * 2));
        assert_eq!(others(&g.due(t0 + MS * 2)), vec![(1, 1)]);
    }

    #[test]
    fn a_connection_has_at_most_its_bound_of_arrivals_and_numbers_are_its_own() {
        let t0 = Instant::now();
        let mut g = Gathering::default();
        g.arrive(1, 10, 1, MS, t0, 2).unwrap();
        assert!(g.arrive(1, 10, 1, MS, t0, 2).is_err(), "1 already waits");
        g.arrive(1, 10, 2, MS, t0, 2).unwrap();
        let e = g.arrive(1, 10, 3, MS, t0, 2).unwrap_err();
        assert!(
            matches!(&e, NotTaken::Limit(m) if m.contains("limits.holdings")),
            "{e:?}"
        );
        g.arrive(2, 20, 1, MS, t0, 2).unwrap();
        assert!(g.arrive(2, 20, 0, MS, t0, 2).is_err());
        g.leave_session(1);
        assert_eq!(g.waiting(), 1);
    }
}
