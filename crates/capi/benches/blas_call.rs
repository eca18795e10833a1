//! Cost per BLAS call of following the grant (shim/follow.c, omp.c).
//!
//! Run: `cargo bench -p allot-capi --bench blas_call`
//! (`ALLOT_BENCH_RUNS` overrides 7).
//!
//! benches/blas_calls.c loads a BLAS with dlopen, as Python does, and times
//! back-to-back dgemm calls: 4×4 (about 0.1 µs, where any per-call cost
//! would show) and 64×64 (large enough for OpenBLAS to thread it). For each
//! library and size, the shim with a grant page is compared with the same
//! library told the same count statically, without the shim:
//!
//! - OpenBLAS (pthreads): the follower sets the count when the grant
//!   changes; nothing is checked per call.
//! - OpenBLAS (OpenMP): the library asks `omp_get_max_threads()` at each
//!   threaded call, which the shim answers with the grant.
//!
//! Configurations run interleaved round by round; the table gives the
//! median ns per call and its ratio to the static baseline.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::path::Path;
use std::process::Command;

const PTHREAD: &str = "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0";
const OPENMP: &str = "/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0";

struct Config {
    lib: &'static str,
    size: u32,
    /// The library's thread-count variable.
    threads: u32,
    /// A grant page with this many threads, and the shim.
    grant: Option<u32>,
    /// Index of the configuration it is compared with.
    baseline: usize,
}

fn configs() -> Vec<Config> {
    let mut out = Vec::new();
    for lib in [PTHREAD, OPENMP] {
        for size in [4, 64] {
            for threads in [1, 2] {
                let base = out.len();
                out.push(Config {
                    lib,
                    size,
                    threads,
                    grant: None,
                    baseline: base,
                });
                // Started for the whole machine, following a grant of
                // `threads`.
                out.push(Config {
                    lib,
                    size,
                    threads: 2,
                    grant: Some(threads),
                    baseline: base,
                });
            }
        }
    }
    out
}

fn name(c: &Config) -> String {
    let lib = if c.lib == PTHREAD {
        "pthreads"
    } else {
        "OpenMP"
    };
    match c.grant {
        None => format!("{lib} {0}x{0}: no shim, {1} thread(s)", c.size, c.threads),
        Some(g) => format!("{lib} {0}x{0}: shim, grant {g}", c.size),
    }
}

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("blas_call bench: run with `cargo bench -p allot-capi --bench blas_call`");
        return;
    }
    for lib in [PTHREAD, OPENMP] {
        assert!(
            Path::new(lib).exists(),
            "{lib} is missing: apt-get install libopenblas0-pthread libopenblas0-openmp"
        );
    }
    let runs: usize = std::env::var("ALLOT_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7);
    let bin = compile("gcc", "benches/blas_calls.c", "blas_calls", &["-ldl"]).unwrap();
    let configs = configs();
    let pages: Vec<Option<Page>> = configs.iter().map(|c| c.grant.map(Page::new)).collect();
    let mut ns: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    for round in 0..runs {
        for k in 0..configs.len() {
            let i = (k + round) % configs.len();
            let c = &configs[i];
            let calls = if c.size == 4 { 1_000_000 } else { 20_000 };
            let mut cmd = Command::new(&bin);
            cmd.arg(c.lib)
                .arg(calls.to_string())
                .arg(c.size.to_string())
                .env_remove("LD_PRELOAD")
                .env_remove("ALLOT_GRANT_FD")
                .env("OMP_NUM_THREADS", c.threads.to_string())
                .env("OPENBLAS_NUM_THREADS", c.threads.to_string());
            if let Some(p) = &pages[i] {
                cmd.env("LD_PRELOAD", shim());
                inherit_page(&mut cmd, p.fd());
            }
            let out = cmd.output().unwrap();
            assert!(out.status.success(), "{} failed", name(c));
            let text = String::from_utf8_lossy(&out.stdout);
            let v: f64 = text
                .split_whitespace()
                .nth(1)
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{}: unexpected output {text:?}", name(c)));
            ns[i].push(v);
        }
    }
    let median = |v: &Vec<f64>| {
        let mut v = v.clone();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = ns.iter().map(median).collect();
    println!("dgemm calls, median of {runs} runs (ns per call, the loop only):");
    println!("{:<44} {:>12} {:>8}", "configuration", "ns/call", "ratio");
    for (i, c) in configs.iter().enumerate() {
        println!(
            "{:<44} {:>12.1} {:>8.3}",
            name(c),
            medians[i],
            medians[i] / medians[c.baseline]
        );
    }
}
