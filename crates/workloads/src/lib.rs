//! Workloads for allot's experiments: five parallel kernels covering the
//! PARSEC program classes of ars Table 1, written once in C against a tiny
//! parallel interface (`c/par.h`) and built two ways from the same files:
//!
//! - **OpenMP** ([`install_omp_binary`], [`run_omp`]): a standalone
//!   program, `allot-omp-workload <kernel> [scale]`, where every `par_for`
//!   is a `#pragma omp parallel for` under libgomp's defaults. Unmodified,
//!   it is what `allot run` confines and what a plain co-run
//!   oversubscribes.
//! - **allot** ([`KernelLib`], [`run_allot`]): the same kernels as a shared
//!   object loaded into this process, every `par_for` a fork/join region on
//!   an [`allot_runtime::Pool`] that follows the cell's grant.
//!
//! Neither is built with the crate: the crate carries the C sources as
//! text and compiles each product with gcc the first time it is needed,
//! into a cache directory ([`compile`]). So the `allot` binary builds and
//! runs without gcc or OpenMP; only the experiments and the demo need them.
//!
//! ```no_run
//! use allot_workloads::{Kernel, KernelLib, install_omp_binary, run_allot, run_omp};
//! let cache = allot_proto::dirs::TrustedDir::create(&allot_workloads::compile::default_dir(), 0o700).unwrap();
//! let pool = allot_runtime::Pool::builder()
//!     .cell(allot_client::Cell::auto("workload"))
//!     .build()
//!     .unwrap();
//! let kernels = KernelLib::load(&cache).unwrap();
//! let a = run_allot(&kernels, Kernel::Stencil, 1.0, &pool);
//! let bin = install_omp_binary(&cache).unwrap();
//! let o = run_omp(Kernel::Stencil, 1.0, &bin, [("OMP_NUM_THREADS", "2")]).unwrap();
//! assert_eq!(a.answer, o.answer);
//! ```
//!
//! Every kernel's answer (a 64-bit checksum of its result) is independent of
//! the number of workers and of the schedule, so all variants of one
//! kernel at one scale print the same answer (see `README.md`).

pub mod compile;
mod kernel;
mod kernel_lib;
mod omp;
mod par;

pub use kernel::{Class, Granularity, Kernel, Model, Schedule, UnknownKernel};
pub use kernel_lib::KernelLib;
pub use omp::{install_omp_binary, omp_args, run_omp};
pub use par::{ParBody, par_for, par_workers};

use allot_runtime::Pool;
use std::fmt;
use std::time::Instant;

/// Largest scale a kernel accepts (`WL_MAX_SCALE` in `c/wl.h`).
pub const MAX_SCALE: f64 = 1000.0;

/// Whether `scale` is one the kernels accept: finite, in `(0, MAX_SCALE]`.
pub fn valid_scale(scale: f64) -> bool {
    scale > 0.0 && scale <= MAX_SCALE
}

/// What one kernel run reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KernelRun {
    /// Wall-clock time of the kernel itself (set-up included, process
    /// start excluded).
    pub seconds: f64,
    /// Checksum of the kernel's result; equal across variants, worker
    /// counts and schedules for one kernel and scale.
    pub answer: u64,
    /// Threads or workers: `omp_get_max_threads()` for OpenMP, the pool's
    /// active workers when the run started for allot.
    pub workers: usize,
    /// Parallel regions (`par_for` calls) the run made.
    pub regions: u64,
    /// allot only: regions handed to the other workers because the worker
    /// running the kernel had lost its CPU to a grant change (0 for OpenMP).
    pub handed_off: u64,
}

/// Which build ran a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// The OpenMP program.
    Omp,
    /// Linked with allot's runtime.
    Allot,
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(match self {
            Variant::Omp => "omp",
            Variant::Allot => "allot",
        })
    }
}

/// A parsed result line.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Line {
    /// The kernel that ran.
    pub kernel: Kernel,
    /// The build that ran it.
    pub variant: Variant,
    /// What it reported.
    pub outcome: KernelRun,
}

impl KernelRun {
    /// The result line both variants print:
    /// `workload=<k> variant=<v> threads=<n> seconds=<s> answer=<16 hex> regions=<n>`.
    pub fn line(&self, kernel: Kernel, variant: Variant) -> String {
        format!(
            "workload={kernel} variant={variant} threads={} seconds={:.6} answer={:016x} regions={}",
            self.workers, self.seconds, self.answer, self.regions
        )
    }
}

/// Why a result line did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadLine(String);

impl fmt::Display for BadLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "bad workload result line: {}", self.0)
    }
}

impl std::error::Error for BadLine {}

/// Parses a result line ([`KernelRun::line`]'s format). `regions` may be
/// missing (0); unknown `key=value` fields are ignored.
pub fn parse_line(line: &str) -> Result<Line, BadLine> {
    let mut kernel = None;
    let mut variant = None;
    let (mut workers, mut seconds, mut answer, mut regions) = (None, None, None, 0);
    for field in line.split_whitespace() {
        let Some((key, value)) = field.split_once('=') else {
            return Err(BadLine(format!("field {field:?} is not key=value")));
        };
        let bad = |what: &str| BadLine(format!("{key}={value:?} is not {what}"));
        match key {
            "workload" => {
                kernel = Some(
                    value
                        .parse::<Kernel>()
                        .map_err(|e| BadLine(e.to_string()))?,
                )
            }
            "variant" => {
                variant = Some(match value {
                    "omp" => Variant::Omp,
                    "allot" => Variant::Allot,
                    _ => return Err(bad("omp or allot")),
                })
            }
            "threads" => workers = Some(value.parse().map_err(|_| bad("a count"))?),
            "seconds" => {
                seconds = Some(
                    value
                        .parse::<f64>()
                        .ok()
                        .filter(|s| s.is_finite() && *s >= 0.0)
                        .ok_or_else(|| bad("a duration"))?,
                )
            }
            "answer" if value.len() == 16 => {
                answer = Some(u64::from_str_radix(value, 16).map_err(|_| bad("16 hex digits"))?)
            }
            "answer" => return Err(bad("16 hex digits")),
            "regions" => regions = value.parse().map_err(|_| bad("a count"))?,
            _ => {}
        }
    }
    let missing = |k: &str| BadLine(format!("no {k}= field"));
    Ok(Line {
        kernel: kernel.ok_or_else(|| missing("workload"))?,
        variant: variant.ok_or_else(|| missing("variant"))?,
        outcome: KernelRun {
            seconds: seconds.ok_or_else(|| missing("seconds"))?,
            answer: answer.ok_or_else(|| missing("answer"))?,
            workers: workers.ok_or_else(|| missing("threads"))?,
            regions,
            handed_off: 0,
        },
    })
}

/// Runs `kernel` (from `kernels`, see [`KernelLib::load`]) at `scale` on
/// `pool` and returns the outcome: the kernel
/// runs as one task on a worker, which takes part in every parallel region
/// (fork/join over the region's chunks); if that worker's CPU is revoked,
/// later regions run on the other workers (see [`KernelRun::handed_off`]).
/// One run at a time per process: a concurrent call waits for the run in
/// progress.
///
/// The pool normally comes from
/// `Pool::builder().cell(allot_client::Cell::auto("workload")).build()`,
/// which joins the cell `allot run` made, or registers with the broker, or
/// runs standalone.
///
/// # Panics
/// If `scale` is not [`valid_scale`], or the kernel fails (out of memory,
/// or a failed self-check, which would be a bug).
pub fn run_allot(kernels: &KernelLib, kernel: Kernel, scale: f64, pool: &Pool) -> KernelRun {
    assert!(
        valid_scale(scale),
        "workload scale {scale} is outside (0, {MAX_SCALE}]"
    );
    let workers = pool.workers();
    let entry = kernels.entry(kernel);
    let ((rc, answer, seconds), stats) = par::with_pool(pool, kernel.omp_schedule(), || {
        let mut answer = 0u64;
        let start = Instant::now();
        // SAFETY: `entry` is a `wl_*` kernel: it reads `scale` and writes
        // one u64 through the pointer, which is valid for the call. Its
        // `par_for` calls find `pool` in the slot `with_pool` filled.
        let rc = unsafe { entry(scale, &mut answer) };
        (rc, answer, start.elapsed().as_secs_f64())
    });
    assert!(
        rc == 0,
        "workload kernel {kernel} failed: {}",
        kernel::status_message(rc)
    );
    KernelRun {
        seconds,
        answer,
        workers,
        regions: stats.regions,
        handed_off: stats.handed_off,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        let o = KernelRun {
            seconds: 2.5,
            answer: 0x0123_4567_89ab_cdef,
            workers: 2,
            regions: 75001,
            handed_off: 0,
        };
        for v in [Variant::Omp, Variant::Allot] {
            let line = o.line(Kernel::Anneal, v);
            let p = parse_line(&line).unwrap();
            assert_eq!(p.kernel, Kernel::Anneal);
            assert_eq!(p.variant, v);
            assert_eq!(p.outcome, o);
        }
        let spec = "workload=stencil variant=omp threads=2 seconds=0.5 answer=00000000000000ff";
        assert_eq!(parse_line(spec).unwrap().outcome.regions, 0);
        for bad in [
            "",
            "workload=nope variant=omp threads=2 seconds=1 answer=00000000000000ff",
            "workload=stencil variant=omp threads=2 seconds=1 answer=ff",
            "workload=stencil variant=omp threads=x seconds=1 answer=00000000000000ff",
            "workload=stencil variant=omp threads=2 seconds=-1 answer=00000000000000ff",
            "workload=stencil variant=omp threads=2 answer=00000000000000ff",
            "workload=stencil junk",
        ] {
            assert!(parse_line(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn scales() {
        assert!(valid_scale(1.0) && valid_scale(MAX_SCALE) && valid_scale(1e-6));
        for s in [0.0, -1.0, f64::NAN, f64::INFINITY, MAX_SCALE * 1.01] {
            assert!(!valid_scale(s), "{s}");
        }
    }
}
