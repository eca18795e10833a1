//! What a cell asks for: the one vocabulary of cell specs, placements,
//! time contracts and goals, and their validation, for every part of allot
//! (the planner, the wire, the journal, the status document, `allot run`,
//! liballot and the Python package). It depends on nothing of allot's, so
//! an application that links the client library does not link the planner.
//!
//! [`CellSpec::validate`] is the one check of a spec that needs no machine;
//! the planner's admission adds what needs one (`allot_plan::admit`). Each
//! encoding at an edge (the wire's bytes, the journal's records, the status
//! document) converts beside its own type and round-trips.
//!
//! A [`CellSpec`] is Tessellation's specification set for CPUs and memory:
//! a minimum (guaranteed), a maximum (a limit), a weight for sharing what
//! lies between, whether the cell's CPUs are its alone, where they should
//! lie, and its [`TimeContract`]: whether it holds CPUs (space) or a share
//! of their time at known moments (time); and its [`Memory`]: bytes
//! guaranteed and a limit (`memory`).
//!
//! # Time contracts
//!
//! A *space* cell ([`TimeContract::Space`], the default) is what allot has
//! always planned: whole CPUs when it has a guarantee (*pinned*), otherwise
//! a best-effort share (stacked when below one CPU). A *time* cell asks for
//! part of the time of `min` CPUs instead:
//!
//! - [`TimeContract::Fraction`]: a fraction of each of its CPUs, delivered
//!   in pieces no shorter than a slice;
//! - [`TimeContract::Triggered`]: a budget every period on each of its CPUs,
//!   all of its threads in the same window (gang);
//! - [`TimeContract::Message`]: nothing until a message arrives on one of
//!   its channels (defined here; activation needs channels).
//!
//! For a time cell `min` is the number of CPUs the contract covers, `max`
//! is 0 or `min`, and it is never exclusive: the time it does not use goes
//! to best-effort cells. Amounts are integers (parts per million,
//! microseconds) so that a spec compares and hashes exactly.

pub mod goal;
pub mod memory;
pub mod terms;

pub use goal::{Goal, GoalError};
pub use memory::{Cache, Memory, MemoryError, MemoryUse, Size, SizeError, parse_size};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
pub use terms::{Term, TermsError, TimeTerms};

/// Identifies a cell for its whole life. Allocated by the broker, never reused
/// while the broker's journal lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct CellId(pub u64);

impl fmt::Display for CellId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Where a cell's CPUs should lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    /// Anywhere; the mapping still prefers compact sets.
    #[default]
    Any,
    /// Within one last-level-cache domain when the grant fits in one.
    Llc,
    /// Within one NUMA node when the grant fits in one.
    Numa,
}

impl Placement {
    /// The byte the wire and the C API carry: 0 any, 1 llc, 2 numa.
    pub fn code(self) -> u8 {
        match self {
            Placement::Any => 0,
            Placement::Llc => 1,
            Placement::Numa => 2,
        }
    }

    /// From a wire code.
    pub fn from_code(code: u8) -> Option<Placement> {
        match code {
            0 => Some(Placement::Any),
            1 => Some(Placement::Llc),
            2 => Some(Placement::Numa),
            _ => None,
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Placement::Any => "any",
            Placement::Llc => "llc",
            Placement::Numa => "numa",
        })
    }
}

impl FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "any" => Ok(Placement::Any),
            "llc" => Ok(Placement::Llc),
            "numa" => Ok(Placement::Numa),
            other => Err(format!(
                "unknown placement {other:?}: expected any, llc or numa"
            )),
        }
    }
}

/// Largest accepted weight.
pub const MAX_WEIGHT: u32 = 10_000;

/// One whole CPU's time, in parts per million.
pub const PPM: u32 = 1_000_000;

/// The slice a time-fraction cell gets when it names none (2 ms).
pub const DEFAULT_SLICE_US: u32 = 2_000;

/// Shortest period of a time-triggered cell (1 ms): the broker's window
/// timer activates a cell in tens of microseconds here, so shorter
/// periods would spend much of their budget waking up.
pub const MIN_PERIOD_US: u32 = 1_000;

/// Longest period, and longest slice (10 s).
pub const MAX_PERIOD_US: u32 = 10_000_000;

/// Smallest budget of a time-triggered cell (100 µs).
pub const MIN_BUDGET_US: u32 = 100;

/// When a cell runs: Tessellation's cell scheduling kinds (see the module
/// notes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum TimeContract {
    /// Whole CPUs or a best-effort share (held when guaranteed).
    #[default]
    Space,
    /// `ppm` millionths of each CPU, in pieces of at least `slice_us`.
    Fraction {
        /// Fraction of each CPU, in parts per million (1..=1_000_000).
        ppm: u32,
        /// Shortest piece of CPU time, in microseconds (0: the default).
        slice_us: u32,
    },
    /// `budget_us` every `period_us` on each CPU, the whole cell at once.
    Triggered {
        /// Period, in microseconds.
        period_us: u32,
        /// Budget per period, in microseconds.
        budget_us: u32,
    },
    /// Nothing until a message arrives; the grant goes back after
    /// `idle_ms` without one.
    Message {
        /// Idle time before the grant is taken back, in milliseconds.
        idle_ms: u32,
    },
}

impl TimeContract {
    /// Whether the contract is about time rather than space.
    pub fn is_time(&self) -> bool {
        !matches!(self, TimeContract::Space)
    }

    /// The time promised on each of the cell's CPUs, in parts per million
    /// (rounded up); 0 for space and message-triggered contracts.
    pub fn ppm(&self) -> u32 {
        match *self {
            TimeContract::Fraction { ppm, .. } => ppm,
            TimeContract::Triggered {
                period_us,
                budget_us,
            } if period_us > 0 => {
                (u64::from(budget_us) * u64::from(PPM)).div_ceil(u64::from(period_us)) as u32
            }
            _ => 0,
        }
    }

    /// The slice of a time-fraction contract, the default filled in.
    pub fn slice_us(&self) -> u32 {
        match *self {
            TimeContract::Fraction { slice_us: 0, .. } => DEFAULT_SLICE_US,
            TimeContract::Fraction { slice_us, .. } => slice_us,
            _ => 0,
        }
    }

    /// The name `allot status` shows (`space` for a space contract: the
    /// spec decides between pinned and best effort).
    pub fn name(&self) -> &'static str {
        match self {
            TimeContract::Space => "space",
            TimeContract::Fraction { .. } => "time-fraction",
            TimeContract::Triggered { .. } => "time-triggered",
            TimeContract::Message { .. } => "message-triggered",
        }
    }

    fn validate(&self) -> Result<(), SpecError> {
        match *self {
            TimeContract::Space => Ok(()),
            TimeContract::Fraction { ppm, slice_us } => {
                if ppm == 0 || ppm > PPM {
                    return Err(SpecError::Fraction(ppm));
                }
                if slice_us > MAX_PERIOD_US {
                    return Err(SpecError::Slice(slice_us));
                }
                Ok(())
            }
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => {
                if !(MIN_PERIOD_US..=MAX_PERIOD_US).contains(&period_us) {
                    return Err(SpecError::Period(period_us));
                }
                if budget_us < MIN_BUDGET_US {
                    return Err(SpecError::Budget(budget_us));
                }
                if budget_us > period_us {
                    return Err(SpecError::BudgetAbovePeriod {
                        budget_us,
                        period_us,
                    });
                }
                Ok(())
            }
            TimeContract::Message { .. } => Ok(()),
        }
    }
}

impl fmt::Display for TimeContract {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TimeContract::Space => f.write_str("space"),
            TimeContract::Fraction { ppm, .. } => write!(
                f,
                "fraction {} slice {}",
                f64::from(ppm) / f64::from(PPM),
                Micros(self.slice_us())
            ),
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => write!(
                f,
                "budget {} every {}",
                Micros(budget_us),
                Micros(period_us)
            ),
            TimeContract::Message { idle_ms } => write!(f, "message-triggered idle {idle_ms}ms"),
        }
    }
}

/// Microseconds, shown in the largest unit that keeps them whole.
struct Micros(u32);

impl fmt::Display for Micros {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            us if us % 1_000_000 == 0 && us > 0 => write!(f, "{}s", us / 1_000_000),
            us if us % 1_000 == 0 && us > 0 => write!(f, "{}ms", us / 1_000),
            us => write!(f, "{us}us"),
        }
    }
}

/// What a cell asks for, in CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct CellSpec {
    /// CPUs guaranteed while the cell lives (0: best effort).
    pub min: u32,
    /// Most CPUs the cell may hold (0: no limit but the machine).
    pub max: u32,
    /// Share of contended CPUs relative to other cells (1..=10000).
    pub weight: u32,
    /// Exclusive cells are guaranteed at least one CPU, never stacked with
    /// other cells, and never lend their CPUs out.
    pub exclusive: bool,
    /// Where the CPUs should lie.
    pub placement: Placement,
    /// Space or time (see the module notes).
    pub time: TimeContract,
    /// What the cell wants to achieve ([`Goal`]); space cells only.
    pub goal: Goal,
    /// Its memory guarantee and limit ([`Memory`]).
    pub memory: Memory,
    /// Its L3 ways and memory bandwidth ceiling ([`Cache`]).
    pub cache: Cache,
}

impl Default for CellSpec {
    fn default() -> Self {
        CellSpec {
            min: 0,
            max: 0,
            weight: 1,
            exclusive: false,
            placement: Placement::Any,
            time: TimeContract::Space,
            goal: Goal::None,
            memory: Memory::default(),
            cache: Cache::default(),
        }
    }
}

/// Why a spec is malformed regardless of the machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// Weight out of range.
    #[error("weight {0} is out of range: use 1 to {MAX_WEIGHT}")]
    Weight(u32),
    /// min above max.
    #[error("minimum {min} CPUs is above the maximum {max}")]
    MinAboveMax {
        /// The spec's `min`, in CPUs.
        min: u32,
        /// The spec's `max`, in CPUs (not 0: an unset maximum never conflicts).
        max: u32,
    },
    /// A fraction outside (0, 1].
    #[error("fraction {}/1000000 is outside (0, 1]: use a fraction such as 0.25", .0)]
    Fraction(u32),
    /// A slice longer than allowed.
    #[error("slice {0} µs is longer than 10 s")]
    Slice(u32),
    /// A period outside the allowed range.
    #[error("period {0} µs is outside 1 ms to 10 s")]
    Period(u32),
    /// A budget too small to enforce.
    #[error("budget {0} µs is below the smallest enforceable budget of 100 µs")]
    Budget(u32),
    /// A budget longer than its period.
    #[error("budget {budget_us} µs is longer than the period {period_us} µs")]
    BudgetAbovePeriod {
        /// The spec's budget, in microseconds.
        budget_us: u32,
        /// The spec's period, in microseconds.
        period_us: u32,
    },
    /// A time contract without CPUs.
    #[error("a {0} cell needs at least one CPU (--cpus)")]
    TimeWithoutCpus(&'static str),
    /// A time contract whose maximum differs from its CPUs.
    #[error("a {kind} cell covers exactly its {cpus} CPUs: leave the maximum unset (got {max})")]
    TimeMax {
        /// The contract's name as `allot status` shows it (`time-fraction`, …).
        kind: &'static str,
        /// The CPUs the contract covers: the spec's `min`.
        cpus: u32,
        /// The maximum asked for.
        max: u32,
    },
    /// A time contract asking for exclusivity or a placement.
    #[error("a {0} cell cannot be exclusive or placed (its CPUs are shared in time)")]
    TimeExclusive(&'static str),
    /// A malformed goal.
    #[error(transparent)]
    Goal(#[from] GoalError),
    /// A goal on a time cell.
    #[error("a {0} cell is promised time, not a performance: goals (--goal) apply to space cells")]
    TimeGoal(&'static str),
    /// A malformed memory request.
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// A [`CellSpec`] that passed [`CellSpec::check`]. Nothing else makes one,
/// so what takes it, the planner's admission above all, never checks
/// again: a spec is checked once, where it enters a process (`allot run`'s
/// flags, a request the broker reads, a record it replays).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ValidSpec(CellSpec);

impl ValidSpec {
    /// The spec.
    pub fn spec(&self) -> &CellSpec {
        &self.0
    }

    /// The spec, to change it (and check it again) or send it.
    pub fn into_spec(self) -> CellSpec {
        self.0
    }

    /// [`CellSpec::holding`], still valid: raising the minimum to `held`
    /// and a maximum with it keeps the minimum at or below the maximum,
    /// and a time cell is left as it is.
    pub fn holding(self, held: u32) -> ValidSpec {
        let s = self.0.holding(held);
        debug_assert_eq!(s.validate(), Ok(()), "holding keeps a spec valid");
        ValidSpec(s)
    }
}

impl fmt::Display for ValidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl std::ops::Deref for ValidSpec {
    type Target = CellSpec;
    fn deref(&self) -> &CellSpec {
        &self.0
    }
}

impl CellSpec {
    /// Checks the spec ([`CellSpec::validate`]) and, when it holds, gives
    /// the one type the planner's admission takes.
    pub fn check(self) -> Result<ValidSpec, SpecError> {
        self.validate()?;
        Ok(ValidSpec(self))
    }

    /// Checks what can be checked without a machine.
    pub fn validate(&self) -> Result<(), SpecError> {
        if self.weight == 0 || self.weight > MAX_WEIGHT {
            return Err(SpecError::Weight(self.weight));
        }
        if self.max != 0 && self.min > self.max {
            return Err(SpecError::MinAboveMax {
                min: self.min,
                max: self.max,
            });
        }
        self.time.validate()?;
        if self.time.is_time() {
            let kind = self.time.name();
            if self.min == 0 {
                return Err(SpecError::TimeWithoutCpus(kind));
            }
            if self.max != 0 && self.max != self.min {
                return Err(SpecError::TimeMax {
                    kind,
                    cpus: self.min,
                    max: self.max,
                });
            }
            if self.exclusive || self.placement != Placement::Any {
                return Err(SpecError::TimeExclusive(kind));
            }
            if self.goal.is_some() {
                return Err(SpecError::TimeGoal(kind));
            }
        }
        self.goal.validate()?;
        self.memory.validate()?;
        self.cache.validate()?;
        Ok(())
    }

    /// Whether the broker guarantees this cell whole CPUs of its own (a
    /// minimum of at least one, or exclusivity). Never for time cells:
    /// what they are promised is time ([`CellSpec::time`]).
    pub fn is_guaranteed(&self) -> bool {
        !self.time.is_time() && (self.min > 0 || self.exclusive)
    }

    /// A partition of `n` CPUs: `n` whole CPUs no other cell may use (what
    /// `allot run --partition N` asks for; a program that registers one
    /// itself builds its pools with `Builder::poll`).
    pub fn partition(n: u32) -> CellSpec {
        CellSpec {
            min: n,
            max: n,
            exclusive: true,
            ..CellSpec::default()
        }
    }

    /// Whether this is a message-triggered cell.
    pub fn is_message(&self) -> bool {
        matches!(self.time, TimeContract::Message { .. })
    }

    /// What a message-triggered cell asks for while it is active (a
    /// message arrived, and it has not been idle since): a best-effort
    /// share of at most the CPUs it covers. While idle it holds nothing.
    pub fn as_active_message(&self) -> CellSpec {
        CellSpec {
            min: 0,
            max: self.min,
            exclusive: false,
            time: TimeContract::Space,
            goal: Default::default(),
            ..*self
        }
    }

    /// The CPUs a time contract covers (0 for space cells).
    pub fn time_cpus(&self) -> u32 {
        if self.time.is_time() { self.min } else { 0 }
    }

    /// The contract's name as `allot status` shows it: `held` or
    /// `best-effort` for space cells, the time contract's name otherwise.
    pub fn kind_name(&self) -> &'static str {
        match self.time {
            TimeContract::Space if self.is_guaranteed() => "pinned",
            TimeContract::Space => "best-effort",
            t => t.name(),
        }
    }

    /// The guaranteed number of whole CPUs: `min`, raised to 1 for exclusive
    /// cells; 0 for time cells.
    pub fn guaranteed(&self) -> u32 {
        if self.time.is_time() {
            0
        } else if self.exclusive {
            self.min.max(1)
        } else {
            self.min
        }
    }

    /// The spec planned for a space cell whose processes hold `held`
    /// CPUs exclusively through `require` (the one account, see
    /// `allot_plan::plan` invariant 8): guaranteed at least those CPUs, and
    /// allowed to hold them. Time cells and `held == 0` are unchanged.
    pub fn holding(self, held: u32) -> CellSpec {
        if held == 0 || self.time.is_time() {
            return self;
        }
        CellSpec {
            min: self.min.max(held),
            max: if self.max == 0 { 0 } else { self.max.max(held) },
            ..self
        }
    }

    /// The maximum, with 0 meaning `capacity`, clipped to `capacity`.
    pub fn max_within(&self, capacity: u32) -> u32 {
        if self.max == 0 {
            capacity
        } else {
            self.max.min(capacity)
        }
    }
}

impl fmt::Display for CellSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let max = if self.max == 0 {
            "all".to_string()
        } else {
            self.max.to_string()
        };
        write!(
            f,
            "min {} max {} weight {}{} place {}",
            self.min,
            max,
            self.weight,
            if self.exclusive { " exclusive" } else { "" },
            self.placement
        )?;
        if self.time.is_time() {
            write!(f, " time {}", self.time)?;
        }
        if self.goal.is_some() {
            write!(f, " goal {}", self.goal)?;
        }
        if !self.memory.is_none() {
            write!(f, " memory {}", self.memory)?;
        }
        if !self.cache.is_none() {
            write!(f, " cache {}", self.cache)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holding_cpus_raises_the_guarantee_and_the_maximum() {
        let be = CellSpec::default();
        assert_eq!(be.holding(0), be);
        let h = be.holding(2);
        assert_eq!((h.min, h.max, h.guaranteed()), (2, 0, 2));
        let capped = CellSpec {
            min: 1,
            max: 1,
            ..be
        }
        .holding(3);
        assert_eq!((capped.min, capped.max), (3, 3));
        let big = CellSpec {
            min: 4,
            max: 8,
            ..be
        }
        .holding(2);
        assert_eq!((big.min, big.max), (4, 8));
        let timed = CellSpec {
            time: TimeContract::Fraction {
                ppm: 500_000,
                slice_us: 0,
            },
            ..be
        };
        assert_eq!(timed.holding(2), timed);
    }

    #[test]
    fn only_a_check_makes_a_valid_spec_and_holding_keeps_it_valid() {
        let bad = CellSpec {
            min: 4,
            max: 2,
            ..CellSpec::default()
        };
        assert_eq!(
            bad.check().unwrap_err(),
            SpecError::MinAboveMax { min: 4, max: 2 }
        );
        let ok = CellSpec {
            min: 1,
            max: 2,
            ..CellSpec::default()
        };
        let valid = ok.check().unwrap();
        assert_eq!(*valid.spec(), ok);
        assert_eq!(valid.to_string(), ok.to_string());
        let held = valid.holding(3);
        assert_eq!((held.min, held.max), (3, 3));
        assert_eq!(held.validate(), Ok(()));
        assert_eq!(held.into_spec(), ok.holding(3));
    }

    #[test]
    fn validation() {
        assert!(CellSpec::default().validate().is_ok());
        let bad = CellSpec {
            weight: 0,
            ..Default::default()
        };
        assert_eq!(bad.validate(), Err(SpecError::Weight(0)));
        let bad = CellSpec {
            min: 3,
            max: 2,
            ..Default::default()
        };
        assert_eq!(
            bad.validate(),
            Err(SpecError::MinAboveMax { min: 3, max: 2 })
        );
        let ok = CellSpec {
            min: 3,
            max: 0,
            ..Default::default()
        };
        assert!(ok.validate().is_ok());
    }

    #[test]
    fn guarantees() {
        let ex = CellSpec {
            exclusive: true,
            ..Default::default()
        };
        assert_eq!(ex.guaranteed(), 1);
        assert!(ex.is_guaranteed());
        assert!(!CellSpec::default().is_guaranteed());
        assert_eq!(CellSpec::default().max_within(8), 8);
        assert_eq!(
            CellSpec {
                max: 20,
                ..Default::default()
            }
            .max_within(8),
            8
        );
    }

    fn time(time: TimeContract, min: u32) -> CellSpec {
        CellSpec {
            min,
            time,
            ..Default::default()
        }
    }

    #[test]
    fn time_contracts_are_checked_before_anything_starts() {
        let tt = |period_us, budget_us| TimeContract::Triggered {
            period_us,
            budget_us,
        };
        let fr = |ppm| TimeContract::Fraction { ppm, slice_us: 0 };
        assert!(time(tt(10_000, 3_000), 1).validate().is_ok());
        assert!(time(fr(250_000), 2).validate().is_ok());
        assert!(time(fr(PPM), 1).validate().is_ok());
        assert_eq!(time(tt(0, 0), 1).validate(), Err(SpecError::Period(0)));
        assert_eq!(
            time(tt(500, 100), 1).validate(),
            Err(SpecError::Period(500))
        );
        assert_eq!(
            time(tt(10_000, 12_000), 1).validate(),
            Err(SpecError::BudgetAbovePeriod {
                budget_us: 12_000,
                period_us: 10_000
            })
        );
        assert_eq!(
            time(tt(10_000, 50), 1).validate(),
            Err(SpecError::Budget(50))
        );
        assert_eq!(time(fr(0), 1).validate(), Err(SpecError::Fraction(0)));
        assert_eq!(
            time(fr(PPM + 1), 1).validate(),
            Err(SpecError::Fraction(PPM + 1))
        );
        assert_eq!(
            time(fr(100_000), 0).validate(),
            Err(SpecError::TimeWithoutCpus("time-fraction"))
        );
        let mut s = time(fr(100_000), 2);
        s.max = 3;
        assert!(matches!(s.validate(), Err(SpecError::TimeMax { .. })));
        s.max = 2;
        assert!(s.validate().is_ok());
        s.exclusive = true;
        assert_eq!(s.validate(), Err(SpecError::TimeExclusive("time-fraction")));
    }

    #[test]
    fn time_cells_hold_no_space_guarantee() {
        let s = time(
            TimeContract::Triggered {
                period_us: 10_000,
                budget_us: 3_000,
            },
            2,
        );
        assert!(!s.is_guaranteed());
        assert_eq!(s.guaranteed(), 0);
        assert_eq!(s.time_cpus(), 2);
        assert_eq!(s.time.ppm(), 300_000);
        assert_eq!(s.kind_name(), "time-triggered");
        assert_eq!(
            TimeContract::Triggered {
                period_us: 3,
                budget_us: 1
            }
            .ppm(),
            333_334,
            "rounded up: never promise less than asked"
        );
        assert_eq!(CellSpec::default().kind_name(), "best-effort");
        assert_eq!(
            CellSpec {
                min: 1,
                ..Default::default()
            }
            .kind_name(),
            "pinned"
        );
        assert_eq!(
            s.to_string(),
            "min 2 max all weight 1 place any time budget 3ms every 10ms"
        );
    }

    #[test]
    fn placement_codes_roundtrip() {
        for p in [Placement::Any, Placement::Llc, Placement::Numa] {
            assert_eq!(Placement::from_code(p.code()), Some(p));
            assert_eq!(p.to_string().parse::<Placement>(), Ok(p));
        }
        assert_eq!(Placement::from_code(9), None);
        assert!("disk".parse::<Placement>().is_err());
    }
}
