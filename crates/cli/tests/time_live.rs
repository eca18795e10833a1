//! Time contracts on this machine: a broker with the cgroup v1 backend, CPU
//! hogs in best-effort cells, and a time cell beside them under
//! `allot run --fraction` or `--period/--budget`. Every process is bounded
//! by `timeout`, and the broker removes its cgroups (the `Daemon` guard
//! does too, on failure).

mod common;

use allot_proto::status::DeliveryStatus;
use common::*;
use std::time::{Duration, Instant};

/// What one time cell received over a measurement.
struct Received {
    /// Share of one CPU.
    share: f64,
    /// Its CPUs, as the status lists them.
    cpus: String,
    /// What the broker says it delivered (windowed cells) in the
    /// measured stretch only: [`since`] of the counts at its end and at
    /// its start, so the periods of start-up (cells joining, the plan
    /// moving) are not counted.
    delivery: Option<DeliveryStatus>,
}

/// The delivery counted between `start` and `end` (two reports of the
/// same cell): counts subtracted, the mean error of those periods alone.
fn since(end: &DeliveryStatus, start: &DeliveryStatus) -> DeliveryStatus {
    let periods = end.periods - start.periods;
    let errors = end.mean_error * end.periods as f64 - start.mean_error * start.periods as f64;
    DeliveryStatus {
        periods,
        mean_error: errors / periods.max(1) as f64,
        under: end.under - start.under,
        over: end.over - start.over,
        missed: end.missed - start.missed,
        resent: end.resent - start.resent,
        ..end.clone()
    }
}

/// What the machine did during a measurement.
struct Machine {
    /// Its busy fraction (every process, the broker included).
    busy: f64,
    /// CPUs' worth of work outside the test's cells (another program on a
    /// shared machine).
    outside: f64,
}

impl Machine {
    /// Whether work outside the test's cells stayed under half a CPU, so
    /// that what the cells received is allot's doing alone.
    fn quiet(&self) -> bool {
        self.outside <= 0.5
    }
}

/// Runs a time cell with `args` beside two best-effort cells of two hogs
/// each for `secs`; returns the time cell's share of one CPU, what the
/// machine did and what the broker says it delivered.
fn measure(args: &[&str], secs: f64) -> (f64, Machine, Option<DeliveryStatus>) {
    let (mut got, m) = measure_cells(&[("timed", args)], secs);
    let r = got.remove(0);
    (r.share, m, r.delivery)
}

/// Checks that a time cell got `target` ± 0.03 of a CPU ([`check_share_within`]).
fn check_share(share: f64, target: f64, m: &Machine) {
    check_share_within(share, target, 0.03, m)
}

/// Checks that a time cell got `target` ± `within` of a CPU. The windows give
/// the cell its CPU only against the test's other cells: work outside
/// every cell (another program keeping a CPU busy) competes for the same
/// CPU by the kernel's own rules, and what it takes is the machine's
/// decision, not allot's. With more than half a CPU of such work during
/// the measurement, only a collapse is judged (under half the target).
fn check_share_within(share: f64, target: f64, within: f64, m: &Machine) {
    let outside = m.outside;
    if !m.quiet() {
        eprintln!(
            "note: {outside:.2} CPUs of work outside the test's cells; judging only that the \
             cell got at least half of its {target}"
        );
        assert!(
            share >= target / 2.0,
            "time cell got {share:.3} of a CPU, under half of {target}"
        );
    } else {
        assert!(
            (target - within..=target + within).contains(&share),
            "time cell got {share:.3} of a CPU, not {target} ± {within}"
        );
    }
}

/// One missed window in how many periods a test allows: one in a hundred
/// on a quiet machine, one in ten beside work outside the cells (see
/// `check_share_within`).
fn missed_bound(m: &Machine) -> u64 {
    if m.quiet() { 100 } else { 10 }
}

/// Runs the time cells `timed` (name, `allot run` options) beside two
/// best-effort cells of two hogs each for `secs`; returns what each time
/// cell received and what the machine did.
fn measure_cells(timed: &[(&str, &[&str])], secs: f64) -> (Vec<Received>, Machine) {
    let d = Daemon::start("cgroup1", &[]);
    let mut kids = Killed(
        &d,
        vec![cell(&d, "hog-a", &[], SPIN2), cell(&d, "hog-b", &[], SPIN2)],
    );
    for (name, args) in timed {
        kids.1.push(cell(&d, name, args, SPIN));
    }
    let mut names = vec!["hog-a", "hog-b"];
    names.extend(timed.iter().map(|(n, _)| *n));
    assert!(
        eventually(Duration::from_secs(10), || {
            let st = d.status();
            names
                .iter()
                .all(|n| st.cells.iter().any(|c| c.name == *n && !c.pids.is_empty()))
        }),
        "the cells did not start: {}",
        d.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    let before: Vec<u64> = names.iter().map(|n| usage(&d, n)).collect();
    let delivered = |st: &allot_proto::status::Status, name: &str| {
        st.cells
            .iter()
            .find(|c| c.name == name)
            .and_then(|c| c.delivery.clone())
    };
    let st0 = d.status();
    let idle0 = idle_ticks();
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let after: Vec<u64> = names.iter().map(|n| usage(&d, n)).collect();
    let idle1 = idle_ticks();
    let wall = t0.elapsed().as_secs_f64();
    // Busy: the machine's own count (every process, the broker included).
    let (i, t) = (idle1.0 - idle0.0, idle1.1 - idle0.1);
    let busy = 1.0 - i as f64 / t.max(1) as f64;
    let used: Vec<f64> = before
        .iter()
        .zip(&after)
        .map(|(b, a)| (a - b) as f64 / 1e9 / wall)
        .collect();
    let st = d.status();
    let got: Vec<Received> = timed
        .iter()
        .zip(&used[2..])
        .map(|((name, args), &share)| {
            let c = st.cells.iter().find(|c| c.name == *name).unwrap();
            let delivery = match (delivered(&st, name), delivered(&st0, name)) {
                (Some(end), Some(start)) => Some(since(&end, &start)),
                (end, _) => end,
            };
            eprintln!(
                "{name} {args:?}: {share:.3} of a CPU on {}; delivered while measured {delivery:?}",
                c.cpus
            );
            Received {
                share,
                cpus: c.cpus.to_string(),
                delivery,
            }
        })
        .collect();
    let ncpus = allot_testkit::cpus() as f64;
    let outside = (busy * ncpus - used.iter().sum::<f64>()).max(0.0);
    eprintln!(
        "hogs {:.3} + {:.3}, cells {:.3} and machine {busy:.3} busy of {} CPUs \
         ({outside:.2} CPUs outside the cells)",
        used[0],
        used[1],
        used.iter().sum::<f64>() / ncpus,
        allot_testkit::cpus()
    );
    drop(kids);
    (got, Machine { busy, outside })
}

/// (idle + iowait, total) clock ticks of the whole machine, from
/// `/proc/stat`.
fn idle_ticks() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let v: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    (v[3] + v[4], v.iter().sum())
}

#[test]
fn a_quarter_fraction_beside_hogs_gets_a_quarter_of_a_cpu() {
    if !cgroup1_here() {
        return;
    }
    let (share, m, _) = measure(&["--fraction", "0.25"], 3.0);
    check_share(share, 0.25, &m);
    assert!(m.busy >= 0.95, "the machine was only {:.3} busy", m.busy);
}

#[test]
fn a_budget_of_3ms_every_10ms_beside_hogs_gets_30_percent() {
    if !cgroup1_here() {
        return;
    }
    let (share, m, delivery) = measure(&["--period", "10ms", "--budget", "3ms"], 3.0);
    check_share(share, 0.30, &m);
    assert!(m.busy >= 0.95, "the machine was only {:.3} busy", m.busy);
    // The broker drove its windows (the freezer) and accounted each period.
    let d = delivery.expect("a windowed cell reports its delivery");
    assert!(d.periods >= 250, "{d:?}");
    // A window is missed when the broker's timer fires after the window's
    // end (3 ms late): a clean-clone CI run on this VM saw it once in 352
    // periods, so the test allows one in a hundred. With work outside the
    // cells the timer competes for a CPU by the kernel's rules (a run with
    // a CPU of it missed 4 in 298): then only a collapse is judged.
    assert!(d.missed * missed_bound(&m) <= d.periods, "{d:?}");
    // Most periods got their budget: a spinning cell is short only when
    // the machine held it back. On this 2-vCPU VM under a debug build,
    // the measured stretch (about 300 periods) usually has 1 to 6 short
    // periods, but about one run in five settles into a mode with 34 to
    // 59 (a share of 0.283 to 0.291 even so; cause not found). The bound
    // of one in four catches a collapse (the freezer without a weight is
    // short in half its periods); what tells windows from a share without
    // them (CFS bandwidth: a quarter short, a per-period error of about a
    // third; see docs/time-mechanisms.md) is the mean error below.
    // Both depend on what the machine let the cell run: judged when the
    // work outside the cells left its CPU alone.
    if m.quiet() {
        assert!(d.under * 4 <= d.periods, "{d:?}");
        assert!(d.mean_error < 0.10, "{d:?}");
    }
}

#[test]
fn two_time_triggered_cells_share_a_cpu_and_each_gets_its_budget() {
    if !cgroup1_here() {
        return;
    }
    // One CPU may carry time promises here: both cells land on it, their
    // windows a gap apart. Overlapping windows would halve what each gets.
    let c = ["--period", "10ms", "--budget", "3ms"];
    let (got, m) = measure_cells(&[("first", &c), ("second", &c)], 3.0);
    assert_eq!(got[0].cpus, got[1].cpus, "both on the time CPU");
    // What this test guards is that the two cells' windows never overlap
    // (overlapping, each would get about 0.15); how exactly one window is
    // delivered is judged by the single-cell tests at ± 0.03. Here the
    // broker opens and closes two cells' windows on the one CPU they share,
    // and a clean-clone CI run on a 2-vCPU VM saw the first cell get 0.270
    // (0.15 CPUs of other work): ± 0.05 keeps the gap to a halving wide.
    for r in &got {
        check_share_within(r.share, 0.30, 0.05, &m);
        let d = r.delivery.as_ref().expect("windowed");
        assert!(
            d.periods >= 250 && d.missed * missed_bound(&m) <= d.periods,
            "{d:?}"
        );
    }
    assert!(m.busy >= 0.95, "the machine was only {:.3} busy", m.busy);
}

/// Runs `allot bench probe ARGS` in a cell made with `contract`, beside
/// two hogs; returns the probe's JSON report.
fn probe(contract: &[&str], args: &[&str]) -> serde_json::Value {
    let d = Daemon::start("cgroup1", &[]);
    let _kids = Killed(&d, vec![cell(&d, "hog-a", &[], SPIN2)]);
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .cells
        .iter()
        .any(|c| c.name == "hog-a" && !c.pids.is_empty())));
    let mut full = vec!["--name", "probe"];
    full.extend_from_slice(contract);
    full.extend_from_slice(&["--", "timeout", "20", ALLOT, "bench", "probe"]);
    full.extend_from_slice(args);
    let o = run_out(allot_run(&d, &full));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Two threads that work 200 µs and sleep 500 µs in turn for 2 s, in a
/// cell of `contract`: each wants the CPU in every window, and neither may
/// run outside one. Checks that the cell's windows are `window` (period,
/// budget µs), that each thread ran in at least `most` of them, only there,
/// and that the two ran in the same windows.
fn two_threads_run_together_in_windows(contract: &[&str], window: [u32; 2], most: u64) {
    let r = probe(
        contract,
        &[
            "--threads",
            "2",
            "--seconds",
            "2",
            "--work-us",
            "200",
            "--sleep-us",
            "500",
        ],
    );
    eprintln!("{r}");
    assert_eq!(r["window"], serde_json::json!(window), "{r}");
    for t in r["threads"].as_array().unwrap() {
        let ran = t["ran_ns"].as_f64().unwrap();
        let windows = t["windows"].as_u64().unwrap();
        assert!(ran > 0.0 && windows >= most, "at least {most} windows: {r}");
        // A suspension lands when the thread next enters the kernel (an
        // interrupt from another CPU): up to about 80 µs past a window's
        // end on this VM. Allow 100 µs per window on average…
        let outside = t["outside_ns"].as_u64().unwrap();
        assert!(outside <= windows * 100_000, "{r}");
        // …and no stretch of a millisecond: a thread the kernel lets run
        // on through a freeze is stopped by the driver's check 0.5 ms
        // after the close.
        assert!(t["outside_max_ns"].as_u64().unwrap() < 1_000_000, "{r}");
    }
    assert!(r["same_windows"].as_f64().unwrap() >= 0.95, "{r}");
}

#[test]
fn both_threads_of_a_time_triggered_cell_run_in_the_same_windows_and_only_there() {
    if !cgroup1_here() {
        return;
    }
    // Most of 200 windows.
    two_threads_run_together_in_windows(
        &["--period", "10ms", "--budget", "3ms"],
        [10_000, 3_000],
        150,
    );
}

/// Tessellation's time-fraction cell is gang-scheduled with a minimum
/// slice: `--fraction 0.25 --slice 2ms` runs both threads together in
/// windows of 4 ms every 16 ms (`allot_plan::time::phase::fraction_windows`),
/// not each thread on its own under a CFS quota.
#[test]
fn both_threads_of_a_time_fraction_cell_run_together_in_its_slices() {
    if !cgroup1_here() {
        return;
    }
    // Most of 125 windows.
    two_threads_run_together_in_windows(
        &["--fraction", "0.25", "--slice", "2ms"],
        [16_000, 4_000],
        90,
    );
}

#[test]
fn a_periodic_task_that_waits_for_its_window_resumes_at_the_opening() {
    if !cgroup1_here() {
        return;
    }
    // 2 ms of work per 10 ms period, waiting with allot's window wait
    // (Cell::wait_window's primitive) while the cell is frozen.
    let r = probe(
        &["--period", "10ms", "--budget", "3ms"],
        &[
            "--seconds",
            "2",
            "--periodic",
            "10000,2000",
            "--wait-window",
        ],
    );
    eprintln!("{r}");
    let late = &r["lateness"];
    assert!(late["n"].as_u64().unwrap() >= 150, "{r}");
    // It resumes with the thaw at each opening, not a window late (a
    // wait that slept through the thaw): the VM's thaw-to-run latency is
    // 20–70 µs at its median; 1 ms bounds it with room for a loaded CI
    // machine, and is a tenth of the period. (That the wait never returns
    // before the opening is checked without a freezer, in allot-proto's
    // and allot-client's unit tests.)
    assert!(late["p50"].as_f64().unwrap() < 1000.0, "{r}");
    let t = &r["threads"][0];
    let windows = t["windows"].as_u64().unwrap();
    assert!(
        t["outside_ns"].as_u64().unwrap() <= windows * 100_000,
        "{r}"
    );
}

#[test]
fn a_contract_that_overcommits_a_cpu_is_refused_with_the_reason() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let _first = Killed(
        &d,
        vec![cell(&d, "first", &["--fraction", "0.7"], "sleep 8")],
    );
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .cells
        .iter()
        .any(|c| c.name == "first")));
    let o = run_out(allot_run(&d, &["--fraction", "0.5", "--", "true"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    // On two CPUs the second promise needs the other CPU, which must stay
    // with space cells; on larger machines it would fit there.
    assert!(
        err.contains("refused") && (err.contains("have room") || err.contains("leaving 0")),
        "{err}"
    );
    // A bad contract fails before anything starts.
    let o = run_out(allot_run(
        &d,
        &["--period", "10ms", "--budget", "20ms", "--", "true"],
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("longer than the period"), "{err}");
}
