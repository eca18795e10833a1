//! The markdown tables of the Sting benchmark: median times, the best
//! allot policy against rayon and OpenMP, and the per-worker figures of
//! Sting's per-VP tables.

use super::{Bench, Measured, Sizes};
use allot_runtime::WorkerStats;
use std::fmt::Write;

/// A per-worker table row: its label and how to print a worker's figure.
type Field = (&'static str, fn(&WorkerStats) -> String);

/// One configuration's outcome on one benchmark.
pub struct Row {
    pub bench: Bench,
    pub variant: String,
    pub outcome: Measured,
}

/// The median of `v` (0 if empty).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// What each worker did between the snapshots `before` and `after` (the
/// queue high-water mark is since the pool started).
pub fn since(after: &[WorkerStats], before: &[WorkerStats]) -> Vec<WorkerStats> {
    after
        .iter()
        .zip(before)
        .map(|(a, b)| WorkerStats {
            tasks_run: a.tasks_run - b.tasks_run,
            tasks_created: a.tasks_created - b.tasks_created,
            tasks_stolen: a.tasks_stolen - b.tasks_stolen,
            sleeps: a.sleeps - b.sleeps,
            time_asleep: a.time_asleep.saturating_sub(b.time_asleep),
            time_awake: a.time_awake.saturating_sub(b.time_awake),
            retirements: a.retirements - b.retirements,
            yields: a.yields - b.yields,
            ..*a
        })
        .collect()
}

fn ms(ns: f64) -> String {
    if ns >= 100e6 {
        format!("{:.0}", ns / 1e6)
    } else {
        format!("{:.1}", ns / 1e6)
    }
}

fn find<'a>(rows: &'a [Row], b: Bench, variant: &str) -> Option<&'a Row> {
    rows.iter().find(|r| r.bench == b && r.variant == variant)
}

/// The fastest allot configuration on `b`.
fn best_allot(rows: &[Row], b: Bench) -> Option<&Row> {
    rows.iter()
        .filter(|r| r.bench == b && r.variant.starts_with("allot "))
        .min_by(|x, y| median(&x.outcome.times).total_cmp(&median(&y.outcome.times)))
}

fn nodes_median(o: &Measured) -> u64 {
    let mut n = o.nodes.clone();
    n.sort_unstable();
    n.get(n.len() / 2).copied().unwrap_or(0)
}

/// All tables, in markdown.
pub fn render(rows: &[Row], s: &Sizes, workers: usize) -> String {
    let mut out = String::new();
    let mut variants: Vec<&str> = Vec::new();
    for r in rows {
        if !variants.contains(&r.variant.as_str()) {
            variants.push(&r.variant);
        }
    }
    let _ = writeln!(
        out,
        "### Median wall time, ms ({} timed runs each, {workers} workers)\n",
        s.runs
    );
    let _ = writeln!(
        out,
        "| configuration | abisort 2^{} keys | queens n={} | knapsack {} items | knapsack nodes expanded |",
        s.sort_log2, s.queens, s.items
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|");
    for v in &variants {
        let mut line = format!("| {v} |");
        for b in Bench::ALL {
            let cell = match find(rows, b, v) {
                Some(r) => {
                    let t = ms(median(&r.outcome.times));
                    let best = best_allot(rows, b).is_some_and(|x| std::ptr::eq(x, r));
                    if best {
                        format!(" **{t}** |")
                    } else {
                        format!(" {t} |")
                    }
                }
                None => " — |".into(),
            };
            line.push_str(&cell);
        }
        let nodes = find(rows, Bench::Knapsack, v)
            .map_or("—".into(), |r| nodes_median(&r.outcome).to_string());
        let _ = writeln!(out, "{line} {nodes} |");
    }

    let _ = writeln!(
        out,
        "\n### Best allot policy against the baselines (same run)\n"
    );
    let _ = writeln!(
        out,
        "| benchmark | best allot policy | ms | rayon ms | OpenMP ms | best / rayon | best / OpenMP | sequential / best |"
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|");
    for b in Bench::ALL {
        let Some(best) = best_allot(rows, b) else {
            continue;
        };
        let t = median(&best.outcome.times);
        let of = |v: &str| find(rows, b, v).map(|r| median(&r.outcome.times));
        let ratio = |x: Option<f64>| x.map_or("—".into(), |x| format!("{:.2}", t / x));
        let time = |x: Option<f64>| x.map_or("—".into(), ms);
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} | {} |",
            b.name(),
            best.variant.trim_start_matches("allot "),
            ms(t),
            time(of("rayon")),
            time(of("OpenMP")),
            ratio(of("rayon")),
            ratio(of("OpenMP")),
            of("sequential").map_or("—".into(), |x| format!("{:.2}", x / t)),
        );
    }

    for b in Bench::ALL {
        let _ = writeln!(
            out,
            "\n### {}: every policy, one run (the last timed one), all workers added up\n",
            b.name()
        );
        let _ = writeln!(
            out,
            "\"absorbed\" is created − run: tasks their creator took back and ran inline \
             (a `join` half nobody stole), which the pool does not count as run.\n"
        );
        let _ = writeln!(
            out,
            "| policy | ms | tasks run | created | absorbed | stolen | sleeps | asleep ms | awake ms | queue high-water |"
        );
        let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for r in rows.iter().filter(|r| r.bench == b) {
            let Some(st) = &r.outcome.stats else { continue };
            let t = WorkerStats::total(st);
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {:.1} | {:.1} | {} |",
                r.variant.trim_start_matches("allot "),
                ms(*r.outcome.times.last().unwrap_or(&0.0)),
                t.tasks_run,
                t.tasks_created,
                t.tasks_created.saturating_sub(t.tasks_run),
                t.tasks_stolen,
                t.sleeps,
                t.time_asleep.as_secs_f64() * 1e3,
                t.time_awake.as_secs_f64() * 1e3,
                t.queue_high_water,
            );
        }
    }

    for b in Bench::ALL {
        let Some(best) = best_allot(rows, b) else {
            continue;
        };
        let Some(st) = &best.outcome.stats else {
            continue;
        };
        let _ = writeln!(
            out,
            "\n### {}: per worker (VP), best policy `{}`, last timed run\n",
            b.name(),
            best.variant.trim_start_matches("allot ")
        );
        let head: Vec<String> = st.iter().map(|w| format!("worker {}", w.worker)).collect();
        let _ = writeln!(out, "| | {} | total |", head.join(" | "));
        let _ = writeln!(out, "|---|{}---:|", "---:|".repeat(st.len()));
        let total = WorkerStats::total(st);
        let fields: [Field; 7] = [
            ("tasks run", |w| w.tasks_run.to_string()),
            ("tasks created", |w| w.tasks_created.to_string()),
            ("tasks stolen", |w| w.tasks_stolen.to_string()),
            ("sleeps", |w| w.sleeps.to_string()),
            ("asleep, ms", |w| {
                format!("{:.1}", w.time_asleep.as_secs_f64() * 1e3)
            }),
            ("awake, ms", |w| {
                format!("{:.1}", w.time_awake.as_secs_f64() * 1e3)
            }),
            ("queue high-water", |w| w.queue_high_water.to_string()),
        ];
        for (name, f) in fields {
            let cells: Vec<String> = st.iter().map(f).collect();
            let _ = writeln!(out, "| {name} | {} | {} |", cells.join(" | "), f(&total));
        }
    }
    out
}
