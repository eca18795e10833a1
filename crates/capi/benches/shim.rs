//! Cost of the OpenMP shim on the worst case for it: a program that runs
//! 100 000 tiny parallel regions (benches/fine_grained.c, gcc + libgomp).
//!
//! Run: `cargo bench -p allot-capi --bench shim`
//! (`ALLOT_BENCH_REGIONS`, `ALLOT_BENCH_RUNS` override 100000 and 7).
//!
//! Each configuration runs `RUNS` times, interleaved round by round so that
//! background load hits all of them alike; the table gives the median wall
//! time of the whole process (start-up included) and its ratio to the
//! baseline without the shim.

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

struct Config {
    name: &'static str,
    omp_num_threads: u32,
    preload: bool,
    grant: Option<u32>,
    /// Index of the configuration it is compared with.
    baseline: usize,
}

const CONFIGS: &[Config] = &[
    Config {
        name: "no shim, OMP_NUM_THREADS=2",
        omp_num_threads: 2,
        preload: false,
        grant: None,
        baseline: 0,
    },
    Config {
        name: "shim, no page (inert)",
        omp_num_threads: 2,
        preload: true,
        grant: None,
        baseline: 0,
    },
    Config {
        name: "shim, page, grant 2 (active, no cap)",
        omp_num_threads: 2,
        preload: true,
        grant: Some(2),
        baseline: 0,
    },
    Config {
        name: "no shim, OMP_NUM_THREADS=1",
        omp_num_threads: 1,
        preload: false,
        grant: None,
        baseline: 3,
    },
    Config {
        name: "shim, no page, OMP_NUM_THREADS=1",
        omp_num_threads: 1,
        preload: true,
        grant: None,
        baseline: 3,
    },
    Config {
        name: "shim, page, grant 1 (capped 2 -> 1)",
        omp_num_threads: 2,
        preload: true,
        grant: Some(1),
        baseline: 3,
    },
];

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    // `cargo test --benches` runs this with `--bench` absent: stay quick.
    if !std::env::args().any(|a| a == "--bench") {
        println!("shim bench: run with `cargo bench -p allot-capi --bench shim`");
        return;
    }
    let regions = env_or("ALLOT_BENCH_REGIONS", 100_000);
    let runs = env_or("ALLOT_BENCH_RUNS", 7) as usize;
    let bin = compile(
        "gcc",
        "benches/fine_grained.c",
        "fine_grained",
        &["-fopenmp"],
    )
    .unwrap();
    let pages: Vec<Option<Page>> = CONFIGS.iter().map(|c| c.grant.map(Page::new)).collect();

    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); CONFIGS.len()];
    for round in 0..runs {
        for k in 0..CONFIGS.len() {
            let i = (k + round) % CONFIGS.len();
            let c = &CONFIGS[i];
            let mut cmd = Command::new(&bin);
            cmd.arg(regions.to_string())
                .env("OMP_NUM_THREADS", c.omp_num_threads.to_string())
                .env_remove("LD_PRELOAD")
                .env_remove("ALLOT_GRANT_FD")
                .stdout(Stdio::null());
            if c.preload {
                cmd.env("LD_PRELOAD", shim());
            }
            if let Some(p) = &pages[i] {
                inherit_page(&mut cmd, p.fd());
            }
            let t = Instant::now();
            let status = cmd.status().unwrap();
            times[i].push(t.elapsed());
            assert!(status.success(), "{} failed", c.name);
        }
    }

    let median = |v: &Vec<Duration>| {
        let mut v = v.clone();
        v.sort();
        v[v.len() / 2]
    };
    let medians: Vec<Duration> = times.iter().map(median).collect();
    println!("{regions} parallel regions, median of {runs} runs (wall time, whole process):");
    println!(
        "{:<40} {:>10} {:>10} {:>8}",
        "configuration", "median ms", "us/region", "ratio"
    );
    for (i, c) in CONFIGS.iter().enumerate() {
        let m = medians[i];
        println!(
            "{:<40} {:>10.1} {:>10.3} {:>8.3}  (vs \"{}\")",
            c.name,
            m.as_secs_f64() * 1e3,
            m.as_secs_f64() * 1e6 / regions as f64,
            m.as_secs_f64() / medians[c.baseline].as_secs_f64(),
            CONFIGS[c.baseline].name
        );
    }
}
