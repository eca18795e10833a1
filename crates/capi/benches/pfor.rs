//! Fine-grained parallel-for through the C ABI against OpenMP
//! (benches/c/pfor.c), plus the same loop on the Rust API for the cost of
//! the C layer.
//!
//! Run: `cargo bench -p allot-capi --bench pfor`
//! (`ALLOT_BENCH_N`, `ALLOT_BENCH_REPS`, `ALLOT_BENCH_ROUNDS` override
//! 100000 iterations, 2000 loops per process and 5 rounds).
//!
//! The C program is compiled with `gcc -O2 -fopenmp` against liballot as
//! `scripts/install-liballot.sh --from <this build>` installs it. Every
//! configuration runs in its own process, one process at a time (allot's
//! workers and OpenMP's threads both spin while idle: side by side they
//! would measure each other). Rounds interleave the configurations so that
//! background load hits all alike. Each process prints the median of its
//! loops; the table shows the median of those medians over the rounds.
//! OpenMP uses libgomp's defaults except its team size, set
//! (`OMP_NUM_THREADS`) to the allot pool's worker count.

#[path = "../tests/support/liballot.rs"]
mod liballot;

use liballot::run_stdout;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Installs this build's liballot and compiles pfor.c against it.
fn build_pfor() -> PathBuf {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pfor");
    let prefix = work.join("prefix");
    liballot::install(&prefix);
    let bin = work.join("pfor");
    run_stdout(&mut liballot::gcc_against(
        &prefix,
        &crate_dir.join("benches/c/pfor.c"),
        &bin,
        &["-fopenmp"],
    ));
    bin
}

#[derive(Clone, Copy)]
struct Config {
    name: &'static str,
    mode: &'static str,
    grain: usize,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The same loop on `allot_runtime::Pool` directly, in this process,
/// called from this thread or (`inside`) from a worker of the pool.
fn rust_reference(n: usize, grain: usize, reps: usize, inside: bool) -> f64 {
    let pool = allot_runtime::Pool::builder()
        .cell(allot_client::Cell::standalone())
        .build()
        .unwrap();
    let x: Vec<std::sync::atomic::AtomicU64> = (0..n)
        .map(|i| std::sync::atomic::AtomicU64::new((i as f64).to_bits()))
        .collect();
    let body = |r: std::ops::Range<usize>| {
        for v in &x[r] {
            let f = f64::from_bits(v.load(std::sync::atomic::Ordering::Relaxed));
            v.store(
                (f * 0.999 + 1.0).to_bits(),
                std::sync::atomic::Ordering::Relaxed,
            );
        }
    };
    let timed = || {
        let mut t = Vec::with_capacity(reps);
        for r in 0..reps + reps / 10 + 10 {
            let t0 = Instant::now();
            pool.for_each_chunk(0..n, grain, body);
            let dt = t0.elapsed();
            if r >= reps / 10 + 10 {
                t.push(dt.as_nanos() as f64);
            }
        }
        median(&mut t)
    };
    if inside { pool.install(timed) } else { timed() }
}

fn fmt_us(ns: f64) -> String {
    format!("{:.1} µs", ns / 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs benches as tests
    // with no such flag: then only check that everything builds and runs.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = env_or("ALLOT_BENCH_N", 100_000) as usize;
    let reps = if quick {
        20
    } else {
        env_or("ALLOT_BENCH_REPS", 2000) as usize
    };
    let rounds = if quick {
        1
    } else {
        env_or("ALLOT_BENCH_ROUNDS", 5) as usize
    };

    let bin = build_pfor();
    let no_broker = Path::new(env!("CARGO_TARGET_TMPDIR")).join("pfor/no-broker.sock");
    let workers: u32 = run_stdout(
        Command::new(&bin)
            .arg("workers")
            .env("ALLOT_SOCKET", &no_broker),
    )
    .trim()
    .parse()
    .unwrap();

    let grains = [64, 256, 1024];
    let mut configs = vec![
        Config {
            name: "sequential",
            mode: "seq",
            grain: 1,
        },
        Config {
            name: "OpenMP schedule(static)",
            mode: "omp-static",
            grain: 1,
        },
        Config {
            name: "allot_pool_parallel_for_static",
            mode: "allot-static",
            grain: 1,
        },
        Config {
            name: "allot_pool_parallel_for_static from a task",
            mode: "allot-static-inside",
            grain: 1,
        },
    ];
    /// Index in `configs` of the first per-grain configuration (after
    /// sequential, OpenMP static and the two allot static ones).
    const FIRST_PER_GRAIN: usize = 4;
    for g in grains {
        for (name, mode) in [
            ("allot_pool_parallel_for", "allot"),
            ("allot_pool_parallel_for from a task", "allot-inside"),
            ("OpenMP schedule(dynamic, grain)", "omp-dynamic"),
        ] {
            configs.push(Config {
                name,
                mode,
                grain: g,
            });
        }
    }

    let mut results: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    // Per grain: the Rust API called from this thread, and from a worker.
    let mut rust_outside: Vec<Vec<f64>> = vec![Vec::new(); grains.len()];
    let mut rust_inside: Vec<Vec<f64>> = vec![Vec::new(); grains.len()];
    let started = Instant::now();
    for _ in 0..rounds {
        for (i, c) in configs.iter().enumerate() {
            let out = run_stdout(
                Command::new(&bin)
                    .args([
                        c.mode,
                        &n.to_string(),
                        &c.grain.to_string(),
                        &reps.to_string(),
                    ])
                    .env("ALLOT_SOCKET", &no_broker)
                    .env("OMP_NUM_THREADS", workers.to_string())
                    .env_remove("OMP_WAIT_POLICY")
                    .env_remove("GOMP_SPINCOUNT")
                    .env_remove("OMP_PROC_BIND"),
            );
            let median_ns: f64 = out.split_whitespace().next().unwrap().parse().unwrap();
            results[i].push(median_ns);
        }
        // In this process, after the children exited: nothing else spins.
        for (k, &g) in grains.iter().enumerate() {
            rust_outside[k].push(rust_reference(n, g, reps, false));
            rust_inside[k].push(rust_reference(n, g, reps, true));
        }
    }
    let rust: Vec<(f64, f64)> = rust_outside
        .iter_mut()
        .zip(rust_inside.iter_mut())
        .map(|(o, i)| (median(o), median(i)))
        .collect();
    let elapsed = started.elapsed();

    let med: Vec<f64> = results.iter_mut().map(|r| median(r)).collect();
    println!(
        "\npfor: {n} iterations of `x[i] = x[i] * 0.999 + 1.0`, {workers} threads \
         (allot workers = OMP_NUM_THREADS), median over {rounds} round(s) of \
         per-process medians of {reps} loops ({:.0?})\n",
        Duration::from_secs(elapsed.as_secs())
    );
    println!(
        "| grain | allot C, called from main | allot C, called from a task | OpenMP dynamic | allot / OpenMP dynamic (main, task) | OpenMP static | allot (task) / OpenMP static | allot Rust API (main, worker) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let omp_static = med[1];
    for (k, g) in grains.iter().enumerate() {
        let outside = med[FIRST_PER_GRAIN + 3 * k];
        let inside = med[FIRST_PER_GRAIN + 1 + 3 * k];
        let dynamic = med[FIRST_PER_GRAIN + 2 + 3 * k];
        println!(
            "| {g} | {} | {} | {} | {:.2}, {:.2} | {} | {:.2} | {}, {} |",
            fmt_us(outside),
            fmt_us(inside),
            fmt_us(dynamic),
            outside / dynamic,
            inside / dynamic,
            fmt_us(omp_static),
            inside / omp_static,
            fmt_us(rust[k].0),
            fmt_us(rust[k].1),
        );
    }
    println!("\nsequential: {}", fmt_us(med[0]));
    println!(
        "static schedule: allot_pool_parallel_for_static {} from main, {} from a task; \
         OpenMP schedule(static) {} (allot / OpenMP: {:.2}, {:.2})",
        fmt_us(med[2]),
        fmt_us(med[3]),
        fmt_us(omp_static),
        med[2] / omp_static,
        med[3] / omp_static,
    );
    println!("\nEvery configuration (median; per-round medians):");
    for ((c, m), r) in configs.iter().zip(&med).zip(&results) {
        let rounds: Vec<String> = r.iter().map(|ns| format!("{:.1}", ns / 1000.0)).collect();
        let grain = if !matches!(
            c.mode,
            "seq" | "omp-static" | "allot-static" | "allot-static-inside"
        ) {
            format!(", grain {}", c.grain)
        } else {
            String::new()
        };
        println!(
            "- {}{grain}: {} ({} µs)",
            c.name,
            fmt_us(*m),
            rounds.join(", ")
        );
    }
}
