//! `allot`: share one Linux machine well between parallel programs.
//!
//! Thin front end: each subcommand lives in `cmd/` and returns the process
//! exit code.

mod bench;
mod cmd;
mod run;

use clap::{CommandFactory, Parser, Subcommand};

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
    /// Run a program in a cell: confined to the CPUs the broker grants it,
    /// with thread-count variables, a jobserver and the OpenMP shim.
    Run(run::Args),
    /// Run the broker (allotd) in the foreground.
    Daemon(cmd::daemon::Args),
    /// Show the broker's cells and grants.
    Status(cmd::status::Args),
    /// Watch the broker's cells, CPUs and queue live (q quits).
    Top(cmd::top::Args),
    /// Show the machine's CPUs, cores, caches and NUMA nodes.
    Topology(cmd::topology::Args),
    /// Send or receive on a named channel (lines of text).
    Channel(cmd::channel::Args),
    /// Show, in under two minutes, what allot does for co-running programs.
    Demo(cmd::demo::Args),
    /// Experiments that check allot's claims on this machine.
    #[command(subcommand)]
    Bench(bench::Bench),
    /// Write shell completions to standard output.
    Completions(cmd::generate::CompletionsArgs),
    /// Write man pages for every command into a directory.
    Man(cmd::generate::ManArgs),
    /// Write the OpenMP shim (liballot_shim.so) into a directory, for
    /// launchers other than `allot run` (the Slurm plugin: docs/slurm.md).
    Shim(cmd::generate::ShimArgs),
    /// Run one of allot's workloads (for experiments).
    #[command(hide = true)]
    Workload(cmd::workload::Args),
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
        Command::Demo(a) => cmd::demo::run(a),
        Command::Bench(b) => bench::run(b),
        Command::Completions(a) => cmd::generate::completions(a, Cli::command()),
        Command::Man(a) => cmd::generate::man(a, Cli::command()),
        Command::Shim(a) => cmd::generate::shim(a),
        Command::Workload(a) => cmd::workload::run(a),
    };
    std::process::exit(code);
}
