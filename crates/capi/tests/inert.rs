//! The shim must load into any dynamically linked program and never break
//! it: common tools run with it preloaded, in a cell or not, exactly as
//! without it.

mod common;

use common::*;
use std::process::{Command, Output};

fn tool(argv: &[&str]) -> Command {
    let mut cmd = Command::new(argv[0]);
    cmd.args(&argv[1..])
        .env_remove("LD_PRELOAD")
        .env_remove("ALLOT_GRANT_FD")
        .env_remove("ALLOT_SHIM_DEBUG");
    cmd
}

fn check(argv: &[&str]) {
    let plain: Output = tool(argv).output().unwrap();
    assert!(
        plain.status.success(),
        "{argv:?} fails even without the shim"
    );

    let page = Page::new(1);
    for in_cell in [false, true] {
        let mut cmd = tool(argv);
        cmd.env("LD_PRELOAD", shim());
        if in_cell {
            inherit_page(&mut cmd, page.fd());
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "{argv:?} (in a cell: {in_cell}) failed: {stderr}"
        );
        assert_eq!(
            out.stdout, plain.stdout,
            "{argv:?} (in a cell: {in_cell}) printed otherwise"
        );
        assert_eq!(
            out.stderr, plain.stderr,
            "{argv:?} (in a cell: {in_cell}): {stderr}"
        );
    }
}

#[test]
fn ls_runs_unchanged() {
    check(&["ls", "/"]);
    check(&["ls", "-l", "/bin/sh"]);
}

#[test]
fn sh_runs_unchanged() {
    check(&["sh", "-c", "true"]);
    check(&["sh", "-c", "echo $((6 * 7)); ls / >/dev/null"]);
}

#[test]
fn python_runs_unchanged() {
    check(&["python3", "-c", "print(1)"]);
    check(&[
        "python3",
        "-c",
        "import ctypes, json, ssl, threading; print(json.dumps([1]))",
    ]);
}

#[test]
fn make_runs_unchanged() {
    check(&["make", "--version"]);
}

/// Outside a cell an OpenMP program runs the teams it would run without
/// the shim, through every entry point.
#[test]
fn openmp_teams_unchanged_without_a_page() {
    let bin = teamsize(Toolchain::Gcc).unwrap();
    let mut plain = tool(&[bin.to_str().unwrap(), "once", "0", "0"]);
    plain.env("OMP_NUM_THREADS", "2");
    let (without, _) = run(&mut plain);
    let mut cmd = Command::new(&bin);
    cmd.args(["once", "0", "0"]);
    with_shim(&mut cmd, 2);
    let (with, stderr) = run(&mut cmd);
    assert!(stderr.is_empty(), "{stderr}");
    with.assert_complete();
    assert_eq!(with.teams(), without.teams());
}
