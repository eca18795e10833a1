//! `allot`: share one Linux machine well between parallel programs.
//!
//! Thin front end: each subcommand lives in `cmd/` and returns the process
//! exit code.

mod cmd;

use clap::{Parser, Subcommand};

/// Share one machine's CPUs between parallel programs without
/// oversubscribing it.
#[derive(Debug, Parser)]
#[command(name = "allot", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the broker (allotd) in the foreground.
    Daemon(cmd::daemon::Args),
    /// Show the broker's cells and grants.
    Status(cmd::status::Args),
    /// Show the machine's CPUs, cores, caches and NUMA nodes.
    Topology(cmd::topology::Args),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Topology(a) => cmd::topology::run(a),
    };
    std::process::exit(code);
}
