//! `allot`: share one Linux machine well between parallel programs.
//!
//! Thin front end: each subcommand lives in `cmd/` and returns the process
//! exit code.

mod cmd;
mod run;

use clap::{CommandFactory, Parser, Subcommand};

/// Share one machine's CPUs between parallel programs without
/// oversubscribing it.
#[derive(Debug, Parser)]
#[command(
    name = "allot",
    version,
    long_about = None,
    propagate_version = true,
    after_help = cmd::manual::TOP_EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a program in a cell: confined to the CPUs the broker grants it,
    /// with thread-count variables, a jobserver and the OpenMP shim.
    #[command(after_help = cmd::manual::RUN_EXAMPLES)]
    Run(run::Args),
    /// Run the broker (allotd) in the foreground.
    #[command(after_help = cmd::manual::DAEMON_EXAMPLES)]
    Daemon(cmd::daemon::Args),
    /// Show the broker's cells and grants.
    Status(cmd::status::Args),
    /// Watch the broker's cells, CPUs and queue live (q quits).
    Top(cmd::top::Args),
    /// Show the machine's CPUs, cores, caches and NUMA nodes.
    Topology(cmd::topology::Args),
    /// Send or receive on a named channel (lines of text).
    Channel(cmd::channel::Args),
    /// Show, in under two minutes, what allot does for co-running programs
    /// (runs `allot-lab demo`).
    #[command(disable_help_flag = true)]
    Demo(cmd::lab::Args),
    /// Experiments that check allot's claims on this machine (runs
    /// `allot-lab bench`; `allot bench --help` lists them).
    #[command(disable_help_flag = true)]
    Bench(cmd::lab::Args),
    /// Write shell completions to standard output.
    Completions(cmd::generate::CompletionsArgs),
    /// Write man pages for every command into a directory.
    Man(cmd::generate::ManArgs),
    /// Write the OpenMP shim (liballot_shim.so) into a directory, for
    /// launchers other than `allot run` (the Slurm plugin: docs/slurm.md).
    Shim(cmd::generate::ShimArgs),
}

fn main() {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Run(a) => run::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Status(a) => cmd::status::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Topology(a) => cmd::topology::run(a),
        Command::Channel(a) => cmd::channel::run(a),
        Command::Demo(a) => cmd::lab::hand_over("demo", a),
        Command::Bench(a) => cmd::lab::hand_over("bench", a),
        Command::Completions(a) => cmd::generate::completions(a, Cli::command()),
        Command::Man(a) => cmd::generate::man(a, Cli::command()),
        Command::Shim(a) => cmd::generate::shim(a),
    };
    std::process::exit(code);
}
