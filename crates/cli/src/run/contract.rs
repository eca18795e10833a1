//! `allot run`'s time-contract flags, turned into the spec's
//! [`TimeContract`] — pure, so every rule is a unit test.
//!
//! ```text
//! --period 10ms --budget 3ms [--cpus N]   time-triggered (gang)
//! --fraction 0.25 [--slice 2ms] [--cpus N] time-fraction
//! --message-idle 50ms [--cpus N]           message-triggered
//! (none)                                   space: --min/--max/--exclusive/--place
//! ```
//!
//! Durations take a unit: `us`, `ms` or `s` (`2.5ms` is fine). Every
//! mistake is reported before anything starts.

use allot_spec::{CellSpec, Term, TimeTerms};

/// The flags as given.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimeFlags {
    /// `--period`.
    pub period: Option<String>,
    /// `--budget`.
    pub budget: Option<String>,
    /// `--fraction`.
    pub fraction: Option<f64>,
    /// `--slice`.
    pub slice: Option<String>,
    /// `--message-idle`.
    pub message_idle: Option<String>,
    /// `--cpus`.
    pub cpus: Option<u32>,
}

/// Parses a duration with a unit into microseconds.
pub fn parse_micros(flag: &str, text: &str) -> Result<u32, String> {
    let t = text.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("us") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("µs") {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1e6)
    } else {
        return Err(format!(
            "{flag} {text:?} needs a unit: us, ms or s (for example 10ms)"
        ));
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("{flag} {text:?} is not a duration (for example 10ms)"))?;
    let us = v * scale;
    if !us.is_finite() || us <= 0.0 {
        return Err(format!("{flag} {text:?} must be longer than zero"));
    }
    if us > f64::from(u32::MAX) {
        return Err(format!("{flag} {text:?} is too long"));
    }
    Ok(us.round() as u32)
}

/// What `allot run` calls each term of a time contract.
fn flag(t: Term) -> Option<&'static str> {
    Some(match t {
        Term::Period => "--period",
        Term::Budget => "--budget",
        Term::Fraction => "--fraction",
        Term::Slice => "--slice",
        Term::MessageIdle => "--message-idle",
    })
}

/// Applies the time flags to `spec` (which holds the space flags). Errors
/// name the flag and what to do; which contract the flags name is
/// [`TimeTerms::contract`]'s to decide, and what the spec itself refuses
/// is [`CellSpec::validate`]'s, once the whole spec is built.
pub fn apply(flags: &TimeFlags, spec: &mut CellSpec) -> Result<(), String> {
    let micros = |name: &str, text: &Option<String>| {
        text.as_deref().map(|t| parse_micros(name, t)).transpose()
    };
    let terms = TimeTerms {
        period_us: micros("--period", &flags.period)?,
        budget_us: micros("--budget", &flags.budget)?,
        fraction: flags.fraction,
        slice_us: micros("--slice", &flags.slice)?,
        message_idle_us: micros("--message-idle", &flags.message_idle)?,
    };
    if !terms.any() {
        if flags.cpus.is_some() {
            return Err(
                "--cpus sets how many CPUs a time contract covers; add --period/--budget or \
                 --fraction, or use --min/--max for whole CPUs"
                    .into(),
            );
        }
        return Ok(());
    }
    spec.time = terms
        .contract()
        .map_err(|e| e.describe(flag, |t, v| format!("{} {v}", flag(t).unwrap_or("?"))))?;
    if spec.min != 0 || spec.max != 0 || spec.exclusive || spec.placement != Default::default() {
        return Err(
            "--min, --max, --exclusive and --place are for whole CPUs; a time contract covers \
             --cpus N CPUs, shared in time"
                .into(),
        );
    }
    // `--cpus 0` is the spec's own error (a time contract needs a CPU),
    // found by the one validation the caller runs next.
    spec.min = flags.cpus.unwrap_or(1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::TimeContract;

    fn flags() -> TimeFlags {
        TimeFlags::default()
    }

    /// What `allot run` does: the flags, then the one validation.
    fn applied(f: &TimeFlags) -> Result<CellSpec, String> {
        let mut s = CellSpec::default();
        apply(f, &mut s)?;
        Ok(s.check().map_err(|e| e.to_string())?.into_spec())
    }

    #[test]
    fn durations_need_a_unit_and_a_positive_value() {
        assert_eq!(parse_micros("--period", "10ms"), Ok(10_000));
        assert_eq!(parse_micros("--period", "2.5ms"), Ok(2_500));
        assert_eq!(parse_micros("--period", "500us"), Ok(500));
        assert_eq!(parse_micros("--period", "1s"), Ok(1_000_000));
        assert!(parse_micros("--period", "10").unwrap_err().contains("unit"));
        assert!(
            parse_micros("--period", "-5ms")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(
            parse_micros("--period", "0ms")
                .unwrap_err()
                .contains("longer than zero")
        );
        assert!(parse_micros("--period", "abcms").is_err());
    }

    #[test]
    fn the_issue_examples_parse() {
        let mut f = flags();
        f.period = Some("10ms".into());
        f.budget = Some("3ms".into());
        let s = applied(&f).unwrap();
        assert_eq!(
            s.time,
            TimeContract::Triggered {
                period_us: 10_000,
                budget_us: 3_000
            }
        );
        assert_eq!(s.min, 1);
        let mut f = flags();
        f.fraction = Some(0.25);
        f.slice = Some("2ms".into());
        f.cpus = Some(2);
        let s = applied(&f).unwrap();
        assert_eq!(
            s.time,
            TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 2_000
            }
        );
        assert_eq!(s.min, 2);
        assert_eq!(applied(&flags()).unwrap(), CellSpec::default());
    }

    #[test]
    fn bad_contracts_are_refused_with_the_flag_named() {
        let mut f = flags();
        f.period = Some("10ms".into());
        f.budget = Some("12ms".into());
        assert!(applied(&f).unwrap_err().contains("longer than the period"));
        f.budget = None;
        assert!(
            applied(&f)
                .unwrap_err()
                .contains("both --period and --budget")
        );
        let mut f = flags();
        f.fraction = Some(1.5);
        assert!(applied(&f).unwrap_err().contains("outside (0, 1]"));
        f.fraction = Some(0.0);
        assert!(applied(&f).unwrap_err().contains("outside (0, 1]"));
        f.fraction = Some(0.5);
        f.period = Some("10ms".into());
        assert!(applied(&f).unwrap_err().contains("choose one"));
        let mut f = flags();
        f.cpus = Some(2);
        assert!(applied(&f).unwrap_err().contains("--cpus"));
        f.fraction = Some(0.5);
        f.cpus = Some(0);
        assert!(applied(&f).unwrap_err().contains("at least one CPU"));
        let mut f = flags();
        f.slice = Some("2ms".into());
        assert!(applied(&f).unwrap_err().contains("add --fraction"));
        let mut s = CellSpec {
            min: 2,
            ..Default::default()
        };
        let mut f = flags();
        f.fraction = Some(0.5);
        assert!(apply(&f, &mut s).unwrap_err().contains("whole CPUs"));
        let mut f = flags();
        f.period = Some("500us".into());
        f.budget = Some("100us".into());
        assert!(applied(&f).unwrap_err().contains("1 ms to 10 s"));
    }
}
