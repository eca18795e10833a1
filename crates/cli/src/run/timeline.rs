//! `allot run --timeline`: where a program's start and exit spend their
//! time. `allot run` marks its own steps (started, broker answering,
//! registered, program started, program exited) on `CLOCK_MONOTONIC`;
//! after the program exits it reads the cell's timeline from the broker's
//! status (`crate::timeline` in the broker: admission, journal, cgroup,
//! CPU-set writes, grants, joins, exits) and prints both, merged in time
//! order, to stderr, as milliseconds since `allot run` started.

use allot_proto::status::Timeline;
use allot_proto::window::monotonic_ns; // the clock the broker's timelines use
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// `allot run`'s own steps.
pub struct Marks {
    origin_ns: u64,
    marks: Vec<(u64, String)>,
}

impl Marks {
    /// Starts counting now.
    pub fn start() -> Marks {
        let origin_ns = monotonic_ns();
        Marks {
            origin_ns,
            marks: vec![(origin_ns, "allot run started".into())],
        }
    }

    /// Marks `what` now.
    pub fn mark(&mut self, what: impl Into<String>) {
        self.marks.push((monotonic_ns(), what.into()));
    }
}

/// One printed line: when (ns since the origin), who, what, what it took.
#[derive(Debug, PartialEq)]
pub struct Line {
    pub at_ns: u64,
    pub broker: bool,
    pub text: String,
    pub cost_us: Option<u64>,
}

/// `marks` and the broker's `timeline` in time order (pure). Broker steps
/// from before `allot run` started (none, normally) are placed at 0.
pub fn merge(marks: &Marks, timeline: Option<&Timeline>) -> Vec<Line> {
    let mut lines: Vec<Line> = marks
        .marks
        .iter()
        .map(|(ns, what)| Line {
            at_ns: ns.saturating_sub(marks.origin_ns),
            broker: false,
            text: what.clone(),
            cost_us: None,
        })
        .collect();
    if let Some(t) = timeline {
        for s in &t.steps {
            let at = (t.origin_ns + s.at_us * 1000).saturating_sub(marks.origin_ns);
            let text = if s.detail.is_empty() {
                s.step.clone()
            } else {
                format!("{} {}", s.step, s.detail)
            };
            lines.push(Line {
                at_ns: at,
                broker: true,
                text,
                cost_us: s.cost_us,
            });
        }
        if t.dropped > 0 {
            lines.push(Line {
                at_ns: u64::MAX,
                broker: true,
                text: format!("({} steps left out in the middle)", t.dropped),
                cost_us: None,
            });
        }
    }
    // Stable: at equal times `allot run`'s mark comes before the broker's.
    lines.sort_by_key(|l| l.at_ns);
    lines
}

/// The lines as text.
pub fn render(cell: u64, lines: &[Line]) -> String {
    let mut out = format!(
        "allot: timeline of cell {cell} (ms since allot run started; [broker] steps with what \
         they took)\n"
    );
    for l in lines {
        let at = if l.at_ns == u64::MAX {
            "".to_string()
        } else {
            format!("{:.3}", l.at_ns as f64 / 1e6)
        };
        let who = if l.broker { "[broker] " } else { "" };
        let cost = l
            .cost_us
            .map(|c| format!("  ({:.3} ms)", c as f64 / 1000.0))
            .unwrap_or_default();
        let _ = writeln!(out, "  {at:>10}  {who}{}{cost}", l.text);
    }
    out
}

/// Reads cell `cell`'s timeline from the broker at `socket`, waiting up to
/// 200 ms for it to show the program's (`pid`) exit, and prints it with
/// `marks` to stderr. Never fails the run: a broker that cannot be asked
/// is said so.
pub fn report(socket: &Path, cell: u64, pid: u32, marks: &Marks) {
    let exited = format!("process {pid}");
    let deadline = Instant::now() + Duration::from_millis(200);
    let timeline = loop {
        let t = allot_client::Client::connect(socket)
            .and_then(|mut c| c.status())
            .map(|s| s.cells.into_iter().find(|c| c.id == cell));
        match t {
            Err(e) => {
                eprintln!("allot: cannot read the cell's timeline from the broker: {e}");
                break None;
            }
            Ok(c) => {
                let t = c.and_then(|c| c.timeline);
                let done = t.as_ref().is_some_and(|t| {
                    t.steps
                        .iter()
                        .any(|s| s.step == "exited" && s.detail == exited)
                });
                if done || Instant::now() >= deadline {
                    break t;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    eprint!("{}", render(cell, &merge(marks, timeline.as_ref())));
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_proto::status::TimelineStep;

    #[test]
    fn broker_steps_interleave_with_the_runs_own_in_time_order() {
        let marks = Marks {
            origin_ns: 1_000_000,
            marks: vec![
                (1_000_000, "allot run started".into()),
                (1_500_000, "registered".into()),
                (3_000_000, "program started".into()),
            ],
        };
        let t = Timeline {
            origin_ns: 1_200_000,
            steps: vec![
                TimelineStep {
                    at_us: 0,
                    step: "request".into(),
                    detail: String::new(),
                    cost_us: None,
                },
                TimelineStep {
                    at_us: 100,
                    step: "cpuset".into(),
                    detail: "0-1".into(),
                    cost_us: Some(40),
                },
                TimelineStep {
                    at_us: 1900,
                    step: "joined".into(),
                    detail: "process 7".into(),
                    cost_us: Some(12),
                },
            ],
            dropped: 2,
        };
        let lines = merge(&marks, Some(&t));
        let got: Vec<(u64, &str)> = lines.iter().map(|l| (l.at_ns, l.text.as_str())).collect();
        assert_eq!(
            got,
            [
                (0, "allot run started"),
                (200_000, "request"),
                (300_000, "cpuset 0-1"),
                (500_000, "registered"),
                (2_000_000, "program started"),
                (2_100_000, "joined process 7"),
                (u64::MAX, "(2 steps left out in the middle)"),
            ]
        );
        let text = render(3, &lines);
        assert!(
            text.contains("0.300  [broker] cpuset 0-1  (0.040 ms)"),
            "{text}"
        );
        assert!(text.contains("2.000  program started\n"), "{text}");
    }

    #[test]
    fn without_a_timeline_only_the_runs_own_steps_are_shown() {
        let mut marks = Marks::start();
        marks.mark("program exited");
        let lines = merge(&marks, None);
        assert_eq!(lines.len(), 2);
        assert!(lines.iter().all(|l| !l.broker));
    }
}
