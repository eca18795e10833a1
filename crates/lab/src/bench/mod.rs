//! `allot bench`: experiments that check allot's claims on your machine.
//!
//! - `allot bench mix`: random mixes of concurrent jobs at rising
//!   co-tenancy, plain co-run vs one after the other vs `allot run` vs
//!   allot's runtime (see `mix.rs`).
//! - `allot bench chaos`: a bounded soak that kills the broker, wrappers
//!   and programs and checks the invariants throughout (see `chaos`).
//! - `allot bench load`: many users, cells and connections, and one
//!   user's flood against the others (see `load.rs`).
//! - `allot bench launch`: what `allot run` adds to a program's start and
//!   exit, per backend (see `launch.rs`), and with `--burst K` how soon K
//!   programs started together all run in their cells (`burst.rs`).
//! - `allot bench upload`: Poli-C's file-upload server case study on a
//!   loop device (see `upload.rs`).
//! - `allot bench users`: two users probe one broker for what they may do
//!   to each other (see `users.rs`).
//!
//! Results go to `--out` (default `bench-out/mix-<unix time>`): `runs.csv`
//! (every run), `mixes.csv` (medians per mix and mode), `levels.csv`
//! (mean / min / max speed-up per level), `alone.csv`, `machine.txt`, and
//! `speedup.png` with the same chart as `speedup.svg`.

pub mod broker;
mod burst;
pub mod chaos;
pub mod interrupt;
pub mod isolation;
pub mod jobs;
pub mod launch;
pub mod load;
pub mod mix;
pub mod noise;
pub mod probe;
mod report;
pub mod runner;
pub mod serve;
pub mod upload;
pub mod users;

use jobs::{Mode, Work};
use std::path::PathBuf;
use std::time::Duration;

/// `allot bench` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Bench {
    /// Random mixes of concurrent parallel jobs, with and without allot.
    Mix(MixArgs),
    /// A soak that kills the broker, wrappers and programs at random and
    /// checks the invariants throughout (bounded in time).
    Chaos(chaos::ChaosArgs),
    /// The broker under many users, cells and connections, and one user's
    /// flood against the others (needs root).
    Load(load::LoadArgs),
    /// What `allot run` adds to a program's start and exit, per backend
    /// (median, p90, p99).
    Launch(launch::LaunchArgs),
    /// Records when its threads actually ran and reports it against its
    /// cell's windows (a helper for time-contract tests and benchmarks).
    #[command(hide = true)]
    Probe(probe::ProbeArgs),
    /// A request server that reports its latencies and work to its cell
    /// (a helper for goal tests and benchmarks).
    #[command(hide = true)]
    Serve(serve::ServeArgs),
    /// The OS noise a spinning thread sees on its CPU: detours, the
    /// longest, the 99th and 99.9th percentiles (JSON).
    Noise(noise::NoiseArgs),
    /// Tessellation's performance isolation with memory: a request
    /// server beside a memory hog and a streamer, plain, with CPUs
    /// partitioned, and with memory partitioned too (needs root and the
    /// cgroup v1 memory hierarchy).
    Isolation(isolation::IsolationArgs),
    /// Poli-C's file-upload server: concurrent O_DIRECT|O_SYNC uploads to
    /// a loop device, plain and each in require(io(dev, 1000)) (needs
    /// root).
    Upload(upload::UploadArgs),
    /// Two users probe one broker for what they may do to each other:
    /// another's cells and processes, every CPU as guarantees, what status
    /// shows (needs root).
    Users(users::UsersArgs),
}

/// Arguments of `allot bench mix`.
#[derive(Debug, clap::Args)]
pub struct MixArgs {
    /// Co-tenancy levels: jobs running at once (comma-separated).
    #[arg(long, default_value = "2,4,8", value_name = "K[,K…]")]
    jobs: String,
    /// Random mixes per level.
    #[arg(long, default_value_t = 5, value_name = "M")]
    mixes: usize,
    /// Seed for drawing mixes (same seed, same mixes).
    #[arg(long, default_value_t = 1, value_name = "S")]
    seed: u64,
    /// Jobs to draw from: workload names (pricing, stencil, pipeline,
    /// anneal, cluster), NAME@SCALE, or cmd:LABEL=SHELL COMMAND for your own
    /// programs (comma-separated; commas cannot appear inside a command).
    #[arg(long, value_name = "LIST")]
    workloads: Option<String>,
    /// An explicit mix instead of random ones (repeatable), same syntax as
    /// --workloads.
    #[arg(long = "mix", value_name = "LIST")]
    explicit: Vec<String>,
    /// Work scale of the workloads (1.0 ≈ 2–4 s alone on 2 CPUs).
    #[arg(long, default_value_t = 1.0, value_name = "X")]
    scale: f64,
    /// Modes to run (comma-separated): plain, seq, run, run-grant,
    /// run-share, run-max, runtime, one, split, dynamic.
    #[arg(long, default_value = "plain,seq,run,runtime", value_name = "LIST")]
    modes: String,
    /// Runs per mix and mode (the median is reported).
    #[arg(long, default_value_t = 3, value_name = "R")]
    repeats: usize,
    /// Stop a run after this many seconds (its jobs are killed).
    #[arg(long, default_value_t = 900, value_name = "SECS")]
    timeout: u64,
    /// Enforcement backend of the experiment's private broker.
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    backend: String,
    /// How the experiment's private broker divides CPUs.
    #[arg(
        long,
        default_value = "fair-share",
        value_name = "fair-share|priority|goals"
    )]
    policy: allot_plan::GlobalPolicy,
    /// Where the results go (created if missing; default: `bench-out/mix-<unix time>`).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Where the workloads are built and cached (a private directory;
    /// default: `workloads` in the user's state directory).
    #[arg(long, value_name = "DIR")]
    build_dir: Option<PathBuf>,
}

/// The workloads' build cache: `dir`, or `workloads` in the user's state
/// directory; created private (0700) if missing, refused if someone else
/// could change it.
pub fn workload_cache(dir: Option<PathBuf>) -> Result<allot_proto::dirs::TrustedDir, String> {
    let path = dir.unwrap_or_else(allot_workloads::compile::default_dir);
    allot_proto::dirs::TrustedDir::create(&path, 0o700).map_err(|e| {
        format!(
            "cannot use {} as the workloads' build cache: {e}",
            path.display()
        )
    })
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
pub(crate) fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn parse_list<T>(s: &str, f: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(f)
        .collect()
}

/// Runs `allot bench …`.
pub fn run(b: Bench) -> i32 {
    match b {
        Bench::Mix(a) => report_errors(mix_cmd(a)),
        Bench::Chaos(a) => report_errors(chaos::run(a)),
        Bench::Load(a) => report_errors(load::run(a)),
        Bench::Users(a) => report_errors(users::run(a)),
        Bench::Launch(a) => report_errors(launch::run(a)),
        Bench::Probe(a) => report_errors(probe::run(a).map(|()| 0)),
        Bench::Serve(a) => report_errors(serve::run(a).map(|()| 0)),
        Bench::Noise(a) => report_errors(noise::run(a).map(|()| 0)),
        Bench::Isolation(a) => report_errors(isolation::run(a)),
        Bench::Upload(a) => report_errors(upload::run(a).map(|()| 0).map_err(|e| format!("{e:#}"))),
    }
}

fn report_errors(r: Result<i32, String>) -> i32 {
    match r {
        Ok(code) => code,
        Err(e) => {
            eprintln!("allot: {e}");
            if interrupt::requested() { 130 } else { 1 }
        }
    }
}

fn mix_cmd(a: MixArgs) -> Result<i32, String> {
    interrupt::install();
    let levels = parse_list(&a.jobs, |s| {
        s.parse::<usize>()
            .map_err(|_| format!("--jobs: {s:?} is not a number"))
    })?;
    if levels.contains(&0) {
        return Err("--jobs: levels must be at least 1".into());
    }
    let modes = parse_list(&a.modes, |s| s.parse::<Mode>())?;
    if modes.is_empty() {
        return Err("--modes: give at least one mode".into());
    }
    let pool = match &a.workloads {
        Some(w) => parse_list(w, |s| Work::parse(s, a.scale))?,
        None => allot_workloads::Kernel::ALL
            .iter()
            .map(|&kernel| Work::Kernel {
                kernel,
                scale: a.scale,
            })
            .collect(),
    };
    if pool.is_empty() {
        return Err("--workloads: empty".into());
    }
    let mixes = if a.explicit.is_empty() {
        mix::random_mixes(&levels, a.mixes, a.seed, &pool)
    } else {
        a.explicit
            .iter()
            .map(|m| parse_list(m, |s| Work::parse(s, a.scale)).map(|v| (v.len(), v)))
            .collect::<Result<_, _>>()?
    };
    let out = a.out.unwrap_or_else(|| {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        PathBuf::from(format!("bench-out/mix-{t}"))
    });
    let plan = mix::Plan {
        mixes,
        modes,
        repeats: a.repeats.max(1),
        limit: Duration::from_secs(a.timeout),
        backend: a.backend,
        policy: a.policy,
        out,
    };
    let allot = crate::product()?;
    let cache = workload_cache(a.build_dir)?;
    let omp = allot_workloads::install_omp_binary(&cache)
        .map_err(|e| format!("cannot build the OpenMP workloads: {e}"))?;
    if plan.modes.contains(&jobs::Mode::Runtime) {
        // Built once here, so the jobs do not all compile it at once.
        allot_workloads::compile::ensure(&cache, allot_workloads::compile::Product::KernelLib)
            .map_err(|e| format!("cannot build the kernels for allot's runtime: {e}"))?;
    }
    eprintln!(
        "{} mixes × {} modes × {} repeats; results in {}",
        plan.mixes.len(),
        plan.modes.len(),
        plan.repeats,
        plan.out.display()
    );
    let outcome = mix::run(&plan, (&allot, &omp, cache.path()))?;
    report::write(&plan, &outcome).map_err(|e| format!("cannot write the report: {e}"))?;
    print!("{}", report::table(&plan, &outcome));
    if !outcome.failures.is_empty() {
        eprintln!("\n{} run(s) failed:", outcome.failures.len());
        for f in &outcome.failures {
            eprintln!("  {f}");
        }
        return Ok(1);
    }
    Ok(0)
}
