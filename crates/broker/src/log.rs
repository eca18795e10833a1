//! Minimal leveled logging to stderr for the broker process.
//!
//! The broker is a daemon with one output stream; lines carry a timestamp
//! (seconds since the broker started) and a level. `ALLOT_LOG=debug`
//! enables debug lines.

use std::sync::OnceLock;
use std::time::Instant;

fn start() -> Instant {
    static T: OnceLock<Instant> = OnceLock::new();
    *T.get_or_init(Instant::now)
}

/// Whether debug lines are printed.
pub fn debug_enabled() -> bool {
    static D: OnceLock<bool> = OnceLock::new();
    *D.get_or_init(|| std::env::var("ALLOT_LOG").is_ok_and(|v| v == "debug"))
}

/// Prints one line.
pub fn line(level: &str, msg: std::fmt::Arguments<'_>) {
    let t = start().elapsed().as_secs_f64();
    eprintln!("allotd [{t:9.3}] {level}: {msg}");
}

/// `info!`-style macros.
#[macro_export]
macro_rules! info { ($($a:tt)*) => { $crate::log::line("info", format_args!($($a)*)) } }
/// Warning.
#[macro_export]
macro_rules! warn { ($($a:tt)*) => { $crate::log::line("warn", format_args!($($a)*)) } }
/// Debug (only with `ALLOT_LOG=debug`).
#[macro_export]
macro_rules! debug { ($($a:tt)*) => { if $crate::log::debug_enabled() { $crate::log::line("debug", format_args!($($a)*)) } } }
