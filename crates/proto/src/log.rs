//! One logging facade for allot's Rust components: the broker, the client
//! library (and so `require` and the C ABI built on it) and the runtime.
//!
//! Lines go to standard error as `<component>[<pid>] <level>: <message>`
//! (the broker, a daemon, prefixes its own lines with its uptime instead
//! of a pid). [`env::LOG`](crate::env::LOG) sets the level for every
//! component: `error`, `warn`, `info` or `debug`; unset or unknown, each
//! component uses its own default — `info` for the broker, whose log is
//! its record, and `warn` inside applications, which should hear from
//! allot only when something needs doing.
//!
//! A condition a component may meet over and over (a broker that stays
//! away while a client retries) is reported once per episode through
//! [`Once`], and says what to do.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};

/// Severity, most severe first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Something failed and was not recovered.
    Error,
    /// Something is wrong or degraded; the line says what to do.
    Warn,
    /// A decision or state change worth a line.
    Info,
    /// Every decision, routine ones included; `ALLOT_LOG=trace` selects it too.
    Debug,
}

impl Level {
    /// The name printed and accepted in [`env::LOG`](crate::env::LOG).
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    /// From a level name; `None` for anything else.
    pub fn parse(s: &str) -> Option<Level> {
        match s.trim().to_ascii_lowercase().as_str() {
            "error" => Some(Level::Error),
            "warn" | "warning" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" | "trace" => Some(Level::Debug),
            _ => None,
        }
    }
}

/// The level the environment sets, if it names one (read once).
pub fn configured() -> Option<Level> {
    static L: OnceLock<Option<Level>> = OnceLock::new();
    *L.get_or_init(|| {
        std::env::var(crate::env::LOG)
            .ok()
            .and_then(|v| Level::parse(&v))
    })
}

/// Whether a line at `level` is printed by a component whose default is
/// `default`.
pub fn enabled(level: Level, default: Level) -> bool {
    level <= configured().unwrap_or(default)
}

/// Prints one line for `component` (no level check: see [`enabled`]).
pub fn line(component: &str, level: Level, msg: std::fmt::Arguments<'_>) {
    eprintln!(
        "{component}[{}] {}: {msg}",
        std::process::id(),
        level.as_str()
    );
}

/// Logs at most once until [`Once::reset`]: one line per episode of a
/// condition that repeats (each retry of a reconnect loop).
#[derive(Debug, Default)]
pub struct Once(AtomicBool);

impl Once {
    /// A fresh episode.
    pub const fn new() -> Once {
        Once(AtomicBool::new(false))
    }

    /// True the first time after creation or a reset.
    pub fn first(&self) -> bool {
        !self.0.swap(true, Ordering::AcqRel)
    }

    /// The condition ended: the next occurrence is logged again.
    pub fn reset(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// Logs for an application-side component (default level `warn`):
/// `allot_proto::app_log!(Warn, "allot-client", "…{}", x)`.
#[macro_export]
macro_rules! app_log {
    ($level:ident, $component:expr, $($a:tt)*) => {
        if $crate::log::enabled($crate::log::Level::$level, $crate::log::Level::Warn) {
            $crate::log::line($component, $crate::log::Level::$level, format_args!($($a)*))
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels_parse_and_order() {
        assert_eq!(Level::parse("DEBUG"), Some(Level::Debug));
        assert_eq!(Level::parse(" warning "), Some(Level::Warn));
        assert_eq!(Level::parse("verbose"), None);
        assert!(Level::Error < Level::Warn && Level::Info < Level::Debug);
        for l in [Level::Error, Level::Warn, Level::Info, Level::Debug] {
            assert_eq!(Level::parse(l.as_str()), Some(l));
        }
    }

    #[test]
    fn once_logs_once_per_episode() {
        let o = Once::new();
        assert!(o.first());
        assert!(!o.first());
        o.reset();
        assert!(o.first());
    }
}
