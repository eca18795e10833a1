//! `allot bench probe`: a program that reports when it actually ran, for
//! measuring time contracts from the inside.
//!
//! Each of `--threads` threads loops reading `CLOCK_MONOTONIC`; a gap of
//! more than `--gap-us` between two reads means the thread was off the
//! CPU, so the loop records *stretches* (intervals it ran without a
//! break). A thread either spins, or (`--work-us`/`--sleep-us`) works and
//! sleeps in turn, or (`--periodic P,B`) wakes at absolute times `k·P`
//! (aligned to its cell's windows when it has a grant page with windows)
//! and spins `B`, sleeping in `clock_nanosleep` as most programs do or,
//! with `--wait-window`, in allot's window wait
//! ([`allot_proto::window::sleep_until`], what `Cell::wait_window` uses). At the end it prints one JSON object ([`Summary`]) on
//! standard output, analysed here against the window schedule its grant
//! page shows (`ALLOT_GRANT_FD`), so tests and benchmarks parse figures,
//! not raw timestamps.
//!
//! The analysis is pure ([`summarize`]) and unit-tested.

use allot_proto::window::monotonic_ns;
use allot_proto::{Phase, Window};
use serde::Serialize;
use std::time::Duration;

/// Arguments of `allot bench probe`.
#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Threads that run and record.
    #[arg(long, default_value_t = 1, value_name = "N")]
    threads: usize,
    /// How long to run.
    #[arg(long, default_value_t = 3.0, value_name = "SECONDS")]
    seconds: f64,
    /// A gap between two clock reads longer than this ends a stretch.
    #[arg(long, default_value_t = 20, value_name = "µs")]
    gap_us: u64,
    /// Work this long between sleeps (with --sleep-us) instead of spinning.
    #[arg(long, value_name = "µs", requires = "sleep_us")]
    work_us: Option<u64>,
    /// Sleep this long between pieces of work.
    #[arg(long, value_name = "µs", requires = "work_us")]
    sleep_us: Option<u64>,
    /// A periodic task: wake at every period start, spin the budget
    /// ("10000,3000" in µs); reports its wake-up lateness.
    #[arg(long, value_name = "PERIOD_US,BUDGET_US", conflicts_with = "work_us")]
    periodic: Option<String>,
    /// Periodic mode: wait for each period with allot's window wait (a
    /// timer that a suspension cannot prolong, then a short spin) instead
    /// of clock_nanosleep.
    #[arg(long, requires = "periodic")]
    wait_window: bool,
}

/// What one thread did.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct ThreadSummary {
    /// CPU time it ran (sum of its stretches), ns.
    pub ran_ns: u64,
    /// Of that, outside every window (0 without windows), ns.
    pub outside_ns: u64,
    /// The longest single stretch outside a window, ns.
    pub outside_max_ns: u64,
    /// Windows it ran in.
    pub windows: usize,
}

/// Percentiles of a sample (in the unit its field names).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Quantiles {
    /// How many values the sample has; for an empty one every quantile is 0.
    pub n: usize,
    /// The median by nearest rank: a value of the sample, never an average of two.
    pub p50: f64,
    /// The 99th percentile by nearest rank: the value 99 % of the sample lie at or below.
    pub p99: f64,
    /// The largest value of the sample (0 for an empty one).
    pub max: f64,
}

impl Quantiles {
    /// Of nanosecond values, in µs.
    pub fn of_ns(ns: Vec<u64>) -> Quantiles {
        Quantiles::of(ns.into_iter().map(|v| v as f64 / 1000.0).collect())
    }

    /// Of `v`, in its own unit.
    pub fn of(mut v: Vec<f64>) -> Quantiles {
        if v.is_empty() {
            return Quantiles::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| super::quantile(&v, q);
        Quantiles {
            n: v.len(),
            p50: at(0.5),
            p99: at(0.99),
            max: at(1.0),
        }
    }
}

/// The probe's report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Summary {
    /// The window schedule from the grant page (period 0: none).
    pub window: Option<(u32, u32)>,
    /// One summary per recording thread, in the order they were started.
    pub threads: Vec<ThreadSummary>,
    /// Of the windows any thread ran in, the fraction every thread ran in.
    pub same_windows: f64,
    /// Window start → the first stretch of any thread that starts in it
    /// (the cell's first instruction), µs; windows that began with a
    /// thread already running are not counted.
    pub activation: Quantiles,
    /// Window start → the moment every thread has run in it (the whole
    /// cell active: Tessellation's activation of a cell of that many
    /// cores), µs; windows some thread missed, or began with a thread
    /// already running, are not counted.
    pub activation_all: Quantiles,
    /// Window end → the last moment any thread ran in it (the whole cell
    /// suspended), µs, negative when every thread had stopped before the
    /// edge (the window driver closes early by its timer lead, so that
    /// suspensions land around the edge); windows with a thread running
    /// on into the next one are not counted.
    pub suspension: Quantiles,
    /// The first thread stopped → the last one stopped, per window, µs:
    /// how long the freeze takes to reach every CPU of the cell.
    pub suspension_spread: Quantiles,
    /// Per whole period: |CPU time in it − budget| / budget, % (all
    /// threads).
    pub delivery_error: Quantiles,
    /// Per whole period: CPU time in it (all threads), µs; against the
    /// budget it tells the sign of the delivery error.
    pub delivered: Quantiles,
    /// Periodic mode: wake-up time − intended time, µs.
    pub lateness: Quantiles,
}

/// Analyses `stretches` (per thread, `[start, end)` ns) against `window`
/// between `from` and `to` (ns); `lateness` are the periodic mode's wake-up
/// delays (ns).
pub fn summarize(
    window: Option<Window>,
    stretches: &[Vec<(u64, u64)>],
    from: u64,
    to: u64,
    lateness: Vec<u64>,
) -> Summary {
    let mut s = Summary {
        window: window.map(|w| (w.period_us, w.budget_us)),
        lateness: Quantiles::of_ns(lateness),
        ..Summary::default()
    };
    let Some(w) = window.filter(Window::is_set) else {
        s.threads = stretches
            .iter()
            .map(|t| ThreadSummary {
                ran_ns: t.iter().map(|(a, b)| b - a).sum(),
                ..Default::default()
            })
            .collect();
        return s;
    };
    let index = |t: u64| (t.saturating_sub(w.origin_ns)) / w.period_ns();
    let mut touched: Vec<std::collections::BTreeSet<u64>> = vec![];
    let mut per_period: std::collections::BTreeMap<u64, u64> = Default::default();
    let mut first_start: std::collections::BTreeMap<u64, u64> = Default::default();
    // Per window: each thread's first start in it, and each thread's last
    // end of a stretch that started in it.
    let mut starts: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    let mut ends: std::collections::BTreeMap<u64, Vec<u64>> = Default::default();
    for (i, t) in stretches.iter().enumerate() {
        let mut ts = ThreadSummary::default();
        let mut set = std::collections::BTreeSet::new();
        for &(a, b) in t {
            ts.ran_ns += b - a;
            // Split the stretch at window edges.
            let mut x = a;
            while x < b {
                let (open, edge) = match w.phase(x) {
                    Phase::Open { closes_ns } => (true, closes_ns),
                    Phase::Closed { opens_ns } => (false, opens_ns),
                };
                let y = edge.min(b);
                if open {
                    set.insert(index(x));
                } else {
                    ts.outside_ns += y - x;
                    ts.outside_max_ns = ts.outside_max_ns.max(y - x);
                }
                *per_period.entry(index(x)).or_default() += y - x;
                x = y;
            }
            if let Phase::Open { .. } = w.phase(a) {
                let k = index(a);
                let start = w.origin_ns + k * w.period_ns();
                let e = first_start.entry(k).or_insert(u64::MAX);
                *e = (*e).min(a - start);
                let each = starts
                    .entry(k)
                    .or_insert_with(|| vec![u64::MAX; stretches.len()]);
                each[i] = each[i].min(a - start);
                let last = ends.entry(k).or_insert_with(|| vec![0; stretches.len()]);
                last[i] = last[i].max(b);
            }
        }
        ts.windows = set.len();
        touched.push(set);
        s.threads.push(ts);
    }
    // Windows where some thread was already running at the start (a
    // stretch crossing the opening edge) have no activation to measure.
    let running_at_open = |k: u64| {
        let start = w.origin_ns + k * w.period_ns();
        stretches
            .iter()
            .flatten()
            .any(|&(a, b)| a < start && b > start)
    };
    s.activation = Quantiles::of_ns(
        first_start
            .iter()
            .filter(|(k, _)| !running_at_open(**k))
            .map(|(_, d)| *d)
            .collect(),
    );
    s.activation_all = Quantiles::of_ns(
        starts
            .iter()
            .filter(|(k, each)| !running_at_open(**k) && each.iter().all(|&d| d != u64::MAX))
            .map(|(_, each)| each.iter().copied().max().unwrap_or(0))
            .collect(),
    );
    let closes = |k: u64| w.origin_ns + k * w.period_ns() + w.budget_ns();
    let next_opens = |k: u64| w.origin_ns + (k + 1) * w.period_ns();
    // Windows every thread ran in, none on into the next window.
    let whole: Vec<(u64, u64, u64)> = ends
        .iter()
        .filter(|(_, each)| each.iter().all(|&e| e != 0))
        .map(|(&k, each)| {
            let (lo, hi) = (each.iter().min(), each.iter().max());
            (k, *lo.unwrap_or(&0), *hi.unwrap_or(&0))
        })
        .filter(|&(k, _, hi)| hi < next_opens(k))
        .collect();
    s.suspension = Quantiles::of(
        whole
            .iter()
            .map(|&(k, _, hi)| (hi as f64 - closes(k) as f64) / 1e3)
            .collect(),
    );
    s.suspension_spread = Quantiles::of_ns(whole.iter().map(|&(_, lo, hi)| hi - lo).collect());
    let all: std::collections::BTreeSet<u64> = touched.iter().flatten().copied().collect();
    if !all.is_empty() {
        let common = all
            .iter()
            .filter(|k| touched.iter().all(|t| t.contains(k)))
            .count();
        s.same_windows = common as f64 / all.len() as f64;
    }
    // Whole periods only: the first and last may be cut by the run.
    let (first, last) = (index(from) + 1, index(to));
    let budget = w.budget_ns() as f64;
    let got = |k: u64| per_period.get(&k).copied().unwrap_or(0);
    s.delivery_error = Quantiles::of(
        (first..last)
            .map(|k| (got(k) as f64 - budget).abs() / budget * 100.0)
            .collect(),
    );
    s.delivered = Quantiles::of_ns((first..last).map(got).collect());
    s
}

/// The window schedule of this process's cell, if it has one.
fn own_window() -> Option<Window> {
    let cell = allot_client::Cell::from_env()?.ok()?;
    let w = cell.grant().window;
    w.is_set().then_some(w)
}

/// Runs one thread's loop until `end`; returns its stretches and (in
/// periodic mode) wake-up delays.
fn thread_loop(
    end: u64,
    gap: u64,
    duty: Option<(u64, u64)>,
    periodic: Option<(u64, u64, u64)>,
    wait_window: bool,
) -> (Vec<(u64, u64)>, Vec<u64>) {
    let mut out = Vec::with_capacity(4096);
    let mut late = Vec::new();
    let mut start = monotonic_ns();
    let mut last = start;
    let mut next_sleep = duty.map(|(work, _)| start + work);
    let mut next_wake = periodic.map(|(origin, period, _)| {
        let k = start.saturating_sub(origin) / period + 1;
        origin + k * period
    });
    loop {
        let now = monotonic_ns();
        if now - last > gap {
            out.push((start, last));
            start = now;
        }
        last = now;
        if now >= end {
            out.push((start, now));
            return (out, late);
        }
        if let (Some(at), Some((_, sleep))) = (next_sleep, duty)
            && now >= at
        {
            out.push((start, now));
            std::thread::sleep(Duration::from_micros(sleep));
            start = monotonic_ns();
            last = start;
            next_sleep = Some(start + duty.map_or(0, |d| d.0));
        }
        if let (Some(wake), Some((_, period, budget))) = (next_wake, periodic)
            && now >= wake.saturating_sub(period) + budget
        {
            // The budget is spent: sleep until the next period start.
            out.push((start, now));
            if wait_window {
                allot_proto::window::sleep_until(wake);
            } else {
                let t = rustix::time::Timespec {
                    tv_sec: (wake / 1_000_000_000) as i64,
                    tv_nsec: (wake % 1_000_000_000) as _,
                };
                let _ = rustix::thread::clock_nanosleep_absolute(
                    rustix::thread::ClockId::Monotonic,
                    &t,
                );
            }
            start = monotonic_ns();
            last = start;
            late.push(start.saturating_sub(wake));
            next_wake = Some(wake + period);
        }
    }
}

/// Runs `allot bench probe`.
pub fn run(a: ProbeArgs) -> Result<(), String> {
    let window = own_window();
    let duty = a.work_us.zip(a.sleep_us).map(|(w, s)| (w * 1000, s));
    let periodic = match &a.periodic {
        None => None,
        Some(text) => {
            let (p, b) = text
                .split_once(',')
                .ok_or_else(|| format!("--periodic {text:?}: expected PERIOD_US,BUDGET_US"))?;
            let p: u64 = p
                .trim()
                .parse()
                .map_err(|e| format!("--periodic period: {e}"))?;
            let b: u64 = b
                .trim()
                .parse()
                .map_err(|e| format!("--periodic budget: {e}"))?;
            if p == 0 || b == 0 || b > p {
                return Err(format!(
                    "--periodic {text:?}: need 0 < budget ≤ period (µs)"
                ));
            }
            let origin = window.map_or(monotonic_ns(), |w| w.origin_ns);
            Some((origin, p * 1000, b * 1000))
        }
    };
    if a.threads == 0 || a.seconds.is_nan() || a.seconds <= 0.0 {
        return Err("--threads and --seconds must be positive".into());
    }
    let from = monotonic_ns();
    let end = from + (a.seconds * 1e9) as u64;
    let gap = a.gap_us * 1000;
    let wait_window = a.wait_window;
    let handles: Vec<_> = (0..a.threads)
        .map(|_| std::thread::spawn(move || thread_loop(end, gap, duty, periodic, wait_window)))
        .collect();
    let mut stretches = Vec::new();
    let mut late = Vec::new();
    for h in handles {
        let (s, l) = h
            .join()
            .map_err(|_| "a probe thread panicked".to_string())?;
        stretches.push(s);
        late.extend(l);
    }
    let summary = summarize(window, &stretches, from, end, late);
    println!(
        "{}",
        serde_json::to_string(&summary).map_err(|e| e.to_string())?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;
    const US: u64 = 1_000;

    fn w() -> Window {
        Window {
            origin_ns: 0,
            period_us: 10_000,
            budget_us: 3_000,
        }
    }

    #[test]
    fn a_gang_inside_its_windows_is_counted_as_such() {
        // Two threads, each running 100 µs after every opening for 2.9 ms.
        let t: Vec<(u64, u64)> = (0..10)
            .map(|k| (k * 10 * MS + 100 * US, k * 10 * MS + 3 * MS))
            .collect();
        let s = summarize(Some(w()), &[t.clone(), t], 0, 100 * MS, vec![]);
        assert_eq!(s.threads[0].outside_ns, 0);
        assert_eq!(s.threads[0].windows, 10);
        assert_eq!(s.same_windows, 1.0);
        assert_eq!(s.activation.n, 10);
        assert_eq!(s.activation.p50, 100.0);
        // Each period got 2 × 2.9 ms against a 3 ms budget.
        assert_eq!(
            s.delivery_error.n, 9,
            "whole periods 1..=9 (period 0 may be cut)"
        );
        assert!((s.delivery_error.p50 - 93.33).abs() < 0.01, "{s:?}");
        assert_eq!(s.delivered.p50, 5800.0, "2 × 2.9 ms, in µs");
    }

    #[test]
    fn the_whole_cell_is_active_when_its_last_thread_runs_and_suspended_when_it_stops() {
        // Thread a starts 100 µs after each opening, b 400 µs; a stops
        // 50 µs after the close, b 200 µs after.
        let a: Vec<(u64, u64)> = (0..5)
            .map(|k| (k * 10 * MS + 100 * US, k * 10 * MS + 3 * MS + 50 * US))
            .collect();
        let b: Vec<(u64, u64)> = (0..5)
            .map(|k| (k * 10 * MS + 400 * US, k * 10 * MS + 3 * MS + 200 * US))
            .collect();
        let s = summarize(Some(w()), &[a.clone(), b], 0, 50 * MS, vec![]);
        assert_eq!(s.activation.p50, 100.0, "the first thread");
        assert_eq!(
            (s.activation_all.n, s.activation_all.p50),
            (5, 400.0),
            "the last"
        );
        assert_eq!((s.suspension.n, s.suspension.p50), (5, 200.0));
        assert_eq!(s.suspension_spread.p50, 150.0, "a stopped 150 µs before b");
        // Stopped before the edge: negative.
        let early: Vec<(u64, u64)> = vec![(100 * US, 2 * MS + 900 * US)];
        let s = summarize(Some(w()), &[early], 0, 10 * MS, vec![]);
        assert_eq!(s.suspension.p50, -100.0);
        // A window one thread missed has no whole-cell activation.
        let s = summarize(
            Some(w()),
            &[a, vec![(400 * US, 3 * MS)]],
            0,
            50 * MS,
            vec![],
        );
        assert_eq!(s.activation_all.n, 1);
    }

    #[test]
    fn time_outside_the_windows_and_threads_apart_are_seen() {
        let a = vec![(5 * MS, 12 * MS)];
        let b = vec![(21 * MS, 22 * MS)];
        let s = summarize(Some(w()), &[a, b], 0, 30 * MS, vec![]);
        // Thread a: 5–10 outside (5 ms), 10–12 in window 1.
        assert_eq!(s.threads[0].outside_ns, 5 * MS);
        assert_eq!(s.threads[0].outside_max_ns, 5 * MS);
        assert_eq!(s.threads[0].windows, 1);
        // Thread b ran only in window 2: no window is common.
        assert_eq!(s.same_windows, 0.0);
        // Window 1 began with thread a running: no activation for it.
        assert_eq!(s.activation.n, 1);
        assert_eq!(s.activation.p50, 1000.0);
    }

    #[test]
    fn without_windows_only_run_time_and_lateness_are_reported() {
        let s = summarize(None, &[vec![(0, 7)]], 0, 10, vec![5_000, 9_000, 1_000]);
        assert_eq!(s.threads[0].ran_ns, 7);
        assert_eq!(s.lateness.n, 3);
        assert_eq!(s.lateness.p50, 5.0);
        assert_eq!(s.activation.n, 0);
    }
}
