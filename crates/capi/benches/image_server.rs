//! The image-server case study of `require`: requests that each blur an
//! image with OpenMP arrive at rising rates; each request either runs a
//! fixed number of OpenMP threads (plain libgomp) or takes
//! `allot_require(&c, allot_fair_cores())` and runs `c.ncores` threads.
//! Mean and 95th-percentile latency against request rate, as a table and
//! as PNG charts. See docs/benchmarks.md, "Image server (require case
//! study)", and the comment at the top of `benches/c/image_server.c`.
//!
//! ```text
//! cargo bench -p allot-capi --bench image_server [-- OPTIONS]
//!
//!   --quick          4 rates, 1 round, 1.5 s bursts; charts under target/tmp
//!                    unless --out is given (a quick look never replaces the
//!                    documented charts)
//!   --burst SECONDS  burst length (default 3; env ALLOT_BENCH_BURST)
//!   --rounds N       rounds over every rate and variant (default 3;
//!                    env ALLOT_BENCH_IMAGE_ROUNDS)
//!   --out PATH       the mean-latency chart (default
//!                    docs/img/image_server.png); beside it go the same
//!                    chart cut below saturation (`_zoom`) and the p95
//!                    chart (`_p95`)
//!   --help
//! ```
//!
//! Steps: installs this build's liballot (`install-liballot.sh --from` the
//! directory of this binary, as the other C benches do) and compiles
//! `image_server.c` twice with `gcc -O2 -fopenmp`: with
//! `-DIMAGE_SERVER_ALLOT` against liballot (the `fair` variant, run with
//! liballot's preload shim so each request's OpenMP team joins its block
//! and is placed one thread per granted core) and without it, linked to
//! libgomp only (the `fixed N` variants, and `fixed 2 bound` with
//! `OMP_PROC_BIND=spread OMP_PLACES=cores`: nothing of allot is loaded). Calibrates the service time of one request alone on
//! one thread, `s1`, and takes the machine's capacity as `CPUs / s1`
//! requests per second (the most a perfectly efficient server could
//! complete). Then runs every variant at rates from 10 % to 110 % of that
//! capacity, one process per run and one run at a time, for `rounds`
//! rounds; the order of the variants rotates from run to run, and all
//! variants at one rate and round see the same arrival sequence (same
//! seed). The table shows, per rate and variant, the median over the
//! rounds of each run's statistic; the charts add the smallest and largest
//! round as error bars.
//!
//! The development machine is shared, so each run is checked: the CPU time
//! the machine spent outside the server process during the run
//! (`/proc/stat` busy time minus the child's `cutime + cstime`) must stay
//! under [`MAX_BACKGROUND`] of the machine, or the run is made again once
//! the machine is quiet, up to [`ATTEMPTS`] times (the least disturbed is
//! kept). The summary line says how many runs were repeated.
//!
//! No broker is started: the `require` runtime of the one server process
//! divides its CPUs among that process's requests. Each run's OpenMP
//! environment is libgomp's default (every `OMP_*`/`GOMP_*` variable
//! removed), and the program's checksum of the blurred image must match
//! the calibration's in every run.
//!
//! Run by `cargo test --benches` (without `--bench`), it only checks that
//! the programs build and run: a tiny image, one short burst per variant,
//! nothing written.

#[path = "support/case.rs"]
mod case;

use allot_plot::{Chart, Series};
use case::{Programs, fields, median, num};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Fractions of the capacity the default run visits.
const LOADS: [f64; 8] = [0.10, 0.25, 0.40, 0.55, 0.70, 0.85, 1.00, 1.10];
/// The same for `--quick`.
const QUICK_LOADS: [f64; 4] = [0.10, 0.40, 0.70, 1.00];
/// The zoomed chart's y axis covers the loads up to this one.
const ZOOM_LOAD: f64 = 0.85;
/// The variants, in the order of the table's columns.
const VARIANTS: [Variant; 5] = [
    Variant::Fixed(1),
    Variant::Fixed(2),
    Variant::Fixed(4),
    Variant::Bound(2),
    Variant::Fair,
];
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Variant {
    /// N threads per request, libgomp's defaults.
    Fixed(u32),
    /// N threads per request bound one per core (`OMP_PROC_BIND=spread`,
    /// `OMP_PLACES=cores`): what a careful user does so a team's threads
    /// do not share a CPU.
    Bound(u32),
    Fair,
}

impl Variant {
    fn label(self) -> String {
        match self {
            Variant::Fixed(n) => format!("fixed {n}"),
            Variant::Bound(n) => format!("fixed {n} bound"),
            Variant::Fair => "fair_cores".into(),
        }
    }
}

#[derive(Debug)]
struct Opts {
    /// Run by `cargo bench` (else a build-and-run check).
    bench: bool,
    quick: bool,
    burst: f64,
    rounds: usize,
    out: PathBuf,
}

const HELP: &str = "\
image_server: mean and p95 latency of an OpenMP image-blurring server
against request rate, fixed OpenMP team sizes against require(fair_cores).

usage: cargo bench -p allot-capi --bench image_server [-- OPTIONS]

  --quick          4 rates, 1 round, 1.5 s bursts; charts under target/tmp
                   unless --out is given (a quick look never replaces the
                   documented charts)
  --burst SECONDS  burst length (default 3; env ALLOT_BENCH_BURST)
  --rounds N       rounds over every rate and variant (default 3;
                   env ALLOT_BENCH_IMAGE_ROUNDS)
  --out PATH       mean-latency chart (default docs/img/image_server.png;
                   a name ending in .svg writes SVG); beside it go the same chart cut below saturation
                   (`_zoom`) and the p95 chart (`_p95`)
  --help           this text";

fn parse_opts() -> Opts {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let repo = repo.canonicalize().unwrap_or(repo);
    let env_f64 = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<f64>().ok());
    let mut o = Opts {
        bench: false,
        quick: false,
        burst: env_f64("ALLOT_BENCH_BURST").unwrap_or(3.0),
        rounds: env_f64("ALLOT_BENCH_IMAGE_ROUNDS").map_or(3, |v| v as usize),
        out: repo.join("docs/img/image_server.png"),
    };
    let mut out_given = false;
    let mut burst_given = std::env::var_os("ALLOT_BENCH_BURST").is_some();
    let mut rounds_given = std::env::var_os("ALLOT_BENCH_IMAGE_ROUNDS").is_some();
    let mut args = std::env::args().skip(1);
    let fail = |msg: String| -> ! {
        eprintln!("image_server: {msg}\n\n{HELP}");
        std::process::exit(2)
    };
    while let Some(a) = args.next() {
        let mut value = |name: &str| {
            args.next()
                .unwrap_or_else(|| fail(format!("{name} needs a value")))
        };
        match a.as_str() {
            "--bench" => o.bench = true,
            "--quick" => o.quick = true,
            "--burst" => {
                let v = value("--burst");
                o.burst = v
                    .parse()
                    .unwrap_or_else(|_| fail(format!("bad --burst {v}")));
                burst_given = true;
            }
            "--rounds" => {
                let v = value("--rounds");
                o.rounds = v
                    .parse()
                    .unwrap_or_else(|_| fail(format!("bad --rounds {v}")));
                rounds_given = true;
            }
            "--out" => {
                o.out = PathBuf::from(value("--out"));
                out_given = true;
            }
            "-h" | "--help" => {
                println!("{HELP}");
                std::process::exit(0)
            }
            other => fail(format!("unknown argument {other}")),
        }
    }
    if o.quick {
        if !out_given {
            o.out = repo.join("target/tmp/image_server/quick.png");
        }
        if !burst_given {
            o.burst = 1.5;
        }
        if !rounds_given {
            o.rounds = 1;
        }
    }
    if !(o.burst > 0.0 && o.burst <= 600.0) || o.rounds == 0 {
        fail("--burst must be in (0, 600] and --rounds at least 1".into());
    }
    o
}

/// One run's statistics (latencies in ms).
#[derive(Clone, Debug)]
struct Stats {
    requests: f64,
    mean: f64,
    p50: f64,
    p95: f64,
    max: f64,
    wait: f64,
    cores: f64,
    /// Share of the machine other processes used during the run.
    background: f64,
    /// Runs made to get this one (see [`undisturbed`]).
    attempts: usize,
}

/// Largest share of the machine that other processes may have used during
/// a run before the run is repeated.
const MAX_BACKGROUND: f64 = 0.05;
/// The machine counts as quiet when at most this share of it is busy.
const QUIET: f64 = 0.10;
/// Attempts at one run before the least disturbed one is kept.
const ATTEMPTS: usize = 4;
/// Longest wait for a quiet machine before going on regardless.
const QUIET_WAIT: Duration = Duration::from_secs(180);

/// CPU time counters, in clock ticks: the whole machine's busy time
/// (including time stolen by the hypervisor) and the time of this process's
/// reaped children (what `getrusage(RUSAGE_CHILDREN)` counts).
#[derive(Clone, Copy)]
struct Ticks {
    busy: u64,
    children: u64,
    at: Instant,
}

impl Ticks {
    fn now() -> Ticks {
        let stat = std::fs::read_to_string("/proc/stat").expect("read /proc/stat");
        let cpu: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or_default()
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // user nice system idle iowait irq softirq steal
        let busy = [0, 1, 2, 5, 6, 7]
            .iter()
            .map(|&i| cpu.get(i).copied().unwrap_or(0))
            .sum();
        let me = std::fs::read_to_string("/proc/self/stat").expect("read /proc/self/stat");
        let after_comm: Vec<u64> = me[me.rfind(')').map_or(0, |i| i + 1)..]
            .split_whitespace()
            .skip(1)
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        // Fields 16 and 17 (cutime, cstime); `after_comm` starts at field 4.
        let children =
            after_comm.get(12).copied().unwrap_or(0) + after_comm.get(13).copied().unwrap_or(0);
        Ticks {
            busy,
            children,
            at: Instant::now(),
        }
    }

    /// Share of the machine (0..1) busy since `self` on behalf of anything
    /// but this process's reaped children.
    fn background_since(&self, cpus: usize) -> f64 {
        let now = Ticks::now();
        let hz = rustix::param::clock_ticks_per_second() as f64;
        let capacity = (now.at - self.at).as_secs_f64() * hz * cpus as f64;
        let other = now.busy.saturating_sub(self.busy) as f64
            - now.children.saturating_sub(self.children) as f64;
        (other / capacity.max(1.0)).max(0.0)
    }
}

/// Waits (at most [`QUIET_WAIT`]) until a second passes with at most
/// [`QUIET`] of the machine busy.
fn wait_for_quiet(cpus: usize) {
    let started = Instant::now();
    let mut said = false;
    while started.elapsed() < QUIET_WAIT {
        let t = Ticks::now();
        std::thread::sleep(Duration::from_secs(1));
        let busy = t.background_since(cpus);
        if busy <= QUIET {
            return;
        }
        if !said {
            eprintln!(
                "  machine {:.0} % busy: waiting for it to quieten",
                100.0 * busy
            );
            said = true;
        }
    }
    eprintln!("  still busy after {QUIET_WAIT:?}: going on");
}

/// Runs `cmd` (one server run) with a deadline, killing it if it overruns;
/// returns its output and the share of the machine other processes used
/// meanwhile.
fn run_server(cmd: &mut Command, deadline: Duration, cpus: usize) -> (String, f64) {
    let before = Ticks::now();
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    loop {
        if child.try_wait().expect("wait for the server").is_some() {
            break;
        }
        if before.at.elapsed() > deadline {
            child.kill().ok();
            let out = child.wait_with_output().expect("wait for the server");
            panic!(
                "{cmd:?} ran over {deadline:?} and was killed:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait for the server");
    let background = before.background_since(cpus);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (String::from_utf8(out.stdout).unwrap(), background)
}

/// Runs `make()`'s command until other processes used at most
/// [`MAX_BACKGROUND`] of the machine during it (waiting for quiet between
/// attempts), at most [`ATTEMPTS`] times; returns the least disturbed
/// attempt's output, its background share, and the number of attempts.
fn undisturbed(
    make: &dyn Fn() -> Command,
    deadline: Duration,
    cpus: usize,
) -> (String, f64, usize) {
    let mut best: Option<(String, f64)> = None;
    for attempt in 1..=ATTEMPTS {
        let (out, bg) = run_server(&mut make(), deadline, cpus);
        if best.as_ref().is_none_or(|b| bg < b.1) {
            best = Some((out, bg));
        }
        if bg <= MAX_BACKGROUND {
            let (out, bg) = best.unwrap();
            return (out, bg, attempt);
        }
        eprintln!(
            "  other processes used {:.0} % of the machine: run again",
            100.0 * bg
        );
        wait_for_quiet(cpus);
    }
    let (out, bg) = best.unwrap();
    (out, bg, ATTEMPTS)
}

struct Runner<'a> {
    progs: &'a Programs,
    /// Options passed to every run (image size, burst).
    common: Vec<String>,
    burst: f64,
    checksum: String,
    cpus: usize,
    /// Repeat runs that other processes disturbed (off in the smoke check).
    guard: bool,
}

impl Runner<'_> {
    fn command(&self, program: &Path) -> Command {
        self.progs.command(program)
    }

    /// Runs `make()`'s command: once, or with [`undisturbed`].
    fn measure(&self, make: &dyn Fn() -> Command) -> (String, f64, usize) {
        let deadline = Duration::from_secs_f64(60.0 + 20.0 * self.burst.max(0.5));
        if self.guard {
            undisturbed(make, deadline, self.cpus)
        } else {
            let (out, bg) = run_server(&mut make(), deadline, self.cpus);
            (out, bg, 1)
        }
    }

    fn run(&self, v: Variant, rate: f64, seed: u64) -> Stats {
        let make = || {
            let mut c = match v {
                Variant::Fixed(n) => {
                    let mut c = self.command(&self.progs.plain);
                    c.args(["fixed", &n.to_string()]);
                    c
                }
                Variant::Bound(n) => {
                    let mut c = self.command(&self.progs.plain);
                    c.args(["fixed", &n.to_string()])
                        .env("OMP_PROC_BIND", "spread")
                        .env("OMP_PLACES", "cores");
                    c
                }
                Variant::Fair => {
                    let mut c = self.progs.command_with_shim(&self.progs.with_allot);
                    c.arg("fair");
                    c
                }
            };
            c.arg(format!("{rate}"))
                .args(&self.common)
                .args(["--seed", &seed.to_string()]);
            c
        };
        let (out, background, attempts) = self.measure(&make);
        let f = fields(&out, "result");
        let stats = Stats {
            requests: num(&f, "requests"),
            mean: num(&f, "mean_ms"),
            p50: num(&f, "p50_ms"),
            p95: num(&f, "p95_ms"),
            max: num(&f, "max_ms"),
            wait: num(&f, "wait_ms"),
            cores: num(&f, "cores"),
            background,
            attempts,
        };
        if stats.requests > 0.0 {
            assert_eq!(
                f.get("checksum"),
                Some(&self.checksum),
                "{} at {rate}/s blurred differently from the calibration",
                v.label()
            );
        }
        stats
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    v.iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
            (lo.min(x), hi.max(x))
        })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// `dir/name.png` → `dir/name_SUFFIX.png`.
fn sibling(out: &Path, suffix: &str) -> PathBuf {
    let stem = out.file_stem().unwrap_or_default().to_string_lossy();
    let ext = out
        .extension()
        .map_or("png".into(), |e| e.to_string_lossy());
    out.with_file_name(format!("{stem}_{suffix}.{ext}"))
}

type Results = BTreeMap<(usize, Variant), Vec<Stats>>;

fn chart(
    title: &str,
    y_label: &str,
    rates: &[f64],
    results: &Results,
    pick: fn(&Stats) -> f64,
) -> Chart {
    let mut c = Chart::new(title, "request rate (requests/s)", y_label).size(900, 560);
    for v in VARIANTS {
        let per_rate: Vec<Vec<f64>> = (0..rates.len())
            .map(|i| results[&(i, v)].iter().map(pick).collect())
            .collect();
        c = c.series(Series::Line {
            name: v.label(),
            points: rates
                .iter()
                .zip(&per_rate)
                .map(|(&r, s)| (r, median(s)))
                .collect(),
            err: Some(per_rate.iter().map(|s| min_max(s)).collect()),
        });
    }
    c
}

fn main() {
    let o = parse_opts();
    let progs = case::build("image_server", "IMAGE_SERVER_ALLOT", "image_server");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());

    // Without `--bench` (cargo test --benches): build, run each variant once
    // on a tiny image, check the lines parse and the images agree.
    let image: Vec<String> = if o.bench {
        Vec::new()
    } else {
        ["--width", "64", "--height", "64"]
            .map(String::from)
            .to_vec()
    };
    let burst = if o.bench { o.burst } else { 0.2 };
    let mut common = image.clone();
    common.extend(["--burst".into(), format!("{burst}")]);
    let mut runner = Runner {
        progs: &progs,
        common,
        burst,
        checksum: String::new(),
        cpus,
        guard: o.bench,
    };
    if o.bench {
        wait_for_quiet(cpus);
    }
    // Interference only slows a request: the fastest of three calibrations
    // (each the median of 7 requests) is the closest to the true cost.
    let mut cal = BTreeMap::new();
    let (mut s1, mut s2) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..if o.bench { 3 } else { 1 } {
        let (out, _, _) = runner.measure(&|| {
            let mut c = runner.command(&progs.plain);
            c.arg("calibrate").args(&image);
            c
        });
        cal = fields(&out, "calibrate");
        s1 = s1.min(num(&cal, "service1_ms"));
        s2 = s2.min(num(&cal, "service2_ms"));
    }
    runner.checksum = cal["checksum"].clone();
    if !o.bench {
        for v in VARIANTS {
            let s = runner.run(v, 20.0, 1);
            println!("{}: {s:?}", v.label());
        }
        println!("image_server: built and ran; `cargo bench -p allot-capi --bench image_server`");
        return;
    }

    let capacity = cpus as f64 * 1000.0 / s1;
    let loads: &[f64] = if o.quick { &QUICK_LOADS } else { &LOADS };
    let rates: Vec<f64> = loads
        .iter()
        .map(|l| (l * capacity * 10.0).round() / 10.0)
        .collect();
    println!(
        "image {}x{} RGB, box radius {}, {} passes; one request alone: {s1:.1} ms on 1 thread, \
         {s2:.1} ms on 2 (speed-up {:.2}); capacity {capacity:.1} requests/s on {cpus} CPUs",
        cal["width"],
        cal["height"],
        cal["radius"],
        cal["passes"],
        s1 / s2
    );
    println!(
        "{} rates, {} variants, {} rounds, {} s bursts; load average before: {}",
        rates.len(),
        VARIANTS.len(),
        o.rounds,
        o.burst,
        loadavg()
    );

    let started = Instant::now();
    let mut results: Results = BTreeMap::new();
    for round in 0..o.rounds {
        for (i, &rate) in rates.iter().enumerate() {
            for k in 0..VARIANTS.len() {
                let v = VARIANTS[(k + i + round) % VARIANTS.len()];
                let s = runner.run(v, rate, 1 + round as u64);
                eprintln!(
                    "  {:>10} at {rate:>5.1}/s, round {}: mean {:.1} ms, p95 {:.1} ms, \
                     {:.0} requests (background {:.0} %)",
                    v.label(),
                    round + 1,
                    s.mean,
                    s.p95,
                    s.requests,
                    100.0 * s.background
                );
                results.entry((i, v)).or_default().push(s);
            }
        }
        eprintln!(
            "round {}/{} done after {:.0} s",
            round + 1,
            o.rounds,
            started.elapsed().as_secs_f64()
        );
    }
    let all: Vec<&Stats> = results.values().flatten().collect();
    let repeated = all.iter().filter(|s| s.attempts > 1).count();
    let still = all.iter().filter(|s| s.background > MAX_BACKGROUND).count();
    let worst = all.iter().map(|s| s.background).fold(0.0, f64::max);
    println!(
        "took {:.0} s; load average after: {}; {repeated} of {} runs repeated because other \
         processes used over {:.0} % of the machine, {still} kept above it after {ATTEMPTS} \
         attempts (worst {:.0} %)\n",
        started.elapsed().as_secs_f64(),
        loadavg(),
        all.len(),
        100.0 * MAX_BACKGROUND,
        100.0 * worst
    );

    let med = |i: usize, v: Variant, pick: fn(&Stats) -> f64| {
        median(&results[&(i, v)].iter().map(pick).collect::<Vec<_>>())
    };
    for (what, pick) in [
        ("mean", (|s: &Stats| s.mean) as fn(&Stats) -> f64),
        ("p95", |s: &Stats| s.p95),
    ] {
        println!("{what} latency (ms), median of {} rounds", o.rounds);
        let others = &VARIANTS[..VARIANTS.len() - 1];
        let names: Vec<String> = others.iter().map(|v| v.label()).collect();
        println!(
            "| rate (req/s) | load | {} | fair_cores | fair ÷ best fixed |",
            names.join(" | ")
        );
        println!("|---:|---:|{}---:|---:|", "---:|".repeat(others.len()));
        for (i, &rate) in rates.iter().enumerate() {
            let fixed: Vec<f64> = others.iter().map(|&v| med(i, v, pick)).collect();
            let fair = med(i, Variant::Fair, pick);
            let best = fixed.iter().copied().fold(f64::INFINITY, f64::min);
            let cells: Vec<String> = fixed.iter().map(|x| format!("{x:.1}")).collect();
            println!(
                "| {rate:.1} | {:.0} % | {} | {fair:.1} | {:.2} |",
                100.0 * rate / capacity,
                cells.join(" | "),
                fair / best
            );
        }
        println!();
    }
    println!("fair_cores: mean cores per request, mean wait for cores (ms), requests per run");
    println!(
        "| rate (req/s) | cores | wait | requests | fixed 1 p50 | fair p50 | fixed 1 max | fair max |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (i, &rate) in rates.iter().enumerate() {
        let f = Variant::Fair;
        let one = Variant::Fixed(1);
        println!(
            "| {rate:.1} | {:.2} | {:.1} | {:.0} | {:.1} | {:.1} | {:.1} | {:.1} |",
            med(i, f, |s| s.cores),
            med(i, f, |s| s.wait),
            med(i, f, |s| s.requests),
            med(i, one, |s| s.p50),
            med(i, f, |s| s.p50),
            med(i, one, |s| s.max),
            med(i, f, |s| s.max),
        );
    }

    if let Some(dir) = o.out.parent() {
        std::fs::create_dir_all(dir).expect("create the chart's directory");
    }
    let subtitle = format!(
        "{cpus} CPUs, {} s bursts, median of {} rounds",
        o.burst, o.rounds
    );
    let mean = |s: &Stats| s.mean;
    let full = chart(
        &format!("Image server: mean latency ({subtitle})"),
        "mean latency (ms)",
        &rates,
        &results,
        mean,
    );
    full.save(&o.out).expect("write the mean chart");
    // The same, with the y axis cut just above the highest median below
    // saturation (LOADS up to ZOOM_LOAD), where the variants differ by
    // milliseconds rather than seconds.
    let below: Vec<usize> = (0..rates.len())
        .filter(|&i| rates[i] <= ZOOM_LOAD * capacity + 1e-9)
        .collect();
    let top = below
        .iter()
        .flat_map(|&i| VARIANTS.map(|v| med(i, v, mean)))
        .fold(0.0, f64::max);
    let zoom = sibling(&o.out, "zoom");
    chart(
        &format!(
            "Mean latency up to {:.0} % load ({subtitle})",
            100.0 * ZOOM_LOAD
        ),
        "mean latency (ms)",
        &rates,
        &results,
        mean,
    )
    .y_range(0.0, (top * 1.15).max(1.0))
    .save(&zoom)
    .expect("write the zoomed mean chart");
    let p95 = sibling(&o.out, "p95");
    chart(
        &format!("Image server: p95 latency ({subtitle})"),
        "p95 latency (ms)",
        &rates,
        &results,
        |s| s.p95,
    )
    .save(&p95)
    .expect("write the p95 chart");
    println!(
        "\ncharts: {}, {} and {}",
        o.out.display(),
        zoom.display(),
        p95.display()
    );
}
