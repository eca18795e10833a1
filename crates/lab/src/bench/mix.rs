//! `allot bench mix`: the cooperative-sharing experiment (ARS §6).
//!
//! For each co-tenancy level K, M random mixes of K concurrent jobs are
//! drawn (with replacement, from a seed) from the workload set. Each mix runs
//! in every requested mode (`plain`, `seq`, `run`, `run-grant`, `runtime`;
//! see `jobs.rs`), `repeats` times, modes interleaved within each repeat so
//! slow drift of the machine affects them alike. The figure of merit is the
//! makespan (first start to last exit; the throughput is jobs ÷ makespan),
//! reported per mix as the median over repeats, and per level as the mean,
//! minimum and maximum speed-up over `plain` across mixes — the paper's
//! Figure 5.
//!
//! Honesty rules: baselines run with each runtime's defaults (nothing allot
//! sets leaks into them); every job's answer is checked against the answer
//! the same work gave alone, so a mode cannot win by doing less; every run
//! is written to `runs.csv` as soon as it ends, so an interrupted experiment
//! keeps its data.

use super::broker::PrivateBroker;
use super::jobs::{self, Mode, Tools, Work};
use super::runner::{self, RunResult};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Settings of one experiment.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Mixes by level: each mix is a list of jobs.
    pub mixes: Vec<(usize, Vec<Work>)>,
    /// Modes, in the order they run within a repeat.
    pub modes: Vec<Mode>,
    /// Repeats per mix and mode.
    pub repeats: usize,
    /// Time limit per run.
    pub limit: Duration,
    /// Enforcement backend of the experiment's broker.
    pub backend: String,
    /// How the experiment's broker divides CPUs.
    pub policy: allot_plan::GlobalPolicy,
    /// Directory the results (`runs.csv`, …) are written to; created if missing.
    pub out: PathBuf,
}

/// splitmix64: deterministic, seedable, no dependency.
pub fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `mixes` random mixes per level, drawn from `pool` with `seed`.
pub fn random_mixes(
    levels: &[usize],
    mixes: usize,
    seed: u64,
    pool: &[Work],
) -> Vec<(usize, Vec<Work>)> {
    let mut state = seed;
    let mut out = Vec::new();
    for &k in levels {
        for _ in 0..mixes {
            let mix = (0..k)
                .map(|_| pool[(splitmix(&mut state) % pool.len() as u64) as usize].clone())
                .collect();
            out.push((k, mix));
        }
    }
    out
}

/// The answer a workload printed (`answer=…`), if any.
pub fn answer_of(stdout: &str) -> Option<String> {
    stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("answer="))
        .map(str::to_string)
}

/// A mix's label and, per mode, the makespans of its runs.
pub type MixRuns = (String, BTreeMap<Mode, Vec<f64>>);

/// Per mix and mode: median makespan and the runs behind it.
#[derive(Debug, Clone, Default)]
pub struct MixResults {
    /// (level, mix index) → labels and makespans per mode.
    pub makespans: BTreeMap<(usize, usize), MixRuns>,
    /// Alone time of each distinct work (plain, defaults).
    pub alone: BTreeMap<String, f64>,
    /// Failures (answer mismatches, non-zero exits, time-outs).
    pub failures: Vec<String>,
}

/// Median of a non-empty slice.
pub fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

fn mode_run(
    work: &[Work],
    mode: Mode,
    tools: &Tools,
    limit: Duration,
) -> std::io::Result<RunResult> {
    let count = work.len();
    let cmds = work
        .iter()
        .enumerate()
        .map(|(index, w)| jobs::command(w, mode, jobs::Slot { index, count }, tools))
        .collect();
    match mode {
        Mode::Seq => runner::sequential(cmds, limit),
        _ => runner::concurrent(cmds, limit),
    }
}

/// Runs the experiment, printing progress to stderr.
pub fn run(plan: &Plan, tools_base: (&Path, &Path, &Path)) -> Result<MixResults, String> {
    std::fs::create_dir_all(&plan.out)
        .map_err(|e| format!("cannot create {}: {e}", plan.out.display()))?;
    let mut broker = if plan.modes.iter().any(|m| m.uses_broker()) {
        let policy = plan.policy.to_string();
        Some(PrivateBroker::start_with(
            tools_base.0,
            &plan.backend,
            &["--policy", &policy],
        )?)
    } else {
        None
    };
    let tools = Tools {
        allot: tools_base.0.to_path_buf(),
        lab: crate::lab()?,
        omp: tools_base.1.to_path_buf(),
        build_dir: tools_base.2.to_path_buf(),
        socket: broker
            .as_ref()
            .map(|b| b.socket().to_path_buf())
            .unwrap_or_default(),
    };
    if let Some(b) = &broker {
        eprintln!(
            "broker: {} backend, socket {}",
            b.backend(),
            b.socket().display()
        );
    }
    let mut runs = std::fs::File::create(plan.out.join("runs.csv")).map_err(|e| e.to_string())?;
    let _ = writeln!(runs, "level,mix,jobs,repeat,mode,makespan_s,job_seconds,ok");

    // Warm-up and reference answers: every distinct work alone, plain.
    let mut out = MixResults::default();
    let mut reference: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut distinct: Vec<Work> = Vec::new();
    for (_, mix) in &plan.mixes {
        for w in mix {
            if !distinct.contains(w) {
                distinct.push(w.clone());
            }
        }
    }
    for w in &distinct {
        let r = mode_run(std::slice::from_ref(w), Mode::Plain, &tools, plan.limit)
            .map_err(|e| e.to_string())?;
        let j = &r.jobs[0];
        if j.code != Some(0) {
            return Err(format!(
                "{} fails when run alone (exit {:?}): {}",
                w.label(),
                j.code,
                j.stderr.trim()
            ));
        }
        eprintln!("alone: {:<10} {:>7.2} s", w.label(), j.seconds);
        out.alone.insert(key(w), j.seconds);
        reference.insert(key(w), answer_of(&j.stdout));
    }

    let total = plan.mixes.len() * plan.repeats * plan.modes.len();
    let mut done = 0;
    for (index, (level, mix)) in plan.mixes.iter().enumerate() {
        let labels: Vec<String> = mix.iter().map(Work::label).collect();
        let entry = out
            .makespans
            .entry((*level, index))
            .or_insert_with(|| (labels.join("+"), BTreeMap::new()));
        for rep in 0..plan.repeats {
            for &mode in &plan.modes {
                done += 1;
                let r = mode_run(mix, mode, &tools, plan.limit).map_err(|e| e.to_string())?;
                let mut ok = true;
                for (w, j) in mix.iter().zip(&r.jobs) {
                    let expected = reference.get(&key(w)).cloned().flatten();
                    let got = answer_of(&j.stdout);
                    if j.timed_out {
                        ok = false;
                        out.failures.push(format!(
                            "mix {index} {} {}: stopped at the {:?} limit",
                            mode.name(),
                            w.label(),
                            plan.limit
                        ));
                    } else if j.code != Some(0) {
                        ok = false;
                        out.failures.push(format!(
                            "mix {index} {} {}: exit {:?}: {}",
                            mode.name(),
                            w.label(),
                            j.code,
                            j.stderr.trim()
                        ));
                    } else if expected.is_some() && got != expected {
                        ok = false;
                        out.failures.push(format!(
                            "mix {index} {} {}: answer {got:?}, alone {expected:?}",
                            mode.name(),
                            w.label()
                        ));
                    }
                }
                let secs: Vec<String> =
                    r.jobs.iter().map(|j| format!("{:.3}", j.seconds)).collect();
                let _ = writeln!(
                    runs,
                    "{level},{index},{},{rep},{},{:.3},{},{ok}",
                    entry.0,
                    mode.name(),
                    r.makespan,
                    secs.join(";")
                );
                let _ = runs.flush();
                entry.1.entry(mode).or_default().push(r.makespan);
                eprintln!(
                    "[{done}/{total}] {level} jobs, mix {index} ({}), repeat {}: {:<9} {:>7.2} s{}",
                    entry.0,
                    rep + 1,
                    mode.name(),
                    r.makespan,
                    if ok { "" } else { "  (FAILED, see below)" }
                );
                if mode.uses_broker()
                    && let Some(b) = &broker
                {
                    b.wait_idle(Duration::from_secs(10));
                }
            }
        }
    }
    if let Some(b) = broker.as_mut()
        && !b.stop()
    {
        eprintln!("note: the broker left cgroups behind; removed them");
    }
    Ok(out)
}

fn key(w: &Work) -> String {
    format!("{w:?}")
}

/// Speed-up of `mode` over `base` for one mix (median makespans).
pub fn speedup(modes: &BTreeMap<Mode, Vec<f64>>, base: Mode, mode: Mode) -> Option<f64> {
    Some(median(modes.get(&base)?) / median(modes.get(&mode)?))
}

/// Per level and mode: (mean, min, max) speed-up over `base` across mixes.
pub fn levels(
    out: &MixResults,
    base: Mode,
    modes: &[Mode],
) -> BTreeMap<usize, BTreeMap<Mode, (f64, f64, f64)>> {
    let mut acc: BTreeMap<usize, BTreeMap<Mode, Vec<f64>>> = BTreeMap::new();
    for ((level, _), (_, m)) in &out.makespans {
        for &mode in modes {
            if let Some(s) = speedup(m, base, mode) {
                acc.entry(*level)
                    .or_default()
                    .entry(mode)
                    .or_default()
                    .push(s);
            }
        }
    }
    acc.into_iter()
        .map(|(l, m)| {
            let stats = m
                .into_iter()
                .map(|(mode, v)| {
                    let mean = v.iter().sum::<f64>() / v.len() as f64;
                    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
                    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    (mode, (mean, min, max))
                })
                .collect();
            (l, stats)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_workloads::Kernel;

    #[test]
    fn mixes_are_repeatable_from_a_seed() {
        let pool: Vec<Work> = Kernel::ALL
            .iter()
            .map(|&k| Work::Kernel {
                kernel: k,
                scale: 1.0,
            })
            .collect();
        let a = random_mixes(&[2, 4], 3, 7, &pool);
        let b = random_mixes(&[2, 4], 3, 7, &pool);
        assert_eq!(a, b);
        assert_eq!(a.len(), 6);
        assert_eq!(a[5].1.len(), 4);
        assert_ne!(a, random_mixes(&[2, 4], 3, 8, &pool));
    }

    #[test]
    fn statistics() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(
            answer_of("workload=x answer=00ff seconds=1"),
            Some("00ff".into())
        );
        let mut out = MixResults::default();
        let mut m = BTreeMap::new();
        m.insert(Mode::Plain, vec![10.0]);
        m.insert(Mode::Run, vec![5.0]);
        out.makespans.insert((2, 0), ("a+b".into(), m.clone()));
        m.insert(Mode::Run, vec![2.5]);
        out.makespans.insert((2, 1), ("a+c".into(), m));
        let l = levels(&out, Mode::Plain, &[Mode::Run]);
        assert_eq!(l[&2][&Mode::Run], (3.0, 2.0, 4.0));
    }
}
