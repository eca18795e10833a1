//! What a cell asks for.
//!
//! A [`CellSpec`] is the CPU part of Tessellation's specification set: a
//! minimum (guaranteed), a maximum (a limit), a weight for sharing what lies
//! between, whether the cell's CPUs are its alone, and where they should lie.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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
    /// Wire code.
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
}

impl Default for CellSpec {
    fn default() -> Self {
        CellSpec {
            min: 0,
            max: 0,
            weight: 1,
            exclusive: false,
            placement: Placement::Any,
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
        /// The minimum.
        min: u32,
        /// The maximum.
        max: u32,
    },
}

impl CellSpec {
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
        Ok(())
    }

    /// Whether the broker guarantees this cell CPUs of its own (a minimum of
    /// at least one, or exclusivity).
    pub fn is_guaranteed(&self) -> bool {
        self.min > 0 || self.exclusive
    }

    /// The guaranteed number of CPUs: `min`, raised to 1 for exclusive cells.
    pub fn guaranteed(&self) -> u32 {
        if self.exclusive {
            self.min.max(1)
        } else {
            self.min
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
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
