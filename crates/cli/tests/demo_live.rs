//! `allot demo` and `allot bench mix`, end to end at a tiny scale: they
//! exit 0, print their tables, write their files, and leave no cgroup, cell
//! or process behind.

mod common;

use common::ALLOT;
use std::collections::BTreeSet;
use std::process::Command;
use std::sync::Mutex;

/// The tests that start brokers run one at a time, so one's cgroups are
/// not taken for the other's leftovers.
static SERIAL: Mutex<()> = Mutex::new(());

/// Every allot cgroup directory on the machine.
fn allot_cgroups() -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for root in ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"] {
        for ctrl in std::fs::read_dir(root).into_iter().flatten().flatten() {
            let mut dirs = vec![ctrl.path()];
            if ctrl.file_name().to_string_lossy().starts_with("allot") {
                out.insert(ctrl.path().display().to_string());
            }
            while let Some(d) = dirs.pop() {
                for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
                    if e.path().is_dir() && !e.path().is_symlink() {
                        if e.file_name().to_string_lossy().starts_with("allot") {
                            out.insert(e.path().display().to_string());
                        }
                        if d == ctrl.path() {
                            dirs.push(e.path()); // two levels are enough
                        }
                    }
                }
            }
        }
    }
    out
}

/// Processes whose command line mentions `needle`.
fn processes_with(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(cmd) = std::fs::read(e.path().join("cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
        }
    }
    out
}

#[test]
fn demo_prints_its_table_and_leaves_nothing_behind() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let before = allot_cgroups();
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new(ALLOT)
        .args(["demo", "--scale", "0.03", "--build-dir"])
        .arg(cache.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    for want in [
        "alone",
        "all at once",
        "under allot",
        "makespan",
        "jobs/min",
        "cleaned up",
    ] {
        assert!(stdout.contains(want), "no {want:?} in:\n{stdout}");
    }
    for k in ["stencil", "pricing", "cluster"] {
        assert!(
            stdout.lines().any(|l| l.starts_with(k)),
            "no row for {k}:\n{stdout}"
        );
    }
    let after = allot_cgroups();
    let left: Vec<_> = after.difference(&before).collect();
    assert!(left.is_empty(), "cgroups left behind: {left:?}");
    // The demo's programs run from the build cache: none may outlive it.
    let procs = processes_with(&cache.path().display().to_string());
    assert!(procs.is_empty(), "processes left behind: {procs:?}");
}

#[test]
fn bench_mix_writes_its_report() {
    let _one = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = Command::new(ALLOT)
        .args([
            "bench",
            "mix",
            "--jobs",
            "2",
            "--mixes",
            "1",
            "--repeats",
            "1",
        ])
        .args(["--scale", "0.02", "--workloads", "pricing,cluster"])
        .arg("--out")
        .arg(&out_dir)
        .arg("--build-dir")
        .arg(dir.path().join("cache"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("speed-up over plain co-run"), "{stdout}");
    for f in [
        "runs.csv",
        "mixes.csv",
        "levels.csv",
        "alone.csv",
        "machine.txt",
        "speedup.png",
        "speedup.svg",
    ] {
        let p = out_dir.join(f);
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{} missing or empty", p.display());
    }
    // One run per mode (plain, seq, run, runtime) for the one mix.
    let runs = std::fs::read_to_string(out_dir.join("runs.csv")).unwrap();
    assert_eq!(runs.lines().count(), 1 + 4, "{runs}");
    let png = std::fs::read(out_dir.join("speedup.png")).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let svg = std::fs::read_to_string(out_dir.join("speedup.svg")).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("plain co-run"),
        "{svg}"
    );
}

#[test]
fn bench_mix_rejects_bad_arguments_clearly() {
    for (args, want) in [
        (vec!["--jobs", "0"], "at least 1"),
        (vec!["--jobs", "x"], "not a number"),
        (vec!["--modes", "fast"], "fast"),
        (vec!["--workloads", "nosuch"], "nosuch"),
    ] {
        let out = Command::new(ALLOT)
            .args(["bench", "mix"])
            .args(&args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
    }
}

/// `allot demo --help` and `allot bench --help` name the command the user
/// typed, not the lab binary they hand over to.
#[test]
fn demo_and_bench_help_name_allot() {
    for sub in ["demo", "bench"] {
        let out = Command::new(ALLOT).args([sub, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{help}");
        assert!(help.contains(&format!("Usage: allot {sub}")), "{help}");
        assert!(!help.contains("allot-lab"), "{help}");
    }
}
