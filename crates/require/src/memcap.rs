//! The `memory` kind's cap, an option (`ALLOT_MEMORY_CAP=<dir>`): what a
//! process's blocks hold of memory also limits what the process may
//! allocate.
//!
//! By default the `memory` kind binds (`set_mempolicy`,
//! [`super::builtin::MemoryOps`]): a block's pages come from the nodes it
//! holds, and the amounts are accounted so two blocks are never promised
//! the same memory. That is what Poli-C's memory resource does. Linux
//! charges memory to a process's memory cgroup, never to one thread, so
//! a cap is the whole process's:
//!
//! - While the process's outermost blocks hold `N > 0` bytes in all
//!   (entered and not left, also while their threads wait: the pages they
//!   allocated are still there), the process runs in its own memory group
//!   `<dir>/allot-m<pid>` with limit `N`, or what the group already uses
//!   when that is more (a lower limit would make the kernel reclaim or
//!   kill): [`next`].
//! - Moving a process does not move the pages it already has, so the
//!   group counts what the process allocates from the moment it joined:
//!   the cap bounds what is allocated while blocks hold memory, by any
//!   thread of the process.
//! - When its blocks hold nothing, the process goes back to the group it
//!   came from and its group is removed. A process that ended capped (the
//!   kernel's out-of-memory kill ends one that allocates past its cap)
//!   leaves its group behind; the next process to join removes it.
//!
//! | | cgroup v1 (`memory`) | cgroup v2 |
//! |---|---|---|
//! | `<dir>` | a memory group this process may write | a group with `memory` in `cgroup.subtree_control` |
//! | limit | `memory.limit_in_bytes` | `memory.max` |
//! | in use | `memory.usage_in_bytes` | `memory.current` |
//! | move the process | `cgroup.procs` | `cgroup.procs` |
//!
//! On cgroup v2 every controller follows the process: while capped it
//! runs under `<dir>`'s CPU and I/O settings too. Where `ALLOT_MEMORY_CAP`
//! names something else, every request with memory is refused with the
//! reason ([`Setting::Refused`], through `KindOps::unenforced`) rather
//! than accounted and silently not capped.
//!
//! Invariant: the process is in its group exactly while [`MemoryCap`]
//! records it joined, and the group is made only by this module under
//! `<dir>` with this process's id in its name.

use crate::cgroupfile::{is_cgroupfs, make_group, remove_group, sweep, write};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Limits are whole pages.
const PAGE: u64 = 4096;

/// The cap as the environment sets it.
#[derive(Debug)]
pub enum Setting {
    /// No `ALLOT_MEMORY_CAP`: the memory kind binds only.
    Off,
    /// Caps under a usable directory.
    On(MemoryCap),
    /// `ALLOT_MEMORY_CAP` names something unusable: why.
    Refused(String),
}

impl Setting {
    /// From `ALLOT_MEMORY_CAP`.
    pub fn from_env() -> Setting {
        let Some(dir) = std::env::var_os(allot_proto::env::MEMORY_CAP) else {
            return Setting::Off;
        };
        match MemoryCap::at(PathBuf::from(dir)) {
            Ok(c) => Setting::On(c),
            Err(why) => Setting::Refused(why),
        }
    }
}

/// What to do when the process's blocks come to hold `wanted` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Nothing changes.
    Stay,
    /// Make the group with this limit and move the process in.
    Join(u64),
    /// Set the group's limit.
    Set(u64),
    /// Move the process back and remove the group.
    Leave,
}

/// The step from the current limit (`None`: not in the group) to
/// `wanted` bytes held, with `usage` bytes charged to the group: never
/// below what it uses, in whole pages.
pub fn next(limit: Option<u64>, wanted: u64, usage: u64) -> Step {
    match (limit, wanted) {
        (None, 0) => Step::Stay,
        (Some(_), 0) => Step::Leave,
        (None, w) => Step::Join(pages(w)),
        (Some(l), w) => {
            let to = pages(w).max(pages(usage));
            if to == l { Step::Stay } else { Step::Set(to) }
        }
    }
}

fn pages(bytes: u64) -> u64 {
    bytes.div_ceil(PAGE).saturating_mul(PAGE)
}

/// The group path of this process in the hierarchy, from
/// `/proc/self/cgroup`: the `memory` controller's line on v1, `0::` on v2.
pub fn own_group(proc_cgroup: &str, v2: bool) -> Option<&str> {
    proc_cgroup.lines().find_map(|l| {
        let mut f = l.splitn(3, ':');
        let (id, ctrls, path) = (f.next()?, f.next()?, f.next()?);
        let ours = if v2 {
            id == "0" && ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == "memory")
        };
        ours.then_some(path)
    })
}

/// Where a process goes back to when its blocks hold nothing.
#[derive(Debug)]
enum Home {
    /// The group it ran in when it joined: `/proc/self/cgroup` under the
    /// hierarchy's mount point.
    Own { root: PathBuf },
    /// A fixed directory (a fixture of plain directories).
    Fixed(PathBuf),
}

/// The cap of one process under one directory.
#[derive(Debug)]
pub struct MemoryCap {
    dir: PathBuf,
    v2: bool,
    home: Home,
    /// On cgroupfs only `rmdir` removes a group; a fixture's plain
    /// directory holds the files written into it.
    cgroupfs: bool,
    joined: Mutex<Option<Joined>>,
}

#[derive(Debug)]
struct Joined {
    group: PathBuf,
    home: PathBuf,
    limit: u64,
}

impl MemoryCap {
    /// Caps under `dir`, which must be a memory cgroup this process may
    /// write; the error says what is wrong and what to do.
    pub fn at(dir: PathBuf) -> Result<MemoryCap, String> {
        let name = allot_proto::env::MEMORY_CAP;
        let shown = dir.display();
        if !dir.is_dir() {
            return Err(format!(
                "{name}={shown} is not a directory; name a memory cgroup this process may \
                 write (cgroup v1: under /sys/fs/cgroup/memory; v2: a group with memory in \
                 its cgroup.subtree_control), or unset it to bind memory without a cap"
            ));
        }
        let v2 = if dir.join("memory.limit_in_bytes").exists() {
            false
        } else if dir.join("cgroup.controllers").exists() {
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "memory") {
                return Err(format!(
                    "{name}={shown}: its groups get no memory controller; enable it \
                     (echo +memory > {shown}/cgroup.subtree_control) or name another group"
                ));
            }
            true
        } else {
            return Err(format!(
                "{name}={shown} is not a memory cgroup (no memory.limit_in_bytes or \
                 cgroup.controllers in it)"
            ));
        };
        if rustix::fs::access(&dir, rustix::fs::Access::WRITE_OK).is_err() {
            return Err(format!(
                "{name}={shown}: this process (uid {}) may not make groups there; \
                 delegate it (chown) or name one it owns",
                rustix::process::getuid().as_raw()
            ));
        }
        let root = mount_root(&dir, v2);
        let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if own_group(&text, v2).is_none() {
            return Err(format!(
                "{name}={shown}: this process is in no group of that hierarchy \
                 (/proc/self/cgroup has no {} line)",
                if v2 { "0::" } else { "memory" }
            ));
        }
        Ok(MemoryCap {
            cgroupfs: is_cgroupfs(&dir),
            dir,
            v2,
            home: Home::Own { root },
            joined: Mutex::new(None),
        })
    }

    /// Caps under `dir` of a fixture of plain directories (`v2`: its
    /// file names), going back to `home`.
    pub fn fixture(dir: PathBuf, v2: bool, home: PathBuf) -> MemoryCap {
        MemoryCap {
            cgroupfs: is_cgroupfs(&dir),
            dir,
            v2,
            home: Home::Fixed(home),
            joined: Mutex::new(None),
        }
    }

    /// This process's group under the directory.
    pub fn group(&self) -> PathBuf {
        self.dir.join(format!("allot-m{}", std::process::id()))
    }

    /// The limit in force (`None`: not capped now).
    pub fn limit(&self) -> Option<u64> {
        self.joined
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|j| j.limit)
    }

    fn limit_file(&self) -> &'static str {
        if self.v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        }
    }

    fn usage_file(&self) -> &'static str {
        if self.v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        }
    }

    fn usage(&self, group: &Path) -> u64 {
        std::fs::read_to_string(group.join(self.usage_file()))
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(0)
    }

    fn home_now(&self) -> io::Result<PathBuf> {
        match &self.home {
            Home::Fixed(p) => Ok(p.clone()),
            Home::Own { root } => {
                let text = std::fs::read_to_string("/proc/self/cgroup")?;
                let rel = own_group(&text, self.v2).ok_or_else(|| {
                    io::Error::new(io::ErrorKind::NotFound, "no group in /proc/self/cgroup")
                })?;
                Ok(root.join(rel.trim_start_matches('/')))
            }
        }
    }

    /// The process's blocks now hold `wanted` bytes of memory in all:
    /// join, adjust or leave the group ([`next`]).
    pub fn hold(&self, wanted: u64) -> io::Result<()> {
        let mut joined = self.joined.lock().unwrap_or_else(|e| e.into_inner());
        let usage = joined.as_ref().map_or(0, |j| self.usage(&j.group));
        match next(joined.as_ref().map(|j| j.limit), wanted, usage) {
            Step::Stay => Ok(()),
            Step::Join(limit) => {
                *joined = Some(self.join(limit)?);
                Ok(())
            }
            Step::Set(limit) => {
                let j = joined.as_mut().expect("a limit to set is in a group");
                self.set_limit(&j.group, limit)?;
                j.limit = limit;
                Ok(())
            }
            Step::Leave => {
                let j = joined.take().expect("a group to leave was joined");
                self.leave(&j)
            }
        }
    }

    fn join(&self, limit: u64) -> io::Result<Joined> {
        let home = self.home_now()?;
        self.sweep();
        let group = self.group();
        // One that exists was left by a process of the same id that ended
        // capped: ours by name.
        make_group(&group)?;
        let moved = self
            .set_limit(&group, limit)
            .and_then(|()| write(&group.join("cgroup.procs"), &std::process::id().to_string()));
        if let Err(e) = moved {
            self.remove(&group);
            return Err(e);
        }
        Ok(Joined { group, home, limit })
    }

    /// Removes the groups of processes that ended while capped (the
    /// kernel's out-of-memory kill among them): `allot-m<pid>` with no
    /// process `<pid>`. A group whose id is alive again is left alone;
    /// one with processes in it cannot be removed anyway.
    fn sweep(&self) {
        let me = u64::from(std::process::id());
        sweep(&self.dir, "allot-m", self.cgroupfs, |pid| {
            pid != me
                && i32::try_from(pid)
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                    .is_some_and(|p| {
                        rustix::process::test_kill_process(p) == Err(rustix::io::Errno::SRCH)
                    })
        });
    }

    fn set_limit(&self, group: &Path, limit: u64) -> io::Result<()> {
        let file = group.join(self.limit_file());
        match write(&file, &limit.to_string()) {
            // cgroup v1 refuses a limit under what is in use (EBUSY) when
            // it cannot reclaim the difference: the use grew since it was
            // read; never go below it.
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                let again = limit.max(pages(self.usage(group)));
                write(&file, &again.to_string())
            }
            r => r,
        }
    }

    fn leave(&self, j: &Joined) -> io::Result<()> {
        write(
            &j.home.join("cgroup.procs"),
            &std::process::id().to_string(),
        )?;
        self.remove(&j.group);
        Ok(())
    }

    fn remove(&self, group: &Path) {
        let _ = remove_group(group, self.cgroupfs);
    }
}

/// The mount point of the hierarchy `dir` is in: the highest directory
/// above it that is still a group (v1: has `memory.limit_in_bytes`; v2:
/// `cgroup.controllers`).
fn mount_root(dir: &Path, v2: bool) -> PathBuf {
    let marker = if v2 {
        "cgroup.controllers"
    } else {
        "memory.limit_in_bytes"
    };
    let mut root = dir.to_path_buf();
    while let Some(up) = root.parent() {
        if !up.join(marker).exists() {
            break;
        }
        root = up.to_path_buf();
    }
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_follows_what_is_held_never_below_what_is_used() {
        const M: u64 = 1 << 20;
        assert_eq!(next(None, 0, 0), Step::Stay, "nothing held, nothing capped");
        assert_eq!(next(None, 64 * M, 0), Step::Join(64 * M));
        assert_eq!(next(None, 1000, 0), Step::Join(4096), "whole pages");
        assert_eq!(next(Some(64 * M), 64 * M, 10 * M), Step::Stay);
        assert_eq!(
            next(Some(64 * M), 96 * M, 10 * M),
            Step::Set(96 * M),
            "grows"
        );
        assert_eq!(
            next(Some(96 * M), 32 * M, 10 * M),
            Step::Set(32 * M),
            "shrinks"
        );
        assert_eq!(
            next(Some(96 * M), 32 * M, 50 * M + 1),
            Step::Set(50 * M + PAGE),
            "a block left, its pages stay: no lower than what is used"
        );
        assert_eq!(next(Some(50 * M), 32 * M, 50 * M), Step::Stay);
        assert_eq!(
            next(Some(32 * M), 0, 30 * M),
            Step::Leave,
            "nothing held: leave"
        );
    }

    #[test]
    fn the_own_group_is_read_from_the_right_line() {
        let v1 = "9:name=systemd:/\n4:memory:/jobs/a\n1:cpu,cpuacct:/\n0::/user.slice\n";
        assert_eq!(own_group(v1, false), Some("/jobs/a"));
        assert_eq!(own_group(v1, true), Some("/user.slice"));
        assert_eq!(own_group("0::/cells/cell-3\n", true), Some("/cells/cell-3"));
        assert_eq!(own_group("0::/x\n", false), None, "no v1 memory line");
        assert_eq!(own_group("3:memory:/a\n", true), None, "no v2 line");
    }

    #[test]
    fn a_fixture_is_joined_adjusted_and_left_with_v1_and_v2_names() {
        for v2 in [false, true] {
            let t = tempfile::tempdir().unwrap();
            let (dir, home) = (t.path().join("caps"), t.path().join("home"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::create_dir_all(&home).unwrap();
            let cap = MemoryCap::fixture(dir.clone(), v2, home.clone());
            let (limit, procs) = (
                if v2 {
                    "memory.max"
                } else {
                    "memory.limit_in_bytes"
                },
                "cgroup.procs",
            );
            let me = std::process::id().to_string();
            // A group of a process that is gone, and one that is not ours.
            let (stale, other) = (dir.join("allot-m2147483646"), dir.join("keep"));
            std::fs::create_dir_all(&stale).unwrap();
            std::fs::create_dir_all(&other).unwrap();
            cap.hold(8 << 20).unwrap();
            assert!(
                !stale.exists() && other.exists(),
                "only a gone process's group is swept"
            );
            let g = cap.group();
            assert_eq!(g, dir.join(format!("allot-m{me}")));
            assert_eq!(std::fs::read_to_string(g.join(limit)).unwrap(), "8388608");
            assert_eq!(std::fs::read_to_string(g.join(procs)).unwrap(), me);
            assert_eq!(cap.limit(), Some(8 << 20));
            cap.hold(16 << 20).unwrap();
            assert_eq!(std::fs::read_to_string(g.join(limit)).unwrap(), "16777216");
            cap.hold(0).unwrap();
            assert_eq!(std::fs::read_to_string(home.join(procs)).unwrap(), me);
            assert!(!g.exists(), "the group is removed when nothing is held");
            assert_eq!(cap.limit(), None);
        }
    }

    #[test]
    fn an_unusable_directory_is_refused_with_what_to_do() {
        let t = tempfile::tempdir().unwrap();
        let e = MemoryCap::at(t.path().join("none")).unwrap_err();
        assert!(
            e.contains("is not a directory") && e.contains("unset it"),
            "{e}"
        );
        let e = MemoryCap::at(t.path().to_path_buf()).unwrap_err();
        assert!(e.contains("is not a memory cgroup"), "{e}");
        std::fs::write(t.path().join("cgroup.controllers"), "cpu memory").unwrap();
        std::fs::write(t.path().join("cgroup.subtree_control"), "cpu").unwrap();
        let e = MemoryCap::at(t.path().to_path_buf()).unwrap_err();
        assert!(e.contains("echo +memory >"), "{e}");
    }
}
