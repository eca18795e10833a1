//! Goals on this machine: a request server with a p99 goal (`allot bench
//! serve` under `allot run --goal`) beside five CPU hogs, with a broker
//! of the cgroup v1 backend under the goals policy and under fair share.
//! Every process is bounded by `timeout`; the broker removes its cgroups
//! (the `Daemon` guard does too, on failure).

mod common;

use allot_topo::CpuSet;
use common::*;
use std::time::Duration;

/// Hogs beside the server. With three, fair share gives the server half
/// a CPU, and a sleeping server's wake-up credit brings it close to its
/// 0.6 CPU of work, so some one-second windows meet the goal; with five
/// it gets about a third of a CPU and every window misses.
const HOGS: usize = 5;

/// The server's p99 goal, µs. On a CPU of its own the server's p99 is
/// 15–26 ms (a busy virtual machine's worst seen); under fair share its
/// queue grows to seconds. The broker reads a p99 as the upper edge of
/// its quarter-octave bucket (up to 25 % above the true one), so a goal
/// close to what one CPU gives would be judged missed on noise.
const GOAL_US: f64 = 60_000.0;

/// One look at the broker while the server runs: seconds since it was
/// started, the server's cell (if registered), the CPUs of the other cells
/// and the machine's load.
struct Sample {
    at: f64,
    cell: Option<allot_proto::status::CellStatus>,
    others: Vec<CpuSet>,
    load: Option<allot_proto::status::LoadStatus>,
}

impl std::fmt::Debug for Sample {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:5.1}s ", self.at)?;
        match self
            .cell
            .as_ref()
            .and_then(|c| c.perf.as_ref().map(|p| (c, p)))
        {
            Some((c, p)) => write!(
                f,
                "cpus {} ({:.2}) used {:?} p99 {:?} met {:?} {:?}",
                c.cpus, p.cpus, p.cpu_used, p.p99_us, p.goal_met, p.goal_note
            )?,
            None => write!(f, "no server cell measured yet")?,
        }
        let outside = self.load.as_ref().and_then(|l| l.unmanaged);
        write!(f, "; outside the cells {outside:?}")
    }
}

/// Runs the server (300 requests a second of 2 ms each: 0.6 CPU of work)
/// with `--goal p99=60ms` beside five hogs under a broker started with
/// `daemon`; returns its report over the second half of 16 s, and the
/// broker's view every quarter second until 14 s (printed as it comes).
fn serve(daemon: &[&str]) -> (serde_json::Value, Vec<Sample>) {
    let d = Daemon::start("cgroup1", daemon);
    let kids = Killed(
        &d,
        (1..=HOGS)
            .map(|i| cell_for(&d, &format!("hog-{i}"), &[], SPIN, 30))
            .collect(),
    );
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .cells
        .iter()
        .filter(|c| c.name.starts_with("hog") && !c.pids.is_empty())
        .count()
        == HOGS));
    let server = std::thread::scope(|s| {
        let start = std::time::Instant::now();
        let run = s.spawn(|| {
            run_out(allot_run(
                &d,
                &[
                    "--name",
                    "server",
                    "--goal",
                    "p99=60ms",
                    "--",
                    "timeout",
                    "30",
                    ALLOT,
                    "bench",
                    "serve",
                    "--rate",
                    "300",
                    "--service-us",
                    "2000",
                    "--seconds",
                    "16",
                    "--warmup",
                    "8",
                ],
            ))
        });
        let mut samples = Vec::new();
        while start.elapsed() < Duration::from_secs(14) {
            std::thread::sleep(Duration::from_millis(250));
            let st = d.status();
            let sample = Sample {
                at: start.elapsed().as_secs_f64(),
                cell: st.cells.iter().find(|c| c.name == "server").cloned(),
                others: st
                    .cells
                    .iter()
                    .filter(|c| c.name != "server")
                    .filter_map(|c| CpuSet::parse_list(&c.cpus).ok())
                    .collect(),
                load: st.load.clone(),
            };
            eprintln!("{sample:?}");
            samples.push(sample);
        }
        let o = run.join().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        (report, samples)
    });
    drop(kids);
    server
}

/// Whether the server's grant in `s` is one CPU that no other cell's
/// grant holds: what the policy decided, read from the broker's state
/// (the measured share, `perf.cpus`, follows it over a window).
fn own_cpu(s: &Sample) -> bool {
    s.cell
        .as_ref()
        .and_then(|c| CpuSet::parse_list(&c.cpus).ok())
        .is_some_and(|cpus| {
            cpus.len() == 1 && s.others.iter().all(|o| o.intersection(&cpus).is_empty())
        })
}

/// When, in seconds since the server's registration reached the broker,
/// the broker first granted the server a single CPU, from the cell's
/// timeline: the broker's own clock, so a test thread kept off the CPU for
/// a while (the machine is oversubscribed on purpose) does not move it.
/// A timeline keeps its first steps and its latest ones, so the steps of
/// every sample are merged (they overlap, a sample every quarter second).
fn first_single_cpu_grant(samples: &[Sample]) -> Option<f64> {
    let mut steps: Vec<(u64, String)> = samples
        .iter()
        .filter_map(|s| s.cell.as_ref()?.timeline.as_ref())
        .flat_map(|t| t.steps.iter())
        .filter(|step| step.step == "grant")
        .map(|step| (step.at_us, step.detail.clone()))
        .collect();
    steps.sort();
    steps.dedup();
    steps.iter().find_map(|(at_us, detail)| {
        let cpus = detail.split("CPUs ").nth(1)?.split(' ').next()?;
        (CpuSet::parse_list(cpus).ok()?.len() == 1).then(|| *at_us as f64 / 1e6)
    })
}

/// CPUs' worth of work outside every cell above which the machine is
/// "busy": the server's CPU of its own is then shared with work the broker
/// does not manage, and what the server achieves says how busy the machine
/// was, not what the policy decided.
const BUSY_OUTSIDE: f64 = 0.2;

/// The server's last measured window and the load at that look.
fn last(
    samples: &[Sample],
) -> (
    allot_proto::status::PerfStatus,
    allot_proto::status::LoadStatus,
) {
    samples
        .iter()
        .rev()
        .find_map(|s| Some((s.cell.as_ref()?.perf.clone()?, s.load.clone()?)))
        .unwrap_or_else(|| panic!("the server never measured: {samples:#?}"))
}

fn note(s: &Sample) -> &str {
    s.cell
        .as_ref()
        .and_then(|c| c.perf.as_ref())
        .map_or("", |p| p.goal_note.as_str())
}

#[test]
fn the_goals_policy_gives_a_latency_goal_its_cpu_and_fair_share_misses_it() {
    if !cgroup1_here() {
        return;
    }
    let (goals, samples) = serve(&["--policy", "goals"]);
    eprintln!("goals: {goals}");
    let (perf, load) = last(&samples);
    let quiet = samples
        .iter()
        .filter_map(|s| s.load.as_ref()?.unmanaged)
        .all(|u| u <= BUSY_OUTSIDE);
    // What the policy decided: the server has a CPU of its own by the end
    // of its warm-up and keeps it, unless (something outside the cells
    // taking CPU time) the policy measured that no allocation meets the
    // goal, said so and treated it as best effort. Either way it acted on
    // the goal, which fair share (below) does not.
    let granted = first_single_cpu_grant(&samples)
        .unwrap_or_else(|| panic!("never a single CPU granted: {samples:#?}"));
    assert!(
        granted <= 8.0,
        "a single CPU only {granted:.1} s after registering, after the warm-up: \
         {samples:#?}"
    );
    let first = samples
        .iter()
        .position(own_cpu)
        .unwrap_or_else(|| panic!("never seen with a CPU of its own: {samples:#?}"));
    for s in &samples[first..] {
        let infeasible = !quiet && note(s).contains("cannot be met");
        assert!(own_cpu(s) || infeasible, "{s:?} in {samples:#?}");
    }
    if quiet {
        // What that bought, as the broker judged it: once its queue had
        // drained, a window met the goal on its CPU of its own. The
        // server's own p99 over eight seconds is printed, not judged: one
        // stall of the virtual machine (a CI run saw 105 ms of them, with
        // the broker's window at 33 ms) moves it past the goal while the
        // policy did exactly what it should.
        assert!(
            samples[first..]
                .iter()
                .any(|s| own_cpu(s) && note(s).contains("met with 1 CPU(s) of its own")),
            "the goal never met on its own CPU: {samples:#?}"
        );
    } else {
        eprintln!(
            "the machine was busy outside the cells: the policy's decision is judged, not the server's p99"
        );
    }
    // Instructions per cycle exactly where this machine counts cycles (a
    // virtual machine often has no PMU; the status then says why).
    use allot_enforce::counters::{Events, PerfCounters, RealCounters};
    let hw = RealCounters.check(Events::CyclesInstructions);
    if perf.goal_met == Some(true) {
        assert_eq!(perf.ipc.is_some(), hw.is_ok(), "{perf:?} {hw:?}");
    }
    assert_eq!(load.counters, hw.err(), "{load:?}");
    // The same server under fair share is one cell of six on two CPUs:
    // a third of a CPU for 0.6 CPU of work, its queue grows (more so on a
    // busy machine).
    let (fair, samples) = serve(&[]);
    eprintln!("fair share: {fair}");
    let (perf, _) = last(&samples);
    assert!(perf.cpus < 0.5, "a share beside the hogs: {perf:?}");
    assert_eq!(perf.goal_met, Some(false), "{perf:?}");
    assert!(perf.goal_note.contains("--policy goals"), "{perf:?}");
    let p99 = fair["p99_us"].as_f64().unwrap();
    let served = fair["requests"].as_f64().unwrap_or(0.0);
    assert!(
        p99 > GOAL_US || served == 0.0,
        "fair share met the goal too: {fair}"
    );
    // What the goal's CPU bought, as the server saw it, against fair share
    // in the same run: its median request waits a fraction as long (a
    // CPU of its own from early in the warm-up serves the second half's
    // requests in milliseconds; a third of a CPU queues them for seconds).
    let median = |r: &serde_json::Value| r["p50_us"].as_f64().unwrap_or(f64::INFINITY);
    if quiet && served > 0.0 {
        assert!(
            median(&goals) * 4.0 <= median(&fair),
            "goals {goals} against fair share {fair}"
        );
    }
}
