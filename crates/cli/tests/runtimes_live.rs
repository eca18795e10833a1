//! Runtimes other than OpenMP, unmodified, under `allot run`: numpy's
//! OpenBLAS (loaded late by Python) and a Go program follow the grant while
//! they run, as a neighbour comes and goes; `allot status` names them.

mod common;

use allot_proto::status::Follows;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// Which runtimes the broker reports for the cell named `name` (none
/// while there is no such cell).
fn runtimes_of(d: &Daemon, name: &str) -> Vec<(String, Follows)> {
    let status = d.status();
    let cell = status.cells.iter().find(|c| c.name == name);
    cell.map(|c| {
        c.runtimes
            .iter()
            .map(|r| (r.name.clone(), r.follows))
            .collect()
    })
    .unwrap_or_default()
}

/// The values before the neighbour came, while it ran, and after it left,
/// each from `settle` after the change (and before the next).
fn phases(samples: &[(f64, u32)], visit: Visit, settle: f64) -> [Vec<u32>; 3] {
    let within = |from: f64, to: f64| -> Vec<u32> {
        let seen = samples.iter().filter(|s| s.0 > from && s.0 < to);
        seen.map(|s| s.1).collect()
    };
    [
        within(visit.launched - 0.4, visit.launched),
        within(visit.started + settle, visit.ended - 0.05),
        within(visit.ended + settle, f64::MAX),
    ]
}

fn two_cpus() -> bool {
    prerequisite(
        allot_topo::allowed_cpus().unwrap().len() >= 2,
        "needs two CPUs",
    )
}

/// numpy's OpenBLAS, loaded late by an unmodified Python program under
/// `allot run`, runs as many threads as the grant — started while sharing,
/// then alone, then with a neighbour, then alone again (the shim's
/// follower, shim/follow.c).
#[test]
fn numpy_follows_the_grant_under_allot_run() {
    if !two_cpus() {
        return;
    }
    let numpy = Command::new(allot_testkit::PYTHON)
        .args(["-c", "import numpy"])
        .status();
    if !prerequisite(
        numpy.is_ok_and(|s| s.success()),
        "numpy (apt-get install python3-numpy)",
    ) {
        return;
    }
    // Prints `t NS THREADS` every 10 ms, THREADS being what numpy's
    // OpenBLAS says it uses, while multiplying matrices, until $STOP_FILE
    // exists (or for argv[1] seconds at most).
    const PROGRAM: &str = r#"
import ctypes, os, sys, time
import numpy as np
lib = next(l.split()[-1] for l in open('/proc/self/maps') if 'libopenblas' in l)
blas = ctypes.CDLL(lib)
a = np.random.default_rng(1).random((128, 128))
end, next_print = time.monotonic() + float(sys.argv[1]), 0.0
stop = os.environ.get('STOP_FILE')
while time.monotonic() < end and not (stop and os.path.exists(stop)):
    a = a @ a
    a /= np.abs(a).max()
    now = time.monotonic()
    if now >= next_print:
        print('t', time.clock_gettime_ns(time.CLOCK_MONOTONIC), blas.openblas_get_num_threads(), flush=True)
        next_print = now + 0.01
"#;
    let d = Daemon::start(backend(), &[]);
    // A neighbour first, so that numpy starts sharing the machine: its
    // launch count is 1 and OpenBLAS starts a pool of one thread, which the
    // shim must find (it creates no thread) and grow when the neighbour
    // leaves. The neighbour spins until told to stop, then prints when it
    // ended (CLOCK_MONOTONIC ns): numpy's cell shares the machine at least
    // until then.
    let first = Watched::spawn(allot_run(
        &d,
        &[
            "--name",
            "first",
            "--",
            allot_testkit::PYTHON,
            "-c",
            "import os, time\n\
             stop, end = os.environ['STOP_FILE'], time.monotonic() + 120\n\
             while not os.path.exists(stop) and time.monotonic() < end: pass\n\
             print(time.clock_gettime_ns(time.CLOCK_MONOTONIC), flush=True)",
        ],
    ));
    assert!(eventually(PATIENCE, || d
        .status()
        .cells
        .iter()
        .any(|c| c.name == "first")));
    let mut np = Watched::spawn(allot_run(
        &d,
        &[
            "--exclusive",
            "--name",
            "numpy",
            "--",
            allot_testkit::PYTHON,
            "-c",
            PROGRAM,
            "120",
        ],
    ));
    // numpy has run while sharing before the neighbour may end.
    np.wait_for("numpy's first sample", |lines| !stamped(lines).is_empty());
    assert!(
        eventually(PATIENCE, || runtimes_of(&d, "numpy")
            .contains(&("openblas".into(), Follows::RunTime))),
        "status names OpenBLAS, following at run time: {:?}",
        runtimes_of(&d, "numpy")
    );
    let first_out = first.stop();
    let t_alone = now_mono();
    let t_shared_until = first_out
        .first()
        .and_then(|l| l.parse::<f64>().ok())
        .expect("the first neighbour's end")
        / 1e9;
    let (lines, visit) = with_a_neighbour(&d, np, t_times, Duration::from_millis(1000), 1.0, 1.0);
    let samples = stamped(&lines);
    let sharing_at_start: Vec<u32> = samples
        .iter()
        .filter(|s| s.0 < t_shared_until)
        .map(|s| s.1)
        .collect();
    assert!(
        !sharing_at_start.is_empty() && sharing_at_start.iter().all(|&t| t == 1),
        "started sharing: 1 thread: {sharing_at_start:?}"
    );
    let alone: Vec<u32> = samples
        .iter()
        .filter(|s| s.0 > t_alone + 0.4 && s.0 < visit.launched)
        .map(|s| s.1)
        .collect();
    assert!(
        settles_at(&alone, 2),
        "alone: the pool grew to 2 threads: {alone:?}"
    );
    let [_, during, after] = phases(&samples, visit, 0.4);
    assert!(settles_at(&during, 1), "sharing: 1 thread: {during:?}");
    assert!(settles_at(&after, 2), "alone again: 2 threads: {after:?}");
}

/// A Go toolchain of release 1.25 or later, whose programs follow their CPU
/// set while they run.
fn go_tool() -> Option<std::path::PathBuf> {
    ["go", "/usr/local/go/bin/go"].into_iter().find_map(|go| {
        let out = Command::new(go).arg("version").output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let minor: u32 = text
            .split_whitespace()
            .nth(2)?
            .strip_prefix("go1.")?
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()?;
        (minor >= 25).then(|| go.into())
    })
}

/// A Go 1.25+ program under `allot run`: GOMAXPROCS is left unset, so its
/// runtime follows the cell's CPU set as a neighbour comes and goes.
#[test]
fn a_go_program_follows_its_cpu_set_under_allot_run() {
    if !two_cpus() {
        return;
    }
    let go = go_tool();
    if !prerequisite(
        go.is_some(),
        "Go 1.25 or later (scripts/deps.sh installs it)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("maxprocs");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/go");
    let built = Command::new(go.unwrap())
        .current_dir(&src)
        .args(["build", "-o"])
        .arg(&exe)
        .arg(".")
        .env("GOFLAGS", "-mod=mod")
        .env("GOTOOLCHAIN", "local")
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "go build: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    let d = Daemon::start(backend(), &[]);
    let mut program = Watched::spawn(allot_run(
        &d,
        &[
            "--exclusive",
            "--name",
            "gomax",
            "--",
            exe.to_str().unwrap(),
            "120",
        ],
    ));
    program.wait_for("the first sample", |lines| !stamped(lines).is_empty());
    assert!(
        eventually(PATIENCE, || runtimes_of(&d, "gomax")
            .iter()
            .any(|(n, f)| n.starts_with("go1.") && *f == Follows::RunTime)),
        "status names the Go runtime, following at run time: {:?}",
        runtimes_of(&d, "gomax")
    );
    // Go looks at its CPU set about once a second; the neighbour stays two,
    // so that a second of samples follows Go's look, and the program runs
    // on for two after it.
    let (lines, visit) =
        with_a_neighbour(&d, program, t_times, Duration::from_millis(1500), 2.0, 2.0);
    let [before, during, after] = phases(&stamped(&lines), visit, 0.8);
    assert!(
        !before.is_empty() && before.iter().all(|&t| t == 2),
        "alone: GOMAXPROCS 2: {before:?}"
    );
    assert!(
        during.contains(&1),
        "sharing: GOMAXPROCS 1 once Go has looked: {during:?}"
    );
    assert!(
        settles_at(&after, 2),
        "alone again: GOMAXPROCS 2: {after:?}"
    );
}

/// Intel's OpenMP runtime (the PyPI wheel) under `allot run` without the
/// shim: its teams are sized by allot's Thread Composability Manager
/// alone, from the cell's grant, as a neighbour comes and goes; `allot
/// status` names the manager (crates/capi/TCM.md).
#[test]
fn intel_openmp_teams_follow_the_grant_through_allot_s_tcm() {
    if !two_cpus() {
        return;
    }
    let rt = std::env::var_os("ALLOT_INTEL_RUNTIMES")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/intel-runtimes")
        });
    if !prerequisite(
        rt.join("lib/libiomp5.so").exists(),
        "Intel OpenMP from PyPI (bash scripts/intel-runtimes.sh, or set ALLOT_INTEL_RUNTIMES)",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/c/tcm_omp.c");
    let exe = dir.path().join("tcm_omp");
    let lib = rt.join("lib");
    let cc = Command::new("gcc")
        .args(["-fopenmp", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg(format!("-L{}", lib.display()))
        .arg("-l:libiomp5.so")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .status();
    assert!(cc.is_ok_and(|s| s.success()), "gcc builds tcm_omp.c");
    let d = Daemon::start(backend(), &[]);
    let mut omp = Watched::spawn(allot_run(
        &d,
        &[
            "--exclusive",
            "--no-shim",
            "--name",
            "iomp",
            "--",
            exe.to_str().unwrap(),
            "120",
        ],
    ));
    omp.wait_for("the first team", |lines| !stamped(lines).is_empty());
    assert!(
        eventually(PATIENCE, || runtimes_of(&d, "iomp")
            .contains(&("tcm".into(), Follows::RunTime))),
        "status names allot's TCM: {:?}",
        runtimes_of(&d, "iomp")
    );
    let (lines, visit) = with_a_neighbour(&d, omp, t_times, Duration::from_millis(1200), 1.0, 1.0);
    let samples = stamped(&lines);
    // On failure: every sample around the visit, and the broker's log.
    assert_phases(&phases(&samples, visit, 0.4), (2, 1), "teams", || {
        let near = samples.iter().filter(|s| s.0 > visit.launched - 0.5);
        let near: Vec<_> = near.collect();
        format!("{visit:?}; samples {near:?}\n{}", d.log())
    });
}
