//! The QR and join case studies (`benches/qr.rs`, `benches/join.rs`),
//! short: the C programs build against liballot and without it, every
//! variant computes the same result, and in the allot join no join of one
//! kind ever runs beside a join of the other and at most two run at once
//! (this machine's CPUs all share one NUMA node and one cache).

#[path = "../benches/support/case.rs"]
mod case;

use case::{fields, num};

#[test]
fn every_qr_variant_computes_the_same_r() {
    let p = case::build("qr", "QR_ALLOT", "qr_test");
    let small = ["--blocks", "6", "--rows", "256", "--cols", "32"].map(String::from);
    let mut sums = Vec::new();
    for (allot, mode) in [
        (false, "baseline"),
        (false, "byhand"),
        (true, "allot"),
        (true, "baseline"),
    ] {
        let prog = if allot { &p.with_allot } else { &p.plain };
        let out = p.run(prog, &[vec![mode.to_string()], small.to_vec()].concat());
        let f = fields(&out, "result");
        assert!(num(&f, "gflops") > 0.0, "{out}");
        sums.push(f["checksum"].clone());
    }
    assert!(sums.iter().all(|s| *s == sums[0]), "{sums:?}");
}

#[test]
fn allot_joins_of_the_two_kinds_never_run_together() {
    let p = case::build("join", "JOIN_ALLOT", "join_test");
    let args: Vec<String> = ["allot", "--joins", "6", "--r", "200000", "--s", "800000"]
        .map(String::from)
        .to_vec();
    let out = p.run(&p.with_allot, &args);
    // (kind, start, end) of every join.
    let joins: Vec<(String, f64, f64)> = out
        .lines()
        .filter(|l| l.starts_with("join "))
        .map(|l| {
            let f = fields(l, "join");
            (f["kind"].clone(), num(&f, "start_s"), num(&f, "end_s"))
        })
        .collect();
    assert_eq!(joins.len(), 6, "{out}");
    for (i, a) in joins.iter().enumerate() {
        for b in &joins[i + 1..] {
            let overlap = a.1 < b.2 && b.1 < a.2;
            assert!(
                a.0 == b.0 || !overlap,
                "a {} join ran beside a {} join:\n{out}",
                a.0,
                b.0
            );
        }
        let beside = joins.iter().filter(|b| b.1 <= a.1 && a.1 < b.2).count();
        assert!(beside <= 2, "{beside} joins ran at once:\n{out}");
    }
    for mode in ["plain", "pairs"] {
        let out = p.run(
            &p.plain,
            &[vec![mode.to_string()], args[1..].to_vec()].concat(),
        );
        assert_eq!(num(&fields(&out, "result"), "joins"), 6.0);
    }
}
