//! The cgroup quota throttle against the live cgroup v1 `cpu` controller.
//!
//! Makes its own base cgroup, moves only a thread it started, and removes
//! everything on the way out (also when an assertion fails). Skipped, with
//! a note, where there is no v1 `cpu` controller or no permission.

use allot_client::require::throttle::Quota;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CPU_ROOT: &str = "/sys/fs/cgroup/cpu";

/// The base cgroup; on drop, threads still in it or below go back to
/// where the process was, and the directories are removed.
struct Base {
    dir: PathBuf,
    home: PathBuf,
}

impl Drop for Base {
    fn drop(&mut self) {
        for sub in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if sub.path().is_dir() {
                evict(&sub.path(), &self.home);
                let _ = std::fs::remove_dir(sub.path());
            }
        }
        evict(&self.dir, &self.home);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

fn evict(from: &Path, to: &Path) {
    let tasks = std::fs::read_to_string(from.join("tasks")).unwrap_or_default();
    for t in tasks.split_whitespace() {
        let _ = std::fs::write(to.join("tasks"), t);
    }
}

fn cpu_ns(tid: u64) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).unwrap();
    s.split_whitespace().next().unwrap().parse().unwrap()
}

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

#[test]
fn a_thread_limited_by_quota_runs_at_its_fraction_and_comes_back() {
    let (Some(home), true) = (
        home(),
        Path::new(CPU_ROOT).join("cpu.cfs_quota_us").exists(),
    ) else {
        eprintln!("skipped: no cgroup v1 cpu controller at {CPU_ROOT}");
        return;
    };
    let dir = Path::new(CPU_ROOT).join(format!("allot-test-throttle-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir) {
        eprintln!("skipped: cannot create {}: {e}", dir.display());
        return;
    }
    let base = Base { dir, home };
    let q = Quota::at(base.dir.clone()).unwrap();

    // A spinning thread of ours.
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(AtomicU64::new(0));
    let spinner = {
        let (stop, tid) = (stop.clone(), tid.clone());
        std::thread::spawn(move || {
            tid.store(
                rustix::thread::gettid().as_raw_nonzero().get() as u64,
                Ordering::Release,
            );
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        })
    };
    while tid.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    let t = tid.load(Ordering::Acquire);

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

    // Over a second the kernel holds it near 20% of a CPU; an unthrottled
    // spinner gets close to a whole CPU on this machine (or at least half
    // of one when the other CPU's load competes).
    let (c0, t0) = (cpu_ns(t), Instant::now());
    std::thread::sleep(Duration::from_millis(1000));
    let share = (cpu_ns(t) - c0) as f64 / t0.elapsed().as_nanos() as f64;
    assert!(share < 0.35, "throttled thread used {share:.2} of a CPU");

    q.lift(t).unwrap();
    assert!(!child.exists(), "the child cgroup is removed");
    let back = std::fs::read_to_string(base.dir.join("tasks")).unwrap();
    assert!(back.split_whitespace().any(|x| x == t.to_string()));

    stop.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    eprintln!("throttled share: {share:.3} of a CPU (limit 0.2)");
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
        use allot_client::require::{Request, Runtime};
        let rt = Runtime::new(allot_topo::discover_live().unwrap(), true).into_static();
        let tid = rustix::thread::gettid().as_raw_nonzero().get();
        let outside = my_cpu_cgroup();
        {
            let _s = rt.enter(vec![Request::device("cpu", 0, 0.3)]).unwrap();
            let inside = my_cpu_cgroup();
            assert!(
                inside.ends_with(&format!("/allot-t{tid}")),
                "in scope: {inside}"
            );
        }
        assert_eq!(my_cpu_cgroup(), outside, "back in the base on leaving");
        return;
    }
    let (Some(home), true) = (
        home(),
        Path::new(CPU_ROOT).join("cpu.cfs_quota_us").exists(),
    ) else {
        eprintln!("skipped: no cgroup v1 cpu controller at {CPU_ROOT}");
        return;
    };
    let dir = Path::new(CPU_ROOT).join(format!("allot-test-rq-throttle-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir(&dir) {
        eprintln!("skipped: cannot create {}: {e}", dir.display());
        return;
    }
    let base = Base { dir, home };
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
        let out = cmd.output().unwrap();
        drop(tasks);
        out
    };
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "{text}");
}
