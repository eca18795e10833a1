//! The QR case study of `require` (Poli-C §7.1): a tall-skinny QR whose
//! blocks are factored by outer workers, each with an inner OpenMP team,
//! run the ways a user could run it and with `allot_numa_nodes(1)`. See
//! docs/benchmarks.md, "QR decomposition", and the comment at the top of
//! `benches/c/qr.c`.
//!
//! ```text
//! cargo bench -p allot-capi --bench qr [-- --rounds N --blocks B --rows M --cols N]
//! ```
//!
//! Variants: `baseline` (as many outer workers as CPUs, each with an
//! OpenMP team as large: both libraries' defaults), the two by-hand
//! settings whose product is the CPU count (`outer CPUs × inner 1` and
//! `outer 1 × inner CPUs`), and `allot` (as many outer workers as CPUs,
//! each inside `require(numa_nodes(1))` with a team of the node's cores).
//! Every variant runs once per round, the order rotating; the table gives
//! the median time over the rounds, its range, and each median over
//! allot's. Every run must produce the same R (its checksum).
//!
//! Run by `cargo test --benches` (without `--bench`), it only checks that
//! the programs build and agree on a small matrix.

#[path = "support/case.rs"]
mod case;

use case::{fields, median, num};

fn main() {
    let (bench, rounds, size) = case::options(
        "qr",
        "cargo bench -p allot-capi --bench qr [-- --rounds N --blocks B --rows M --cols N]",
        &[("--blocks", "32"), ("--rows", "4096"), ("--cols", "256")],
    );
    let p = case::build("qr", "QR_ALLOT", "qr_bench");
    let cpus = allot_testkit::cpus().to_string();
    let variants: Vec<(String, bool, Vec<String>)> = vec![
        ("baseline".into(), false, vec!["baseline".into()]),
        (
            format!("by hand: outer {cpus} x inner 1"),
            false,
            ["byhand", "--outer", &cpus, "--inner", "1"]
                .map(String::from)
                .to_vec(),
        ),
        (
            format!("by hand: outer 1 x inner {cpus}"),
            false,
            ["byhand", "--outer", "1", "--inner", &cpus]
                .map(String::from)
                .to_vec(),
        ),
        (
            "allot: require(numa_nodes(1))".into(),
            true,
            vec!["allot".into()],
        ),
    ];
    if !bench {
        let small = ["--blocks", "4", "--rows", "256", "--cols", "32"].map(String::from);
        let sums: Vec<String> = variants
            .iter()
            .map(|(_, allot, args)| {
                let prog = if *allot { &p.with_allot } else { &p.plain };
                let out = p.run(prog, &[args.clone(), small.to_vec()].concat());
                fields(&out, "result")["checksum"].clone()
            })
            .collect();
        assert!(
            sums.iter().all(|s| *s == sums[0]),
            "the variants disagree: {sums:?}"
        );
        println!("qr: the four variants build, run and agree");
        return;
    }
    let mut checksum: Option<String> = None;
    let mut gflops = vec![Vec::new(); variants.len()];
    let times = case::rounds(variants.len(), rounds, |v| {
        let (_, allot, args) = &variants[v];
        let prog = if *allot { &p.with_allot } else { &p.plain };
        let out = p.run(prog, &[args.clone(), size.clone()].concat());
        let f = fields(&out, "result");
        let sum = f["checksum"].clone();
        assert_eq!(
            checksum.get_or_insert_with(|| sum.clone()),
            &sum,
            "{} computed another R",
            variants[v].0
        );
        gflops[v].push(num(&f, "gflops"));
        num(&f, "seconds")
    });
    let allot = median(&times[variants.len() - 1]);
    println!(
        "\nQR of {} blocks of {} x {} on {cpus} CPUs, {rounds} rounds (median, range):\n",
        size[1], size[3], size[5]
    );
    println!("| variant | time | range | GFLOP/s | × allot |");
    println!("|---|---:|---:|---:|---:|");
    for (v, (name, _, _)) in variants.iter().enumerate() {
        let t = &times[v];
        let lo = t.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = t.iter().copied().fold(0.0, f64::max);
        println!(
            "| {name} | {:.2} s | {lo:.2}–{hi:.2} | {:.2} | {:.2} |",
            median(t),
            median(&gflops[v]),
            median(t) / allot
        );
    }
}
