//! Runs one workload kernel and prints its result line; for calibration
//! and measurements (the `allot workload` command does the same for users).
//!
//! ```text
//! cargo run -p allot-workloads --release --example workload -- <kernel> [scale] [allot|omp] [repeats]
//! ```
//!
//! `allot` (the default) runs on a pool of a standalone cell (the CPUs this
//! process may use; it never registers with a broker, so a measurement
//! cannot disturb someone else's experiment — `allot workload` is the
//! command that joins or registers); `omp` runs the installed OpenMP
//! program with the current environment.
//! With `repeats` > 1, runs that many times and prints a last line with the
//! median seconds.

use allot_workloads::{Kernel, KernelLib, Variant, install_omp_binary, run_allot, run_omp};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: workload <kernel> [scale] [allot|omp] [repeats]";
    let Some(kernel) = args.first() else {
        eprintln!("{usage}");
        return ExitCode::from(2);
    };
    let kernel: Kernel = match kernel.parse() {
        Ok(k) => k,
        Err(e) => {
            eprintln!("{e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    let scale: f64 = match args.get(1).map(|s| s.parse()) {
        None => 1.0,
        Some(Ok(s)) if allot_workloads::valid_scale(s) => s,
        Some(_) => {
            eprintln!("bad scale\n{usage}");
            return ExitCode::from(2);
        }
    };
    let variant = match args.get(2).map(String::as_str) {
        None | Some("allot") => Variant::Allot,
        Some("omp") => Variant::Omp,
        Some(v) => {
            eprintln!("unknown variant {v:?}\n{usage}");
            return ExitCode::from(2);
        }
    };
    let repeats: usize = args.get(3).and_then(|r| r.parse().ok()).unwrap_or(1).max(1);
    let mut times = Vec::new();
    let cache =
        allot_proto::dirs::TrustedDir::create(&allot_workloads::compile::default_dir(), 0o700)
            .expect("the build cache");
    match variant {
        Variant::Allot => {
            let pool = allot_runtime::Pool::builder()
                .cell(allot_client::Cell::standalone())
                .build()
                .expect("start allot's runtime");
            let kernels = KernelLib::load(&cache).expect("build and load the kernels");
            for _ in 0..repeats {
                let o = run_allot(&kernels, kernel, scale, &pool);
                println!("{}", o.line(kernel, variant));
                times.push(o.seconds);
            }
        }
        Variant::Omp => {
            let bin = install_omp_binary(&cache).expect("build the OpenMP program");
            for _ in 0..repeats {
                match run_omp(kernel, scale, &bin, std::iter::empty::<(&str, &str)>()) {
                    Ok(o) => {
                        println!("{}", o.line(kernel, variant));
                        times.push(o.seconds);
                    }
                    Err(e) => {
                        eprintln!("{e}");
                        return ExitCode::FAILURE;
                    }
                }
            }
        }
    }
    if repeats > 1 {
        times.sort_by(f64::total_cmp);
        println!("median seconds={:.3}", times[times.len() / 2]);
    }
    ExitCode::SUCCESS
}
