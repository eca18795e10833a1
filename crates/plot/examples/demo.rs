//! Renders a sample benchmark figure to `DIR/demo.png`:
//! mean speed-up per co-tenancy level with min/max error bars, plus a
//! grouped bar chart, a numeric x axis and a log-x latency chart beside it
//! (`demo-bars.png`, `demo-lines.png`, `demo-log.png`), and the first chart
//! again as `demo.svg`.
//!
//! Run with `cargo run -p allot-plot --example demo [DIR]`; `DIR`
//! defaults to `target/plot-demo` in the workspace.

use std::path::{Path, PathBuf};

use allot_plot::{Chart, Series};

fn main() -> std::io::Result<()> {
    let dir = match std::env::args_os().nth(1) {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/plot-demo"),
    };
    std::fs::create_dir_all(&dir)?;
    println!("writing charts to {}", dir.display());
    let levels: Vec<String> = ["1", "2", "4", "8"].iter().map(|s| s.to_string()).collect();

    let speedup = |name: &str, mean: [f64; 4], spread: f64| Series::Line {
        name: name.to_string(),
        points: mean
            .iter()
            .enumerate()
            .map(|(i, m)| (i as f64, *m))
            .collect(),
        err: Some(
            mean.iter()
                .map(|m| (m - spread, m + spread * 1.4))
                .collect(),
        ),
    };
    let first = Chart::new(
        "Mean speed-up per co-tenancy level (min/max bars)",
        "co-tenant programs",
        "speed-up over OS scheduling (×)",
    )
    .categories(levels.clone())
    .hline(1.0, "1.0 = no change")
    .series(speedup("allot", [1.02, 1.18, 1.37, 1.52], 0.06))
    .series(speedup("static split", [0.99, 1.05, 1.11, 1.09], 0.09));
    first.save(&dir.join("demo.png"))?;
    first.save(&dir.join("demo.svg"))?;

    let bars = |name: &str, v: [f64; 4]| Series::Bars {
        name: name.to_string(),
        values: v.to_vec(),
    };
    Chart::new("Makespan by policy", "co-tenancy level", "makespan (s)")
        .categories(levels)
        .series(bars("OS", [12.1, 25.3, 51.0, 104.2]))
        .series(bars("static", [12.4, 23.9, 45.2, 92.8]))
        .series(bars("allot", [12.0, 21.6, 39.9, 75.5]))
        .save(&dir.join("demo-bars.png"))?;

    Chart::new("Throughput vs threads", "threads", "ops/s [millions]")
        .size(480, 300)
        .series(Series::Line {
            name: "spin".into(),
            points: (1..=12)
                .map(|t| (t as f64, 0.8 * t as f64 / (1.0 + 0.05 * t as f64)))
                .collect(),
            err: None,
        })
        .series(Series::Line {
            name: "futex".into(),
            points: (1..=12).map(|t| (t as f64, 0.6 * t as f64)).collect(),
            err: None,
        })
        .save(&dir.join("demo-lines.png"))?;

    Chart::new(
        "p99 latency vs offered load",
        "requests/s",
        "p99 latency (µs)",
    )
    .log_x()
    .series(Series::Line {
        name: "p99".into(),
        points: [100.0, 300.0, 1e3, 3e3, 1e4, 3e4, 1e5]
            .iter()
            .zip([42.0, 43.0, 45.0, 51.0, 70.0, 140.0, 610.0])
            .map(|(x, y)| (*x, y))
            .collect(),
        err: None,
    })
    .save(&dir.join("demo-log.png"))
}
