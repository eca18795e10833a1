//! cgroup directories a test creates, removed on drop.

use std::path::{Path, PathBuf};

/// Directories removed (children first, deepest last listed first) on
/// drop; processes in them are moved to their hierarchy's root first so
/// that removal cannot fail on them.
pub struct CgroupDirs(pub Vec<PathBuf>);

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            remove_tree(d);
        }
    }
}

fn remove_tree(d: &Path) {
    if let Ok(rd) = std::fs::read_dir(d) {
        let mut kids: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        kids.sort();
        for k in kids.iter().rev() {
            remove_tree(k);
        }
    }
    move_to_root(d);
    // A task that is exiting keeps the directory busy for a moment.
    for _ in 0..50 {
        match std::fs::remove_dir(d) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(10)),
        }
    }
}

/// Moves every process of cgroup `dir` to the root of its hierarchy (the
/// highest ancestor with a `cgroup.procs`).
pub fn move_to_root(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    let mut root = dir.to_path_buf();
    while let Some(p) = root.parent() {
        if !p.join("cgroup.procs").exists() {
            break;
        }
        root = p.to_path_buf();
    }
    for pid in procs.split_whitespace() {
        let _ = std::fs::write(root.join("cgroup.procs"), pid);
    }
}

/// Whether the v1 cpuset hierarchy at its usual place can be written.
pub fn v1_cpuset_writable() -> bool {
    crate::is_root() && Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists()
}

/// A name no other call makes, in this process or another:
/// `allot-test-<tag>-<pid>-<n>` (tests of one binary run in parallel
/// threads, so the pid alone is not enough).
pub fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("allot-test-{tag}-{}-{n}", std::process::id())
}
