//! Running build steps, installing this build's liballot and compiling C
//! against it: shared by the C tests (`tests/c_abi.rs`, `tests/c_require.rs`,
//! `tests/image_server.rs`, `tests/handoff.rs`) and the C benches
//! (`benches/pfor.rs`, `benches/require.rs`, `benches/image_server.rs`),
//! which include this file with `#[path]`.
//!
//! The library is the one cargo built for the running test or bench (the
//! `cdylib` and `staticlib` of this crate, beside its binary in `deps/`):
//! no nested cargo build, which would wait for the build lock the run
//! holds.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs `cmd`; panics with its output unless it succeeds.
#[track_caller]
pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`run`], returning the standard output as text.
#[track_caller]
pub fn run_stdout(cmd: &mut Command) -> String {
    String::from_utf8(run(cmd).stdout).unwrap()
}

/// The repository's root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding the libraries cargo built for this run: the
/// running binary's own directory, `target/<profile>/deps`. (cargo copies
/// them up to `target/<profile>` only when the library itself was asked
/// for, as by `cargo build`, so the copies there may be stale.)
pub fn artifacts() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().to_path_buf()
}

/// `gcc` compiling the C file `src` into `exe` against the liballot
/// installed in `prefix` (its headers, the library and its run path), C11,
/// `-O2`, warnings as errors, with `extra` flags (`-fopenmp`).
pub fn gcc_against(prefix: &Path, src: &Path, exe: &Path, extra: &[&str]) -> Command {
    let mut c = Command::new("gcc");
    c.args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .args(extra)
        .arg(format!("-I{}", prefix.join("include").display()))
        .arg(src)
        .arg("-o")
        .arg(exe)
        .arg(format!("-L{}", prefix.join("lib").display()))
        .arg("-lallot")
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()));
    c
}

/// Installs this build's liballot into `prefix` with
/// `scripts/install-liballot.sh --from` [`artifacts`]. The script is
/// idempotent and replaces files atomically.
#[track_caller]
pub fn install(prefix: &Path) {
    run(Command::new("bash")
        .arg(repo().join("scripts/install-liballot.sh"))
        .arg("--from")
        .arg(artifacts())
        .arg(prefix));
}
