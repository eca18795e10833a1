//! Per-thread CPU quotas through cgroups.
//!
//! A [`Quota`] manages children `allot-t<tid>` of one base cgroup: `limit`
//! creates the thread's child (once), sets its quota and moves the thread in;
//! `lift` moves the thread back to the base and removes the child. Children
//! of threads that are gone (the thread ended inside its limit) are removed
//! by the next `limit`.
//!
//! | | cgroup v1 (`cpu` controller) | cgroup v2 |
//! |---|---|---|
//! | child type | — | `threaded` (written to `cgroup.type`) |
//! | quota | `cpu.cfs_period_us` = 100000, `cpu.cfs_quota_us` | `cpu.max` = `"<quota> 100000"` |
//! | move a thread | its id into `tasks` | its id into `cgroup.threads` |
//!
//! The version is told by the base: v2 has `cgroup.controllers`. On a plain
//! directory (a test fixture) the same files are written, and removing a
//! child removes its files too; on cgroupfs only `rmdir` is used.

use crate::cgroupfile::{is_cgroupfs, make_group, remove_group, sweep, write};
use std::io;
use std::path::{Path, PathBuf};

/// Quota period, microseconds.
pub const PERIOD_US: u64 = 100_000;
/// Smallest quota the kernel accepts, microseconds.
const MIN_QUOTA_US: u64 = 1_000;

/// Children of one base cgroup holding throttled threads.
#[derive(Debug, Clone)]
pub struct Quota {
    base: PathBuf,
    v2: bool,
    cgroupfs: bool,
}

impl Quota {
    /// Uses `base`, which must be a cgroup directory (v1 with the `cpu`
    /// controller, or v2).
    pub fn at(base: PathBuf) -> io::Result<Quota> {
        let v2 = base.join("cgroup.controllers").exists();
        let v1 = base.join("cpu.cfs_quota_us").exists();
        if !v1 && !v2 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is not a cgroup with the cpu controller (no cpu.cfs_quota_us or cgroup.controllers)",
                    base.display()
                ),
            ));
        }
        let cgroupfs = is_cgroupfs(&base);
        Ok(Quota { base, v2, cgroupfs })
    }

    /// The base directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The child cgroup of thread `tid`.
    pub fn dir(&self, tid: u64) -> PathBuf {
        self.base.join(format!("allot-t{tid}"))
    }

    /// The quota, in microseconds per period, for `fraction` of a CPU.
    pub fn quota_us(fraction: f64) -> u64 {
        ((fraction.clamp(0.0, 1.0) * PERIOD_US as f64).round() as u64).max(MIN_QUOTA_US)
    }

    /// Limits thread `tid` (of this process) to `fraction` of a CPU.
    pub fn limit(&self, tid: u64, fraction: f64) -> io::Result<()> {
        self.sweep();
        let dir = self.dir(tid);
        make_group(&dir)?;
        let q = Self::quota_us(fraction);
        let moved = if self.v2 {
            write(&dir.join("cgroup.type"), "threaded")
                .and_then(|()| write(&dir.join("cpu.max"), &format!("{q} {PERIOD_US}")))
                .and_then(|()| write(&dir.join("cgroup.threads"), &tid.to_string()))
        } else {
            write(&dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())
                .and_then(|()| write(&dir.join("cpu.cfs_quota_us"), &q.to_string()))
                .and_then(|()| write(&dir.join("tasks"), &tid.to_string()))
        };
        if let Err(e) = moved {
            let _ = remove_group(&dir, self.cgroupfs);
            return Err(e);
        }
        Ok(())
    }

    /// Moves thread `tid` back to the base and removes its child.
    ///
    /// The child's quota is lifted first: a thread moved out of a group
    /// while the group is throttled can stay off the CPU for hundreds of
    /// milliseconds on recent kernels (seen on 6.18: a third of the moves
    /// stalled it for over 300 ms), since nothing unthrottles a group that
    /// is about to be removed. Unlimiting it first puts every throttled
    /// thread back on its run queue.
    pub fn lift(&self, tid: u64) -> io::Result<()> {
        let dir = self.dir(tid);
        if !dir.exists() {
            return Ok(());
        }
        let _ = if self.v2 {
            write(&dir.join("cpu.max"), &format!("max {PERIOD_US}"))
        } else {
            write(&dir.join("cpu.cfs_quota_us"), "-1")
        };
        let file = if self.v2 { "cgroup.threads" } else { "tasks" };
        write(&self.base.join(file), &tid.to_string())?;
        remove_group(&dir, self.cgroupfs)
    }

    /// Removes children whose thread no longer exists in this process.
    fn sweep(&self) {
        sweep(&self.base, "allot-t", self.cgroupfs, |tid| {
            !Path::new(&format!("/proc/self/task/{tid}")).exists()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tid() -> u64 {
        rustix::thread::gettid().as_raw_nonzero().get() as u64
    }

    #[test]
    fn quota_is_a_share_of_the_period() {
        assert_eq!(Quota::quota_us(0.3), 30_000);
        assert_eq!(Quota::quota_us(1.0), PERIOD_US);
        assert_eq!(Quota::quota_us(0.0), MIN_QUOTA_US);
        assert_eq!(Quota::quota_us(7.0), PERIOD_US);
    }

    #[test]
    fn refuses_a_directory_that_is_not_a_cgroup() {
        let d = tempfile::tempdir().unwrap();
        let e = Quota::at(d.path().into()).unwrap_err();
        assert!(e.to_string().contains("not a cgroup"), "{e}");
    }

    #[test]
    fn v2_fixture_gets_a_threaded_child_with_cpu_max() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.controllers"), "cpu\n").unwrap();
        let q = Quota::at(d.path().into()).unwrap();
        let me = tid();
        q.limit(me, 0.25).unwrap();
        let c = q.dir(me);
        assert_eq!(
            std::fs::read_to_string(c.join("cgroup.type")).unwrap(),
            "threaded"
        );
        assert_eq!(
            std::fs::read_to_string(c.join("cpu.max")).unwrap(),
            "25000 100000"
        );
        assert_eq!(
            std::fs::read_to_string(c.join("cgroup.threads")).unwrap(),
            me.to_string()
        );
        q.lift(me).unwrap();
        assert!(!c.exists());
        assert_eq!(
            std::fs::read_to_string(d.path().join("cgroup.threads")).unwrap(),
            me.to_string()
        );
    }

    #[test]
    fn children_of_ended_threads_are_swept() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("cgroup.controllers"), "cpu\n").unwrap();
        let q = Quota::at(d.path().into()).unwrap();
        let gone = std::thread::spawn(tid).join().unwrap();
        // `join` returns once the thread's code is done; the kernel may
        // list the exiting task a little longer, and the sweep rightly
        // keeps the child of a thread it still lists.
        let listed = format!("/proc/self/task/{gone}");
        let t0 = std::time::Instant::now();
        while Path::new(&listed).exists() && t0.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        std::fs::create_dir(q.dir(gone)).unwrap();
        std::fs::create_dir(d.path().join("unrelated")).unwrap();
        q.limit(tid(), 0.5).unwrap();
        assert!(!q.dir(gone).exists());
        assert!(
            d.path().join("unrelated").exists(),
            "only allot-t<tid> children are swept"
        );
        q.lift(tid()).unwrap();
    }
}
