//! From a front end's options to a [`TimeContract`]: which contract the
//! options given ask for, and the mistakes of combining them, said once for
//! `allot run`'s flags and the Python package's keyword arguments (each
//! converts its own durations to µs first and names its own options).
//!
//! | given | contract |
//! |-------|----------|
//! | period and budget | [`TimeContract::Triggered`] |
//! | fraction (and slice) | [`TimeContract::Fraction`] |
//! | message idle time | [`TimeContract::Message`] (ms, rounded up) |
//! | none | [`TimeContract::Space`] |
//!
//! What a contract's values may be (a budget within its period, a period of
//! 1 ms to 10 s, …) is [`CellSpec::validate`](crate::CellSpec::validate)'s:
//! terms only pick the contract and refuse what names no single one.

use crate::TimeContract;
use std::fmt;

/// One option of a time contract, as a front end names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Term {
    /// The period of a time-triggered cell.
    Period,
    /// The CPU time a time-triggered cell gets in each period.
    Budget,
    /// The fraction of each CPU of a time-fraction cell.
    Fraction,
    /// The shortest piece of CPU time a time-fraction cell is given at once.
    Slice,
    /// The idle time of a message-triggered cell.
    MessageIdle,
}

/// The options given, durations in µs (`None`: not given).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TimeTerms {
    /// Period, µs.
    pub period_us: Option<u32>,
    /// Budget, µs.
    pub budget_us: Option<u32>,
    /// Fraction of each CPU, in (0, 1].
    pub fraction: Option<f64>,
    /// Slice, µs.
    pub slice_us: Option<u32>,
    /// Idle time, µs.
    pub message_idle_us: Option<u32>,
}

/// Why the options name no single contract.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TermsError {
    /// Options of two contracts.
    TwoKinds,
    /// A period without a budget, or a budget without a period.
    TriggeredNeedsBoth,
    /// A slice without a fraction.
    SliceWithoutFraction,
    /// A fraction outside (0, 1].
    FractionOutOfRange(f64),
}

impl TimeTerms {
    /// Whether any option of a time contract was given.
    pub fn any(&self) -> bool {
        self.triggered() || self.fractional() || self.message_idle_us.is_some()
    }

    fn triggered(&self) -> bool {
        self.period_us.is_some() || self.budget_us.is_some()
    }

    fn fractional(&self) -> bool {
        self.fraction.is_some() || self.slice_us.is_some()
    }

    /// The contract the options ask for ([`TimeContract::Space`] when none
    /// was given).
    pub fn contract(&self) -> Result<TimeContract, TermsError> {
        let kinds = [
            self.triggered(),
            self.fractional(),
            self.message_idle_us.is_some(),
        ];
        if kinds.iter().filter(|k| **k).count() > 1 {
            return Err(TermsError::TwoKinds);
        }
        if self.triggered() {
            let (Some(period_us), Some(budget_us)) = (self.period_us, self.budget_us) else {
                return Err(TermsError::TriggeredNeedsBoth);
            };
            return Ok(TimeContract::Triggered {
                period_us,
                budget_us,
            });
        }
        if self.fractional() {
            let Some(f) = self.fraction else {
                return Err(TermsError::SliceWithoutFraction);
            };
            if !(f > 0.0 && f <= 1.0) {
                return Err(TermsError::FractionOutOfRange(f));
            }
            return Ok(TimeContract::Fraction {
                ppm: ((f * 1e6).round() as u32).max(1),
                slice_us: self.slice_us.unwrap_or(0),
            });
        }
        if let Some(idle) = self.message_idle_us {
            return Ok(TimeContract::Message {
                idle_ms: idle.div_ceil(1000),
            });
        }
        Ok(TimeContract::Space)
    }
}

impl TermsError {
    /// The error in the front end's words: `name` says what it calls each
    /// term (`None`: it has no such option), `value` how it shows a value
    /// given for a term (`--fraction 1.5`, `fraction=1.5`).
    pub fn describe(
        &self,
        name: impl Fn(Term) -> Option<&'static str>,
        value: impl Fn(Term, &dyn fmt::Display) -> String,
    ) -> String {
        let n = |t: Term| name(t).unwrap_or("?");
        match *self {
            TermsError::TwoKinds => {
                let mut kinds = vec![
                    format!("{}/{} (time-triggered)", n(Term::Period), n(Term::Budget)),
                    format!("{}/{} (time-fraction)", n(Term::Fraction), n(Term::Slice)),
                ];
                if let Some(m) = name(Term::MessageIdle) {
                    kinds.push(format!("{m} (message-triggered)"));
                }
                let last = kinds.pop().unwrap_or_default();
                format!("choose one time contract: {} or {last}", kinds.join(", "))
            }
            TermsError::TriggeredNeedsBoth => format!(
                "a time-triggered cell needs both {} and {}",
                n(Term::Period),
                n(Term::Budget)
            ),
            TermsError::SliceWithoutFraction => format!(
                "{} applies to a time-fraction cell: add {}",
                n(Term::Slice),
                n(Term::Fraction)
            ),
            TermsError::FractionOutOfRange(f) => format!(
                "{} is outside (0, 1]: use a share of each CPU such as 0.25",
                value(Term::Fraction, &f)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(t: Term) -> Option<&'static str> {
        Some(match t {
            Term::Period => "--period",
            Term::Budget => "--budget",
            Term::Fraction => "--fraction",
            Term::Slice => "--slice",
            Term::MessageIdle => "--message-idle",
        })
    }

    fn said(e: TermsError) -> String {
        e.describe(flag, |t, v| format!("{} {v}", flag(t).unwrap()))
    }

    #[test]
    fn each_contract_from_its_terms() {
        let t = TimeTerms::default();
        assert_eq!(t.contract(), Ok(TimeContract::Space));
        assert!(!t.any());
        let t = TimeTerms {
            period_us: Some(10_000),
            budget_us: Some(3_000),
            ..t
        };
        assert_eq!(
            t.contract(),
            Ok(TimeContract::Triggered {
                period_us: 10_000,
                budget_us: 3_000
            })
        );
        let t = TimeTerms {
            fraction: Some(0.25),
            ..TimeTerms::default()
        };
        assert_eq!(
            t.contract(),
            Ok(TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 0
            })
        );
        let t = TimeTerms {
            message_idle_us: Some(50_001),
            ..TimeTerms::default()
        };
        assert_eq!(t.contract(), Ok(TimeContract::Message { idle_ms: 51 }));
        // A tiny fraction still asks for something.
        let t = TimeTerms {
            fraction: Some(1e-9),
            ..TimeTerms::default()
        };
        assert!(matches!(
            t.contract(),
            Ok(TimeContract::Fraction { ppm: 1, .. })
        ));
    }

    #[test]
    fn terms_of_no_single_contract_are_refused_in_the_front_ends_words() {
        let two = TimeTerms {
            fraction: Some(0.5),
            period_us: Some(10_000),
            ..TimeTerms::default()
        };
        assert_eq!(two.contract(), Err(TermsError::TwoKinds));
        assert_eq!(
            said(TermsError::TwoKinds),
            "choose one time contract: --period/--budget (time-triggered), \
             --fraction/--slice (time-fraction) or --message-idle (message-triggered)"
        );
        // A front end without message-triggered cells lists two kinds.
        let python = |t: Term| match t {
            Term::MessageIdle => None,
            Term::Period => Some("period"),
            Term::Budget => Some("budget"),
            Term::Fraction => Some("fraction"),
            Term::Slice => Some("slice"),
        };
        assert_eq!(
            TermsError::TwoKinds.describe(python, |_, v| v.to_string()),
            "choose one time contract: period/budget (time-triggered) or fraction/slice \
             (time-fraction)"
        );
        let half = TimeTerms {
            period_us: Some(10_000),
            ..TimeTerms::default()
        };
        assert_eq!(half.contract(), Err(TermsError::TriggeredNeedsBoth));
        assert!(said(TermsError::TriggeredNeedsBoth).contains("both --period and --budget"));
        let slice = TimeTerms {
            slice_us: Some(2_000),
            ..TimeTerms::default()
        };
        assert_eq!(slice.contract(), Err(TermsError::SliceWithoutFraction));
        assert!(said(TermsError::SliceWithoutFraction).contains("add --fraction"));
        for f in [0.0, 1.5, -1.0, f64::NAN] {
            let t = TimeTerms {
                fraction: Some(f),
                ..TimeTerms::default()
            };
            let e = t.contract().unwrap_err();
            assert!(said(e).starts_with(&format!("--fraction {f} is outside (0, 1]")));
        }
    }
}
