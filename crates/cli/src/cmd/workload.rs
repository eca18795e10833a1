//! `allot workload`: run one of allot's workloads (used by `allot bench`
//! and the demo; handy for trying the runtime by hand).
//!
//! `--variant allot` runs the kernel on allot's runtime inside this process
//! (joining the cell `allot run` made, else registering with the broker,
//! else standalone); `--variant omp` runs the OpenMP build with libgomp
//! defaults. Both print one line:
//! `workload=K variant=V threads=N seconds=S answer=HEX`.

use allot_workloads::Kernel;

/// Arguments of `allot workload`.
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
}

/// Runs `allot workload`.
pub fn run(a: Args) -> i32 {
    match a.variant.as_str() {
        "allot" => {
            let cell = allot_client::Cell::auto(&format!("{}", a.kernel));
            let pool = match allot_runtime::Pool::builder().cell(cell).build() {
                Ok(p) => p,
                Err(e) => return super::fail(anyhow::anyhow!("cannot start allot's runtime: {e}")),
            };
            if !allot_workloads::valid_scale(a.scale) {
                eprintln!(
                    "allot: --scale {} is out of range (0 to {})",
                    a.scale,
                    allot_workloads::MAX_SCALE
                );
                return 2;
            }
            let o = allot_workloads::run_allot(a.kernel, a.scale, &pool);
            println!("{}", o.line(a.kernel, allot_workloads::Variant::Allot));
            0
        }
        "omp" => {
            let path = allot_proto::default_state_dir().join("bin");
            let dir = match allot_proto::dirs::TrustedDir::create(&path, 0o700) {
                Ok(d) => d,
                Err(e) => return super::fail(anyhow::anyhow!("refusing {}: {e}", path.display())),
            };
            let bin = match allot_workloads::install_omp_binary(&dir) {
                Ok(b) => b,
                Err(e) => {
                    return super::fail(anyhow::anyhow!(
                        "cannot install the OpenMP workloads in {}: {e}",
                        dir.path().display()
                    ));
                }
            };
            use std::os::unix::process::CommandExt;
            let err = std::process::Command::new(bin)
                .arg(a.kernel.to_string())
                .arg(format!("{}", a.scale))
                .exec();
            super::fail(anyhow::anyhow!("cannot run the OpenMP workload: {err}"))
        }
        other => {
            eprintln!("allot: --variant {other:?}: expected allot or omp");
            2
        }
    }
}
