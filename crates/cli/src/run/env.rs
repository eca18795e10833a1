//! The environment of a program `allot run` starts: liballot's
//! [`allot_capi::environ`] (one contract for every launcher), and how
//! `allot run` picks the launch count.

pub use allot_capi::environ::*;

/// Which count a variable read once at start gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LaunchRule {
    /// The cell's fair share ([`launch_threads`]): the default.
    Share,
    /// The grant at the instant of launch (lent CPUs included).
    Grant,
    /// The cell's maximum.
    Max,
}

impl std::str::FromStr for LaunchRule {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "share" => Ok(LaunchRule::Share),
            "grant" => Ok(LaunchRule::Grant),
            "max" => Ok(LaunchRule::Max),
            other => Err(format!(
                "unknown value {other:?}: expected share, grant or max"
            )),
        }
    }
}
