//! Smoke test of the image-server benchmark's C program
//! (`benches/c/image_server.c`): both builds compile with `-Werror`, every
//! variant serves a short burst of a tiny image at a low rate without a
//! broker, prints one well-formed `result` line, and blurs the same image
//! as the calibration. No timing is checked; `cargo bench -p allot-capi
//! --bench image_server` measures.

#[path = "support/liballot.rs"]
mod liballot;

use liballot::run_stdout;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

/// The fields of the output line tagged `tag`.
fn fields(out: &str, tag: &str) -> BTreeMap<String, String> {
    let line = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some(tag))
        .unwrap_or_else(|| panic!("no `{tag}` line in:\n{out}"));
    line.split_whitespace()
        .skip(1)
        .map(|f| {
            let (k, v) = f
                .split_once('=')
                .unwrap_or_else(|| panic!("malformed field {f:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn num(f: &BTreeMap<String, String>, k: &str) -> f64 {
    f.get(k)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{k} missing or not a number in {f:?}"))
}

#[test]
fn every_variant_serves_a_short_burst() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("image_server_smoke");
    let prefix = work.join("prefix");
    liballot::install(&prefix);
    let src = crate_dir.join("benches/c/image_server.c");
    let gcc = |out: &Path| {
        let mut c = Command::new("gcc");
        c.args(["-std=c11", "-O2", "-fopenmp", "-Wall", "-Wextra", "-Werror"])
            .arg(&src)
            .arg("-o")
            .arg(out);
        c
    };
    let with_allot = work.join("image_server");
    run_stdout(
        gcc(&with_allot)
            .arg("-DIMAGE_SERVER_ALLOT")
            .arg(format!("-I{}", prefix.join("include").display()))
            .arg(format!("-L{}", prefix.join("lib").display()))
            .arg("-lallot")
            .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
            .arg("-lm"),
    );
    let plain = work.join("image_server_omp");
    run_stdout(gcc(&plain).arg("-lm"));

    let tiny = ["--width", "48", "--height", "32", "--passes", "1"];
    let cal = fields(
        &run_stdout(Command::new(&plain).arg("calibrate").args(tiny)),
        "calibrate",
    );
    assert!(num(&cal, "service1_ms") > 0.0);
    let variants: [(&Path, &[&str], &str); 4] = [
        (&plain, &["fixed", "1"], "fixed1"),
        (&plain, &["fixed", "2"], "fixed2"),
        (&plain, &["fixed", "4"], "fixed4"),
        (&with_allot, &["fair"], "fair"),
    ];
    for (prog, args, name) in variants {
        let out = run_stdout(
            Command::new(prog)
                .args(args)
                .arg("40")
                .args(tiny)
                .args(["--burst", "0.3", "--seed", "3"])
                .env("ALLOT_SOCKET", work.join("no-broker.sock"))
                .env_remove("ALLOT_CELL")
                .env_remove("ALLOT_GRANT_FD")
                .env_remove("LD_PRELOAD")
                .env_remove("OMP_NUM_THREADS"),
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
