//! `allot demo` and `allot bench …`: handed over to `allot-lab`.
//!
//! The demo and the experiments live in a binary of their own so that
//! `allot` carries none of their code (workloads, charts, soaks). `allot`
//! finds `allot-lab` beside itself, else on `PATH`, and replaces itself
//! with it, passing the subcommand and its arguments on unchanged and
//! naming itself in `ALLOT_BIN`, so the lab runs the very `allot` it was
//! handed over from.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

/// The lab's binary name.
const LAB: &str = "allot-lab";

/// Arguments handed to `allot-lab` unchanged (`--help` included).
#[derive(Debug, clap::Args)]
pub struct Args {
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "ARGS"
    )]
    args: Vec<OsString>,
}

/// Where `allot-lab` is: beside `me`, else the first on `path`.
fn find(me: Option<PathBuf>, path: Option<OsString>) -> Option<PathBuf> {
    let beside = me.map(|m| m.with_file_name(LAB));
    let on_path = path
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(LAB));
    beside.into_iter().chain(on_path).find(|p| p.is_file())
}

/// Replaces this process with `allot-lab SUBCOMMAND ARGS…`; returns only
/// when that cannot be done (exit code 1 after a clear message).
pub fn hand_over(subcommand: &str, a: Args) -> i32 {
    let me = std::env::current_exe().ok();
    let Some(lab) = find(me.clone(), std::env::var_os("PATH")) else {
        eprintln!(
            "allot: `allot {subcommand}` runs {LAB}, which is neither beside this allot nor on \
             PATH; build both with `cargo build --release -p allot-cli -p allot-lab` \
             (target/release/{LAB}) or install it beside allot"
        );
        return 1;
    };
    let mut cmd = std::process::Command::new(&lab);
    cmd.arg(subcommand).args(&a.args);
    if let Some(me) = me {
        cmd.env(allot_proto::env::BIN, me);
    }
    let err = cmd.exec();
    eprintln!("allot: cannot run {}: {err}", lab.display());
    1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_beside_allot_wins_over_path() {
        let beside = tempfile::tempdir().unwrap();
        let on_path = tempfile::tempdir().unwrap();
        std::fs::write(on_path.path().join(LAB), "").unwrap();
        let me = beside.path().join("allot");
        let path = Some(on_path.path().as_os_str().to_owned());
        assert_eq!(
            find(Some(me.clone()), path.clone()),
            Some(on_path.path().join(LAB))
        );
        std::fs::write(beside.path().join(LAB), "").unwrap();
        assert_eq!(find(Some(me), path), Some(beside.path().join(LAB)));
        assert_eq!(find(None, None), None);
    }
}
