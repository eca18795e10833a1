//! `allot demo`: what allot is for, in under two minutes.
//!
//! Runs a small mix of parallel programs the way people run them today —
//! all at once, each sized to the whole machine by its runtime's defaults —
//! and then under `allot run`, and prints each program's time, the mix's
//! makespan and throughput, and the ratio. It starts its own broker on a
//! private socket and leaves no cell, cgroup or process behind. The
//! programs are built with gcc on the first run and kept in the user's
//! workload cache (`allot_workloads::compile::default_dir`, emptied at
//! reboot), so later runs start at once.

use crate::bench::broker::PrivateBroker;
use crate::bench::jobs::{self, Mode, Tools, Work};
use crate::bench::mix::answer_of;
use crate::bench::runner;
use allot_workloads::Kernel;
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `allot demo`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Work scale of each program (1.0 ≈ 2–4 s alone on 2 CPUs).
    #[arg(long, default_value_t = DEFAULT_SCALE)]
    scale: f64,
    /// Enforcement backend of the demo's broker.
    #[arg(long, default_value = "auto", value_name = "BACKEND")]
    backend: String,
    /// Stop a run after this many seconds.
    #[arg(long, default_value_t = 75)]
    timeout: u64,
    /// Where the workloads are built and cached (a private directory;
    /// default: `workloads` in the user's state directory).
    #[arg(long, value_name = "DIR")]
    build_dir: Option<PathBuf>,
}

/// Default scale: keeps the whole demo under two minutes on a 2-CPU machine.
pub const DEFAULT_SCALE: f64 = 0.5;

/// The demo's mix: one program of each granularity class.
pub const MIX: [Kernel; 3] = [Kernel::Stencil, Kernel::Pricing, Kernel::Cluster];

fn secs(t: f64, timed_out: bool) -> String {
    if timed_out {
        format!("> {t:.0} s")
    } else {
        format!("{t:.1} s")
    }
}

/// Runs `allot demo`.
pub fn run(a: Args) -> i32 {
    match demo(a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("allot demo: {e}");
            if crate::bench::interrupt::requested() {
                130
            } else {
                1
            }
        }
    }
}

fn demo(a: Args) -> Result<i32, String> {
    crate::bench::interrupt::install();
    let machine = allot_topo::discover_live().map_err(|e| e.to_string())?;
    let work: Vec<Work> = MIX
        .iter()
        .map(|&kernel| Work::Kernel {
            kernel,
            scale: a.scale,
        })
        .collect();
    println!("allot demo on {}", machine.summary());
    println!();
    println!("Three OpenMP programs, each written to use every CPU (libgomp defaults):");
    for k in MIX {
        println!("  {:<9} {}", k.to_string(), k.description());
    }
    println!();
    let allot = crate::product()?;
    let cache = crate::bench::workload_cache(a.build_dir)?;
    let omp = allot_workloads::install_omp_binary(&cache)
        .map_err(|e| format!("cannot build the demo's programs: {e}"))?;
    let mut broker = PrivateBroker::start(&allot, &a.backend)?;
    let tools = Tools {
        allot,
        lab: crate::lab()?,
        omp,
        build_dir: cache.path().to_path_buf(),
        socket: broker.socket().to_path_buf(),
    };
    let limit = Duration::from_secs(a.timeout);

    let step = |title: &str, mode: Mode| -> Result<runner::RunResult, String> {
        print!("{title} … ");
        let _ = std::io::Write::flush(&mut std::io::stdout());
        let count = work.len();
        let cmds = work
            .iter()
            .enumerate()
            .map(|(index, w)| jobs::command(w, mode, jobs::Slot { index, count }, &tools))
            .collect();
        let r = match mode {
            Mode::Seq => runner::sequential(cmds, limit),
            _ => runner::concurrent(cmds, limit),
        }
        .map_err(|e| e.to_string())?;
        let late = r.jobs.iter().any(|j| j.timed_out);
        println!("{}", secs(r.makespan, late));
        Ok(r)
    };
    let seq = step(
        "1. one after the other (each alone on the machine)",
        Mode::Seq,
    )?;
    let plain = step(
        "2. all at once, as people run them today           ",
        Mode::Plain,
    )?;
    let run = step(
        "3. all at once, each under `allot run`             ",
        Mode::Run,
    )?;
    broker.wait_idle(Duration::from_secs(10));
    let clean = broker.stop();

    // Same answers everywhere, or the comparison means nothing.
    for (i, w) in work.iter().enumerate() {
        let alone = answer_of(&seq.jobs[i].stdout);
        for (name, r) in [("all at once", &plain), ("under allot", &run)] {
            let j = &r.jobs[i];
            if !j.timed_out && answer_of(&j.stdout) != alone {
                return Err(format!(
                    "{} gave a different answer {name}: {:?} vs {:?}",
                    w.label(),
                    answer_of(&j.stdout),
                    alone
                ));
            }
        }
    }

    println!();
    println!(
        "{:<10} {:>10} {:>13} {:>13}",
        "program", "alone", "all at once", "under allot"
    );
    for (i, w) in work.iter().enumerate() {
        println!(
            "{:<10} {:>10} {:>13} {:>13}",
            w.label(),
            secs(seq.jobs[i].seconds, seq.jobs[i].timed_out),
            secs(plain.jobs[i].seconds, plain.jobs[i].timed_out),
            secs(run.jobs[i].seconds, run.jobs[i].timed_out)
        );
    }
    let n = work.len() as f64;
    let tput = |r: &runner::RunResult| n * 60.0 / r.makespan;
    println!(
        "{:<10} {:>10} {:>13} {:>13}",
        "makespan",
        secs(seq.makespan, false),
        secs(plain.makespan, plain.jobs.iter().any(|j| j.timed_out)),
        secs(run.makespan, false)
    );
    println!(
        "{:<10} {:>10} {:>13} {:>13}",
        "jobs/min",
        format!("{:.1}", tput(&seq)),
        format!("{:.1}", tput(&plain)),
        format!("{:.1}", tput(&run))
    );
    println!();
    let vs_plain = plain.makespan / run.makespan;
    let vs_seq = seq.makespan / run.makespan;
    println!(
        "allot finished the mix {vs_plain:.1}x faster than running it all at once{} and {vs_seq:.2}x the speed of running it one after the other.",
        if plain.jobs.iter().any(|j| j.timed_out) {
            " (which was stopped early)"
        } else {
            ""
        }
    );
    println!(
        "Why: each program starts one thread per CPU, so together they put {} spinning threads on {} CPUs and wait at every barrier for threads that are not running; \
         allot gives each program its own share of the CPUs and sizes its OpenMP teams to that share.",
        work.len() * machine.num_cpus(),
        machine.num_cpus()
    );
    println!();
    println!(
        "{}",
        if clean {
            "cleaned up: the demo's broker is stopped; no cell, cgroup or process is left."
        } else {
            "cleaned up (the broker left cgroups behind; removed them)."
        }
    );
    Ok(0)
}
