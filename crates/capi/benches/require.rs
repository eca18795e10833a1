//! Cost of entering and leaving a `require` block from C, against a pair
//! of `sched_setaffinity` calls measured in the same process (what a block
//! that confines its thread to one CPU must do on entry and on exit).
//!
//! Installs this build's liballot with `install-liballot.sh --from`,
//! compiles `benches/c/require_cost.c` with `gcc -O2`, runs it once (no
//! broker: a standalone runtime) and prints its table: per configuration
//! the median ns per enter+leave over the rounds, with the fastest and
//! slowest round. `ALLOT_BENCH_ROUNDS` (21) and `ALLOT_BENCH_ITERS` (20000)
//! change the sizes.

#[path = "../tests/support/liballot.rs"]
mod liballot;

use liballot::run_stdout;
use std::path::Path;
use std::process::Command;

fn main() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("require_cost");
    let prefix = work.join("prefix");
    liballot::install(&prefix);
    let bin = work.join("require_cost");
    run_stdout(&mut liballot::gcc_against(
        &prefix,
        &crate_dir.join("benches/c/require_cost.c"),
        &bin,
        &[],
    ));
    let rounds = std::env::var("ALLOT_BENCH_ROUNDS").unwrap_or_else(|_| "21".into());
    let iters = std::env::var("ALLOT_BENCH_ITERS").unwrap_or_else(|_| "20000".into());
    let out = run_stdout(
        Command::new(&bin)
            .args([&rounds, &iters])
            .env("ALLOT_SOCKET", work.join("no-broker.sock"))
            .env_remove("ALLOT_CELL")
            .env_remove("ALLOT_GRANT_FD")
            .env_remove("LD_PRELOAD"),
    );
    let rows: Vec<(String, f64, f64, f64)> = out
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some((
                f.first()?.to_string(),
                f.get(1)?.parse().ok()?,
                f.get(2)?.parse().ok()?,
                f.get(3)?.parse().ok()?,
            ))
        })
        .collect();
    let base = rows
        .iter()
        .find(|r| r.0.contains("baseline"))
        .map_or(1.0, |r| r.1);
    println!("rounds {rounds}, {iters} enter+leave per round; ns per enter+leave");
    println!("| configuration | median ns | fastest–slowest round | × baseline |");
    println!("|---|---:|---:|---:|");
    for (name, med, lo, hi) in rows {
        println!(
            "| {name} | {med:.0} | {lo:.0}–{hi:.0} | {:.2} |",
            med / base
        );
    }
}
