//! A cell's goal, in the cell's own terms (Tessellation's QoS targets):
//! "200 frames a second", "p99 latency under 5 ms". A cell without a goal
//! is best effort.
//!
//! The cell measures itself: units of work through heartbeats, request
//! latencies through its report page (`allot_proto::report`). The broker
//! compares what it reads there with the goal, and the `goals` policy
//! (`allot_plan::policy`) sizes the cell's allocation to meet it.
//!
//! The text form is the one definition every front end parses (`allot run
//! --goal`, the C ABI, the Python package):
//!
//! ```text
//! rate=200/s    at least 200 units of work per second (also 200/min, 12.5/s)
//! p99=5ms       99th percentile request latency at most 5 ms (us, ms or s)
//! none          no goal (best effort)
//! ```

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Largest rate goal, units per second (a sanity bound, far above any
/// heartbeat rate a process can sustain).
pub const MAX_RATE_PER_S: u64 = 1_000_000_000;

/// Largest latency goal (1 minute), µs.
pub const MAX_P99_US: u32 = 60_000_000;

/// What a cell wants to achieve.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum Goal {
    /// No goal: best effort.
    #[default]
    None,
    /// At least `milli_per_s / 1000` units of work per second.
    Rate {
        /// Units of work per second, in thousandths (1..=10^12).
        milli_per_s: u64,
    },
    /// The 99th percentile of request latency at most `us` microseconds.
    P99 {
        /// Latency bound, µs (1..=60 000 000).
        us: u32,
    },
}

/// Why a goal is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoalError {
    /// Text that is not a goal.
    #[error(
        "goal {0:?} is not understood: use rate=N/s (units of work a second, counted with \
         heartbeats), p99=DURATION (request latency, such as 5ms) or none"
    )]
    Syntax(String),
    /// A rate of zero or beyond the bound.
    #[error("rate goal {0}/1000 per second is outside (0, {MAX_RATE_PER_S}] per second")]
    Rate(u64),
    /// A latency of zero or beyond the bound.
    #[error("p99 goal {0} µs is outside (0, 60 s]")]
    P99(u32),
}

impl Goal {
    /// Whether the cell has a goal.
    pub fn is_some(&self) -> bool {
        !matches!(self, Goal::None)
    }

    /// Checks the bounds.
    pub fn validate(&self) -> Result<(), GoalError> {
        match *self {
            Goal::None => Ok(()),
            Goal::Rate { milli_per_s } => {
                if milli_per_s == 0 || milli_per_s > MAX_RATE_PER_S * 1000 {
                    Err(GoalError::Rate(milli_per_s))
                } else {
                    Ok(())
                }
            }
            Goal::P99 { us } => {
                if us == 0 || us > MAX_P99_US {
                    Err(GoalError::P99(us))
                } else {
                    Ok(())
                }
            }
        }
    }

    /// The rate goal in units per second, if that is the goal.
    pub fn rate_per_s(&self) -> Option<f64> {
        match *self {
            Goal::Rate { milli_per_s } => Some(milli_per_s as f64 / 1000.0),
            _ => None,
        }
    }

    /// Whether measurements meet the goal: a rate of at least the goal's,
    /// a p99 of at most the goal's. `None` without a goal, or without the
    /// measurement the goal needs.
    pub fn met(&self, rate_per_s: Option<f64>, p99_us: Option<u64>) -> Option<bool> {
        match *self {
            Goal::None => None,
            Goal::Rate { milli_per_s } => rate_per_s.map(|r| r * 1000.0 >= milli_per_s as f64),
            Goal::P99 { us } => p99_us.map(|p| p <= u64::from(us)),
        }
    }

    /// The latency goal in µs, if that is the goal.
    pub fn p99_us(&self) -> Option<u32> {
        match *self {
            Goal::P99 { us } => Some(us),
            _ => None,
        }
    }
}

/// Parses `N/s`, `N/min` or `N/h` into thousandths per second.
fn parse_rate(text: &str) -> Option<u64> {
    let (num, per) = text.split_once('/')?;
    let seconds = match per.trim() {
        "s" | "sec" => 1.0,
        "min" => 60.0,
        "h" => 3600.0,
        _ => return None,
    };
    let v: f64 = num.trim().parse().ok()?;
    let milli = v / seconds * 1000.0;
    (0.0..1.8e19).contains(&milli).then(|| milli.round() as u64)
}

/// Parses a duration with a unit (`us`, `µs`, `ms`, `s`) into µs.
fn parse_us(text: &str) -> Option<u64> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us").or_else(|| t.strip_suffix("µs")) {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        return None;
    };
    let v: f64 = num.trim().parse().ok()?;
    let us = v * scale;
    (0.0..1.8e19).contains(&us).then(|| us.round() as u64)
}

impl FromStr for Goal {
    type Err = GoalError;

    /// Parses the text form (see the module notes) and checks the bounds.
    fn from_str(s: &str) -> Result<Goal, GoalError> {
        let syntax = || GoalError::Syntax(s.to_string());
        let t = s.trim();
        if t == "none" {
            return Ok(Goal::None);
        }
        let (key, value) = t.split_once('=').ok_or_else(syntax)?;
        let goal = match key.trim() {
            "rate" => Goal::Rate {
                milli_per_s: parse_rate(value).ok_or_else(syntax)?,
            },
            "p99" => Goal::P99 {
                us: u32::try_from(parse_us(value).ok_or_else(syntax)?)
                    .map_err(|_| GoalError::P99(u32::MAX))?,
            },
            _ => return Err(syntax()),
        };
        goal.validate()?;
        Ok(goal)
    }
}

impl fmt::Display for Goal {
    /// The text form, which [`Goal::from_str`] reads back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Goal::None => f.write_str("none"),
            Goal::Rate { milli_per_s } if milli_per_s % 1000 == 0 => {
                write!(f, "rate={}/s", milli_per_s / 1000)
            }
            Goal::Rate { milli_per_s } => write!(f, "rate={}/s", milli_per_s as f64 / 1000.0),
            Goal::P99 { us } if us % 1000 == 0 => write!(f, "p99={}ms", us / 1000),
            Goal::P99 { us } => write!(f, "p99={us}us"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_forms_parse() {
        assert_eq!(
            "rate=200/s".parse(),
            Ok(Goal::Rate {
                milli_per_s: 200_000
            })
        );
        assert_eq!(
            "rate=12.5/s".parse(),
            Ok(Goal::Rate {
                milli_per_s: 12_500
            })
        );
        assert_eq!(
            "rate = 120/min".parse(),
            Ok(Goal::Rate { milli_per_s: 2_000 })
        );
        assert_eq!("p99=5ms".parse(), Ok(Goal::P99 { us: 5_000 }));
        assert_eq!("p99=250us".parse(), Ok(Goal::P99 { us: 250 }));
        assert_eq!("p99=1.5s".parse(), Ok(Goal::P99 { us: 1_500_000 }));
        assert_eq!("none".parse(), Ok(Goal::None));
    }

    #[test]
    fn mistakes_are_named() {
        for bad in [
            "", "rate", "rate=200", "rate=x/s", "p99=5", "p50=5ms", "fast",
        ] {
            assert_eq!(
                bad.parse::<Goal>(),
                Err(GoalError::Syntax(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!("rate=0/s".parse::<Goal>(), Err(GoalError::Rate(0)));
        assert_eq!("p99=0ms".parse::<Goal>(), Err(GoalError::P99(0)));
        assert!(matches!(
            "p99=2h".parse::<Goal>(),
            Err(GoalError::Syntax(_))
        ));
        assert!(matches!("p99=90s".parse::<Goal>(), Err(GoalError::P99(_))));
        let e = "fast".parse::<Goal>().unwrap_err().to_string();
        assert!(e.contains("rate=N/s") && e.contains("p99="), "{e}");
    }

    #[test]
    fn a_goal_is_met_by_the_measurement_it_names() {
        let rate = Goal::Rate {
            milli_per_s: 200_000,
        };
        assert_eq!(rate.met(Some(200.0), None), Some(true));
        assert_eq!(rate.met(Some(199.9), Some(1)), Some(false));
        assert_eq!(rate.met(None, Some(1)), None, "no heartbeats yet");
        let p99 = Goal::P99 { us: 5_000 };
        assert_eq!(p99.met(None, Some(5_000)), Some(true));
        assert_eq!(p99.met(Some(1e9), Some(5_001)), Some(false));
        assert_eq!(p99.met(Some(1.0), None), None);
        assert_eq!(Goal::None.met(Some(1.0), Some(1)), None);
    }

    #[test]
    fn the_display_reads_back() {
        for g in [
            Goal::None,
            Goal::Rate {
                milli_per_s: 200_000,
            },
            Goal::Rate {
                milli_per_s: 12_345,
            },
            Goal::P99 { us: 5_000 },
            Goal::P99 { us: 1_234 },
        ] {
            assert_eq!(g.to_string().parse::<Goal>(), Ok(g), "{g}");
        }
    }
}
