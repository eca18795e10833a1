//! `allot-lab`: the experiments that check allot's claims, apart from the
//! product.
//!
//! The `allot` binary runs programs in cells, runs the broker and shows its
//! state; it carries no workload, chart or experiment code. Everything that
//! measures allot lives here and is built into a second binary,
//! `allot-lab`, installed beside `allot`:
//!
//! - `allot-lab demo`: what allot does for co-running programs, in under
//!   two minutes (`demo.rs`);
//! - `allot-lab bench …`: the mix experiment, the chaos and load soaks,
//!   launch and noise measurements, the upload case study, and the
//!   helpers the time and goal tests run inside cells (`bench/`);
//! - `allot-lab workload`: one of the C workloads, on OpenMP or on allot's
//!   runtime (`workload.rs`).
//!
//! `allot demo` and `allot bench …` hand over to this binary (`allot`
//! finds it beside itself or on `PATH`), so the commands people know keep
//! working. The lab in turn runs the product as a separate program — the
//! `allot` beside it ([`product`]) — so what it measures is exactly what a
//! user runs.

pub mod bench;
mod demo;
mod workload;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Experiments that check allot's claims on this machine.
#[derive(Debug, Parser)]
#[command(name = "allot-lab", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show, in under two minutes, what allot does for co-running programs.
    Demo(demo::Args),
    /// Experiments that check allot's claims on this machine.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Run one of allot's workloads (on OpenMP or on allot's runtime).
    Workload(workload::Args),
}

/// Runs `allot-lab` with the process's arguments; returns the exit code.
pub fn main() -> i32 {
    use clap::{CommandFactory, FromArgMatches};
    let mut cmd = Cli::command();
    // Handed over from `allot demo` or `allot bench` (which name
    // themselves in ALLOT_BIN): usage and help say `allot`, what the user
    // typed.
    if std::env::var_os(allot_proto::env::BIN).is_some() {
        cmd = cmd.name("allot").bin_name("allot");
    }
    let cli = Cli::from_arg_matches(&cmd.get_matches()).unwrap_or_else(|e| e.exit());
    match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Bench(b) => bench::run(b),
        Command::Workload(a) => workload::run(a),
    }
}

/// The `allot` binary the experiments run: `$ALLOT_BIN`, else the `allot`
/// installed beside this program.
pub fn product() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(allot_proto::env::BIN) {
        return Ok(PathBuf::from(p));
    }
    let me = lab()?;
    let beside = me.with_file_name("allot");
    if beside.is_file() {
        Ok(beside)
    } else {
        Err(format!(
            "cannot find the allot binary beside {} (build both with \
             `cargo build --release -p allot-cli`, or name it in {})",
            me.display(),
            allot_proto::env::BIN
        ))
    }
}

/// This program (`allot-lab`), which the experiments also run for their
/// workloads and in-cell helpers.
pub fn lab() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("cannot find the allot-lab binary: {e}"))
}
