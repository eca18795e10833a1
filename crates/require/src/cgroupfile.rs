//! Cgroup directories for the parts that put a thread or the whole process
//! in a group of its own: the quota throttle (`throttle::Quota`) and the
//! memory cap ([`super::memcap`]). Writes name the file in their error, and
//! a group is made and removed the same way on cgroupfs and on a test
//! fixture's plain directories (where removing a group removes the files
//! written into it; on cgroupfs only `rmdir` is used).

use std::io;
use std::path::Path;

const CGROUP_SUPER_MAGIC: i64 = 0x0027_e0eb;
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Writes `text` to the cgroup file `path`.
pub(crate) fn write(path: &Path, text: &str) -> io::Result<()> {
    std::fs::write(path, text).map_err(|e| with_path(e, path))
}

/// `e`, saying which path it was about.
pub(crate) fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// Makes group `dir`, or keeps it when it exists already.
pub(crate) fn make_group(dir: &Path) -> io::Result<()> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(with_path(e, dir)),
        _ => Ok(()),
    }
}

/// Removes group `dir` (`cgroupfs`: it is a cgroup, else a fixture's plain
/// directory).
pub(crate) fn remove_group(dir: &Path, cgroupfs: bool) -> io::Result<()> {
    if cgroupfs {
        std::fs::remove_dir(dir)
    } else {
        std::fs::remove_dir_all(dir)
    }
    .map_err(|e| with_path(e, dir))
}

/// Removes the groups `<prefix><id>` under `dir` whose owner `gone` says
/// has ended (a thread or a process left one behind). A group that still
/// holds something cannot be removed anyway.
pub(crate) fn sweep(dir: &Path, prefix: &str, cgroupfs: bool, gone: impl Fn(u64) -> bool) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let id = e
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix(prefix))
            .and_then(|i| i.parse::<u64>().ok());
        if id.is_some_and(&gone) {
            let _ = remove_group(&e.path(), cgroupfs);
        }
    }
}

/// Whether `p` is on a cgroup file system (v1 or v2), not a fixture's
/// plain directory.
pub(crate) fn is_cgroupfs(p: &Path) -> bool {
    rustix::fs::statfs(p).is_ok_and(|s| {
        #[allow(clippy::unnecessary_cast)] // f_type is not i64 on every target
        let t = s.f_type as i64;
        t == CGROUP_SUPER_MAGIC || t == CGROUP2_SUPER_MAGIC
    })
}
