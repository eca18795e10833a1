//! Smoke test of the image-server benchmark's C program
//! (`benches/c/image_server.c`): both builds compile with `-Werror`, every
//! variant serves a short burst of a tiny image at a low rate without a
//! broker, prints one well-formed `result` line, and blurs the same image
//! as the calibration. No timing is checked; `cargo bench -p allot-capi
//! --bench image_server` measures.

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
    let variants: [(&Path, &[&str], &str); 4] = [
        (plain, &["fixed", "1"], "fixed1"),
        (plain, &["fixed", "2"], "fixed2"),
        (plain, &["fixed", "4"], "fixed4"),
        (with_allot, &["fair"], "fair"),
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
            "fair" => {
                let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
                assert!((1.0..=cpus as f64).contains(&cores), "{f:?}");
            }
            _ => assert_eq!(cores, name[5..].parse::<f64>().unwrap()),
        }
        assert_eq!(f["checksum"], cal["checksum"], "{name} blurred differently");
    }
}
