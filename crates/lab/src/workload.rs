//! `allot-lab workload`: run one of allot's workloads (used by `allot bench`
//! and the demo; handy for trying the runtime by hand).
//!
//! `--variant allot` runs the kernel on allot's runtime inside this process
//! (joining the cell `allot run` made, else registering with the broker,
//! else standalone); `--variant omp` runs the OpenMP build with libgomp
//! defaults. Both print one line:
//! `workload=K variant=V threads=N seconds=S answer=HEX`.
//!
//! Neither is part of a binary: each is compiled with gcc from the
//! sources `allot-lab` carries the first time it is needed, into the
//! build cache (`--build-dir`, by default `workloads` in the user's state
//! directory), and reused from there.

use allot_workloads::{Kernel, KernelLib, Variant};
use std::path::PathBuf;

/// Arguments of `allot-lab workload`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// pricing, stencil, pipeline, anneal or cluster.
    kernel: Kernel,
    /// Work scale (1.0 ≈ 2–4 s alone on 2 CPUs).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// allot (allot's runtime) or omp (the OpenMP build).
    #[arg(long, default_value = "allot", value_name = "allot|omp")]
    variant: String,
    /// Where the workloads are built and cached (a private directory;
    /// default: `workloads` in the user's state directory).
    #[arg(long, value_name = "DIR")]
    build_dir: Option<PathBuf>,
}

/// Runs `allot-lab workload`.
pub fn run(a: Args) -> i32 {
    if !allot_workloads::valid_scale(a.scale) {
        eprintln!(
            "allot: --scale {} is out of range (0 to {})",
            a.scale,
            allot_workloads::MAX_SCALE
        );
        return 2;
    }
    let variant = match a.variant.as_str() {
        "allot" => Variant::Allot,
        "omp" => Variant::Omp,
        other => {
            eprintln!("allot: --variant {other:?}: expected allot or omp");
            return 2;
        }
    };
    let cache = match crate::bench::workload_cache(a.build_dir) {
        Ok(d) => d,
        Err(e) => return fail(anyhow::anyhow!("{e}")),
    };
    match variant {
        Variant::Allot => {
            let kernels = match KernelLib::load(&cache) {
                Ok(k) => k,
                Err(e) => return fail(anyhow::anyhow!("{e}")),
            };
            let cell = allot_client::Cell::auto(&format!("{}", a.kernel));
            let pool = match allot_runtime::Pool::builder().cell(cell).build() {
                Ok(p) => p,
                Err(e) => return fail(anyhow::anyhow!("cannot start allot's runtime: {e}")),
            };
            let o = allot_workloads::run_allot(&kernels, a.kernel, a.scale, &pool);
            println!("{}", o.line(a.kernel, Variant::Allot));
            0
        }
        Variant::Omp => {
            let bin = match allot_workloads::install_omp_binary(&cache) {
                Ok(b) => b,
                Err(e) => return fail(anyhow::anyhow!("{e}")),
            };
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new(bin)
                .arg(a.kernel.to_string())
                .arg(format!("{}", a.scale))
                .exec();
            fail(anyhow::anyhow!("cannot run the OpenMP workload: {err}"))
        }
    }
}

/// Prints `err` with its causes as `allot-lab: …` and returns exit code 1.
fn fail(err: anyhow::Error) -> i32 {
    eprintln!("allot-lab: {err:#}");
    1
}
