//! The shim's follower (shim/follow.c): libraries whose thread count is a
//! setting are set to the grant while they run, also when the program loads
//! them late with dlopen, as Python does.
//!
//! Each test runs a probe under the shim with a grant page it controls,
//! moves the grant 2 → 1 → 2 threads, and checks, phase by phase, what the
//! library itself reports (OpenBLAS, BLIS, a stand-in for MKL), how many
//! threads it really runs at once (oneTBB), or how much CPU its team uses
//! (OpenBLAS on OpenMP).

mod common;

use allot_testkit::Stream;
use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long a phase lasts, and how long a change may take to be seen.
const PHASE: Duration = Duration::from_millis(700);
const SETTLE: Duration = Duration::from_millis(250);

/// A guard before each change: a sample taken just before it may describe
/// work that ran past it.
const GUARD: Duration = Duration::from_millis(50);

/// One `t NS VALUE [OTHERS ICV]` line of a probe's.
#[derive(Debug, Clone, Copy)]
struct Sample {
    t: i64,
    value: i64,
    /// CPU ns used so far by the probe's other threads (follow_probe).
    others: Option<i64>,
    /// The probe's own omp_get_max_threads() (follow_probe; -1: none).
    icv: Option<i64>,
}

type Trace = Vec<Sample>;

/// Runs `cmd` under the shim with a page of 2 threads, changes it to 1 and
/// back to 2 at PHASE intervals, and returns the probe's trace with the
/// changes' times. The probe runs until the last phase has as many
/// samples as a phase (`STOP_FILE`); its duration argument is only a cap.
fn run_phases(cmd: &mut Command) -> (Trace, Vec<Change>, String) {
    run_phases_after(cmd, PHASE)
}

/// As [`run_phases`], the first change `lead` after the start.
fn run_phases_after(cmd: &mut Command, lead: Duration) -> (Trace, Vec<Change>, String) {
    let mut page = Page::new(2);
    with_shim(cmd, 2);
    inherit_page(cmd, page.fd());
    let dir = tempfile::tempdir().unwrap();
    let stop = dir.path().join("stop");
    cmd.env("ALLOT_SHIM_DEBUG", "1")
        .env("STOP_FILE", &stop)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("the probe starts");
    let out = Stream::read(child.stdout.take().unwrap());
    let err = Stream::read(child.stderr.take().unwrap());
    let samples_since = |from: i64| {
        trace_of(&out.lines())
            .iter()
            .filter(|s| s.t >= from)
            .count()
    };
    // The phases count from the probe's first sample: on a busy machine
    // its start (loading the library, starting its threads) can take most
    // of a phase, which would leave the first one too short to judge.
    let _ = allot_testkit::eventually(Duration::from_secs(20), || samples_since(0) > 0);
    let start = Instant::now();
    let mut changes = vec![];
    for (k, threads) in [1u32, 2].into_iter().enumerate() {
        std::thread::sleep((lead + PHASE * k as u32).saturating_sub(start.elapsed()));
        changes.push(change(&mut page, threads));
    }
    // The last phase as long as the others, with samples enough to judge.
    let last = changes[1].end;
    let _ = allot_testkit::eventually(Duration::from_secs(20), || {
        now_ns() >= last + PHASE.as_nanos() as i64
            && samples_since(last + SETTLE.as_nanos() as i64) >= LAST_PHASE_SAMPLES
    });
    std::fs::write(&stop, "").unwrap();
    let status = wait_within(&mut child, Duration::from_secs(30));
    let stderr = err.rest();
    assert!(status.success(), "the probe failed: {stderr}");
    (trace_of(&out.all_lines()), changes, stderr)
}

/// The probe's `t NS VALUE [OTHERS ICV]` lines.
fn trace_of(lines: &[String]) -> Trace {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("t "))
        .map(|rest| {
            let f: Vec<i64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap())
                .collect();
            Sample {
                t: f[0],
                value: f[1],
                others: f.get(2).copied(),
                icv: f.get(3).copied(),
            }
        })
        .collect()
}

/// Samples the last phase waits for (the most any test asks of a phase).
const LAST_PHASE_SAMPLES: usize = 5;

fn wait_within(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            panic!("the probe did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The samples of each phase, from SETTLE after its change to GUARD before
/// the next: (threads granted, samples).
fn phases(trace: &Trace, changes: &[Change]) -> Vec<(u32, Vec<Sample>)> {
    let settle = SETTLE.as_nanos() as i64;
    let guard = GUARD.as_nanos() as i64;
    let first_t = trace.first().map_or(0, |s| s.t);
    let bounds = [
        (2, first_t + settle, changes[0].start - guard),
        (1, changes[0].end + settle, changes[1].start - guard),
        (2, changes[1].end + settle, i64::MAX),
    ];
    bounds
        .iter()
        .map(|&(want, from, to)| {
            let seen = trace.iter().filter(|s| s.t >= from && s.t < to).copied();
            (want, seen.collect())
        })
        .collect()
}

/// CPU time the probe's other threads used per second of the phase.
fn others_rate(samples: &[Sample]) -> f64 {
    let (first, last) = (samples.first().unwrap(), samples.last().unwrap());
    let cpu = last.others.unwrap() - first.others.unwrap();
    cpu as f64 / (last.t - first.t).max(1) as f64
}

fn probe() -> std::path::PathBuf {
    compile("cc", "tests/c/follow_probe.c", "follow_probe", &["-ldl"]).expect("follow_probe builds")
}

/// Every sample of every phase shows the grant's thread count; a phase
/// needs three (a probe on a busy machine samples every 80 ms or so).
fn assert_follows(trace: &Trace, changes: &[Change], what: &str, stderr: &str) {
    for (want, seen) in phases(trace, changes) {
        assert!(
            seen.len() >= 3,
            "{what}: too few samples in the {want}-thread phase ({seen:?}); stderr: {stderr}"
        );
        let values: Vec<i64> = seen.iter().map(|s| s.value).collect();
        assert!(
            values.iter().all(|&v| v == want as i64),
            "{what}: the library ran with {values:?} threads while the grant was {want}; stderr: {stderr}"
        );
    }
}

#[test]
fn openblas_loaded_late_follows_the_grant() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0");
    if !allot_testkit::prerequisite(lib.exists(), "Debian's libopenblas0-pthread") {
        return;
    }
    let mut cmd = Command::new(probe());
    cmd.arg(lib).args(["openblas_get_num_threads", "int", "30"]);
    // The count it would keep without the follower.
    cmd.env("OPENBLAS_NUM_THREADS", "2");
    let (trace, changes, stderr) = run_phases(&mut cmd);
    assert!(stderr.contains("follow: openblas"), "{stderr}");
    assert_follows(&trace, &changes, "OpenBLAS (pthreads)", &stderr);
}

#[test]
fn an_openmp_openblas_follows_without_losing_its_team() {
    // OpenBLAS's OpenMP build splits a call into as many parts as
    // omp_get_max_threads() says, and its team's threads wait for each
    // other's parts: a team capped below that split never finishes. Its
    // teams are left whole and it is told the grant instead. Debian's is
    // 0.3.21, which also stores that count as the thread's OpenMP setting.
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/openblas-openmp/libopenblas.so.0");
    if !allot_testkit::prerequisite(lib.exists(), "Debian's libopenblas0-openmp") {
        return;
    }
    let mut cmd = Command::new(probe());
    cmd.arg(lib).args(["openblas_get_num_threads", "int", "30"]);
    let (trace, changes, stderr) = run_phases(&mut cmd);
    assert!(
        stderr.contains("follow: openblas is an OpenMP build") && stderr.contains("left whole"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("capped"),
        "no team of OpenBLAS's is capped: {stderr}"
    );
    // That release reports the count it last stored, not the one a call
    // uses, so what its team threads run tells: nothing while one thread
    // is granted, some share of a CPU while two are (only a share on a busy
    // machine, where other programs and this file's other probes run too:
    // 0.2 CPU was seen with the test command and a busy loop beside it).
    for (want, seen) in phases(&trace, &changes) {
        assert!(seen.len() >= 3, "{want}: {seen:?}; stderr: {stderr}");
        let rate = others_rate(&seen);
        if want == 1 {
            assert!(
                rate < 0.05,
                "its team kept running with 1 thread granted: {rate:.2} CPU"
            );
        } else {
            assert!(
                rate > 0.1,
                "its team did not use 2 granted threads: {rate:.2} CPU"
            );
        }
        // The program's own OpenMP setting is not the library's echo.
        assert!(
            seen.iter().all(|s| s.icv == Some(2)),
            "the program's omp_get_max_threads() moved: {seen:?}"
        );
    }
}

#[test]
fn blis_follows_the_grant() {
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/blis-pthread/libblis.so.4");
    if !allot_testkit::prerequisite(lib.exists(), "Debian's libblis4-pthread") {
        return;
    }
    let mut cmd = Command::new(probe());
    cmd.arg(lib)
        .args(["bli_thread_get_num_threads", "i64", "30"]);
    let (trace, changes, stderr) = run_phases(&mut cmd);
    assert!(stderr.contains("follow: blis"), "{stderr}");
    assert_follows(&trace, &changes, "BLIS", &stderr);
}

#[test]
fn mkl_s_setting_follows_the_grant() {
    // MKL is not in Debian's main archive: a stand-in exporting its two
    // threading entry points checks the call the follower makes.
    let fake = compile(
        "cc",
        "tests/c/fake_mkl.c",
        "libfake_mkl.so",
        &["-shared", "-fPIC", "-lpthread"],
    )
    .unwrap();
    // Like MKL's own pool, the stand-in starts a thread as it loads: that
    // is when the shim looks for it.
    let mut cmd = Command::new(probe());
    cmd.arg(&fake).args(["MKL_Get_Max_Threads", "int", "30"]);
    let (trace, changes, stderr) = run_phases(&mut cmd);
    assert!(stderr.contains("follow: mkl"), "{stderr}");
    assert_follows(&trace, &changes, "MKL stand-in", &stderr);
}

#[test]
fn onetbb_runs_no_more_threads_than_the_grant() {
    let tbb = compile(
        "g++",
        "tests/c/follow_tbb.cpp",
        "follow_tbb",
        &["-std=c++17", "-ltbb"],
    );
    if !allot_testkit::prerequisite(tbb.is_ok(), "g++ and oneTBB (apt-get install libtbb-dev)") {
        return;
    }
    let mut cmd = Command::new(tbb.unwrap());
    cmd.arg("30");
    let (trace, changes, stderr) = run_phases(&mut cmd);
    assert!(stderr.contains("follow: onetbb"), "{stderr}");
    for (want, seen) in phases(&trace, &changes) {
        let peaks: Vec<i64> = seen.iter().map(|s| s.value).collect();
        assert!(peaks.len() >= 5, "{want}: {peaks:?}");
        assert!(
            peaks.iter().all(|&v| v <= want as i64),
            "oneTBB ran {peaks:?} bodies at once while the grant was {want}; stderr: {stderr}"
        );
        if want == 2 {
            assert!(
                peaks.contains(&2),
                "with 2 threads granted it uses both: {peaks:?}"
            );
        }
    }
}

#[test]
fn a_library_loaded_while_the_follower_runs_is_found_without_deadlock() {
    // OpenBLAS first (the follower starts for it), then a stand-in whose
    // constructor holds the loader's lock across two of the follower's
    // rescans and then asks for its CPUs: both the follower and the loading
    // thread look at the loaded objects at that moment.
    let lib = Path::new("/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0");
    if !allot_testkit::prerequisite(lib.exists(), "Debian's libopenblas0-pthread") {
        return;
    }
    let slow = compile(
        "cc",
        "tests/c/slow_pool.c",
        "libslow_pool.so",
        &["-shared", "-fPIC"],
    )
    .unwrap();
    let mut cmd = Command::new(probe());
    cmd.arg(&slow)
        .args(["bli_thread_get_num_threads", "i64", "30"])
        .env("PROBE_FIRST", lib);
    let (trace, changes, stderr) = run_phases_after(&mut cmd, Duration::from_millis(1300));
    assert!(stderr.contains("follow: openblas"), "{stderr}");
    assert!(
        stderr.contains("follow: blis in") && stderr.contains("slow_pool"),
        "{stderr}"
    );
    assert_follows(&trace, &changes, "a slow-starting stand-in", &stderr);
}
