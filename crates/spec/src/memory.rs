//! Memory capacity per cell: the memory part of a cell's partition
//! (Tessellation gives a cell a share of every resource, not only CPUs).
//!
//! A [`Memory`] is a guarantee and a limit, in bytes, 0 meaning none:
//!
//! - `min`: memory the kernel does not reclaim from the cell while the
//!   machine is under pressure (cgroup v2 `memory.min`; v1 has no hard
//!   protection and gets `memory.soft_limit_in_bytes`). Admission never
//!   promises more than the machine has, less a reserve.
//! - `max`: the most the cell may use; past it the kernel reclaims the
//!   cell's own memory and, failing that, kills a process *of the cell*
//!   (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`). Nothing outside
//!   the cell pays for it.
//!
//! A [`Cache`] is the rest of the memory system: L3 ways of the cell's own
//! and a ceiling on its memory bandwidth (Intel RDT, AMD QoS; the kernel's
//! resctrl).
//!
//! Sizes are written with an optional unit: `K`, `M`, `G`, `T` (powers of
//! 1024, as the kernel's cgroup files and systemd read them; `KiB`, `MB`
//! and friends are accepted as the same), or plain bytes.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A cell's memory guarantee and limit, bytes (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Memory {
    /// Bytes guaranteed (0: none).
    pub min: u64,
    /// Most bytes (0: no limit but what encloses the cell).
    pub max: u64,
}

/// A cell's share of the cache and of memory bandwidth (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub struct Cache {
    /// L3 ways of every cache domain that only this cell may fill.
    pub ways: u32,
    /// The most memory bandwidth it may take, percent of each domain's.
    pub bandwidth: u32,
}

impl Cache {
    /// Whether the cell asks for nothing of the cache or bandwidth.
    pub fn is_none(&self) -> bool {
        self.ways == 0 && self.bandwidth == 0
    }

    /// Checks what can be checked without a machine.
    pub fn validate(&self) -> Result<(), MemoryError> {
        if self.bandwidth > 100 {
            return Err(MemoryError::Bandwidth(self.bandwidth));
        }
        if self.ways > 64 {
            return Err(MemoryError::Ways(self.ways));
        }
        Ok(())
    }
}

impl fmt::Display for Cache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.ways, self.bandwidth) {
            (0, 0) => write!(f, "any"),
            (w, 0) => write!(f, "{w} L3 ways"),
            (0, b) => write!(f, "bandwidth {b} %"),
            (w, b) => write!(f, "{w} L3 ways, bandwidth {b} %"),
        }
    }
}

/// A cell's memory as the kernel counts it (what the backend reads, what
/// the status shows).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct MemoryUse {
    /// Bytes charged to the cell now.
    pub current: u64,
    /// Its own limit as the kernel enforces it (0: none).
    pub limit: u64,
    /// Times it hit its limit (v2 `memory.events` `max`; v1
    /// `memory.failcnt`).
    pub at_limit: u64,
    /// Processes the kernel killed in it for want of memory.
    pub oom_kills: u64,
    /// Share of the last 10 s some of its threads waited for memory
    /// (`memory.pressure`, `some avg10`, 0 to 100; absent without PSI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pressure: Option<f64>,
}

/// The smallest limit allot sets: below it a program cannot even start.
pub const MIN_LIMIT: u64 = 4 << 20;

/// Why a memory request is malformed regardless of the machine.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemoryError {
    /// The guarantee is above the limit.
    #[error(
        "the memory guarantee {} is above the limit {}: raise --memory-max or lower --memory-min",
        Size(*.min), Size(*.max)
    )]
    MinAboveMax {
        /// The guarantee, bytes.
        min: u64,
        /// The limit, bytes.
        max: u64,
    },
    /// A limit too small to run anything.
    #[error("the memory limit {} is below the smallest allot sets, {}", Size(*.0), Size(MIN_LIMIT))]
    TooSmall(u64),
    /// A bandwidth ceiling that is not a percentage.
    #[error("a memory bandwidth ceiling of {0} % is not a percentage: use 1 to 100")]
    Bandwidth(u32),
    /// More ways than any cache has.
    #[error("{0} L3 ways is more than any cache has (64 at most)")]
    Ways(u32),
}

impl Memory {
    /// Whether the cell asks for nothing of memory.
    pub fn is_none(&self) -> bool {
        self.min == 0 && self.max == 0
    }

    /// Checks what can be checked without a machine.
    pub fn validate(&self) -> Result<(), MemoryError> {
        if self.max != 0 && self.max < MIN_LIMIT {
            return Err(MemoryError::TooSmall(self.max));
        }
        if self.max != 0 && self.min > self.max {
            return Err(MemoryError::MinAboveMax {
                min: self.min,
                max: self.max,
            });
        }
        Ok(())
    }
}

impl fmt::Display for Memory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.min, self.max) {
            (0, 0) => write!(f, "any"),
            (min, 0) => write!(f, "{} guaranteed", Size(min)),
            (0, max) => write!(f, "at most {}", Size(max)),
            (min, max) => write!(f, "{} guaranteed, at most {}", Size(min), Size(max)),
        }
    }
}

/// Bytes, shown in the largest binary unit that keeps one decimal
/// (`512M`, `1.5G`, `8G`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size(pub u64);

impl fmt::Display for Size {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(&str, u32); 4] = [("T", 40), ("G", 30), ("M", 20), ("K", 10)];
        for (unit, shift) in UNITS {
            let one = 1u64 << shift;
            if self.0 >= one {
                let whole = self.0 / one;
                let tenths = (self.0 % one) * 10 / one;
                return if tenths == 0 {
                    write!(f, "{whole}{unit}")
                } else {
                    write!(f, "{whole}.{tenths}{unit}")
                };
            }
        }
        write!(f, "{}B", self.0)
    }
}

/// Why a size could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "\"{0}\" is not a size: write bytes, or a number with K, M, G or T (powers of 1024), such as 512M or 2G"
)]
pub struct SizeError(pub String);

/// Reads a size: `4096`, `512K`, `512M`, `1.5G`, `2GiB`, `8g`.
pub fn parse_size(text: &str) -> Result<u64, SizeError> {
    let bad = || SizeError(text.to_string());
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(bad()),
    };
    if number.is_empty() {
        return Err(bad());
    }
    if shift == 0 || !number.contains('.') {
        let n: u64 = number.parse().map_err(|_| bad())?;
        return n.checked_mul(1u64 << shift).ok_or_else(bad);
    }
    let n: f64 = number.parse().map_err(|_| bad())?;
    let bytes = n * (1u64 << shift) as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("512K"), Ok(512 << 10));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size(" 1.5G "), Ok(3 << 29));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        for bad in [
            "",
            "G",
            "2X",
            "-1G",
            "1.2.3M",
            "99999999999999999999",
            "20000000T",
        ] {
            let e = parse_size(bad).unwrap_err();
            assert!(e.to_string().contains("not a size"), "{bad}: {e}");
        }
    }

    #[test]
    fn sizes_show_in_the_largest_unit() {
        assert_eq!(Size(512 << 20).to_string(), "512M");
        assert_eq!(Size(3 << 29).to_string(), "1.5G");
        assert_eq!(Size(8 << 30).to_string(), "8G");
        assert_eq!(Size(100).to_string(), "100B");
        for s in ["512M", "1.5G", "8G", "3T", "64K"] {
            assert_eq!(Size(parse_size(s).unwrap()).to_string(), s);
        }
    }

    #[test]
    fn a_guarantee_above_the_limit_and_a_tiny_limit_are_refused() {
        let m = Memory {
            min: 8 << 30,
            max: 2 << 30,
        };
        let e = m.validate().unwrap_err();
        assert_eq!(
            e.to_string(),
            "the memory guarantee 8G is above the limit 2G: raise --memory-max or lower --memory-min"
        );
        assert!(matches!(
            Memory {
                min: 0,
                max: 1 << 20
            }
            .validate(),
            Err(MemoryError::TooSmall(_))
        ));
        assert_eq!(Memory::default().validate(), Ok(()));
        assert_eq!(
            Memory {
                min: 2 << 30,
                max: 0
            }
            .validate(),
            Ok(())
        );
    }
}
