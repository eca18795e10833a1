//! A cell's timeline: what the broker did for the cell and when, from the
//! arrival of its registration on — the admission verdict, the cgroup
//! made, the journal append, every CPU-set write and what the kernel took
//! for it, every grant published (its CPUs and advised thread count, the
//! team the OpenMP shim sizes its next region to), every process joining
//! and exiting. `allot status --json` shows it per cell and `allot run
//! --timeline` prints the program's own (docs/operations.md, "Timelines").
//!
//! Invariants: recording never fails and never blocks (a step is a
//! clock read and a push); a timeline holds at most
//! [`Timeline::MAX`](allot_proto::status::Timeline::MAX) steps, the first
//! [`FIRST`](allot_proto::status::Timeline::FIRST) and the latest, so a
//! long-lived cell costs a bounded amount of memory; times are
//! `CLOCK_MONOTONIC`, comparable with any process's on the machine.

use allot_proto::status::{Timeline as Doc, TimelineStep};
use allot_proto::window::monotonic_ns;
use std::time::Duration;

/// A cell's steps (see the module notes).
#[derive(Debug, Clone)]
pub(crate) struct Timeline(Doc);

impl Timeline {
    /// A timeline starting now.
    pub(crate) fn start() -> Timeline {
        Timeline(Doc {
            origin_ns: monotonic_ns(),
            ..Doc::default()
        })
    }

    /// Records `step` now, with its particulars and, when measured, what
    /// it took.
    pub(crate) fn note(&mut self, step: &str, detail: impl Into<String>, cost: Option<Duration>) {
        let at_us = monotonic_ns().saturating_sub(self.0.origin_ns) / 1000;
        self.push(TimelineStep {
            at_us,
            step: step.to_owned(),
            detail: detail.into(),
            cost_us: cost.map(|c| c.as_micros() as u64),
        });
    }

    fn push(&mut self, s: TimelineStep) {
        if self.0.steps.len() == Doc::MAX {
            self.0.steps.remove(Doc::FIRST);
            self.0.dropped += 1;
        }
        self.0.steps.push(s);
    }

    /// The document form (`allot status`).
    pub(crate) fn doc(&self) -> Doc {
        self.0.clone()
    }
}

/// Runs `f` and returns its result with the time it took.
pub(crate) fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = std::time::Instant::now();
    let r = f();
    (r, t.elapsed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_steps_and_the_latest() {
        let mut t = Timeline::start();
        let n = Doc::MAX + 10;
        for i in 0..n {
            t.note("grant", i.to_string(), None);
        }
        let d = t.doc();
        assert_eq!(d.steps.len(), Doc::MAX);
        assert_eq!(d.dropped, 10);
        let details: Vec<usize> = d.steps.iter().map(|s| s.detail.parse().unwrap()).collect();
        let first: Vec<usize> = (0..Doc::FIRST).collect();
        let last: Vec<usize> = (n - (Doc::MAX - Doc::FIRST)..n).collect();
        assert_eq!(details[..Doc::FIRST], first[..]);
        assert_eq!(details[Doc::FIRST..], last[..]);
        // Times never go backwards.
        assert!(d.steps.windows(2).all(|w| w[0].at_us <= w[1].at_us));
    }

    #[test]
    fn a_step_records_what_it_took() {
        let mut t = Timeline::start();
        let ((), took) = timed(|| std::thread::sleep(Duration::from_millis(2)));
        t.note("cpuset", "0-1", Some(took));
        let d = t.doc();
        assert!(d.steps[0].cost_us.unwrap() >= 2000);
        assert!(d.origin_ns > 0);
    }
}
