//! `allot run --partition`: CPUs of the program's own, a program told to
//! poll, and — with `isolate = true` in the broker's configuration —
//! interrupts and workqueues moved off them and put back afterwards. The
//! broker's `isolate_root` is a fixture tree here: tests never change this
//! machine's interrupts (DEVELOPERS.md, "Touch only what you started").

mod common;

use common::*;
use std::time::Duration;

fn fixture(dir: &std::path::Path, cpus: &str) {
    for irq in [5, 11] {
        let p = dir.join(format!("proc/irq/{irq}"));
        std::fs::create_dir_all(&p).unwrap();
        std::fs::write(p.join("smp_affinity_list"), cpus).unwrap();
    }
    let wq = dir.join("sys/devices/virtual/workqueue");
    std::fs::create_dir_all(&wq).unwrap();
    std::fs::write(wq.join("cpumask"), "3").unwrap();
}

#[test]
fn a_partition_gets_its_cpus_a_polling_program_and_a_clear_machine() {
    let usable = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(
        usable.len() >= 2,
        "a partition beside the rest needs 2 CPUs",
    ) {
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let all = usable.to_string();
    fixture(root.path(), &all);
    let cfg = root.path().join("allotd.toml");
    std::fs::write(
        &cfg,
        format!(
            "isolate = true\nisolate_root = \"{}\"\n",
            root.path().display()
        ),
    )
    .unwrap();
    let d = Daemon::start("dry-run", &["--config", cfg.to_str().unwrap()]);
    let irq = root.path().join("proc/irq/5/smp_affinity_list");
    let wq = root.path().join("sys/devices/virtual/workqueue/cpumask");
    let out = run_out(allot_run(
        &d,
        &[
            "--partition",
            "1",
            "--",
            "sh",
            "-c",
            "echo \"$ALLOT_POOL_POLL $OMP_WAIT_POLICY\"; cat \"$1\"; echo; cat \"$2\"",
            "sh",
            irq.to_str().unwrap(),
            wq.to_str().unwrap(),
        ],
    ));
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "1 active", "{text}");
    // While the partition ran, its CPU was clear of the interrupt and
    // the workqueue mask (the program saw the files mid-run).
    let seen = allot_topo::CpuSet::parse_list(lines[1].trim()).unwrap();
    assert_eq!(seen.len(), usable.len() - 1, "{text}");
    assert_ne!(lines[2].trim(), "3", "{text}");
    // After it: everything back, and nothing left saved.
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap().trim().to_string();
    assert!(
        eventually(Duration::from_secs(10), || read(&irq) == all
            && read(&wq) == "3"),
        "{} {}\n{}",
        read(&irq),
        read(&wq),
        d.log()
    );
    assert!(!d.dir.path().join("isolation.json").exists());
}

#[test]
fn partition_arguments_are_checked() {
    let d = Daemon::start("dry-run", &[]);
    let out = run_out(allot_run(&d, &["--partition", "0", "--", "true"]));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("at least one CPU"));
    let out = run_out(allot_run(
        &d,
        &["--partition", "1", "--min", "1", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

/// The real thing, only when asked (`ALLOT_TEST_ISOLATE=1`, root): a
/// broker with `isolate = true` on this machine's `/proc/irq` and
/// workqueue mask moves what it can off a one-CPU partition while it runs
/// and puts every value back afterwards. It changes the whole machine for
/// a moment, so it never runs by default (nor on CI).
#[test]
fn isolation_on_this_machine_when_asked() {
    if std::env::var("ALLOT_TEST_ISOLATE").as_deref() != Ok("1") {
        return;
    }
    let irqs = || -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = std::fs::read_dir("/proc/irq")
            .unwrap()
            .filter_map(|e| {
                let p = e.ok()?.path().join("smp_affinity_list");
                Some((p.display().to_string(), std::fs::read_to_string(&p).ok()?))
            })
            .collect();
        v.sort();
        v
    };
    let wq = "/sys/devices/virtual/workqueue/cpumask";
    let before = (irqs(), std::fs::read_to_string(wq).ok());
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("allotd.toml");
    std::fs::write(&cfg, "isolate = true\n").unwrap();
    let d = Daemon::start("dry-run", &["--config", cfg.to_str().unwrap()]);
    let out = run_out(allot_run(
        &d,
        &[
            "--partition",
            "1",
            "--",
            "sh",
            "-c",
            "cat /proc/self/status | grep Cpus_allowed_list; sleep 1",
        ],
    ));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = d.log();
    eprintln!("{log}");
    assert!(
        log.contains("interrupt/workqueue affinities moved off them"),
        "{log}"
    );
    assert!(
        eventually(Duration::from_secs(10), || (
            irqs(),
            std::fs::read_to_string(wq).ok()
        ) == before),
        "every value back"
    );
}
