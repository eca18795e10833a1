//! What the C case-study programs' drivers share — the benches
//! `benches/image_server.rs`, `benches/qr.rs` and `benches/join.rs`, and
//! the tests `tests/image_server.rs` and `tests/case_studies.rs`, which
//! include this file: building a program twice (against liballot, and
//! without it), running it with a clean environment, reading its
//! `TAG key=value …` lines, medians, rounds in rotating order, and the
//! benches' options.
#![allow(dead_code)]

#[path = "../../tests/support/liballot.rs"]
mod liballot;

pub use liballot::run_stdout;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// OpenMP, preload and allot variables removed from every run's
/// environment: each variant runs with libgomp's defaults, in no cell.
const SCRUBBED_ENV: [&str; 13] = [
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
    "ALLOT_THROTTLE_CGROUP",
];

/// A C program built twice.
pub struct Programs {
    /// Built with `-D<define>` against liballot.
    pub with_allot: PathBuf,
    /// Built without it: nothing of allot is loaded.
    pub plain: PathBuf,
    /// The build directory.
    pub work: PathBuf,
}

impl Programs {
    /// `program` with the scrubbed environment and no broker: `require`
    /// blocks divide the CPUs among the process's own threads
    /// (`ALLOT_SOCKET` names a socket nobody listens on).
    pub fn command(&self, program: &Path) -> Command {
        let mut c = Command::new(program);
        for k in SCRUBBED_ENV {
            c.env_remove(k);
        }
        c.env("ALLOT_SOCKET", self.work.join("no-broker.sock"));
        c
    }

    /// [`Programs::command`] with liballot's preload shim, as
    /// docs/require.md says a program whose OpenMP teams should share its
    /// blocks runs: libgomp's threads then join the block they are made
    /// in, and are placed one per granted CPU. (Its waits then give the
    /// block back too, so threads that all wait at a barrier at once free
    /// it for a moment: a program that counts on a block excluding others
    /// for its whole length runs without it.)
    pub fn command_with_shim(&self, program: &Path) -> Command {
        let mut c = self.command(program);
        c.env("LD_PRELOAD", self.shim());
        c
    }

    /// liballot's preload shim, installed once in the build directory.
    fn shim(&self) -> &Path {
        static SHIM: OnceLock<PathBuf> = OnceLock::new();
        SHIM.get_or_init(|| {
            let dir = allot_proto::dirs::TrustedDir::create(&self.work.join("shim"), 0o700)
                .expect("a directory for the shim");
            allot_capi::install_shim(&dir).expect("the shim installed")
        })
    }

    /// Runs `program args` as [`Programs::command`] makes it; its stdout.
    pub fn run(&self, program: &Path, args: &[String]) -> String {
        run_stdout(self.command(program).args(args))
    }
}

/// Builds `benches/c/<name>.c` with gcc (`-O2 -fopenmp -pthread`, warnings
/// as errors) into `<target tmp>/<dir>/`: `<name>` with `-D<define>`
/// against liballot, `<name>_plain` without.
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
    Programs {
        with_allot,
        plain,
        work,
    }
}

/// The `key=value` fields of the first line of `out` whose first word is
/// `tag`; every other word of it must be a field.
pub fn fields(out: &str, tag: &str) -> BTreeMap<String, String> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(tag))
        .unwrap_or_else(|| panic!("no `{tag}` line in:\n{out}"));
    line.split_whitespace()
        .skip(1)
        .map(|f| {
            let (k, v) = f
                .split_once('=')
                .unwrap_or_else(|| panic!("malformed field {f:?} in {line:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// Field `key` of `f` as a number.
pub fn num(f: &BTreeMap<String, String>, key: &str) -> f64 {
    f.get(key)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} missing or not a number in {f:?}"))
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

/// A case-study bench's options: `--rounds N` (default 5) and the
/// program options `defaults` lists with their default values, passed on
/// to it; `--help` prints `usage` and exits. Returns whether it runs as a
/// benchmark (`cargo bench` passes `--bench`) rather than as a build check
/// (`cargo test --benches`), the rounds, and the program options.
pub fn options(name: &str, usage: &str, defaults: &[(&str, &str)]) -> (bool, usize, Vec<String>) {
    let mut bench = false;
    let mut rounds = 5usize;
    let mut size: Vec<String> = defaults
        .iter()
        .flat_map(|(k, v)| [k.to_string(), v.to_string()])
        .collect();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--bench" => bench = true,
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).unwrap_or(0),
            "--help" | "-h" => {
                println!("usage: {usage}");
                std::process::exit(0);
            }
            _ => {
                if let Some(i) = size.iter().step_by(2).position(|k| *k == a) {
                    size[2 * i + 1] = it.next().unwrap_or_default();
                }
            }
        }
    }
    if rounds == 0 {
        eprintln!("{name}: --rounds must be a positive number");
        std::process::exit(2);
    }
    (bench, rounds, size)
}
