//! Best effort is never refused, live: with the cgroup v1 backend (whose
//! freezer pauses a cell), a best-effort `allot run` started while another
//! cell's guarantee takes every CPU starts paused, says so, shows as
//! paused in the status, and runs when that cell ends. Every process is
//! bounded by `timeout`; the broker thaws what it paused when it exits.

mod common;

use common::*;
use std::process::Stdio;
use std::time::{Duration, Instant};

fn freezer_here() -> bool {
    allot_testkit::prerequisite(
        std::path::Path::new("/sys/fs/cgroup/freezer/freezer.state").exists()
            || std::path::Path::new("/sys/fs/cgroup/freezer/tasks").exists(),
        "a cgroup v1 freezer hierarchy",
    )
}

#[test]
fn a_best_effort_run_waits_paused_for_a_guarantee_to_end() {
    if !cgroup1_here() || !freezer_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let cpus = allot_testkit::cpus().to_string();
    let mut big = allot_run(
        &d,
        &[
            "--name",
            "big",
            "--exclusive",
            "--min",
            &cpus,
            "--",
            "timeout",
            "20",
            "sleep",
            "3",
        ],
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .cells
        .iter()
        .any(|c| c.name == "big" && !c.pids.is_empty())));
    let make = allot_run(
        &d,
        &[
            "--name", "make", "--", "timeout", "20", "sh", "-c", "echo ran",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // Admitted (not refused) and paused, while "big" holds every CPU.
    let mut shown = None;
    assert!(
        eventually(Duration::from_secs(10), || {
            shown = d.status().cells.into_iter().find(|c| c.name == "make");
            shown.as_ref().is_some_and(|c| c.paused.is_some())
        }),
        "{shown:?}\n{}",
        d.log()
    );
    assert!(big.try_wait().unwrap().is_none(), "big still runs");
    // A paused run still takes Ctrl-C (a frozen process takes a fatal
    // signal on kernels since 6.1): it ends at once, and its cell with it.
    let mut quit = allot_run(&d, &["--name", "quit", "--", "timeout", "20", "true"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .cells
        .iter()
        .any(|c| c.name == "quit" && c.paused.is_some())));
    let pid = rustix::process::Pid::from_raw(quit.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    assert!(
        allot_testkit::eventually(Duration::from_secs(5), || quit
            .try_wait()
            .unwrap()
            .is_some()),
        "a paused allot run ignored Ctrl-C"
    );
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .cells
        .iter()
        .all(|c| c.name != "quit")));
    // "big" ends: "make" runs to its end.
    assert!(big.wait().unwrap().success());
    let start = Instant::now();
    let out = make.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ran\n");
    assert!(err.contains("allot: paused"), "{err}");
    assert!(start.elapsed() < Duration::from_secs(15));
}
