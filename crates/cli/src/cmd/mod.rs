//! Subcommands. Each `run` returns the exit code and prints its own errors.

pub mod channel;
pub mod daemon;
pub mod generate;
pub mod lab;
pub mod status;
pub mod top;
pub mod topology;

/// Prints `err` with its causes as `allot: …` and returns exit code 1.
pub fn fail(err: anyhow::Error) -> i32 {
    eprintln!("allot: {err:#}");
    1
}
