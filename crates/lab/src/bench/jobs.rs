//! What a job is and how each mode runs it.
//!
//! A job is either one of allot's workloads (a kernel at a scale) or an
//! external command line. Modes:
//!
//! | mode | how the job runs |
//! |------|------------------|
//! | `plain` | the OpenMP binary (or the command) as is: libgomp defaults, every job sized to the whole machine, all jobs at once |
//! | `seq` | the same, one job after the other |
//! | `run` | `allot run -- <same>`: unmodified binary in a cell, OpenMP shim on (`OMP_NUM_THREADS` = cell maximum, teams capped to the grant) |
//! | `run-grant` | `allot run --no-shim --launch-threads grant`: thread variables set to the grant at the instant of launch, no shim (the ARS "dynamic parallelism" model) |
//! | `run-share` | `allot run --no-shim --launch-threads share`: thread variables set by the launch rule (the cell's fair share), no shim |
//! | `run-max` | `allot run --no-shim --launch-threads max`: thread variables set to the cell's maximum, no shim (confinement alone) |
//! | `runtime` | the workload's allot-runtime variant (`allot-lab workload --variant allot`), registering its own cell; external commands fall back to `run` |
//! | `one` | as `plain`, with every thread-count variable (`OMP_NUM_THREADS`, `OPENBLAS_NUM_THREADS`, `MKL_NUM_THREADS`…) set to 1: the careful user's fix for co-running parallel programs |
//! | `split` | a static CPU split: job *k* of *n* pinned (affinity) to its share of the CPUs — ⌈C/n⌉ or ⌊C/n⌋ consecutive CPUs when n ≤ C, CPU *k* mod C otherwise — with every thread-count variable set to that many |
//! | `dynamic` | as `plain`, with `OMP_DYNAMIC=true` (libgomp sizes each team to the idle CPUs it sees) |
//!
//! Every setting of the baselines is written down here and in the report:
//! `plain` and `seq` set no `OMP_*` variable, so libgomp uses one thread per
//! online CPU and its default wait policy.

use allot_workloads::Kernel;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;
use std::str::FromStr;

/// One job of a mix.
#[derive(Debug, Clone, PartialEq)]
pub enum Work {
    /// An allot workload.
    Kernel {
        /// Which of the workload kernels to run.
        kernel: Kernel,
        /// Work scale (1.0 ≈ 2–4 s alone on 2 CPUs).
        scale: f64,
    },
    /// A user's command, run through `sh -c`.
    Command {
        /// Label in reports.
        label: String,
        /// The command line.
        line: String,
    },
}

impl Work {
    /// Short label for tables.
    pub fn label(&self) -> String {
        match self {
            Work::Kernel { kernel, .. } => kernel.to_string(),
            Work::Command { label, .. } => label.clone(),
        }
    }

    /// Parses `kernel`, `kernel@scale`, or `cmd:LABEL=COMMAND LINE` /
    /// `cmd:COMMAND LINE`.
    pub fn parse(s: &str, default_scale: f64) -> Result<Work, String> {
        if let Some(rest) = s.strip_prefix("cmd:") {
            let (label, line) = match rest.split_once('=') {
                Some((l, c)) if !l.contains(' ') && !l.is_empty() => (l.to_string(), c.to_string()),
                _ => (
                    rest.split_whitespace().next().unwrap_or("cmd").to_string(),
                    rest.to_string(),
                ),
            };
            if line.trim().is_empty() {
                return Err(format!("{s:?}: empty command"));
            }
            return Ok(Work::Command { label, line });
        }
        let (name, scale) = match s.split_once('@') {
            Some((n, sc)) => (
                n,
                sc.parse::<f64>()
                    .map_err(|_| format!("{s:?}: bad scale {sc:?}"))?,
            ),
            None => (s, default_scale),
        };
        if !(scale > 0.0 && scale < 1000.0) {
            return Err(format!("{s:?}: scale must be positive"));
        }
        let kernel = Kernel::from_str(name).map_err(|e| format!("{s:?}: {e}"))?;
        Ok(Work::Kernel { kernel, scale })
    }
}

/// How a mix is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mode {
    /// Everything at once, defaults.
    Plain,
    /// One after the other, defaults.
    Seq,
    /// Under `allot run` with the shim.
    Run,
    /// Under `allot run`, no shim, variables = the grant at launch.
    RunGrant,
    /// Under `allot run`, no shim, variables = the launch rule (the share).
    RunShare,
    /// Under `allot run`, no shim, variables = the cell's maximum.
    RunMax,
    /// allot's runtime variant.
    Runtime,
    /// Every thread-count variable 1.
    One,
    /// A static CPU split.
    Split,
    /// `OMP_DYNAMIC=true`.
    Dynamic,
}

/// Which job of how many a command is (for `split`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Position, from 0.
    pub index: usize,
    /// Jobs in the run.
    pub count: usize,
}

/// Job `slot`'s share of `allowed` CPUs in the `split` mode.
pub fn split_cpus(allowed: &allot_topo::CpuSet, slot: Slot) -> allot_topo::CpuSet {
    let cpus: Vec<usize> = allowed.iter().collect();
    let c = cpus.len().max(1);
    let n = slot.count.max(1);
    if n > c {
        return std::iter::once(cpus[slot.index % c]).collect();
    }
    let from = slot.index * c / n;
    let to = (slot.index + 1) * c / n;
    cpus[from..to.max(from + 1)].iter().copied().collect()
}

impl Mode {
    /// Every mode, in report order.
    pub const ALL: [Mode; 10] = [
        Mode::Plain,
        Mode::Seq,
        Mode::Run,
        Mode::RunGrant,
        Mode::RunShare,
        Mode::RunMax,
        Mode::Runtime,
        Mode::One,
        Mode::Split,
        Mode::Dynamic,
    ];

    /// Name used on the command line and in CSV.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plain => "plain",
            Mode::Seq => "seq",
            Mode::Run => "run",
            Mode::RunGrant => "run-grant",
            Mode::RunShare => "run-share",
            Mode::RunMax => "run-max",
            Mode::Runtime => "runtime",
            Mode::One => "one",
            Mode::Split => "split",
            Mode::Dynamic => "dynamic",
        }
    }

    /// The ways to run a mix without allot (what a careful user would
    /// pick from).
    pub const BASELINES: [Mode; 5] = [
        Mode::Plain,
        Mode::Seq,
        Mode::One,
        Mode::Split,
        Mode::Dynamic,
    ];

    /// Short name for chart legends.
    pub fn legend(self) -> &'static str {
        match self {
            Mode::Plain => "plain co-run",
            Mode::Seq => "one after the other",
            Mode::Run => "allot run",
            Mode::RunGrant => "allot run, no shim, grant at launch",
            Mode::RunShare => "allot run, no shim, share at launch",
            Mode::RunMax => "allot run, no shim, maximum at launch",
            Mode::Runtime => "allot's runtime",
            Mode::One => "one thread each",
            Mode::Split => "static CPU split",
            Mode::Dynamic => "OMP_DYNAMIC",
        }
    }

    /// Whether the mode needs the broker.
    pub fn uses_broker(self) -> bool {
        matches!(
            self,
            Mode::Run | Mode::RunGrant | Mode::RunShare | Mode::RunMax | Mode::Runtime
        )
    }
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!(
                    "unknown mode {s:?}: expected plain, seq, run, run-grant, runtime, one, split or dynamic"
                )
            })
    }
}

/// Paths the commands need.
#[derive(Debug, Clone)]
pub struct Tools {
    /// The `allot` binary.
    pub allot: PathBuf,
    /// The `allot-lab` binary (for `allot-lab workload`).
    pub lab: PathBuf,
    /// The OpenMP workload binary (in the build cache).
    pub omp: PathBuf,
    /// The workloads' build cache, passed to `allot-lab workload --build-dir`
    /// (which finds the kernels for allot's runtime there).
    pub build_dir: PathBuf,
    /// The experiment's broker socket.
    pub socket: PathBuf,
}

/// The command for `work` in `mode`, as job `slot` of its run.
pub fn command(work: &Work, mode: Mode, slot: Slot, tools: &Tools) -> Command {
    let base: Vec<OsString> = match work {
        Work::Kernel { kernel, scale } => vec![
            tools.omp.clone().into(),
            kernel.to_string().into(),
            format!("{scale}").into(),
        ],
        Work::Command { line, .. } => vec!["sh".into(), "-c".into(), line.into()],
    };
    let allot_run = |extra: &[&str]| {
        let mut c = Command::new(&tools.allot);
        c.arg("run")
            .args(extra)
            .arg("--name")
            .arg(work.label())
            .arg("--")
            .args(&base);
        c
    };
    let mut c = match (mode, work) {
        (Mode::Plain | Mode::Seq | Mode::One | Mode::Split | Mode::Dynamic, _) => {
            let mut c = Command::new(&base[0]);
            c.args(&base[1..]);
            c
        }
        (Mode::Run, _) | (Mode::Runtime, Work::Command { .. }) => allot_run(&[]),
        (Mode::RunGrant, _) => allot_run(&["--no-shim", "--launch-threads", "grant"]),
        (Mode::RunShare, _) => allot_run(&["--no-shim", "--launch-threads", "share"]),
        (Mode::RunMax, _) => allot_run(&["--no-shim", "--launch-threads", "max"]),
        (Mode::Runtime, Work::Kernel { kernel, scale }) => {
            let mut c = Command::new(&tools.lab);
            c.args(["workload", "--variant", "allot", "--build-dir"])
                .arg(&tools.build_dir)
                .arg("--scale")
                .arg(format!("{scale}"))
                .arg(kernel.to_string());
            c
        }
    };
    // Baselines run with the runtime defaults: nothing allot sets leaks in.
    for v in allot_capi::environ::thread_vars() {
        c.env_remove(v);
    }
    c.env_remove(allot_proto::env::CELL)
        .env_remove(allot_proto::env::GRANT_FD)
        .env_remove("LD_PRELOAD");
    if mode.uses_broker() {
        c.env(allot_proto::env::SOCKET, &tools.socket);
    }
    let threads = |c: &mut Command, n: usize| {
        for v in allot_capi::environ::thread_vars() {
            c.env(v, n.to_string());
        }
    };
    match mode {
        Mode::One => threads(&mut c, 1),
        Mode::Dynamic => {
            c.env("OMP_DYNAMIC", "true");
        }
        Mode::Split => {
            let allowed =
                allot_topo::allowed_cpus().unwrap_or_else(|_| allot_topo::CpuSet::first_n(1));
            let mine = split_cpus(&allowed, slot);
            threads(&mut c, mine.len());
            // SAFETY: sched_setaffinity is async-signal-safe and the set is
            // computed before the fork.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
                    let mut set = rustix::thread::CpuSet::new();
                    for cpu in mine.iter() {
                        set.set(cpu);
                    }
                    rustix::thread::sched_setaffinity(None, &set)?;
                    Ok(())
                });
            }
        }
        _ => {}
    }
    c
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_work() {
        assert_eq!(
            Work::parse("stencil", 1.0),
            Ok(Work::Kernel {
                kernel: Kernel::Stencil,
                scale: 1.0
            })
        );
        assert_eq!(
            Work::parse("pricing@0.5", 1.0),
            Ok(Work::Kernel {
                kernel: Kernel::Pricing,
                scale: 0.5
            })
        );
        assert_eq!(
            Work::parse("cmd:xz=xz -T0 -c f > /dev/null", 1.0),
            Ok(Work::Command {
                label: "xz".into(),
                line: "xz -T0 -c f > /dev/null".into()
            })
        );
        assert_eq!(
            Work::parse("cmd:sleep 1", 1.0),
            Ok(Work::Command {
                label: "sleep".into(),
                line: "sleep 1".into()
            })
        );
        assert!(Work::parse("nosuch", 1.0).is_err());
        assert!(Work::parse("stencil@-1", 1.0).is_err());
        assert!(Work::parse("cmd:", 1.0).is_err());
        for m in Mode::ALL {
            assert_eq!(m.name().parse::<Mode>(), Ok(m));
        }
    }

    #[test]
    fn a_static_split_gives_each_job_its_own_share() {
        let two = allot_topo::CpuSet::first_n(2);
        let at = |index, count| split_cpus(&two, Slot { index, count }).to_string();
        assert_eq!(
            (at(0, 4), at(1, 4), at(2, 4), at(3, 4)),
            ("0".into(), "1".into(), "0".into(), "1".into())
        );
        assert_eq!((at(0, 2), at(1, 2)), ("0".into(), "1".into()));
        assert_eq!(at(0, 1), "0-1");
        let eight = allot_topo::CpuSet::first_n(8);
        let at8 = |index, count| split_cpus(&eight, Slot { index, count }).to_string();
        assert_eq!(
            (at8(0, 3), at8(1, 3), at8(2, 3)),
            ("0-1".into(), "2-4".into(), "5-7".into())
        );
    }
}
