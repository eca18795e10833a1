//! The cgroup filesystem behind a trait.
//!
//! The cgroup backends never call `std::fs` directly: they go through
//! [`CgroupFs`], whose [`KernelFs`] implementation is the real cgroupfs and
//! whose [`FixtureFs`] implementation turns a plain directory into a
//! stand-in (on `mkdir` it creates the interface files the kernel would).
//! That is how cgroup v2 is tested on a machine whose unified hierarchy lacks
//! the cpuset controller.
//!
//! Control files that change on the hot path are opened once and rewritten
//! in place through a [`ControlFile`] (one `pwrite`, about a microsecond).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// An open control file that is rewritten whole on every `set`.
pub trait ControlFile: Send + std::fmt::Debug {
    /// Replaces the file's value with `text`.
    fn set(&mut self, text: &str) -> io::Result<()>;
}

/// Filesystem operations on a cgroup hierarchy.
pub trait CgroupFs: Send + Sync + std::fmt::Debug {
    /// Creates a cgroup directory (parents must exist).
    fn mkdir(&self, path: &Path) -> io::Result<()>;
    /// Removes an empty cgroup directory.
    fn rmdir(&self, path: &Path) -> io::Result<()>;
    /// Reads a control file.
    fn read(&self, path: &Path) -> io::Result<String>;
    /// Writes a control file once.
    fn write(&self, path: &Path, text: &str) -> io::Result<()>;
    /// Opens a control file for repeated in-place writes.
    fn open(&self, path: &Path) -> io::Result<Box<dyn ControlFile>>;
    /// Whether `path` exists.
    fn exists(&self, path: &Path) -> bool {
        path.exists()
    }
    /// Claims directory `dir` for this process: an exclusive `flock` on
    /// it, held while the returned descriptor is open (the kernel's
    /// cgroup files take flocks like any directory). Fails with
    /// `WouldBlock` while another process holds it.
    fn claim(&self, dir: &Path) -> io::Result<rustix::fd::OwnedFd> {
        use rustix::fs::{FlockOperation, Mode, OFlags};
        let fd = rustix::fs::open(
            dir,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )?;
        rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive)?;
        Ok(fd)
    }
    /// Child cgroup directory names of `path`.
    fn children(&self, path: &Path) -> io::Result<Vec<String>> {
        let mut out: Vec<String> = std::fs::read_dir(path)?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        out.sort();
        Ok(out)
    }
}

/// [`CgroupFs::claim`] for a broker's own directory `dir`: the error
/// says that another broker manages it and how to give this one its own.
/// One broker per directory: two would adopt each other's cells and
/// remove the directory under each other.
pub fn claim_own(fs: &dyn CgroupFs, dir: &Path) -> crate::Result<rustix::fd::OwnedFd> {
    fs.claim(dir).map_err(|e| {
        let what = format!("claim {}", dir.display());
        if e.kind() == io::ErrorKind::WouldBlock {
            crate::EnforceError::new(
                what,
                io::Error::other(
                    "another broker manages this cgroup directory; give this broker one of \
                     its own (--cgroup-name NAME, or cgroup_name = in its configuration)",
                ),
            )
        } else {
            crate::EnforceError::new(what, e)
        }
    })
}

/// Why a process in cgroup `group` (a `/proc/PID/cgroup` path, below
/// `mount`) may not be moved into one of allot's cells (below `own`, a
/// path of the same form) for user `uid`, if it may not: `group` is
/// outside allot's tree, its effective CPUs are fewer than
/// `managed`, and `uid` may not write its `cgroup.procs` (the kernel's own
/// test for moving a process out of it). See
/// [`crate::Enforcer::confined_elsewhere`].
pub fn confined_elsewhere(
    fs: &dyn CgroupFs,
    mount: &Path,
    own: &str,
    group: &str,
    managed: &allot_topo::CpuSet,
    uid: u32,
) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let own = own.trim_end_matches('/');
    // A cell's group is below allot's own, or beside it named after it
    // (an exclusive cell on a kernel before 6.7: `crate::partition`).
    if uid == 0
        || group == "/"
        || group == own
        || group.starts_with(&format!("{own}/"))
        || group.starts_with(&format!("{own}.cell-"))
    {
        return None;
    }
    let dir = mount.join(group.trim_start_matches('/'));
    // v2 names it cpuset.cpus.effective, v1 cpuset.effective_cpus.
    let cpus = fs
        .read(&dir.join("cpuset.cpus.effective"))
        .or_else(|_| fs.read(&dir.join("cpuset.effective_cpus")))
        .ok()?;
    let cpus = allot_topo::CpuSet::parse_list(cpus.trim()).ok()?;
    if managed.is_subset(&cpus) {
        return None;
    }
    let writable = std::fs::metadata(dir.join("cgroup.procs"))
        .is_ok_and(|m| m.uid() == uid && m.mode() & 0o200 != 0);
    if writable {
        return None;
    }
    Some(format!(
        "it is confined to CPUs {cpus} by the cgroup {group}, which uid {uid} may not move it \
         out of; run it where it may use every managed CPU, or ask that cgroup's owner"
    ))
}

/// The path of a process's group in a v1 hierarchy with `controller`, or
/// its v2 group (`0::`), from its `/proc/PID/cgroup` text.
pub fn group_in(proc_cgroup: &str, controller: Option<&str>) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (id, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match controller {
            Some(c) => ctrls.split(',').any(|x| x == c),
            None => id == "0" && ctrls.is_empty(),
        };
        hit.then(|| path.trim().to_string())
    })
}

/// The processes in cgroup `dir` (its `cgroup.procs`); none when it is
/// gone or unreadable.
pub fn procs(fs: &dyn CgroupFs, dir: &Path) -> Vec<u32> {
    fs.read(&dir.join("cgroup.procs"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

/// Removes cgroup `dir`; if processes remain in it, first moves them to
/// `out` (so they leave the cell's confinement), retrying a few times for
/// processes forked during the move.
pub fn evict_and_remove(fs: &dyn CgroupFs, dir: &Path, out: &Path) -> io::Result<()> {
    const ATTEMPTS: usize = 5;
    let mut last = Ok(());
    for _ in 0..ATTEMPTS {
        match fs.rmdir(dir) {
            Ok(()) => return Ok(()),
            Err(e) => last = Err(e),
        }
        let procs = fs.read(&dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.split_whitespace() {
            // A process that exited meanwhile is not an error.
            let _ = fs.write(&out.join("cgroup.procs"), pid);
        }
    }
    last
}

/// The kernel's cgroupfs.
#[derive(Debug, Default, Clone, Copy)]
pub struct KernelFs;

#[derive(Debug)]
struct KernelFile {
    file: File,
}

impl ControlFile for KernelFile {
    fn set(&mut self, text: &str) -> io::Result<()> {
        // A write of no bytes never reaches cgroupfs: an empty value (an
        // empty CPU list, "inherit") is written as a lone newline.
        let text = if text.is_empty() { "\n" } else { text };
        // cgroupfs takes each write as a whole value and ignores the offset.
        let n = self.file.write_at(text.as_bytes(), 0)?;
        if n != text.len() {
            return Err(io::Error::other(format!("short write of {n} bytes")));
        }
        Ok(())
    }
}

fn ctx(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

impl CgroupFs for KernelFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        match std::fs::create_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            other => other.map_err(|e| ctx(e, "create cgroup", path)),
        }
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        match std::fs::remove_dir(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            other => other.map_err(|e| ctx(e, "remove cgroup", path)),
        }
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        crate::os::read_kernel_file(path).map_err(|e| ctx(e, "read", path))
    }
    fn write(&self, path: &Path, text: &str) -> io::Result<()> {
        let f = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| ctx(e, "open", path))?;
        KernelFile { file: f }
            .set(text)
            .map_err(|e| ctx(e, "write", path))
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn ControlFile>> {
        let file = OpenOptions::new()
            .write(true)
            .open(path)
            .map_err(|e| ctx(e, "open", path))?;
        Ok(Box::new(KernelFile { file }))
    }
}

/// Which interface files [`FixtureFs`] creates in a new directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FixtureLayout {
    /// A cgroup v2 directory with the cpuset and cpu controllers.
    V2,
    /// A cgroup v1 cpuset directory.
    V1Cpuset,
    /// A cgroup v1 cpu directory.
    V1Cpu,
    /// A cgroup v1 cpuacct directory.
    V1Cpuacct,
    /// A cgroup v1 memory directory.
    V1Memory,
    /// A resctrl group (not a cgroup, but made and written the same way).
    Resctrl,
    /// Every v1 file allot uses (cpuset, cpu, cpuacct, freezer, blkio,
    /// memory) in one directory: one fixture serving all six hierarchies.
    V1All,
}

impl FixtureLayout {
    /// Files and their initial contents.
    pub fn files(self) -> &'static [(&'static str, &'static str)] {
        match self {
            FixtureLayout::V2 => &[
                ("cgroup.procs", ""),
                ("cgroup.controllers", "cpuset cpu memory io\n"),
                ("cgroup.subtree_control", ""),
                ("cgroup.events", "populated 0\nfrozen 0\n"),
                ("cgroup.freeze", "0\n"),
                ("cpuset.cpus", ""),
                ("cpuset.mems", ""),
                ("cpuset.cpus.effective", ""),
                ("cpuset.cpus.exclusive", ""),
                ("cpuset.cpus.partition", "member\n"),
                ("cpu.weight", "100\n"),
                ("cpu.max", "max 100000\n"),
                ("cpu.stat", "usage_usec 0\nuser_usec 0\nsystem_usec 0\n"),
                (
                    "cpu.pressure",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                     full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                ),
                ("io.weight", "default 100\n"),
                ("memory.min", "0\n"),
                ("memory.max", "max\n"),
                ("memory.current", "0\n"),
                (
                    "memory.events",
                    "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\noom_group_kill 0\n",
                ),
                (
                    "memory.pressure",
                    "some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n\
                     full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
                ),
            ],
            FixtureLayout::V1Cpuset => &[
                ("cgroup.procs", ""),
                ("tasks", ""),
                ("cgroup.clone_children", "0\n"),
                ("cpuset.cpus", ""),
                ("cpuset.mems", ""),
            ],
            FixtureLayout::V1Cpu => &[
                ("cgroup.procs", ""),
                ("tasks", ""),
                ("cpu.shares", "1024\n"),
                ("cpu.cfs_quota_us", "-1\n"),
                ("cpu.cfs_period_us", "100000\n"),
            ],
            FixtureLayout::V1Cpuacct => &[
                ("cgroup.procs", ""),
                ("tasks", ""),
                ("cpuacct.usage", "0\n"),
            ],
            FixtureLayout::V1Memory => &[
                ("cgroup.procs", ""),
                ("tasks", ""),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
                ("memory.usage_in_bytes", "0\n"),
                ("memory.failcnt", "0\n"),
                (
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                ),
            ],
            FixtureLayout::Resctrl => &[
                ("tasks", ""),
                ("cpus", ""),
                ("schemata", ""),
                ("mode", "shareable\n"),
            ],
            FixtureLayout::V1All => &[
                ("cgroup.procs", ""),
                ("tasks", ""),
                ("cgroup.clone_children", "0\n"),
                ("cpuset.cpus", ""),
                ("cpuset.mems", ""),
                ("cpu.shares", "1024\n"),
                ("cpu.cfs_quota_us", "-1\n"),
                ("cpu.cfs_period_us", "100000\n"),
                ("cpuacct.usage", "0\n"),
                ("freezer.state", "THAWED\n"),
                ("blkio.bfq.weight_device", "default 100\n"),
                ("memory.limit_in_bytes", "9223372036854771712\n"),
                ("memory.soft_limit_in_bytes", "9223372036854771712\n"),
                ("memory.usage_in_bytes", "0\n"),
                ("memory.failcnt", "0\n"),
                (
                    "memory.oom_control",
                    "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n",
                ),
            ],
        }
    }
}

/// A plain directory playing cgroupfs: `mkdir` creates the interface files
/// of `layout`; writes replace a file's contents; `rmdir` removes the files
/// and refuses when `cgroup.procs` is not empty, as the kernel does.
#[derive(Debug, Clone)]
pub struct FixtureFs {
    layout: FixtureLayout,
    /// Files of the layout this kernel lacks ([`FixtureFs::without`]).
    omit: &'static [&'static str],
}

#[derive(Debug)]
struct FixtureFile {
    path: PathBuf,
}

impl ControlFile for FixtureFile {
    fn set(&mut self, text: &str) -> io::Result<()> {
        std::fs::write(&self.path, text)
    }
}

impl FixtureFs {
    /// A fixture filesystem creating `layout` files.
    pub fn new(layout: FixtureLayout) -> Self {
        FixtureFs { layout, omit: &[] }
    }

    /// The same, never creating the files `omit` (as an older kernel:
    /// `cpuset.cpus.exclusive` before 6.7).
    pub fn without(mut self, omit: &'static [&'static str]) -> Self {
        self.omit = omit;
        self
    }

    /// Creates a root directory with its interface files (the part the
    /// kernel provides before allot runs).
    pub fn populate(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        for (name, init) in self.layout.files() {
            if self.omit.contains(name) {
                continue;
            }
            let p = dir.join(name);
            if !p.exists() {
                std::fs::write(p, init)?;
            }
        }
        Ok(())
    }
}

impl FixtureFs {
    /// Removes `pid` from every other `cgroup.procs` of the hierarchy that
    /// holds `target` (the topmost ancestor with a `cgroup.procs`), as the
    /// kernel keeps each process in exactly one cgroup per hierarchy.
    fn unlist(&self, target: &Path, pid: &str) {
        let Some(mut root) = target.parent().map(Path::to_path_buf) else {
            return;
        };
        while let Some(up) = root.parent() {
            if !up.join("cgroup.procs").exists() {
                break;
            }
            root = up.to_path_buf();
        }
        let mut stack = vec![root];
        while let Some(d) = stack.pop() {
            let f = d.join("cgroup.procs");
            if f != target
                && let Ok(text) = std::fs::read_to_string(&f)
                && text.split_whitespace().any(|p| p == pid)
            {
                let kept: String = text
                    .split_whitespace()
                    .filter(|p| *p != pid)
                    .map(|p| format!("{p}\n"))
                    .collect();
                let _ = std::fs::write(&f, kept);
            }
            if let Ok(rd) = std::fs::read_dir(&d) {
                stack.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
        }
    }
}

impl CgroupFs for FixtureFs {
    fn mkdir(&self, path: &Path) -> io::Result<()> {
        if !path.parent().is_some_and(Path::is_dir) {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("create cgroup {}: no parent", path.display()),
            ));
        }
        self.populate(path)
    }
    fn rmdir(&self, path: &Path) -> io::Result<()> {
        if !path.exists() {
            return Ok(());
        }
        let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
        if !procs.trim().is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::ResourceBusy,
                format!("remove cgroup {}: still has processes", path.display()),
            ));
        }
        std::fs::remove_dir_all(path)
    }
    fn read(&self, path: &Path) -> io::Result<String> {
        std::fs::read_to_string(path).map_err(|e| ctx(e, "read", path))
    }
    fn write(&self, path: &Path, text: &str) -> io::Result<()> {
        if !path.exists() {
            return Err(ctx(io::Error::from(io::ErrorKind::NotFound), "open", path));
        }
        if path.file_name().is_some_and(|n| n == "cgroup.procs") {
            // Moving a process lists it here and, as in the kernel, nowhere
            // else under the same root.
            let pid = text.trim();
            self.unlist(path, pid);
            let mut cur = std::fs::read_to_string(path)?;
            cur.push_str(pid);
            cur.push('\n');
            return std::fs::write(path, cur);
        }
        std::fs::write(path, text)
    }
    fn open(&self, path: &Path) -> io::Result<Box<dyn ControlFile>> {
        if !path.exists() {
            return Err(ctx(io::Error::from(io::ErrorKind::NotFound), "open", path));
        }
        Ok(Box::new(FixtureFile {
            path: path.to_path_buf(),
        }))
    }
}
