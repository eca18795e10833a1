//! What the C case-study benches (`benches/qr.rs`, `benches/join.rs`)
//! share: building a program twice (against liballot, and without it),
//! running variants in rotating order with a clean environment, reading
//! their `result key=value …` lines, and medians. The test
//! `tests/case_studies.rs` includes it too, for its short runs.
#![allow(dead_code)]

#[path = "../../tests/support/liballot.rs"]
mod liballot;

pub use liballot::run_stdout;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// OpenMP, preload and allot variables removed from every run's
/// environment: each variant runs with libgomp's defaults.
const SCRUBBED_ENV: [&str; 14] = [
    "OMP_NUM_THREADS",
    "OMP_DYNAMIC",
    "OMP_PROC_BIND",
    "OMP_PLACES",
    "OMP_WAIT_POLICY",
    "OMP_THREAD_LIMIT",
    "OMP_MAX_ACTIVE_LEVELS",
    "GOMP_SPINCOUNT",
    "GOMP_CPU_AFFINITY",
    "LD_PRELOAD",
    "ALLOT_CELL",
    "ALLOT_GRANT_FD",
    "ALLOT_SOCKET",
    "ALLOT_THROTTLE_CGROUP",
];

/// A C program built twice.
pub struct Programs {
    /// Built with `-D<define>` against liballot.
    pub with_allot: PathBuf,
    /// Built without it: nothing of allot is loaded.
    pub plain: PathBuf,
}

/// Builds `benches/c/<name>.c` with gcc (`-O2 -fopenmp -pthread`, warnings
/// as errors) into `<target tmp>/<name>/`, with and without `define`.
/// `dir` names the build directory (benches and tests use their own).
pub fn build(name: &str, define: &str, dir: &str) -> Programs {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join(dir);
    let prefix = work.join("prefix");
    liballot::install(&prefix);
    let src = crate_dir.join(format!("benches/c/{name}.c"));
    let gcc = |out: &Path| {
        let mut c = Command::new("gcc");
        c.args([
            "-std=c11", "-O2", "-fopenmp", "-pthread", "-Wall", "-Wextra", "-Werror",
        ])
        .arg(&src)
        .arg("-o")
        .arg(out);
        c
    };
    let with_allot = work.join(name);
    run_stdout(
        gcc(&with_allot)
            .arg(format!("-D{define}"))
            .arg(format!("-I{}", prefix.join("include").display()))
            .arg(format!("-L{}", prefix.join("lib").display()))
            .arg("-lallot")
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-lm"),
    );
    let plain = work.join(format!("{name}_plain"));
    run_stdout(gcc(&plain).arg("-lm"));
    Programs { with_allot, plain }
}

/// Runs `program args` with the scrubbed environment; its stdout.
pub fn run(program: &Path, args: &[String]) -> String {
    let mut c = Command::new(program);
    c.args(args);
    for k in SCRUBBED_ENV {
        c.env_remove(k);
    }
    run_stdout(&mut c)
}

/// `key=value` fields of the first line of `out` starting with `tag`.
pub fn fields(out: &str, tag: &str) -> BTreeMap<String, String> {
    let line = out
        .lines()
        .find(|l| l.starts_with(tag))
        .unwrap_or_else(|| panic!("no {tag:?} line in:\n{out}"));
    line.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Field `key` of `f` as a number.
pub fn num(f: &BTreeMap<String, String>, key: &str) -> f64 {
    f.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number {key} in {f:?}"))
}

/// The median of `v` (the mean of the middle two for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Runs `rounds` rounds of every variant, the order rotating by one each
/// round, through `run_one(variant index)`; the values by variant.
pub fn rounds(
    variants: usize,
    rounds: usize,
    mut run_one: impl FnMut(usize) -> f64,
) -> Vec<Vec<f64>> {
    let mut out = vec![Vec::new(); variants];
    for r in 0..rounds {
        for k in 0..variants {
            let v = (k + r) % variants;
            out[v].push(run_one(v));
        }
        eprintln!("round {}/{rounds} done", r + 1);
    }
    out
}

/// Whether this binary runs as a benchmark (`cargo bench` passes
/// `--bench`) rather than as a build check (`cargo test --benches`), and
/// the other arguments.
pub fn args() -> (bool, Vec<String>) {
    let mut bench = false;
    let mut rest = Vec::new();
    for a in std::env::args().skip(1) {
        if a == "--bench" {
            bench = true;
        } else {
            rest.push(a);
        }
    }
    (bench, rest)
}
