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

/// `allot run` alone: what every launch parses. Building every other
/// subcommand's arguments as well took a third of the binary's own start,
/// so [`main`] tries this first and falls back to [`Cli`] for anything
/// it does not accept (help, version, a mistake), whose words are then
/// the ones printed.
#[derive(Debug, Parser)]
#[command(
    name = "allot run",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct RunOnly {
    #[command(flatten)]
    args: run::Args,
}

/// The arguments after `allot run`, when the command line is a run.
fn run_only(args: &[std::ffi::OsString]) -> Option<run::Args> {
    let rest = args.get(2..).filter(|_| args[1] == "run")?;
    RunOnly::try_parse_from(rest).ok().map(|r| r.args)
}

fn main() {
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(a) = run_only(&argv) {
        std::process::exit(run::run(a));
    }
    let cli = Cli::parse_from(argv);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(line: &str) -> Vec<std::ffi::OsString> {
        line.split_whitespace().map(Into::into).collect()
    }

    /// The fast path reads a run exactly as the whole command line does.
    #[test]
    fn a_run_reads_the_same_alone_as_among_every_command() {
        RunOnly::command().debug_assert();
        for line in [
            "allot run true",
            "allot run -- make -j8",
            "allot run --min 2 --max 4 --name build -- make -j --help",
            "allot run --exclusive --timeline -- ls -l",
            "allot run --no-shim --no-tcm --wait sh -c x",
        ] {
            let alone = run_only(&argv(line)).unwrap_or_else(|| panic!("{line}"));
            let Command::Run(whole) = Cli::try_parse_from(argv(line)).unwrap().command else {
                panic!("{line}: not a run");
            };
            assert_eq!(format!("{alone:?}"), format!("{whole:?}"), "{line}");
        }
    }

    /// Help, the version, a mistake and every other command go to the
    /// whole parser, whose words are printed.
    #[test]
    fn what_the_fast_path_does_not_accept_goes_to_the_whole_parser() {
        for line in [
            "allot",
            "allot run",
            "allot run --help",
            "allot run -h",
            "allot run --version",
            "allot run --no-such-flag -- true",
            "allot run --min lots -- true",
            "allot status --json",
            "allot runx true",
        ] {
            assert!(run_only(&argv(line)).is_none(), "{line}");
        }
    }
}
