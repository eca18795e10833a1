//! `allot run` and make: the jobserver whose tokens follow the cell's
//! grant (`crates/cli/src/run/jobserver.rs`). Builds run in cells of a
//! test broker; what is judged is how many recipes ran at once.

mod common;

use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// A Makefile with `n` CPU-bound targets logging their start and end.
fn makefile(dir: &Path, name: &str, n: usize, secs: f64) -> PathBuf {
    let log = dir.join(format!("{name}.log"));
    let busy = format!(
        "python3 -c \"import time,sys; t=time.monotonic(); open('{log}','a').write('start %f\\\\n' % t); \
         exec('while time.monotonic()-t<{secs}: pass'); open('{log}','a').write('end %f\\\\n' % time.monotonic())\"",
        log = log.display()
    );
    let targets: Vec<String> = (0..n).map(|i| format!("t{i}")).collect();
    let mut text = format!(
        ".PHONY: all {}\nall: {}\n",
        targets.join(" "),
        targets.join(" ")
    );
    for t in &targets {
        text.push_str(&format!("{t}:\n\t@{busy}\n"));
    }
    let mf = dir.join(format!("{name}.mk"));
    std::fs::write(&mf, text).unwrap();
    mf
}

/// A build.ninja with `n` CPU-bound edges logging their start and end, in
/// the log format of [`makefile`].
fn ninjafile(dir: &Path, name: &str, n: usize, secs: f64) -> PathBuf {
    let log = dir.join(format!("{name}.log"));
    let busy = format!(
        "python3 -c \"import time; t=time.monotonic(); open('{log}','a').write('start %f\\n' % t); \
         exec('while time.monotonic()-t<{secs}: pass'); open('{log}','a').write('end %f\\n' % time.monotonic())\"",
        log = log.display()
    );
    // ninja keeps its log (.ninja_log) in the build directory: the
    // test's own, not the working directory.
    let mut text = format!(
        "builddir = {}\nrule busy\n  command = {busy} && touch $out\n",
        dir.display()
    );
    for i in 0..n {
        text.push_str(&format!(
            "build {}: busy\n",
            dir.join(format!("{name}.o{i}")).display()
        ));
    }
    let f = dir.join(format!("{name}.ninja"));
    std::fs::write(&f, text).unwrap();
    f
}

/// ninja 1.13 as `scripts/deps.sh` installs it (PyPI, into the build tree).
fn ninja() -> Option<PathBuf> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/ninja/bin/ninja");
    p.exists().then_some(p)
}

/// (start, end) of every recipe in a log.
fn intervals(log: &Path) -> Vec<(f64, f64)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut starts = Vec::new();
    let mut ends = Vec::new();
    for l in text.lines() {
        let mut w = l.split_whitespace();
        match (w.next(), w.next().and_then(|v| v.parse::<f64>().ok())) {
            (Some("start"), Some(t)) => starts.push(t),
            (Some("end"), Some(t)) => ends.push(t),
            _ => {}
        }
    }
    starts.sort_by(f64::total_cmp);
    ends.sort_by(f64::total_cmp);
    // Pair by order of events: concurrency is what matters, not identity.
    starts.into_iter().zip(ends).collect()
}

/// Most recipes running at once within [from, to].
fn max_concurrency(iv: &[(f64, f64)], from: f64, to: f64) -> usize {
    let mut ev: Vec<(f64, i32)> = Vec::new();
    for &(s, e) in iv {
        if e < from || s > to {
            continue;
        }
        ev.push((s.max(from), 1));
        ev.push((e.min(to), -1));
    }
    ev.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut cur, mut best) = (0i32, 0i32);
    for (_, d) in ev {
        cur += d;
        best = best.max(cur);
    }
    best as usize
}

#[test]
fn make_j8_in_a_one_cpu_cell_runs_one_recipe_at_a_time() {
    let d = Daemon::start(backend(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let mf = makefile(dir.path(), "one", 6, 0.15);
    let o = run_out(allot_run(
        &d,
        &[
            "--max",
            "1",
            "--",
            "make",
            "-j8",
            "-f",
            mf.to_str().unwrap(),
        ],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let iv = intervals(&dir.path().join("one.log"));
    assert_eq!(iv.len(), 6);
    assert_eq!(max_concurrency(&iv, 0.0, f64::MAX), 1, "{iv:?}");
    // Without allot the same make runs them in parallel (the test is not vacuous).
    let mf2 = makefile(dir.path(), "free", 4, 0.3);
    let o = Command::new("make")
        .args(["-j8", "-f", mf2.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(max_concurrency(&intervals(&dir.path().join("free.log")), 0.0, f64::MAX) >= 2);
}

#[test]
fn two_builds_share_the_cpus_and_the_survivor_speeds_up() {
    if !prerequisite(
        allot_topo::allowed_cpus().unwrap().len() >= 2,
        "needs two CPUs",
    ) {
        return;
    }
    // Without lending: the short build's CPU, idle between its recipes
    // (longer on a busy machine), would rightly be lent to the long build
    // for a tick, and a recipe started on it runs on. What this test
    // judges is the split itself.
    let d = Daemon::start(backend(), &["--no-lend"]);
    let dir = tempfile::tempdir().unwrap();
    let short = makefile(dir.path(), "short", 4, 0.4);
    let long = makefile(dir.path(), "long", 14, 0.4);
    let mut b = allot_run(
        &d,
        &[
            "--name",
            "long",
            "--",
            "make",
            "-j8",
            "-f",
            long.to_str().unwrap(),
        ],
    );
    let b = b.stderr(Stdio::piped()).spawn().unwrap();
    // The short build starts once the long one runs (on a busy machine
    // its start can take seconds), so that the two overlap.
    let long_log = dir.path().join("long.log");
    assert!(eventually(Duration::from_secs(20), || {
        std::fs::read_to_string(&long_log).is_ok_and(|t| t.contains("start"))
    }));
    let t0 = now_mono();
    let o = run_out(allot_run(
        &d,
        &[
            "--name",
            "short",
            "--",
            "make",
            "-j8",
            "-f",
            short.to_str().unwrap(),
        ],
    ));
    let t1 = now_mono();
    assert!(o.status.success());
    // The team the broker gives the long build from then on: two CPUs,
    // less what work outside every cell holds of them (a busy machine's),
    // read until the build ends.
    let mut b = b;
    let mut team = 0;
    while b.try_wait().unwrap().is_none() {
        if now_mono() >= t1 + 0.3
            && let Some(c) = d.status().cells.iter().find(|c| c.name == "long")
        {
            team = team.max(c.threads);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let ob = b.wait_with_output().unwrap();
    assert!(
        ob.status.success(),
        "{}",
        String::from_utf8_lossy(&ob.stderr)
    );
    let s = intervals(&dir.path().join("short.log"));
    let l = intervals(&dir.path().join("long.log"));
    // While both ran (after the second was admitted), one recipe each. The
    // long build's extra token is taken back as soon as its grant shrinks,
    // but a recipe that took it just before runs to its end (0.4 s), and
    // on a loaded machine the wrapper's grant watcher may be late (a CI run
    // saw two long recipes start together 0.46 s after the short build's
    // first): only the long build's recipes that *started* 0.6 s or more
    // into the short build are checked against each other.
    let both_from = s.first().map_or(t0, |x| x.0) + 0.6;
    // Until the short build's last recipe ended (its wrapper's exit, at
    // `t1`, may come later on a loaded machine, and from then on the long
    // build rightly has both CPUs again).
    let both_to = s.last().map_or(t1, |x| x.1) - 0.05;
    assert_eq!(max_concurrency(&s, 0.0, f64::MAX), 1, "short build: {s:?}");
    let late: Vec<(f64, f64)> = l.iter().copied().filter(|x| x.0 >= both_from).collect();
    assert!(
        late.iter().any(|x| x.0 < both_to),
        "no long recipe started while the short build ran: {l:?}\nshort: {s:?}"
    );
    assert_eq!(
        max_concurrency(&late, both_from, both_to),
        1,
        "long build while the short one ran: {l:?}\nshort: {s:?}\nshort's stderr: {}\n{}",
        String::from_utf8_lossy(&o.stderr),
        d.log()
    );
    // After the short build ended, the long one runs as many at once as
    // its team: two on a quiet machine.
    assert!(team >= 1, "no team seen for the long build\n{}", d.log());
    assert_eq!(
        max_concurrency(&l, t1 + 0.3, f64::MAX),
        team.min(2) as usize,
        "long build after the other ended (team {team}): {l:?}\n{}",
        d.log()
    );
}

/// A make the user did not ask for parallel jobs stays serial in a cell
/// of two CPUs, as under `taskset`: run as the program, and under a shell;
/// a `MAKEFLAGS=-j2` of the user's is kept, not replaced by the grant.
#[test]
fn a_serial_make_stays_serial_and_the_users_makeflags_count() {
    if !prerequisite(
        allot_topo::allowed_cpus().unwrap().len() >= 2,
        "needs two CPUs",
    ) {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let plain = makefile(dir.path(), "plain", 4, 0.2);
    let o = run_out(allot_run(
        &d,
        &["--", "make", "-f", plain.to_str().unwrap()],
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let iv = intervals(&dir.path().join("plain.log"));
    assert_eq!(iv.len(), 4, "{iv:?}");
    assert_eq!(
        max_concurrency(&iv, 0.0, f64::MAX),
        1,
        "make without -j: {iv:?}"
    );
    let shell = makefile(dir.path(), "shell", 4, 0.2);
    let script = format!("echo \"[$MAKEFLAGS]\"; make -f {}", shell.display());
    let mut c = allot_run(&d, &["--", "sh", "-c", &script]);
    c.env_remove("MAKEFLAGS");
    let o = run_out(c);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.starts_with("[]"),
        "MAKEFLAGS given to a serial build: {out}"
    );
    let iv = intervals(&dir.path().join("shell.log"));
    assert_eq!(
        max_concurrency(&iv, 0.0, f64::MAX),
        1,
        "make under sh: {iv:?}"
    );
    // The user's own -j2: kept as the cap of the cell's jobserver.
    let mut c = allot_run(&d, &["--", "sh", "-c", "echo \"$MAKEFLAGS\""]);
    c.env("MAKEFLAGS", "-k -j2");
    let o = run_out(c);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("-k") && out.contains("-j2 --jobserver-auth="),
        "{out}"
    );
}

const LEAK_PY: &str = r#"
import os, re, signal
flags = os.environ.get('MAKEFLAGS', '')
r, w = map(int, re.search(r'--jobserver-auth=(\d+),(\d+)', flags).groups())
os.read(r, 1)                          # take a token...
os.kill(os.getpid(), signal.SIGKILL)   # ...and die holding it
"#;

#[test]
fn tokens_lost_with_a_crashed_client_are_restored() {
    if !prerequisite(
        allot_topo::allowed_cpus().unwrap().len() >= 2,
        "needs two CPUs",
    ) {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let dir = tempfile::tempdir().unwrap();
    let mf = makefile(dir.path(), "after", 8, 0.3);
    let leak = dir.path().join("leak.py");
    std::fs::write(&leak, LEAK_PY).unwrap();
    let script = format!(
        "python3 {} ; sleep 1; make -f {}",
        leak.display(),
        mf.display()
    );
    // The user asks make for parallel jobs through MAKEFLAGS (a make
    // under a shell gets the jobserver only then).
    let mut c = allot_run(&d, &["--max", "2", "--", "sh", "-c", &script]);
    c.env("MAKEFLAGS", "-j");
    let o = run_out(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("token(s) were lost") && err.contains("restored"),
        "{err}"
    );
    let iv = intervals(&dir.path().join("after.log"));
    assert_eq!(
        max_concurrency(&iv, 0.0, f64::MAX),
        2,
        "the restored token lets make run two jobs: {iv:?}"
    );
}

/// ninja 1.13 is a jobserver client: in a one-CPU cell, `ninja -j8` (its
/// `-j8` taken out, as make's) runs one job at a time, with the style
/// chosen for it and with either style named, and without allot the same
/// build runs jobs together (the test is not vacuous). No token is counted
/// lost along the way (ninja at times holds one for its first job).
#[test]
fn ninja_follows_the_cells_jobserver_in_either_style() {
    let ninja = ninja();
    if !prerequisite(
        ninja.is_some(),
        "ninja 1.13 in target/tools (bash scripts/deps.sh)",
    ) {
        return;
    }
    let ninja = ninja.expect("checked");
    let d = Daemon::start(backend(), &[]);
    let dir = tempfile::tempdir().unwrap();
    for style in [None, Some("pipe"), Some("fifo")] {
        let name = style.unwrap_or("default");
        let f = ninjafile(dir.path(), name, 5, 0.15);
        let mut args = vec!["--max", "1"];
        if let Some(s) = style {
            args.extend(["--jobserver", s]);
        }
        args.extend([
            "--",
            ninja.to_str().unwrap(),
            "-j8",
            "-f",
            f.to_str().unwrap(),
        ]);
        let o = run_out(allot_run(&d, &args));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(!err.contains("lost"), "{name}: {err}");
        let iv = intervals(&dir.path().join(format!("{name}.log")));
        assert_eq!(iv.len(), 5, "{name}: {iv:?}");
        assert_eq!(max_concurrency(&iv, 0.0, f64::MAX), 1, "{name}: {iv:?}");
    }
    let f = ninjafile(dir.path(), "free", 4, 0.3);
    let o = Command::new(&ninja)
        .args(["-j8", "-f", f.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(max_concurrency(&intervals(&dir.path().join("free.log")), 0.0, f64::MAX) >= 2);
}
