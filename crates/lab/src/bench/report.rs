//! Tables, CSV files and the plot of an experiment.

use super::jobs::Mode;
use super::mix::{self, MixResults, Plan};
use std::fmt::Write as _;
use std::io::Write as _;

/// A description of the machine, for the top of every report.
pub fn machine() -> String {
    let mut s = String::new();
    let m = allot_topo::discover_live()
        .map(|m| m.summary())
        .unwrap_or_else(|e| e.to_string());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<u64>()
                    .unwrap_or(0)
                    / 1024
                    / 1024
            })
        })
        .unwrap_or(0);
    let gcc = std::process::Command::new("gcc")
        .arg("-dumpfullversion")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "machine: {m}; {model}; {mem} GiB; Linux {}",
        kernel.trim()
    );
    let _ = writeln!(
        s,
        "allot {}; gcc {gcc} (OpenMP: libgomp defaults)",
        env!("CARGO_PKG_VERSION")
    );
    s
}

/// The summary table printed at the end.
pub fn table(plan: &Plan, out: &MixResults) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n{}", machine());
    let _ = writeln!(
        s,
        "makespan per mix (median of {} runs), seconds:",
        plan.repeats
    );
    let _ = write!(s, "{:>5} {:>4}  {:<40}", "jobs", "mix", "programs");
    for m in &plan.modes {
        let _ = write!(s, " {:>9}", m.name());
    }
    let best_column =
        plan.modes.contains(&Mode::Run) && plan.modes.iter().any(|m| Mode::BASELINES.contains(m));
    if best_column {
        let _ = write!(s, " {:>14}", "best/run");
    }
    let _ = writeln!(s);
    for ((level, index), (labels, modes)) in &out.makespans {
        let _ = write!(s, "{level:>5} {index:>4}  {labels:<40}");
        for m in &plan.modes {
            match modes.get(m) {
                Some(v) => {
                    let _ = write!(s, " {:>9.2}", mix::median(v));
                }
                None => {
                    let _ = write!(s, " {:>9}", "-");
                }
            }
        }
        if best_column {
            let _ = match best_over_run(modes) {
                Some((base, r)) => write!(s, " {r:>7.2}x {:<6}", base.name()),
                None => write!(s, " {:>14}", "-"),
            };
        }
        let _ = writeln!(s);
    }
    if best_column {
        let _ = writeln!(
            s,
            "best/run: the fastest of the runs without allot ({}) over `allot run`, both medians; above 1, allot run is faster",
            Mode::BASELINES.map(Mode::name).join(", ")
        );
    }
    if plan.modes.contains(&Mode::Plain) {
        let others: Vec<Mode> = plan
            .modes
            .iter()
            .copied()
            .filter(|&m| m != Mode::Plain)
            .collect();
        let lv = mix::levels(out, Mode::Plain, &others);
        let _ = writeln!(
            s,
            "\nspeed-up over plain co-run (makespan ratio; mean [min … max] across mixes):"
        );
        for (level, modes) in &lv {
            let _ = write!(s, "  {level} jobs:");
            for (m, (mean, min, max)) in modes {
                let _ = write!(s, "  {} {mean:.2}x [{min:.2} … {max:.2}]", m.name());
            }
            let _ = writeln!(s);
        }
    }
    s
}

/// The fastest baseline of a mix (by median makespan) and its median over
/// `allot run`'s.
pub fn best_over_run(modes: &std::collections::BTreeMap<Mode, Vec<f64>>) -> Option<(Mode, f64)> {
    let run = mix::median(modes.get(&Mode::Run)?);
    let (base, med) = Mode::BASELINES
        .iter()
        .filter_map(|m| modes.get(m).map(|v| (*m, mix::median(v))))
        .min_by(|a, b| a.1.total_cmp(&b.1))?;
    Some((base, med / run))
}

/// Writes mixes.csv, levels.csv, alone.csv, machine.txt and speedup.png/.svg.
pub fn write(plan: &Plan, out: &MixResults) -> std::io::Result<()> {
    let mut f = std::fs::File::create(plan.out.join("mixes.csv"))?;
    writeln!(
        f,
        "level,mix,jobs,mode,median_makespan_s,throughput_jobs_per_min,speedup_vs_plain,speedup_vs_seq"
    )?;
    for ((level, index), (labels, modes)) in &out.makespans {
        for (m, v) in modes {
            let med = mix::median(v);
            let vs =
                |base| mix::speedup(modes, base, *m).map_or(String::new(), |x| format!("{x:.4}"));
            writeln!(
                f,
                "{level},{index},{labels},{},{med:.3},{:.3},{},{}",
                m.name(),
                *level as f64 * 60.0 / med,
                vs(Mode::Plain),
                vs(Mode::Seq)
            )?;
        }
    }
    let mut f = std::fs::File::create(plan.out.join("levels.csv"))?;
    writeln!(f, "level,mode,base,mean_speedup,min_speedup,max_speedup")?;
    for base in [Mode::Plain, Mode::Seq] {
        if !plan.modes.contains(&base) {
            continue;
        }
        let others: Vec<Mode> = plan.modes.iter().copied().filter(|&m| m != base).collect();
        for (level, modes) in mix::levels(out, base, &others) {
            for (m, (mean, min, max)) in modes {
                writeln!(
                    f,
                    "{level},{},{},{mean:.4},{min:.4},{max:.4}",
                    m.name(),
                    base.name()
                )?;
            }
        }
    }
    let mut f = std::fs::File::create(plan.out.join("alone.csv"))?;
    writeln!(f, "work,seconds")?;
    for (w, t) in &out.alone {
        writeln!(f, "{:?},{t:.3}", w)?;
    }
    std::fs::write(plan.out.join("machine.txt"), machine())?;
    plot(plan, out)
}

fn plot(plan: &Plan, out: &MixResults) -> std::io::Result<()> {
    use allot_plot::{Chart, Series};
    if !plan.modes.contains(&Mode::Plain) {
        return Ok(());
    }
    let others: Vec<Mode> = plan
        .modes
        .iter()
        .copied()
        .filter(|&m| m != Mode::Plain)
        .collect();
    let lv = mix::levels(out, Mode::Plain, &others);
    let levels: Vec<usize> = lv.keys().copied().collect();
    let mut chart = Chart::new(
        "Speed-up over plain co-run (mean, min/max across mixes)",
        "concurrent jobs",
        "speed-up (higher is better)",
    )
    .categories(levels.iter().map(|l| l.to_string()).collect())
    .hline(1.0, "plain co-run");
    for m in others {
        let mut points = Vec::new();
        let mut err = Vec::new();
        for (i, modes) in lv.values().enumerate() {
            if let Some(&(mean, min, max)) = modes.get(&m) {
                points.push((i as f64, mean));
                err.push((min, max));
            }
        }
        if !points.is_empty() {
            chart = chart.series(Series::Line {
                name: m.legend().to_string(),
                points,
                err: Some(err),
            });
        }
    }
    chart.save(&plan.out.join("speedup.png"))?;
    chart.save(&plan.out.join("speedup.svg"))
}
