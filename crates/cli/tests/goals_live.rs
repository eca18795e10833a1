//! Goals on this machine: a request server with a p99 goal (`allot bench
//! serve` under `allot run --goal`) beside five CPU hogs, with a broker
//! of the cgroup v1 backend under the goals policy and under fair share.
//! Every process is bounded by `timeout`; the broker removes its cgroups
//! (the `Daemon` guard does too, on failure).

mod common;

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

/// Runs the server (300 requests a second of 2 ms each: 0.6 CPU of work)
/// with `--goal p99=60ms` beside five hogs under a broker started with
/// `daemon`; returns its report over the second half of 16 s, and the
/// server cell's status and the machine's load near the end.
fn serve(
    daemon: &[&str],
) -> (
    serde_json::Value,
    allot_proto::status::CellStatus,
    allot_proto::status::LoadStatus,
) {
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
        std::thread::sleep(Duration::from_secs(14));
        let st = d.status();
        let srv = st.cells.iter().find(|c| c.name == "server").cloned();
        let load = st.load.clone().expect("the machine's load");
        let o = run.join().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).to_string();
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let report: serde_json::Value =
            serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
        (report, srv.expect("the server's cell"), load)
    });
    drop(kids);
    server
}

/// CPUs' worth of work outside every cell above which the machine is
/// "busy": the server's CPU of its own is then shared with work the broker
/// does not manage, and what the server achieves says how busy the machine
/// was, not what the policy decided.
const BUSY_OUTSIDE: f64 = 0.2;

#[test]
fn the_goals_policy_gives_a_latency_goal_its_cpu_and_fair_share_misses_it() {
    if !cgroup1_here() {
        return;
    }
    let (report, cell, load) = serve(&["--policy", "goals"]);
    eprintln!("goals: {report} {:?} {load:?}", cell.perf);
    let perf = cell.perf.expect("measured");
    let quiet = load.unmanaged.is_some_and(|u| u <= BUSY_OUTSIDE);
    if quiet {
        // What the policy decided, and what that bought.
        assert!(
            (0.95..=1.05).contains(&perf.cpus),
            "one CPU of its own beside the hogs: {perf:?}"
        );
        assert_eq!(perf.goal_met, Some(true), "{perf:?}");
        assert!(perf.goal_note.contains("of its own"), "{perf:?}");
        // What that bought, as the server saw it: its median request is
        // served well inside the goal (under fair share its queue grows to
        // seconds). Its own p99 over eight seconds is printed, not judged:
        // one stall of the virtual machine (a CI run saw 105 ms of them,
        // with the broker's window at 33 ms) moves it past the goal while
        // the policy did exactly what it should.
        let p50 = report["p50_us"].as_f64().unwrap();
        assert!(p50 <= GOAL_US / 4.0, "median {p50} µs: {report}");
    } else {
        // Something outside the cells took CPU time: the policy either
        // gave the server its CPU or, measuring that no allocation meets
        // the goal, said so and treated it as best effort. Either way it
        // acted on the goal, which fair share (below) does not.
        eprintln!(
            "the machine was busy outside the cells ({load:?}): the policy's decision is judged, not the server's p99"
        );
        let own = (0.95..=1.05).contains(&perf.cpus) && perf.goal_note.contains("of its own");
        let infeasible = perf.goal_met == Some(false) && perf.goal_note.contains("cannot be met");
        assert!(own || infeasible, "{perf:?}");
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
    let (report, cell, _) = serve(&[]);
    eprintln!("fair share: {report} {:?}", cell.perf);
    let perf = cell.perf.expect("measured");
    assert!(perf.cpus < 0.5, "a share beside the hogs: {perf:?}");
    assert_eq!(perf.goal_met, Some(false), "{perf:?}");
    assert!(perf.goal_note.contains("--policy goals"), "{perf:?}");
    let p99 = report["p99_us"].as_f64().unwrap();
    let served = report["requests"].as_f64().unwrap_or(0.0);
    assert!(
        p99 > GOAL_US || served == 0.0,
        "fair share met the goal too: {report}"
    );
}
