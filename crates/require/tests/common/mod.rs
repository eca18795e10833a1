//! What the live tests share: a runtime on this machine and a thread's
//! CPUs; for the throttling tests a spinning thread of this process and
//! the share of a CPU a thread used, from its `schedstat`.
#![allow(dead_code)] // each test binary uses some of it

use allot_require::Blocks;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// CPU time of thread `tid` of this process, ns.
pub fn cpu_ns(tid: u64) -> u64 {
    std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat"))
        .ok()
        .and_then(|t| t.split_whitespace().next()?.parse().ok())
        .expect("schedstat of a thread of this process")
}

/// The share of a CPU thread `tid` used over `span` of wall time.
pub fn share_over(tid: u64, span: Duration) -> f64 {
    let (c0, t0) = (cpu_ns(tid), Instant::now());
    std::thread::sleep(span);
    (cpu_ns(tid) - c0) as f64 / t0.elapsed().as_nanos() as f64
}

/// A thread of this process spinning until dropped.
pub struct Spinner {
    /// Its kernel thread id.
    pub tid: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Spinner {
    /// Starts it and waits (at most 5 s) until it has said its thread id.
    pub fn start() -> Spinner {
        let stop = Arc::new(AtomicBool::new(false));
        let tid = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, tid) = (stop.clone(), tid.clone());
            std::thread::spawn(move || {
                let me = rustix::thread::gettid().as_raw_nonzero().get() as u64;
                tid.store(me, Ordering::Release);
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            })
        };
        assert!(
            allot_testkit::eventually(Duration::from_secs(5), || tid.load(Ordering::Acquire) != 0),
            "the spinning thread started"
        );
        Spinner {
            tid: tid.load(Ordering::Acquire),
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A runtime on this machine that applies allocations to the OS, kept for
/// the life of the test process (its threads outlive the test's frame).
pub fn live_runtime() -> &'static Blocks {
    Blocks::new(allot_topo::discover_live().unwrap(), true).into_static()
}

/// The calling thread's CPUs.
pub fn affinity() -> Vec<usize> {
    let s = rustix::thread::sched_getaffinity(None).unwrap();
    (0..1024).filter(|&c| s.is_set(c)).collect()
}

/// A cgroup directory a test made. On drop, even when the test failed,
/// what is still listed in it or in a group below it goes back to `home`
/// (`moved` names the list: `tasks` for threads, `cgroup.procs` for
/// processes), and the directories are removed.
pub struct CgroupBase {
    pub dir: PathBuf,
    pub home: PathBuf,
    pub moved: &'static str,
}

impl Drop for CgroupBase {
    fn drop(&mut self) {
        for sub in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            if sub.path().is_dir() {
                self.evict(&sub.path());
                let _ = std::fs::remove_dir(sub.path());
            }
        }
        self.evict(&self.dir);
        let _ = std::fs::remove_dir(&self.dir);
    }
}

impl CgroupBase {
    fn evict(&self, from: &Path) {
        let listed = std::fs::read_to_string(from.join(self.moved)).unwrap_or_default();
        for id in listed.split_whitespace() {
            let _ = std::fs::write(self.home.join(self.moved), id);
        }
    }
}
