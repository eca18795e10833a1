//! The cgroup quota throttle against the live cgroup v1 `cpu` controller.
//!
//! Makes its own base cgroup, moves only a thread it started, and removes
//! everything on the way out (also when an assertion fails). Skipped, with
//! a note, where there is no v1 `cpu` controller or no permission; fails
//! there instead where every test must run (`ALLOT_STRICT_TESTS=1`).

mod common;

use allot_require::throttle::Quota;
use common::{CgroupBase, Spinner, share_over};
use std::path::{Path, PathBuf};
use std::time::Duration;

const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

fn home() -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = text.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        ctrls
            .split(',')
            .any(|c| c == "cpu")
            .then(|| path.to_string())
    })?;
    Some(Path::new(CPU_ROOT).join(rel.trim_start_matches('/')))
}

/// A base cgroup of ours under the v1 `cpu` hierarchy, or `None` (with a
/// note, or a failure under `ALLOT_STRICT_TESTS=1`) where there is none.
fn make_base(tag: &str) -> Option<CgroupBase> {
    let home = home().filter(|_| Path::new(CPU_ROOT).join("cpu.cfs_quota_us").exists());
    let Some(home) = home else {
        allot_testkit::prerequisite(false, &format!("a cgroup v1 cpu controller at {CPU_ROOT}"));
        return None;
    };
    let dir = Path::new(CPU_ROOT).join(format!("{tag}-{}", std::process::id()));
    let made = std::fs::create_dir(&dir);
    if !allot_testkit::prerequisite(
        made.is_ok(),
        &format!("permission to create {}: {:?}", dir.display(), made.err()),
    ) {
        return None;
    }
    Some(CgroupBase {
        dir,
        home,
        moved: "tasks",
    })
}

#[test]
fn a_thread_limited_by_quota_runs_at_its_fraction_and_comes_back() {
    let Some(base) = make_base("allot-test-throttle") else {
        return;
    };
    let q = Quota::at(base.dir.clone()).unwrap();

    // A spinning thread of ours.
    let spinner = Spinner::start();
    let t = spinner.tid;
    // What it gets unthrottled, measured in the same run.
    let free = share_over(t, Duration::from_millis(500));

    q.limit(t, 0.2).unwrap();
    let child = q.dir(t);
    assert_eq!(
        std::fs::read_to_string(child.join("cpu.cfs_quota_us"))
            .unwrap()
            .trim(),
        "20000"
    );
    let tasks = std::fs::read_to_string(child.join("tasks")).unwrap();
    assert_eq!(
        tasks.split_whitespace().collect::<Vec<_>>(),
        [t.to_string()]
    );

    // Over a second the kernel holds it to 20% of a CPU: not more (the
    // limit works, whatever else runs), throttled by the quota (the
    // group's own count, so not merely a busy machine), and it still runs
    // (a frozen or descheduled thread would pass an upper bound alone).
    let throttled_before = nr_throttled(&child);
    let share = share_over(t, Duration::from_millis(1000));
    let throttled = nr_throttled(&child) - throttled_before;
    assert!(share < 0.3, "throttled thread used {share:.2} of a CPU");
    // (A thread the machine let run less than the quota even unthrottled
    // is never throttled: then the upper bound is all there is to see.)
    assert!(
        throttled > 0 || free < 0.25,
        "the kernel never throttled the group (it used {share:.2} of a CPU, {free:.2} free)"
    );
    assert!(share > 0.0, "the throttled thread did not run at all");

    q.lift(t).unwrap();
    assert!(!child.exists(), "the child cgroup is removed");
    let back = std::fs::read_to_string(base.dir.join("tasks")).unwrap();
    assert!(back.split_whitespace().any(|x| x == t.to_string()));
    let after = share_over(t, Duration::from_millis(500));
    // Shares against the free one mean something only where the machine
    // let the thread run nearly freely; elsewhere the kernel's own count
    // above is the evidence.
    if free >= 0.6 {
        assert!(
            share > 0.1,
            "throttled thread used only {share:.2} of a CPU; it should run at 0.2 (unthrottled: {free:.2})"
        );
        assert!(
            after > share * 2.0,
            "after the limit is lifted it used {after:.2} (throttled {share:.2}, before {free:.2})"
        );
    } else {
        eprintln!("the machine is busy (free share {free:.2}): shares not compared");
    }

    drop(spinner);
    eprintln!(
        "shares of a CPU: free {free:.3}, throttled {share:.3} (limit 0.2), lifted {after:.3}"
    );
}

/// How many periods the kernel throttled the cgroup at `dir` in (its
/// `cpu.stat`).
fn nr_throttled(dir: &Path) -> u64 {
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).unwrap();
    stat.lines()
        .find_map(|l| l.strip_prefix("nr_throttled "))
        .and_then(|n| n.trim().parse().ok())
        .expect("cpu.stat has nr_throttled")
}

/// The calling thread's cgroup in the v1 cpu hierarchy.
fn my_cpu_cgroup() -> String {
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/cgroup")).unwrap();
    text.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            ctrls
                .split(',')
                .any(|c| c == "cpu")
                .then(|| path.to_string())
        })
        .unwrap()
}

#[test]
fn a_fractional_require_uses_the_configured_quota() {
    const CHILD: &str = "ALLOT_TEST_THROTTLE_CHILD";
    if std::env::var_os(CHILD).is_some() {
        // In the child process: the runtime reads ALLOT_THROTTLE_CGROUP.
        use allot_require::{Blocks, Need};
        let rt = Blocks::new(allot_topo::discover_live().unwrap(), true).into_static();
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let outside = my_cpu_cgroup();
        {
            let _s = rt.enter(vec![Need::device("cpu", 0, 0.3)]).unwrap();
            let inside = my_cpu_cgroup();
            assert!(
                inside.ends_with(&format!("/allot-t{tid}")),
                "in scope: {inside}"
            );
        }
        assert_eq!(my_cpu_cgroup(), outside, "back in the base on leaving");
        return;
    }
    let Some(base) = make_base("allot-test-rq-throttle") else {
        return;
    };
    // The child starts in the base so that leaving the quota returns there.
    let out = {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "a_fractional_require_uses_the_configured_quota",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("ALLOT_THROTTLE_CGROUP", &base.dir);
        let tasks = std::fs::OpenOptions::new()
            .write(true)
            .open(base.dir.join("tasks"))
            .unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&tasks);
        // SAFETY: between fork and exec the hook only calls write(2) on a
        // descriptor opened before the fork (no allocation, no locks).
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(move || {
                if libc::write(fd, b"0".as_ptr().cast(), 1) == 1 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let out = allot_testkit::output_within(&mut cmd, Duration::from_secs(60));
        drop(tasks);
        out
    };
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
