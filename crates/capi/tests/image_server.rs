//! Smoke test of the image-server benchmark's C program
//! (`benches/c/image_server.c`): both builds compile with `-Werror`, every
//! variant serves a short burst of a tiny image at a low rate without a
//! broker, prints one well-formed `result` line, and blurs the same image
//! as the calibration; `--trace` writes a line per request. No timing is
//! checked; `cargo bench -p allot-capi --bench image_server` measures.

#[path = "../benches/support/case.rs"]
mod case;

use case::{fields, num};
use std::path::Path;

#[test]
fn every_variant_serves_a_short_burst() {
    let p = case::build("image_server", "IMAGE_SERVER_ALLOT", "image_server_smoke");
    let (plain, with_allot) = (p.plain.as_path(), p.with_allot.as_path());
    let tiny = ["--width", "48", "--height", "32", "--passes", "1"];
    let cal = fields(
        &case::run_stdout(p.command(plain).arg("calibrate").args(tiny)),
        "calibrate",
    );
    assert!(num(&cal, "service1_ms") > 0.0);
    let variants: [(&Path, &[&str], &str); 5] = [
        (plain, &["fixed", "1"], "fixed1"),
        (plain, &["fixed", "2"], "fixed2"),
        (plain, &["fixed", "4"], "fixed4"),
        (with_allot, &["fair"], "fair"),
        (with_allot, &["numa"], "numa"),
    ];
    for (prog, args, name) in variants {
        // Without a broker, in no cell, with libgomp's defaults.
        let mut command = if prog == with_allot {
            p.command_with_shim(prog)
        } else {
            p.command(prog)
        };
        let out = case::run_stdout(
            command
                .args(args)
                .arg("40")
                .args(tiny)
                .args(["--burst", "0.3", "--seed", "3"]),
        );
        let f = fields(&out, "result");
        assert_eq!(f["variant"], name);
        let n = num(&f, "requests");
        assert!(n >= 1.0, "{name}: no request in the burst: {f:?}");
        let (p50, p95, max, mean) = (
            num(&f, "p50_ms"),
            num(&f, "p95_ms"),
            num(&f, "max_ms"),
            num(&f, "mean_ms"),
        );
        assert!(
            0.0 < p50 && p50 <= p95 && p95 <= max && mean <= max,
            "{name}: {f:?}"
        );
        let cores = num(&f, "cores");
        match name {
            "fair" | "numa" => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                assert!((1.0..=cpus as f64).contains(&cores), "{f:?}");
            }
            _ => assert_eq!(cores, name[5..].parse::<f64>().unwrap()),
        }
        assert_eq!(f["checksum"], cal["checksum"], "{name} blurred differently");
    }
}

/// `--trace` writes one line per request ("arrival start done cores
/// cpu", in arrival order), which `scripts/bench-image-servers.sh` puts on
/// one time line with the other processes' requests.
#[test]
fn the_trace_has_a_line_per_request_in_order() {
    let p = case::build("image_server", "IMAGE_SERVER_ALLOT", "image_server_trace");
    let path = p.work.join("trace");
    let out = case::run_stdout(
        p.command(&p.plain)
            .args(["fixed", "1", "40", "--width", "48", "--height", "32"])
            .args(["--burst", "0.3", "--seed", "3", "--trace"])
            .arg(&path),
    );
    let requests = num(&fields(&out, "result"), "requests") as usize;
    let text = std::fs::read_to_string(&path).expect("the trace was written");
    let rows: Vec<Vec<f64>> = text
        .lines()
        .map(|l| l.split(' ').map(|x| x.parse().expect("a number")).collect())
        .collect();
    assert!(requests >= 1);
    assert_eq!(rows.len(), requests, "a line per request:\n{text}");
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(r.len(), 5, "arrival start done cores cpu: {r:?}");
        assert!(r[0] <= r[1] && r[1] <= r[2], "in order: {r:?}");
        assert_eq!(r[3], 1.0, "fixed 1: one core");
        assert!(r[4] > 0.0, "its thread's CPU time: {r:?}");
        if i > 0 {
            assert!(rows[i - 1][0] <= r[0], "arrival order: {text}");
        }
    }
}
