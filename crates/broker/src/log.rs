//! The broker's log: [`allot_proto::log`]'s levels (`ALLOT_LOG`, default
//! `info` here), one line per event on stderr, prefixed with the seconds
//! since the broker started instead of a pid.
//!
//! Under systemd, stderr is a stream to the journal, which says so in
//! `JOURNAL_STREAM` (its device and inode). Then each line starts with
//! the journal's own priority prefix (`<3>` error, `<4>` warning, `<6>`
//! info, `<7>` debug; sd-daemon(3)), so `journalctl -p warning` finds the
//! broker's warnings without a logging library in between.

use allot_proto::log::Level;
use std::sync::OnceLock;
use std::time::Instant;

fn start() -> Instant {
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

/// Whether lines at `level` are printed (`ALLOT_LOG`, default `info`).
pub fn enabled(level: Level) -> bool {
    allot_proto::log::enabled(level, Level::Info)
}

/// Whether debug lines are printed.
pub fn debug_enabled() -> bool {
    enabled(Level::Debug)
}

/// The journal's priority prefix of `level` (syslog's numbers).
pub fn priority(level: Level) -> &'static str {
    match level {
        Level::Error => "<3>",
        Level::Warn => "<4>",
        Level::Info => "<6>",
        Level::Debug => "<7>",
    }
}

/// Whether `journal_stream` (`JOURNAL_STREAM`, `DEVICE:INODE`) names the
/// file `stderr` is (its device and inode).
pub fn is_journal(journal_stream: Option<&str>, stderr: Option<(u64, u64)>) -> bool {
    let (Some(v), Some((dev, ino))) = (journal_stream, stderr) else {
        return false;
    };
    v.split_once(':')
        .is_some_and(|(d, i)| d.parse() == Ok(dev) && i.parse() == Ok(ino))
}

/// Whether this process's stderr goes to the journal (decided once).
fn to_journal() -> bool {
    static J: OnceLock<bool> = OnceLock::new();
    *J.get_or_init(|| {
        let stderr = rustix::fs::fstat(rustix::stdio::stderr())
            .ok()
            .map(|st| (st.st_dev, st.st_ino));
        is_journal(std::env::var("JOURNAL_STREAM").ok().as_deref(), stderr)
    })
}

/// Prints one line at `level` if enabled.
pub fn line(level: Level, msg: std::fmt::Arguments<'_>) {
    if enabled(level) {
        let t = start().elapsed().as_secs_f64();
        let prefix = if to_journal() { priority(level) } else { "" };
        // Formatted whole, then written at once: stderr is unbuffered, and
        // `eprintln!` would make a system call of every piece.
        let text = format!("{prefix}allotd [{t:9.3}] {}: {msg}\n", level.as_str());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
    }
}

/// `info!`-style macros, imported as `use crate::log::{info, warn}`.
macro_rules! info { ($($a:tt)*) => { $crate::log::line(allot_proto::log::Level::Info, format_args!($($a)*)) } }
/// Warning.
macro_rules! warning { ($($a:tt)*) => { $crate::log::line(allot_proto::log::Level::Warn, format_args!($($a)*)) } }
/// Debug (only with `ALLOT_LOG=debug`).
macro_rules! debug { ($($a:tt)*) => { if $crate::log::debug_enabled() { $crate::log::line(allot_proto::log::Level::Debug, format_args!($($a)*)) } } }
// `warn` is also a built-in attribute's name: defined as `warning`.
pub(crate) use {debug, info, warning as warn};

/// Lets a repeated message through at most once per interval and counts
/// what it held back (a client flood or a resource shortage must not turn
/// into a log flood).
#[derive(Debug)]
pub struct Throttle {
    every: std::time::Duration,
    last: Option<Instant>,
    held: u64,
}

impl Throttle {
    /// At most one message per `every`.
    pub const fn new(every: std::time::Duration) -> Throttle {
        Throttle {
            every,
            last: None,
            held: 0,
        }
    }

    /// `Some(n)` when a message may be printed now, `n` being how many were
    /// held back since the last one; `None` to hold this one back.
    pub fn allow(&mut self, now: Instant) -> Option<u64> {
        match self.last {
            Some(t) if now.duration_since(t) < self.every => {
                self.held += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.held))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_journal_is_recognised_by_device_and_inode() {
        assert!(is_journal(Some("8:12345"), Some((8, 12345))));
        assert!(
            !is_journal(Some("8:12345"), Some((8, 12346))),
            "another file"
        );
        assert!(!is_journal(Some("8:12345"), None));
        assert!(!is_journal(None, Some((8, 12345))));
        assert!(!is_journal(Some("garbage"), Some((8, 12345))));
        assert_eq!(priority(Level::Warn), "<4>");
        assert_eq!(priority(Level::Error), "<3>");
    }

    #[test]
    fn throttle_lets_one_through_per_interval_and_counts_the_rest() {
        let t0 = Instant::now();
        let mut t = Throttle::new(Duration::from_secs(1));
        assert_eq!(t.allow(t0), Some(0));
        assert_eq!(t.allow(t0 + Duration::from_millis(10)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(20)), None);
        assert_eq!(t.allow(t0 + Duration::from_millis(1001)), Some(2));
    }
}
