//! How the spec vocabulary ([`allot_spec`]) is laid out on the wire: the
//! placement's byte ([`Placement::code`](allot_spec::Placement::code)), then a time contract's three
//! fields and a goal's two. Every value has exactly one encoding: a field
//! a kind does not use must be 0, and decoding refuses anything else.
//!
//! A spec is `min: u32, max: u32, weight: u32, exclusive: bool,
//! placement: u8`, then its time contract (`kind: u8, a: u32, b: u32`),
//! then its goal (`kind: u8, value: u64`), then its memory (`min: u64,
//! max: u64`, bytes, 0: none), then its cache (`ways: u32, bandwidth:
//! u32`, percent, 0: none).
//!
//! | time kind | contract          | a          | b          |
//! |-----------|-------------------|------------|------------|
//! | 0         | space             | 0          | 0          |
//! | 1         | time-fraction     | ppm        | slice µs (0: default) |
//! | 2         | time-triggered    | period µs  | budget µs  |
//! | 3         | message-triggered | idle ms    | 0          |
//!
//! | goal kind | goal | value |
//! |-----------|------|-------|
//! | 0         | none | 0     |
//! | 1         | rate | units of work per second, in thousandths |
//! | 2         | p99  | request latency bound, µs (at most `u32::MAX`) |

use allot_spec::{Goal, TimeContract};

/// A time contract's three wire fields.
pub fn time_fields(t: TimeContract) -> (u8, u32, u32) {
    match t {
        TimeContract::Space => (0, 0, 0),
        TimeContract::Fraction { ppm, slice_us } => (1, ppm, slice_us),
        TimeContract::Triggered {
            period_us,
            budget_us,
        } => (2, period_us, budget_us),
        TimeContract::Message { idle_ms } => (3, idle_ms, 0),
    }
}

/// The time contract of three wire fields; `None` for an unknown kind, or
/// a field the kind does not use that is not 0.
pub fn time_from_fields(kind: u8, a: u32, b: u32) -> Option<TimeContract> {
    Some(match kind {
        0 if a == 0 && b == 0 => TimeContract::Space,
        1 => TimeContract::Fraction {
            ppm: a,
            slice_us: b,
        },
        2 => TimeContract::Triggered {
            period_us: a,
            budget_us: b,
        },
        3 if b == 0 => TimeContract::Message { idle_ms: a },
        _ => return None,
    })
}

/// A goal's two wire fields.
pub fn goal_fields(g: Goal) -> (u8, u64) {
    match g {
        Goal::None => (0, 0),
        Goal::Rate { milli_per_s } => (1, milli_per_s),
        Goal::P99 { us } => (2, u64::from(us)),
    }
}

/// The goal of two wire fields; `None` for an unknown kind or a value the
/// kind cannot carry.
pub fn goal_from_fields(kind: u8, value: u64) -> Option<Goal> {
    Some(match kind {
        0 if value == 0 => Goal::None,
        1 => Goal::Rate { milli_per_s: value },
        2 => Goal::P99 {
            us: u32::try_from(value).ok()?,
        },
        _ => return None,
    })
}
