//! allot's mechanism layer: making the kernel enforce a plan.
//!
//! One trait, [`Enforcer`], four backends chosen at start-up from what the
//! machine allows ([`BackendKind::Auto`] picks the first that works):
//!
//! | backend                 | confines with                        | needs                    |
//! |-------------------------|--------------------------------------|--------------------------|
//! | [`Cgroup2`]             | `cpuset.cpus`, `cpu.weight`, `cpu.max`, `cgroup.freeze`, `memory.min`/`memory.max` | a writable v2 subtree with cpuset |
//! | [`Cgroup1`]             | cpuset, cpu (shares, CFS bandwidth), cpuacct, freezer, memory | writable v1 mounts |
//! | [`Affinity`]            | `sched_setaffinity` on every thread (no weights, no bandwidth) | nothing (same user) |
//! | [`DryRun`]              | nothing; records every call          | nothing                  |
//!
//! Hot path: processes are moved into a cell's cgroup once, when they join
//! it; a grant change only rewrites `cpuset.cpus` through a file kept open
//! (about a microsecond). Moving tasks between cgroups costs milliseconds
//! and never happens on a grant change.
//!
//! The OS sits behind [`os::Os`] (processes) and [`cgroupfs::CgroupFs`]
//! (cgroup files); both have fakes for tests, and the cgroup backends take
//! their root paths so they run against temporary directories.
//! Time-triggered windows use a [`Gate`] per cell (the freezer), driven
//! from the broker's window thread; see [`gate`]. A cell's memory
//! guarantee and limit: [`memory`].

pub mod affinity;
mod ahead;
pub mod cgroup1;
pub mod cgroup2;
pub mod cgroupfs;
pub mod counters;
pub mod delegation;
pub mod detect;
pub mod dryrun;
pub mod gate;
pub mod isolate;
pub mod launcher;
pub mod memory;
pub mod os;
pub mod partition;
pub mod resctrl;
pub mod runtimes;
pub mod unmanaged;

pub use affinity::Affinity;
pub use cgroup1::{Cgroup1, V1Mounts};
pub use cgroup2::Cgroup2;
pub use dryrun::{Call, DryRun};
pub use gate::{Gate, GateCall};

/// What [`Enforcer::set_partition`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Partitioning {
    /// The kernel isolates the cell as a partition over the CPUs asked.
    Isolated,
    /// The cell is a plain cell (asked with no CPUs).
    Plain,
    /// No partition can be made here, and why: the backend, the kernel's
    /// version or where allot's directory is. The cell stays exclusive by
    /// its cpuset alone.
    Unavailable(String),
}

/// What one ordinary thread (nice 0) weighs in [`Applied::weight`]: 100,
/// cgroup v2's default `cpu.weight` (`allot_plan::weight::THREAD`, the
/// planner's unit; the broker checks at compile time that they agree).
pub const THREAD: u32 = 100;

use allot_topo::CpuSet;
use std::fmt;
use std::str::FromStr;

/// What a cell should get from the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Applied {
    /// CPUs its threads may run on.
    pub cpus: CpuSet,
    /// CPU weight, in hundredths of what one ordinary thread weighs
    /// ([`THREAD`]: cgroup v2's `cpu.weight` scale; cgroup v1's
    /// `cpu.shares` is 1024 per thread). A backend writes at most its
    /// [`Enforcer::max_weight`].
    pub weight: u32,
    /// A cap on CPU time (CFS bandwidth control), or none.
    pub bandwidth: Option<Bandwidth>,
}

/// A cell's I/O weight per block device: `"MAJ:MIN"` → 1..=1000 (BFQ's
/// scale, 100 the default; v1 `blkio.bfq.weight_device`, v2
/// `io.bfq.weight`, else `io.weight`).
pub type IoWeights = std::collections::BTreeMap<String, u32>;

/// The I/O scheduler of block device `majmin` (`"8:0"`): the bracketed
/// name in its `queue/scheduler`, `None` when it cannot be read.
pub fn io_scheduler(majmin: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/sys/dev/block/{majmin}/queue/scheduler")).ok()?;
    chosen_scheduler(&text)
}

/// The bracketed entry of a `queue/scheduler` text.
fn chosen_scheduler(text: &str) -> Option<String> {
    let start = text.find('[')? + 1;
    let end = start + text[start..].find(']')?;
    Some(text[start..end].to_string())
}

#[cfg(test)]
mod io_tests {
    #[test]
    fn the_chosen_scheduler_is_the_bracketed_one() {
        assert_eq!(
            super::chosen_scheduler("none mq-deadline kyber [bfq]\n").as_deref(),
            Some("bfq")
        );
        assert_eq!(
            super::chosen_scheduler("[none] bfq").as_deref(),
            Some("none")
        );
        assert_eq!(super::chosen_scheduler("none"), None);
    }
}

/// Brings the weight file `file` from `applied` (what it was last set to)
/// to `weights`, one device per write (the kernel takes one `MAJ:MIN
/// WEIGHT` line at a time): devices no longer listed go back to `default`.
/// `applied` becomes `weights` once every write succeeded, and stays as it
/// was otherwise.
pub(crate) fn apply_io_weights(
    fs: &dyn cgroupfs::CgroupFs,
    file: &std::path::Path,
    applied: &mut IoWeights,
    weights: &IoWeights,
) -> std::io::Result<()> {
    for dev in applied.keys().filter(|d| !weights.contains_key(*d)) {
        fs.write(file, &format!("{dev} default"))?;
    }
    for (dev, w) in weights {
        if applied.get(dev) != Some(w) {
            fs.write(file, &format!("{dev} {}", (*w).clamp(1, 1000)))?;
        }
    }
    applied.clone_from(weights);
    Ok(())
}

/// CFS bandwidth control: at most `quota_us` of CPU time, summed over the
/// cell's threads, in every `period_us` (v1 `cpu.cfs_quota_us` and
/// `cpu.cfs_period_us`, v2 `cpu.max`). The kernel accepts periods from
/// 1 ms to 1 s and quotas of at least 1 ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bandwidth {
    /// CPU time per period, µs.
    pub quota_us: u64,
    /// Period, µs.
    pub period_us: u32,
}

/// A failed enforcement step.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {source}")]
pub struct EnforceError {
    /// What was being done.
    pub what: String,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

impl EnforceError {
    /// Wraps `source` with a description.
    pub fn new(what: impl Into<String>, source: std::io::Error) -> Self {
        EnforceError {
            what: what.into(),
            source,
        }
    }
    /// Whether the failure means "the cell still has processes".
    pub fn is_busy(&self) -> bool {
        self.source.kind() == std::io::ErrorKind::ResourceBusy
            || self.source.raw_os_error() == Some(libc::EBUSY)
    }
}

/// A result whose error is an `EnforceError`: the step that failed and the OS error.
pub type Result<T> = std::result::Result<T, EnforceError>;

/// The mechanism interface the broker drives.
///
/// Cells are identified by the broker's numeric id. Calls for a cell always
/// come in the order `create` → (`attach` | `apply`)* → `remove`, or
/// `adopt` instead of `create` after a broker restart.
pub trait Enforcer: Send + fmt::Debug {
    /// Which backend this is.
    fn kind(&self) -> BackendKind;
    /// Prepares a new cell (creates its cgroups, or takes those
    /// [`Enforcer::make_ahead`] made for it).
    fn create(&mut self, cell: u64) -> Result<()>;
    /// Makes the groups of cell `cell` (the id the broker will hand out
    /// next) before anyone asks for it, off a registration's path, so that
    /// [`Enforcer::create`] finds them made; the groups made ahead for an
    /// earlier id that no cell took are removed first. At most one cell's
    /// groups are made ahead at a time, and [`Enforcer::cleanup`] removes
    /// them. Returns whether the groups of `cell` are ready. Default:
    /// nothing is worth making ahead.
    fn make_ahead(&mut self, _cell: u64) -> Result<bool> {
        Ok(false)
    }
    /// The id whose groups [`Enforcer::make_ahead`] made and no cell has
    /// taken yet, if any.
    fn made_ahead(&self) -> Option<u64> {
        None
    }
    /// Creates the group for a cell that is exclusive from its start:
    /// where the kernel can make it a partition only in another place
    /// (cgroup v2 before 6.7, [`partition`]), it is made there.
    fn create_exclusive(&mut self, cell: u64) -> Result<()> {
        self.create(cell)
    }
    /// Re-attaches to a cell that existed before a broker restart, with its
    /// known member processes, without changing what it runs on, and
    /// without thawing it (a cell the last broker paused stays frozen
    /// until the new one decides). Returns the CPUs it is confined to now,
    /// if the backend can tell.
    fn adopt(&mut self, cell: u64, members: &[u32]) -> Result<Option<CpuSet>>;
    /// Puts process `pid` (and, for the affinity backend, its future
    /// descendants) into the cell. Called once per process.
    fn attach(&mut self, cell: u64, pid: u32) -> Result<()>;
    /// Files through which process `pid` may move *itself* into cell `cell`
    /// (cgroup v1: each hierarchy's `tasks`, opened for writing, where `0`
    /// moves the writing thread; cgroup v2: the cell's directory, to start
    /// a process inside with `clone3(CLONE_INTO_CGROUP)`). A thread moving itself does not take the
    /// kernel's global lock that a move by pid takes, which waits for an
    /// RCU grace period after a quiet spell. Empty: the backend has none,
    /// and members are moved with [`Enforcer::attach`].
    fn join_files(&mut self, _cell: u64, _pid: u32) -> Result<Vec<std::fs::File>> {
        Ok(Vec::new())
    }
    /// Applies a grant. Hot path: must not move processes.
    fn apply(&mut self, cell: u64, applied: &Applied) -> Result<()>;
    /// Whether [`Applied::weight`] reaches the kernel (a cgroup `cpu`
    /// controller); without it a weight alone is not worth an `apply`.
    fn has_weights(&self) -> bool {
        false
    }
    /// Whether a cell's CPUs reach its threads through a cpuset (the
    /// cgroup backends) rather than through masks set on the threads. A
    /// mask the broker sets on a thread then limits it on top of the
    /// cpuset, and the kernel (Linux 6.2 and later) keeps that mask through
    /// every later change of the cpuset: such a mask must name every CPU
    /// the thread may use whatever the cell gets, not the grant of the
    /// moment.
    fn cpuset_confines(&self) -> bool {
        false
    }
    /// The largest weight this backend can give a cell or the cells
    /// together, in [`Applied::weight`]'s unit.
    fn max_weight(&self) -> u32 {
        10_000
    }
    /// Sets the weight of the directory holding the cells against what
    /// sits beside it there (processes outside every cell, other
    /// software's cgroups), in [`Applied::weight`]'s unit
    /// (`allot_plan::weight`). `Ok(false)`: this backend has no such
    /// directory, or the directory is not allot's to weigh (a subtree an
    /// operator or systemd delegated: its weight is theirs), and nothing
    /// is done.
    fn set_together_weight(&mut self, _weight: u32) -> Result<bool> {
        Ok(false)
    }
    /// Why process `pid` may not be moved into a cell for a requester of
    /// uid `uid`, if it may not: it is confined to fewer CPUs than the
    /// managed ones by a cgroup outside allot's own (a job's or a
    /// service's cpuset) whose `cgroup.procs` that user cannot write, so
    /// moving it would undo a confinement the user could not undo
    /// themselves. Root may (`uid` 0). `None` where moving is what the
    /// user could do (the default: no cgroups).
    fn confined_elsewhere(&self, _pid: u32, _uid: u32) -> Option<String> {
        None
    }
    /// Sets cell `cell`'s I/O weights ([`IoWeights`]): each block device
    /// listed gets its weight, each one listed last time and not now goes
    /// back to the default. Returns false when the backend has no I/O
    /// control (nothing is done).
    fn set_io_weights(&mut self, _cell: u64, _weights: &IoWeights) -> Result<bool> {
        Ok(false)
    }
    /// Tears a cell down. Processes still in it leave confinement (they move
    /// out of allot's cgroups, or get every managed CPU back).
    fn remove(&mut self, cell: u64) -> Result<()>;
    /// CPU time the cell's processes have used, in nanoseconds.
    fn usage_ns(&mut self, cell: u64) -> Option<u64>;
    /// Time some runnable thread of the cell waited for a CPU, in
    /// microseconds, from the kernel's pressure stall information of its
    /// cgroup (`cpu.pressure`, `some total`). `None` where the backend
    /// keeps no such record (cgroup v1, affinity).
    fn cpu_pressure_us(&mut self, _cell: u64) -> Option<u64> {
        None
    }
    /// Processes in the cell now.
    fn pids(&mut self, cell: u64) -> Vec<u32>;
    /// Removes what the backend keeps for allot that is empty (broker exit):
    /// cells, stray empty cell directories a crashed broker left, and
    /// allot's own top-level directories — also when an earlier run
    /// created them.
    fn cleanup(&mut self) -> Result<()>;
    /// Cells the backend holds now, tracked or not (a cgroup `cell-N` left
    /// by a broker whose journal lost it). Backends that keep nothing in
    /// the kernel return none.
    fn existing(&mut self) -> Vec<u64> {
        Vec::new()
    }
    /// A gate that suspends and resumes the whole cell ([`gate`]), for
    /// the broker's window driver; `None` when the backend has no freezer
    /// (time-triggered cells then fall back to CFS bandwidth alone). Each
    /// call returns a new handle with its own open control file.
    fn gate(&mut self, cell: u64) -> Result<Option<Box<dyn Gate>>> {
        let _ = cell;
        Ok(None)
    }
    /// Makes cell `cell` also confine `dir`, a cgroup a launcher made for
    /// its own processes (Slurm's step `user` group on cgroup v2;
    /// [`launcher`]): the cell's CPUs and weight are written there from
    /// now on, no process is moved, and the directory is left to the
    /// launcher when the cell ends. `Ok(false)`: this backend keeps cells
    /// in no cgroup of the kind (nothing is done); `Err`: `dir` cannot be
    /// one (why), and nothing changed.
    fn include_group(&mut self, cell: u64, dir: &std::path::Path) -> Result<bool> {
        let _ = (cell, dir);
        Ok(false)
    }
    /// Makes cell `cell` a partition the kernel itself keeps apart over
    /// `cpus` (its grant; `None`: a plain cell again): no load balancing
    /// across those CPUs, no unbound work on them ([`partition`]).
    /// `Err`: the kernel refused, with its reason, and nothing was left
    /// half-done.
    fn set_partition(&mut self, cell: u64, cpus: Option<CpuSet>) -> Result<Partitioning> {
        let _ = (cell, cpus);
        Ok(Partitioning::Unavailable(format!(
            "the {} backend makes no cpuset partitions (cgroup v2 only)",
            self.kind()
        )))
    }
    /// Whether [`Enforcer::gate`] gives every cell a gate (the backend has a
    /// freezer): the broker then pauses best-effort cells while guarantees
    /// take every CPU instead of refusing them
    /// (`allot_plan::PlanConfig::pause_best_effort`).
    fn can_pause(&self) -> bool {
        false
    }
    /// Sets cell `cell`'s memory guarantee and limit ([`memory`]). Returns
    /// false when the backend has no memory control (nothing is done).
    /// The kernel may refuse a limit below what the cell uses now; the
    /// cell is then left as it was.
    fn set_memory(&mut self, cell: u64, m: &allot_spec::Memory) -> Result<bool> {
        let _ = (cell, m);
        Ok(false)
    }
    /// Cell `cell`'s memory as the kernel counts it; `None` without
    /// memory control.
    fn memory_use(&mut self, cell: u64) -> Option<allot_spec::MemoryUse> {
        let _ = cell;
        None
    }
    /// Bytes the cells live within: the machine's memory, or the limit of
    /// a memory group enclosing them when lower; `None` without memory
    /// control.
    fn memory_capacity(&mut self) -> Option<u64> {
        None
    }
}

/// The cell id a backend directory name stands for (`cell-17` → 17).
pub fn cell_id(dir_name: &str) -> Option<u64> {
    let id = dir_name.strip_prefix("cell-")?;
    (!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()))
        .then(|| id.parse().ok())
        .flatten()
}

/// An I/O error as an [`EnforceError`] saying what was being done (the
/// cgroup backends' one error path).
pub(crate) fn err(what: String) -> impl FnOnce(std::io::Error) -> EnforceError {
    move |e| EnforceError::new(what, e)
}

/// For adopting cell `cell` from an earlier broker: the CPUs its cpuset
/// group `dir` confines to now (`None`: unreadable), or an error when the
/// group is gone. Both cgroup backends adopt through this.
pub(crate) fn adoptable(
    fs: &dyn cgroupfs::CgroupFs,
    dir: &std::path::Path,
    cell: u64,
) -> Result<Option<CpuSet>> {
    if !fs.exists(dir) {
        return Err(EnforceError::new(
            format!("adopt cell {cell}"),
            std::io::Error::from(std::io::ErrorKind::NotFound),
        ));
    }
    Ok(fs
        .read(&dir.join("cpuset.cpus"))
        .ok()
        .and_then(|t| CpuSet::parse_list(&t).ok()))
}

/// Whether process `pid` is listed in cgroup `dir` (its `cgroup.procs`;
/// on v1 a process is listed where any of its threads is).
fn listed(fs: &dyn cgroupfs::CgroupFs, dir: &std::path::Path, pid: u32) -> bool {
    let pid = pid.to_string();
    fs.read(&dir.join("cgroup.procs"))
        .is_ok_and(|procs| procs.split_whitespace().any(|p| p == pid))
}

/// A cell's group in one hierarchy, for [`needs_no_move`]: the v1
/// controller that names the hierarchy in `/proc/PID/cgroup` (`None`:
/// the v2 hierarchy), where the hierarchy is mounted, and the group.
pub(crate) struct Group<'a> {
    pub controller: Option<&'a str>,
    pub mount: &'a std::path::Path,
    pub dir: &'a std::path::Path,
}

/// Whether moving process `pid` into `groups` would change nothing, so
/// the move (which takes the kernel's global threadgroup lock, an RCU
/// grace period when none was taken lately) is skipped:
///
/// - `/proc/PID/cgroup` names every group already: a launcher that joined
///   the cell forked it inside (one small read, whatever the cell holds);
/// - the process has exited: the kernel lists a zombie in no group, so a
///   short program the broker hears of after its end would otherwise be
///   moved for nothing, the broker's loop waiting on the lock;
/// - each group's `cgroup.procs` lists it (on v1, where any of its
///   threads is).
///
/// `proc` is where `/proc` is read (tests point it at a fixture).
pub(crate) fn needs_no_move(
    fs: &dyn cgroupfs::CgroupFs,
    proc: &std::path::Path,
    pid: u32,
    groups: &[Group<'_>],
) -> bool {
    if let Ok(text) = fs.read(&proc.join(format!("{pid}/cgroup"))) {
        let inside = |g: &Group<'_>| {
            cgroupfs::group_in(&text, g.controller)
                .is_some_and(|path| g.mount.join(path.trim_start_matches('/')) == g.dir)
        };
        if groups.iter().all(inside) {
            return true;
        }
    }
    let exited = fs
        .read(&proc.join(format!("{pid}/stat")))
        .ok()
        .and_then(|t| Some(os::stat_after_name(&t)?.starts_with(['Z', 'X'])))
        .unwrap_or(false);
    exited || groups.iter().all(|g| listed(fs, g.dir, pid))
}

/// The cells whose directories are children of `dir`, sorted (helper for
/// [`Enforcer::existing`]).
pub(crate) fn cell_dirs(fs: &dyn cgroupfs::CgroupFs, dir: &std::path::Path) -> Vec<u64> {
    let mut ids: Vec<u64> = fs
        .children(dir)
        .unwrap_or_default()
        .iter()
        .filter_map(|n| cell_id(n))
        .collect();
    ids.sort_unstable();
    ids
}

/// Removes the children of `dir` that stand for cells and are empty
/// (helper for [`Enforcer::cleanup`]). Populated ones are left alone.
pub(crate) fn remove_stray_cells(fs: &dyn cgroupfs::CgroupFs, dir: &std::path::Path) {
    for name in fs.children(dir).unwrap_or_default() {
        if cell_id(&name).is_some() {
            let d = dir.join(&name);
            if fs
                .read(&d.join("cgroup.procs"))
                .is_ok_and(|p| p.trim().is_empty())
            {
                let _ = fs.rmdir(&d);
            }
        }
    }
}

/// Backend choice, as `--backend` spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendKind {
    /// The first that works: cgroup2, cgroup1, affinity.
    #[default]
    Auto,
    /// cgroup v2: a `cell-<id>` cgroup per cell, with `cpuset.cpus` and `cpu.weight`.
    Cgroup2,
    /// cgroup v1: a `cell-<id>` directory per cell in the cpuset, cpu and cpuacct
    /// hierarchies.
    Cgroup1,
    /// `sched_setaffinity` only.
    Affinity,
    /// Record, do nothing.
    DryRun,
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BackendKind::Auto => "auto",
            BackendKind::Cgroup2 => "cgroup2",
            BackendKind::Cgroup1 => "cgroup1",
            BackendKind::Affinity => "affinity",
            BackendKind::DryRun => "dry-run",
        })
    }
}

impl FromStr for BackendKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Ok(match s {
            "auto" => BackendKind::Auto,
            "cgroup2" => BackendKind::Cgroup2,
            "cgroup1" => BackendKind::Cgroup1,
            "affinity" => BackendKind::Affinity,
            "dry-run" | "dryrun" => BackendKind::DryRun,
            other => {
                return Err(format!(
                    "unknown backend {other:?}: expected auto, cgroup2, cgroup1, affinity or dry-run"
                ));
            }
        })
    }
}

/// Settings for [`open`].
#[derive(Debug, Clone)]
pub struct OpenOptions {
    /// Name of allot's cgroup directory under each hierarchy ("allot").
    pub cgroup_name: String,
    /// Explicit cgroup v2 subtree to manage (a delegated directory); when
    /// `None`, `<cgroup2 mount>/<cgroup_name>`.
    pub cgroup2_root: Option<std::path::PathBuf>,
    /// CPUs the broker manages.
    pub usable: CpuSet,
}

/// Where the cells' cgroup v2 directory is when the configuration names
/// none ([`delegation`]: inside systemd's delegated subtree, or
/// `<mount>/<cgroup_name>` without systemd).
pub fn cgroup2_layout(mounts: &detect::Mounts, cgroup_name: &str) -> Result<delegation::Layout> {
    let mount = mounts.cgroup2.as_ref().ok_or_else(|| {
        EnforceError::new(
            "cgroup2",
            std::io::Error::other("no cgroup2 hierarchy is mounted"),
        )
    })?;
    let facts = delegation::Facts::read(mount);
    delegation::place(&facts, cgroup_name, delegation::marked_delegated)
        .map_err(|e| EnforceError::new("cgroup2", std::io::Error::other(e)))
}

/// Opens the requested backend; with `Auto`, the first of cgroup2, cgroup1,
/// affinity that can be set up. Returns the backend and, for `Auto`, why the
/// ones before it were skipped.
pub fn open(kind: BackendKind, opts: &OpenOptions) -> Result<(Box<dyn Enforcer>, Vec<String>)> {
    use std::sync::Arc;
    let mounts = detect::Mounts::read();
    let try_v2 = || -> Result<Box<dyn Enforcer>> {
        let fs = Arc::new(cgroupfs::KernelFs);
        // allot's own directory is removed when the broker stops clean; an
        // operator's delegated subtree only if this run created it.
        let (layout, owned) = match &opts.cgroup2_root {
            Some(r) => {
                let facts = delegation::Facts::read(mounts.cgroup2.as_deref().unwrap_or(r));
                (delegation::explicit(r, &facts), false)
            }
            None => (cgroup2_layout(&mounts, &opts.cgroup_name)?, true),
        };
        // The root's weight is allot's only in its own directory; a
        // delegated subtree's (a systemd unit's CPUWeight=) is not.
        let own_dir = matches!(layout, delegation::Layout::Plain(_)) && owned;
        delegation::settle(fs.as_ref(), &layout, std::process::id()).map_err(|e| {
            EnforceError::new(
                format!("cgroup2 in {}", layout.cells().display()),
                std::io::Error::other(format!(
                    "cannot move the broker into its own leaf of the delegated subtree: {e}"
                )),
            )
        })?;
        Ok(Box::new(
            Cgroup2::new(fs, layout.cells().to_path_buf(), opts.usable)?
                .owns_root(owned)
                .weighs_root(own_dir),
        ))
    };
    let try_v1 = || -> Result<Box<dyn Enforcer>> {
        let mut m = mounts.v1().ok_or_else(|| {
            EnforceError::new(
                "cgroup1",
                std::io::Error::other("no cgroup v1 cpuset hierarchy is mounted"),
            )
        })?;
        m.memory = mounts
            .v1_for("memory")
            .and_then(|mount| Some((mount.to_path_buf(), memory::own_v1_group()?)));
        Ok(Box::new(Cgroup1::new(
            Arc::new(cgroupfs::KernelFs),
            &m,
            &opts.cgroup_name,
            opts.usable,
        )?))
    };
    let affinity = || -> Box<dyn Enforcer> {
        Box::new(Affinity::new(Arc::new(os::RealOs)).restore_on_remove(opts.usable))
    };
    match kind {
        BackendKind::Cgroup2 => Ok((try_v2()?, vec![])),
        BackendKind::Cgroup1 => Ok((try_v1()?, vec![])),
        BackendKind::Affinity => Ok((affinity(), vec![])),
        BackendKind::DryRun => Ok((Box::new(DryRun::new()), vec![])),
        BackendKind::Auto => {
            let mut skipped = Vec::new();
            match try_v2() {
                Ok(b) => return Ok((b, skipped)),
                Err(e) => skipped.push(format!("cgroup2 skipped: {e}")),
            }
            match try_v1() {
                Ok(b) => return Ok((b, skipped)),
                Err(e) => skipped.push(format!("cgroup1 skipped: {e}")),
            }
            Ok((affinity(), skipped))
        }
    }
}
