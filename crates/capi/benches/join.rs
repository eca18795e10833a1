//! The join case study of `require` (Poli-C §7.4): concurrent hash joins,
//! half cache-sensitive (radix) and half not (no-partition), run the ways
//! a user could run them and with `allot_strong_numa_node()` /
//! `allot_weak_numa_node()`. See docs/benchmarks.md, "Hash joins", and the
//! comment at the top of `benches/c/join.c`.
//!
//! ```text
//! cargo bench -p allot-capi --bench join [-- --rounds N --joins J --r TUPLES --s TUPLES]
//! ```
//!
//! Variants: `plain` (every join at once with a thread per CPU),
//! `single` (every join at once, one thread each), `serial` (one join at a
//! time), `pairs` (two joins at a time, any kinds), and `allot` (each join
//! inside its class's policy: the other class never shares its cores, at
//! most two joins per core). Every variant runs once per round, the order
//! rotating. The table gives the median makespan and its range, the
//! throughput over the makespan, and the summed per-join throughput of
//! each kind (tuples over each join's own run).
//!
//! Run by `cargo test --benches` (without `--bench`), it only checks that
//! the programs build and join correctly on small relations.

#[path = "support/case.rs"]
mod case;

use case::{fields, median, num};

fn main() {
    let (bench, rounds, size) = case::options(
        "join",
        "cargo bench -p allot-capi --bench join [-- --rounds N --joins J --r TUPLES --s TUPLES]",
        &[("--joins", "8"), ("--r", "4194304"), ("--s", "16777216")],
    );
    let p = case::build("join", "JOIN_ALLOT", "join_bench");
    let variants = ["plain", "single", "serial", "pairs", "allot"];
    let program = |v: &str| {
        if v == "allot" {
            &p.with_allot
        } else {
            &p.plain
        }
    };
    if !bench {
        let small = ["--joins", "4", "--r", "4096", "--s", "16384"].map(String::from);
        for v in variants {
            // The program checks every join's matches and payload sum.
            let out = p.run(program(v), &[vec![v.to_string()], small.to_vec()].concat());
            assert_eq!(num(&fields(&out, "result"), "joins"), 4.0);
        }
        println!("join: the five variants build, run and join correctly");
        return;
    }
    let mut tput = vec![Vec::new(); variants.len()];
    let mut radix = vec![Vec::new(); variants.len()];
    let mut nopart = vec![Vec::new(); variants.len()];
    let times = case::rounds(variants.len(), rounds, |v| {
        let out = p.run(
            program(variants[v]),
            &[vec![variants[v].to_string()], size.clone()].concat(),
        );
        let f = fields(&out, "result");
        tput[v].push(num(&f, "mtuples_per_s"));
        radix[v].push(num(&f, "radix_mtps"));
        nopart[v].push(num(&f, "nopart_mtps"));
        num(&f, "seconds")
    });
    let allot = median(&times[variants.len() - 1]);
    println!(
        "\n{} joins of {} x {} tuples on {} CPUs, {rounds} rounds (median, range):\n",
        size[1],
        size[3],
        size[5],
        allot_testkit::cpus()
    );
    println!(
        "| variant | makespan | range | Mtuples/s | radix joins, Mtuples/s | no-partition joins, Mtuples/s | makespan × allot |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (v, name) in variants.iter().enumerate() {
        let t = &times[v];
        let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = t.iter().copied().fold(0.0, f64::max);
        println!(
            "| {name} | {:.2} s | {lo:.2}–{hi:.2} | {:.1} | {:.1} | {:.1} | {:.2} |",
            median(t),
            median(&tput[v]),
            median(&radix[v]),
            median(&nopart[v]),
            median(t) / allot
        );
    }
}
