//! What one soak counted and found, the time bounds its checks allow,
//! and the summaries printed at the end (one soak, and several seeds
//! together).

use std::collections::BTreeMap;
use std::time::Duration;

/// How long an unlisted `cell-N` may remain.
pub const LEAK_AFTER: Duration = Duration::from_secs(10);
/// How long a restarted broker may take to list the surviving cells.
pub const ADOPT_WITHIN: Duration = Duration::from_secs(2);
/// How long a surviving `allot run` may take to rejoin.
pub const REJOIN_WITHIN: Duration = Duration::from_secs(3);
/// How long a job may run before it counts as hung.
pub const JOB_LIMIT: Duration = Duration::from_secs(30);

/// The time bounds the checks allow, the constants above times
/// `--patience` (only for emulated machines, such as the guest lane's:
/// there the checks still judge that each thing happens, not how fast).
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    pub(super) leak_after: Duration,
    pub(super) adopt_within: Duration,
    pub(super) rejoin_within: Duration,
    pub(super) job_limit: Duration,
}

impl Bounds {
    pub(super) fn scaled(patience: f64) -> Bounds {
        Bounds {
            leak_after: LEAK_AFTER.mul_f64(patience),
            adopt_within: ADOPT_WITHIN.mul_f64(patience),
            rejoin_within: REJOIN_WITHIN.mul_f64(patience),
            job_limit: JOB_LIMIT.mul_f64(patience),
        }
    }
}

impl Default for Bounds {
    fn default() -> Bounds {
        Bounds::scaled(1.0)
    }
}

#[derive(Debug, Default)]
pub(super) struct Tally {
    pub(super) started: u32,
    pub(super) refused: u32,
    pub(super) finished: u32,
    pub(super) wrappers_killed: u32,
    pub(super) programs_killed: u32,
    pub(super) restarts: u32,
    pub(super) checks: u32,
    pub(super) adopt_ms: Vec<u64>,
    pub(super) rejoin_ms: Vec<u64>,
    pub(super) failures: Vec<String>,
    /// What was seen around the first kernel overlap of each pair of
    /// cells, printed after the failures.
    pub(super) diagnoses: BTreeMap<(u64, u64), String>,
    pub(super) bounds: Bounds,
    /// Where the brokers' whole log was kept (after a failure).
    pub(super) log: Option<std::path::PathBuf>,
}

fn pct(v: &[u64], p: f64) -> String {
    if v.is_empty() {
        return "-".into();
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    format!("{} ms", s[i])
}

pub(super) fn summary(seconds: u64, backend: &str, seed: u64, t: &Tally) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "chaos: {seconds} s, {backend} backend, seed {seed}");
    let _ = writeln!(
        out,
        "  jobs started {}, finished {}, refused {}; wrappers killed {}, programs killed {}",
        t.started, t.finished, t.refused, t.wrappers_killed, t.programs_killed
    );
    let _ = writeln!(
        out,
        "  broker restarts {}; survivors listed again: median {}, max {} (bound {:?}); \
         rejoined: median {}, max {} (bound {:?})",
        t.restarts,
        pct(&t.adopt_ms, 0.5),
        pct(&t.adopt_ms, 1.0),
        t.bounds.adopt_within,
        pct(&t.rejoin_ms, 0.5),
        pct(&t.rejoin_ms, 1.0),
        t.bounds.rejoin_within
    );
    let _ = writeln!(
        out,
        "  invariant checks {}: exclusivity (status and kernel), leaked cgroups, lost tokens",
        t.checks
    );
    if t.failures.is_empty() {
        let _ = writeln!(out, "  no failure");
    } else {
        let _ = writeln!(out, "  {} FAILURE(S):", t.failures.len());
        for f in t.failures.iter().take(30) {
            let _ = writeln!(out, "    {f}");
        }
        if let Some(kept) = &t.log {
            let _ = writeln!(
                out,
                "  the brokers' log (every restart): {}",
                kept.display()
            );
        }
        for ((id, other), seen) in &t.diagnoses {
            let _ = writeln!(out, "  at the first overlap of cells {id} and {other}:");
            for l in seen.lines() {
                let _ = writeln!(out, "    {l}");
            }
        }
    }
    out
}

/// The summary of several soaks: their sums, and which seeds failed.
pub(super) fn overall(seconds: u64, backend: &str, runs: &[(u64, Tally)]) -> String {
    use std::fmt::Write;
    let sum = |f: fn(&Tally) -> u64| runs.iter().map(|(_, t)| f(t)).sum::<u64>();
    let failed: Vec<String> = runs
        .iter()
        .filter(|(_, t)| !t.failures.is_empty())
        .map(|(s, t)| format!("{s} ({} failures)", t.failures.len()))
        .collect();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "chaos over {} seeds, {seconds} s each ({} s in all), {backend} backend:",
        runs.len(),
        seconds * runs.len() as u64
    );
    let _ = writeln!(
        out,
        "  invariant checks {}, breaches {}, broker restarts {}, jobs started {}, wrappers killed {}, programs killed {}",
        sum(|t| t.checks.into()),
        sum(|t| t.failures.len() as u64),
        sum(|t| t.restarts.into()),
        sum(|t| t.started.into()),
        sum(|t| t.wrappers_killed.into()),
        sum(|t| t.programs_killed.into()),
    );
    if failed.is_empty() {
        let _ = writeln!(out, "  no failure");
    } else {
        let _ = writeln!(out, "  FAILED with seeds {}", failed.join(", "));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_overall_summary_sums_and_names_the_failed_seeds() {
        let ok = Tally {
            checks: 10,
            restarts: 2,
            ..Tally::default()
        };
        let bad = Tally {
            checks: 5,
            restarts: 1,
            failures: vec!["exclusive cell 3 overlaps".into()],
            ..Tally::default()
        };
        let text = overall(60, "cgroup2", &[(1, ok), (2, bad)]);
        assert!(text.contains("2 seeds, 60 s each (120 s in all)"), "{text}");
        assert!(
            text.contains("invariant checks 15, breaches 1, broker restarts 3"),
            "{text}"
        );
        assert!(text.contains("FAILED with seeds 2 (1 failures)"), "{text}");
        let text = overall(
            60,
            "cgroup2",
            &[(1, Tally::default()), (2, Tally::default())],
        );
        assert!(text.contains("no failure"), "{text}");
    }
}
