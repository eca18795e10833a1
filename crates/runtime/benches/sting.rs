//! Sting's evaluation on allot's runtime: three task-parallel programs,
//! each under every policy of the library, against rayon and OpenMP
//! builds of the same algorithms, all in one run.
//!
//! - `abisort`: Bilardi and Nicolau's adaptive bitonic sort on a bitonic
//!   tree, both halves of every sort and merge forked (`sting/abisort.rs`);
//! - `queens`: N-queens solution count, forking in the top rows;
//! - `knapsack`: branch-and-bound 0/1 knapsack whose tasks are spawned
//!   with priorities (the tree search where priorities matter).
//!
//! Run: `cargo bench -p allot-runtime --bench sting` (`-- --quick`, or
//! `ALLOT_STING_QUICK=1`, for tiny sizes; `cargo test` runs it quick).
//! `ALLOT_STING_RUNS` sets the timed runs per configuration (default 7;
//! one untimed warm-up run comes first); `ALLOT_STING_ONLY=abisort,queens`
//! runs only the benchmarks named; `ALLOT_STING_SOURCE` and
//! `ALLOT_STING_TMP` say where the OpenMP build's source is and goes
//! (`build_omp`). Every configuration runs alone:
//! one allot pool (standalone cell: one pinned worker per CPU), a rayon
//! pool of as many threads, or an OpenMP process (`OMP_NUM_THREADS` the
//! same), never two at once. Each answer is checked against a sequential
//! reference; a wrong one stops the run. Results: `BENCHMARKS.md`,
//! "Sting's evaluation".

#![cfg_attr(loom, allow(unused))]

#[path = "sting/abisort.rs"]
mod abisort;
#[path = "sting/knapsack.rs"]
mod knapsack;
#[path = "sting/queens.rs"]
mod queens;
#[cfg(not(loom))]
#[path = "sting/report.rs"]
mod report;
#[cfg(not(loom))]
#[path = "sting/variants.rs"]
mod variants;

#[cfg(not(loom))]
use allot_runtime::{PolicySpec, Pool, WorkerStats};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

/// The three benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bench {
    Abisort,
    Queens,
    Knapsack,
}

impl Bench {
    pub const ALL: [Bench; 3] = [Bench::Abisort, Bench::Queens, Bench::Knapsack];

    pub fn name(self) -> &'static str {
        match self {
            Bench::Abisort => "abisort",
            Bench::Queens => "queens",
            Bench::Knapsack => "knapsack",
        }
    }
}

/// Problem sizes and repetitions.
#[derive(Debug, Clone, Copy)]
pub struct Sizes {
    /// abisort sorts 2^sort_log2 keys.
    pub sort_log2: u32,
    /// queens board size.
    pub queens: u32,
    /// knapsack items.
    pub items: usize,
    /// Timed runs per configuration (after one warm-up).
    pub runs: usize,
}

impl Sizes {
    /// The size argument of a benchmark (as the C program takes it).
    pub fn of(&self, b: Bench) -> usize {
        match b {
            Bench::Abisort => self.sort_log2 as usize,
            Bench::Queens => self.queens as usize,
            Bench::Knapsack => self.items,
        }
    }
}

/// What a configuration measured on one benchmark.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// Wall time of each timed run, in ns.
    pub times: Vec<f64>,
    /// Nodes expanded in each timed run (knapsack; 0 otherwise).
    pub nodes: Vec<u64>,
    /// Per-worker statistics of the last run (allot pools only).
    pub stats: Option<Vec<WorkerStats>>,
}

fn main() {
    #[cfg(not(loom))]
    run();
}

#[cfg(not(loom))]
fn run() {
    let args: Vec<String> = std::env::args().collect();
    let quick = std::env::var_os("ALLOT_STING_QUICK").is_some_and(|v| v != "0")
        || args.iter().any(|a| a == "--quick")
        || !args.iter().any(|a| a == "--bench");
    let runs = std::env::var("ALLOT_STING_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1 } else { 7 });
    let sizes = if quick {
        Sizes {
            sort_log2: 14,
            queens: 8,
            items: 30,
            runs,
        }
    } else {
        Sizes {
            sort_log2: 20,
            queens: 14,
            items: 80,
            runs,
        }
    };
    let workers = allot_pool(PolicySpec::default()).workers();
    let omp = build_omp();
    eprintln!(
        "sting: {sizes:?}, {workers} workers, OpenMP: {}",
        omp.is_some()
    );

    let only = std::env::var("ALLOT_STING_ONLY").unwrap_or_default();
    let chosen: Vec<Bench> = Bench::ALL
        .into_iter()
        .filter(|b| only.is_empty() || only.split(',').any(|n| n.trim() == b.name()))
        .collect();
    if chosen.is_empty() {
        eprintln!(
            "sting: ALLOT_STING_ONLY={only:?} names no benchmark; known: abisort, queens, knapsack"
        );
        std::process::exit(2);
    }
    let mut rows: Vec<report::Row> = Vec::new();
    for b in chosen {
        rows.extend(measure(b, &sizes, workers, omp.as_deref()));
    }
    println!("{}", report::render(&rows, &sizes, workers));
}

/// Runs every configuration on `b`: each once untimed, then `runs`
/// rounds in which each runs once, so that changing background load hits
/// them alike. Stops the benchmark if an answer is wrong.
#[cfg(not(loom))]
fn measure(b: Bench, sizes: &Sizes, workers: usize, omp: Option<&Path>) -> Vec<report::Row> {
    let want = expected(b, sizes);
    let mut configs: Vec<(String, Exec)> = vec![("sequential".into(), Exec::Rust(Threads::Seq))];
    for p in variants::POLICIES {
        let spec: PolicySpec = p.parse().expect("policy spec");
        configs.push((
            format!("allot {p}"),
            Exec::Rust(Threads::Allot(Arc::new(allot_pool(spec)))),
        ));
    }
    let rayon = rayon::ThreadPoolBuilder::new()
        .num_threads(workers)
        .build()
        .expect("rayon pool");
    configs.push(("rayon".into(), Exec::Rust(Threads::Rayon(Arc::new(rayon)))));
    if let Some(bin) = omp {
        let omp = |prio| Exec::Omp {
            bin: bin.to_path_buf(),
            workers,
            prio,
        };
        configs.push(("OpenMP".into(), omp(true)));
        if b == Bench::Knapsack {
            configs.push(("OpenMP, no priorities".into(), omp(false)));
        }
    }
    let check = |name: &str, answer: u64| {
        assert_eq!(answer, want, "{} under {name}: wrong answer", b.name());
    };
    for (name, exec) in &configs {
        check(name, once(b, sizes, exec).answer);
    }
    let mut outcomes: Vec<Measured> = configs.iter().map(|_| Measured::default()).collect();
    for _ in 0..sizes.runs {
        for ((name, exec), o) in configs.iter().zip(&mut outcomes) {
            let run = once(b, sizes, exec);
            check(name, run.answer);
            o.times.push(run.ns);
            o.nodes.push(run.nodes);
            // The last run's statistics are the ones reported.
            o.stats = run.stats;
        }
    }
    configs
        .into_iter()
        .zip(outcomes)
        .map(|((variant, _), outcome)| {
            eprintln!(
                "  {:<9} {:<34} {:>9.1} ms",
                b.name(),
                variant,
                report::median(&outcome.times) / 1e6
            );
            report::Row {
                bench: b,
                variant,
                outcome,
            }
        })
        .collect()
}

/// An allot pool with policy `spec` on the standalone cell.
#[cfg(not(loom))]
fn allot_pool(spec: PolicySpec) -> Pool {
    Pool::builder()
        .cell(allot_client::Cell::standalone())
        .policy(spec)
        .name("sting")
        .build()
        .expect("allot pool")
}

/// The right answer: the sorted keys' checksum, the known number of
/// queens solutions, the knapsack optimum by dynamic programming.
fn expected(b: Bench, s: &Sizes) -> u64 {
    match b {
        Bench::Abisort => {
            let mut k = abisort::keys(1 << s.sort_log2, 1);
            k.sort_unstable();
            abisort::checksum(&k)
        }
        Bench::Queens => queens::SOLUTIONS[s.queens as usize],
        Bench::Knapsack => knapsack::instance(s.items, 7).optimum(),
    }
}

/// Where a run executes.
#[cfg(not(loom))]
enum Exec {
    /// The Rust code on this thread or a pool.
    Rust(Threads),
    /// The OpenMP build, `workers` threads, task priorities on or off.
    Omp {
        bin: PathBuf,
        workers: usize,
        prio: bool,
    },
}

/// Where the Rust code runs.
#[cfg(not(loom))]
enum Threads {
    Seq,
    Allot(Arc<Pool>),
    Rayon(Arc<rayon::ThreadPool>),
}

/// What one run measured.
#[cfg(not(loom))]
struct Run {
    /// Wall time of the algorithm, ns.
    ns: f64,
    answer: u64,
    /// Nodes expanded (knapsack; 0 otherwise).
    nodes: u64,
    /// An allot pool's per-worker statistics over the timed part alone.
    stats: Option<Vec<WorkerStats>>,
}

/// One run of `b`. The input is made before the clock starts and the
/// answer read after it stops (the OpenMP build does the same).
#[cfg(not(loom))]
fn once(b: Bench, s: &Sizes, exec: &Exec) -> Run {
    match exec {
        Exec::Omp { bin, workers, prio } => {
            let (ns, answer, nodes) = run_omp(bin, b, s, *workers, *prio);
            Run {
                ns,
                answer,
                nodes,
                stats: None,
            }
        }
        Exec::Rust(t) => once_rust(b, s, t),
    }
}

/// Runs `f` on the clock; on an allot pool also takes the pool's
/// statistics of just that interval.
#[cfg(not(loom))]
fn clocked<R>(exec: &Threads, f: impl FnOnce() -> R) -> (f64, R, Option<Vec<WorkerStats>>) {
    let pool = match exec {
        Threads::Allot(p) => Some(p),
        _ => None,
    };
    let before = pool.map(|p| p.worker_stats());
    let t0 = Instant::now();
    let r = f();
    let ns = t0.elapsed().as_nanos() as f64;
    let stats = pool
        .zip(before)
        .map(|(p, before)| report::since(&p.worker_stats(), &before));
    (ns, r, stats)
}

#[cfg(not(loom))]
fn once_rust(b: Bench, s: &Sizes, exec: &Threads) -> Run {
    use variants::{Allot, AllotSpawner, Rayon, RayonSpawner, Seq};
    match b {
        Bench::Abisort => {
            // Building the tree and reading it back are not timed.
            let mut tree = abisort::Tree::new(&abisort::keys(1 << s.sort_log2, 1));
            let (ns, (), stats) = clocked(exec, || match exec {
                Threads::Seq => tree.sort(&Seq),
                Threads::Allot(p) => p.install(|| tree.sort(&Allot)),
                Threads::Rayon(p) => p.install(|| tree.sort(&Rayon)),
            });
            let k = tree.to_vec();
            let answer = if abisort::is_sorted(&k) {
                abisort::checksum(&k)
            } else {
                0
            };
            Run {
                ns,
                answer,
                nodes: 0,
                stats,
            }
        }
        Bench::Queens => {
            let n = s.queens;
            let (ns, answer, stats) = clocked(exec, || match exec {
                Threads::Seq => queens::count(&Seq, n),
                Threads::Allot(p) => p.install(|| queens::count(&Allot, n)),
                Threads::Rayon(p) => p.install(|| queens::count(&Rayon, n)),
            });
            Run {
                ns,
                answer,
                nodes: 0,
                stats,
            }
        }
        Bench::Knapsack => {
            let inst = knapsack::instance(s.items, 7);
            let (ns, (answer, nodes), stats) = clocked(exec, || match exec {
                Threads::Seq => knapsack::search_seq(&inst),
                Threads::Allot(p) => knapsack::search_par(&inst, AllotSpawner(p.clone())),
                Threads::Rayon(p) => knapsack::search_par(&inst, RayonSpawner(p.clone())),
            });
            Run {
                ns,
                answer,
                nodes,
                stats,
            }
        }
    }
}

/// Compiles `sting/sting.c` with `gcc -O2 -fopenmp` into the target's
/// temporary directory; `None` (OpenMP rows left out) if that fails.
///
/// On a machine without the build tree (the bench binary carried to a
/// borrowed machine: `scripts/bench-16cpu.sh --sting`),
/// `ALLOT_STING_SOURCE` names `sting.c` and `ALLOT_STING_TMP` a directory
/// for the program.
#[cfg(not(loom))]
fn build_omp() -> Option<PathBuf> {
    let src = std::env::var_os("ALLOT_STING_SOURCE").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/sting/sting.c"),
        PathBuf::from,
    );
    let dir = std::env::var_os("ALLOT_STING_TMP").map_or_else(
        || Path::new(env!("CARGO_TARGET_TMPDIR")).join("sting"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).ok()?;
    let bin = dir.join("sting-omp");
    let out = Command::new("gcc")
        .args(["-std=c11", "-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output();
    match out {
        Ok(o) if o.status.success() => Some(bin),
        Ok(o) => {
            eprintln!(
                "sting: no OpenMP rows, gcc failed:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            None
        }
        Err(e) => {
            eprintln!("sting: no OpenMP rows, cannot run gcc: {e}");
            None
        }
    }
}

/// Runs the OpenMP build of `b` in a process of its own: one untimed
/// run (the team starts), then the measured one.
#[cfg(not(loom))]
fn run_omp(bin: &Path, b: Bench, s: &Sizes, workers: usize, prio: bool) -> (f64, u64, u64) {
    let out = Command::new(bin)
        .arg(b.name())
        .arg(s.of(b).to_string())
        .arg("2")
        .env("OMP_NUM_THREADS", workers.to_string())
        .env("OMP_MAX_TASK_PRIORITY", if prio { "2" } else { "0" })
        .output()
        .expect("run the OpenMP build");
    assert!(out.status.success(), "OpenMP {}: {:?}", b.name(), out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout
        .lines()
        .last()
        .expect("the OpenMP build printed its runs");
    let f: Vec<u64> = last
        .split_whitespace()
        .map(|x| x.parse().expect("a number"))
        .collect();
    (f[0] as f64, f[1], f[2])
}
