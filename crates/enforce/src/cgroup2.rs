//! cgroup v2 backend.
//!
//! Layout: `<root>/cell-<id>` per cell, with the `cpuset` and `cpu`
//! controllers enabled in `<root>/cgroup.subtree_control` (and in the
//! parent's, which needs privilege unless the subtree was delegated). The
//! root itself holds no process (the v2 "no internal processes" rule).
//!
//! Per cell, `cpuset.cpus` and `cpu.weight` are opened once and rewritten in
//! place on every grant change. The root's own `cpu.weight` is the cells'
//! weight together against what sits beside it, written only where the
//! root is allot's own directory ([`Cgroup2::weighs_root`]). Usage comes from `cpu.stat` (`usage_usec`),
//! membership from `cgroup.procs`. A cell's gate is its `cgroup.freeze`;
//! `remove` thaws the cell first (a broker that died mid-window); `adopt`
//! leaves the freezer as it finds it (the broker thaws each adopted cell
//! it does not keep paused). Where the `io` controller is available it is enabled too
//! (best effort), and a cell's I/O weights go to its `io.bfq.weight`
//! (BFQ's, per device) or, without BFQ, `io.weight` (the io.cost
//! controller's). Likewise the `memory` controller: a cell's memory
//! guarantee and limit go to its `memory.min` and `memory.max`
//! ([`crate::memory`]). A cell may also include cgroups a launcher made
//! for its processes ([`crate::launcher`]): its CPUs and weight go there
//! too, and its processes and CPU time count theirs.
//!
//! The next cell's directory is made between the broker's turns
//! ([`Enforcer::make_ahead`], `ahead.rs`), off a registration's path.

use crate::ahead;
use crate::cgroupfs::{CgroupFs, ControlFile};
use crate::gate::{CgroupGate, Gate, UsageFile};
use crate::partition::Scheme;
use crate::{Applied, BackendKind, EnforceError, Enforcer, Result, err};
use allot_topo::CpuSet;
use std::collections::{BTreeSet, HashMap};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The cgroup v2 backend.
#[derive(Debug)]
pub struct Cgroup2 {
    fs: Arc<dyn CgroupFs>,
    root: PathBuf,
    cells: HashMap<u64, Cell>,
    /// The id whose directory is made ahead, no cell holding it yet.
    ahead: Option<u64>,
    /// Remove the root at a clean stop: it is allot's own (or this run
    /// created it).
    remove_root: bool,
    /// Cells the kernel isolates as partitions ([`crate::partition`]).
    partitions: crate::partition::Partitions,
    /// How this kernel makes partitions, or why it makes none here
    /// (read once, at start).
    scheme: std::result::Result<Scheme, String>,
    /// Exclusive cells whose directory is beside the root, not in it
    /// (the local scheme: [`crate::partition::apart_dir`]).
    apart: BTreeSet<u64>,
    /// Exclusive cells that could not be made beside the root, and why
    /// (made below it instead: exclusive by their cpusets alone).
    not_apart: HashMap<u64, String>,
    /// The root's own `cpu.weight` is allot's to set (its own directory,
    /// not a subtree systemd or an operator delegated).
    weighs_root: bool,
    /// The CPUs allot manages (the root's `cpuset.cpus`).
    usable: CpuSet,
    /// The hierarchy's mount: the topmost directory above the root with a
    /// `cgroup.controllers` (what `/proc/PID/cgroup` paths start from).
    mount: PathBuf,
    /// Where processes' cgroup memberships are read (`/proc`).
    proc: PathBuf,
    /// The flock on the root that keeps other brokers out of it
    /// ([`crate::cgroupfs::claim_own`]); held for the backend's lifetime.
    _claim: rustix::fd::OwnedFd,
}

#[derive(Debug)]
struct Cell {
    dir: PathBuf,
    cpus: Box<dyn ControlFile>,
    weight: Box<dyn ControlFile>,
    last: Option<Applied>,
    io: crate::IoWeights,
    /// Launcher groups the cell includes ([`crate::launcher`]).
    groups: Vec<crate::launcher::Group>,
}

/// The hierarchy's mount above `dir`: its topmost ancestor (or itself)
/// with a `cgroup.controllers`.
fn mount_of(fs: &dyn CgroupFs, dir: &Path) -> PathBuf {
    let mut top = dir.to_path_buf();
    for up in dir.ancestors().skip(1) {
        if fs.exists(&up.join("cgroup.controllers")) {
            top = up.to_path_buf();
        } else {
            break;
        }
    }
    top
}

/// The largest `cpu.weight` the kernel takes.
const MAX_WEIGHT: u32 = 10_000;

/// `cpu.weight` for a weight in hundredths of a thread: the same scale
/// ([`crate::THREAD`] is v2's default, 100), within the kernel's
/// 1..=10 000.
pub fn v2_weight(w: u32) -> u32 {
    w.clamp(1, MAX_WEIGHT)
}

impl Cgroup2 {
    /// Sets up (or reopens) the subtree at `root`, enabling cpuset and cpu
    /// for it, confined to `usable`.
    pub fn new(fs: Arc<dyn CgroupFs>, root: PathBuf, usable: CpuSet) -> Result<Cgroup2> {
        let parent = root
            .parent()
            .ok_or_else(|| EnforceError::new("cgroup2 root", std::io::Error::other("no parent")))?;
        let available = fs
            .read(&parent.join("cgroup.controllers"))
            .map_err(err(format!(
                "cgroup2 at {} is not a cgroup directory",
                parent.display()
            )))?;
        for ctrl in ["cpuset", "cpu"] {
            if !available.split_whitespace().any(|c| c == ctrl) {
                return Err(EnforceError::new(
                    format!("cgroup2 at {}", parent.display()),
                    std::io::Error::other(format!(
                        "the {ctrl} controller is not available there (it is bound to a v1 hierarchy or not delegated)"
                    )),
                ));
            }
        }
        // I/O weights and memory limits too where the io and memory
        // controllers are there (best effort: without them cells get none).
        let extras: Vec<&str> = ["io", "memory"]
            .into_iter()
            .filter(|x| available.split_whitespace().any(|c| c == *x))
            .collect();
        let enable = |dir: &Path| -> std::io::Result<()> {
            let file = dir.join("cgroup.subtree_control");
            let all: String = extras.iter().map(|x| format!(" +{x}")).collect();
            if fs.write(&file, &format!("+cpuset +cpu{all}")).is_ok() {
                return Ok(());
            }
            // One extra the kernel refuses must not cost the others.
            fs.write(&file, "+cpuset +cpu")?;
            for x in &extras {
                let _ = fs.write(&file, &format!("+{x}"));
            }
            Ok(())
        };
        let enabled = fs
            .read(&parent.join("cgroup.subtree_control"))
            .unwrap_or_default();
        let on = |c: &str| enabled.split_whitespace().any(|e| e == c);
        if !on("cpuset") || !on("cpu") || extras.iter().any(|x| !on(x)) {
            enable(parent).map_err(|e| {
                let what = format!("enable cpuset and cpu in {}", parent.display());
                if e.raw_os_error() == Some(rustix::io::Errno::BUSY.raw_os_error()) {
                    // The v2 "no internal processes" rule.
                    return EnforceError::new(
                        what,
                        std::io::Error::other(format!(
                            "{e}: processes are in {} itself (see its cgroup.procs), and a \
                             cgroup whose children have controllers may hold none; move them \
                             into a child cgroup",
                            parent.display()
                        )),
                    );
                }
                err(what)(e)
            })?;
        }
        let created_root = !fs.exists(&root);
        fs.mkdir(&root)
            .map_err(err(format!("create {}", root.display())))?;
        let claim = crate::cgroupfs::claim_own(fs.as_ref(), &root)?;
        let mount = mount_of(fs.as_ref(), &root);
        let _ = fs.write(&root.join("cpuset.cpus"), &usable.to_string());
        enable(&root).map_err(err(format!("enable cpuset and cpu in {}", root.display())))?;
        let scheme = crate::partition::scheme(fs.as_ref(), &root);
        // Cells an earlier broker made beside the root (before 6.7): found
        // before anything asks for their directories.
        let apart: BTreeSet<u64> = fs
            .children(parent)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| crate::partition::apart_id(&root, n))
            .collect();
        Ok(Cgroup2 {
            partitions: crate::partition::Partitions::new(
                scheme.clone().unwrap_or_default(),
                usable,
            ),
            scheme,
            apart,
            not_apart: HashMap::new(),
            fs,
            root,
            cells: HashMap::new(),
            ahead: None,
            remove_root: created_root,
            weighs_root: false,
            usable,
            mount,
            proc: PathBuf::from("/proc"),
            _claim: claim,
        })
    }

    /// Reads processes' cgroup memberships under `proc` instead of
    /// `/proc` (tests).
    pub fn with_proc_root(mut self, proc: PathBuf) -> Cgroup2 {
        self.proc = proc;
        self
    }

    /// Whether the root's own `cpu.weight`, the cells' weight together
    /// against what sits beside the root, is allot's to set: true for
    /// allot's own directory (`<mount>/<cgroup_name>`), false (the
    /// default) for a subtree systemd or an operator delegated, whose
    /// weight is theirs ([`Enforcer::set_together_weight`]).
    pub fn weighs_root(mut self, weighs: bool) -> Cgroup2 {
        self.weighs_root = weighs;
        self
    }

    /// Whether the root is allot's own directory, removed at a clean stop
    /// even when an earlier run created it (default: only if this run did).
    pub fn owns_root(mut self, owned: bool) -> Cgroup2 {
        self.remove_root |= owned;
        self
    }

    /// The subtree root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Thaws cell `cell` (errors ignored: a kernel without the v2 freezer,
    /// or a cell already gone, has nothing to thaw).
    /// Thaws cgroup `dir` (a cell's, or a launcher group it held), if it
    /// has a freezer.
    fn thaw(&self, dir: &Path) {
        let f = dir.join("cgroup.freeze");
        if self.fs.exists(&f) {
            let _ = self.fs.write(&f, crate::gate::V2_FREEZE.open);
        }
    }

    /// Cell `cell`'s directory: `<root>/cell-N`, or beside the root for
    /// an exclusive cell under the local partition scheme.
    fn dir_of(&self, cell: u64) -> PathBuf {
        if self.apart.contains(&cell) {
            crate::partition::apart_dir(&self.root, cell)
        } else {
            self.root.join(format!("cell-{cell}"))
        }
    }

    /// The cells whose directories are beside the root (left by an
    /// earlier broker, or made by this one).
    fn apart_dirs(&self) -> Vec<u64> {
        let Some(parent) = self.root.parent() else {
            return Vec::new();
        };
        self.fs
            .children(parent)
            .unwrap_or_default()
            .iter()
            .filter_map(|n| crate::partition::apart_id(&self.root, n))
            .collect()
    }

    fn open_cell(&mut self, cell: u64) -> Result<&mut Cell> {
        if !self.cells.contains_key(&cell) {
            let dir = self.dir_of(cell);
            let cpus = self
                .fs
                .open(&dir.join("cpuset.cpus"))
                .map_err(err(format!("cell {cell}")))?;
            let weight = self
                .fs
                .open(&dir.join("cpu.weight"))
                .map_err(err(format!("cell {cell}")))?;
            self.cells.insert(
                cell,
                Cell {
                    dir,
                    cpus,
                    weight,
                    last: None,
                    io: Default::default(),
                    groups: Vec::new(),
                },
            );
        }
        Ok(self.cells.get_mut(&cell).expect("inserted above"))
    }
}

/// A cell's directory below the root (`ahead.rs`).
impl ahead::Directories for Cgroup2 {
    fn ahead(&mut self) -> &mut Option<u64> {
        &mut self.ahead
    }

    /// Makes cell `cell`'s directory below the root (the root too, if
    /// someone removed it).
    fn make(&self, cell: u64) -> Result<()> {
        let dir = self.dir_of(cell);
        match self.fs.mkdir(&dir) {
            // The root is gone (removed by someone): made again, with the
            // managed CPUs and the controllers its cells need.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let root = &self.root;
                self.fs
                    .mkdir(root)
                    .map_err(err(format!("create {}", root.display())))?;
                let _ = self
                    .fs
                    .write(&root.join("cpuset.cpus"), &self.usable.to_string());
                let control = root.join("cgroup.subtree_control");
                self.fs
                    .write(&control, "+cpuset +cpu")
                    .map_err(err(format!("enable cpuset and cpu in {}", root.display())))?;
                for x in ["+io", "+memory"] {
                    let _ = self.fs.write(&control, x);
                }
                self.fs
                    .mkdir(&dir)
                    .map_err(err(format!("create cell {cell}")))?;
            }
            other => other.map_err(err(format!("create cell {cell}")))?,
        }
        Ok(())
    }

    fn unmake(&self, cell: u64) {
        let _ = self.fs.rmdir(&self.root.join(format!("cell-{cell}")));
    }

    fn free(&self, cell: u64) -> bool {
        !self.cells.contains_key(&cell) && !self.fs.exists(&self.root.join(format!("cell-{cell}")))
    }

    fn open(&mut self, cell: u64) -> Result<()> {
        self.open_cell(cell).map(|_| ())
    }
}

impl Enforcer for Cgroup2 {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup2
    }

    fn confined_elsewhere(&self, pid: u32, uid: u32) -> Option<String> {
        let text = self
            .fs
            .read(&self.proc.join(format!("{pid}/cgroup")))
            .ok()?;
        let group = crate::cgroupfs::group_in(&text, None)?;
        let own = format!("/{}", self.root.strip_prefix(&self.mount).ok()?.display());
        crate::cgroupfs::confined_elsewhere(
            self.fs.as_ref(),
            &self.mount,
            &own,
            &group,
            &self.usable,
            uid,
        )
        .map(|why| format!("process {pid}: {why}"))
    }

    fn create(&mut self, cell: u64) -> Result<()> {
        ahead::create(self, cell)
    }

    fn make_ahead(&mut self, cell: u64) -> Result<bool> {
        ahead::make_ahead(self, cell)
    }

    fn made_ahead(&self) -> Option<u64> {
        self.ahead
    }

    fn create_exclusive(&mut self, cell: u64) -> Result<()> {
        if self.scheme != Ok(Scheme::Local) {
            return self.create(cell);
        }
        // Made beside the root, not where the directory made ahead is.
        if self.ahead.take_if(|a| *a == cell).is_some() {
            ahead::Directories::unmake(self, cell);
        }
        // Below the hierarchy's root, the only partition root its parent
        // can be before 6.7 (the controllers are enabled there: the root
        // needs them too).
        let dir = crate::partition::apart_dir(&self.root, cell);
        if let Err(e) = self.fs.mkdir(&dir) {
            // Exclusive by its cpuset alone, below the root as any cell.
            self.not_apart.insert(
                cell,
                format!(
                    "a partition must be a child of the hierarchy's root on this kernel \
                     (before 6.7), and {} could not be made: {e}",
                    dir.display()
                ),
            );
            return self.create(cell);
        }
        self.apart.insert(cell);
        self.open_cell(cell).map(|_| ())
    }

    fn adopt(&mut self, cell: u64, _members: &[u32]) -> Result<Option<CpuSet>> {
        if self
            .fs
            .exists(&crate::partition::apart_dir(&self.root, cell))
        {
            self.apart.insert(cell);
        }
        let dir = self.dir_of(cell);
        let now = crate::adoptable(&*self.fs, &dir, cell)?;
        // A partition an earlier broker made: plain again, until this
        // broker decides (it partitions exclusive cells again when asked).
        if self
            .fs
            .read(&dir.join("cpuset.cpus.partition"))
            .is_ok_and(|p| p.trim() != "member")
        {
            self.partitions
                .unmake(self.fs.as_ref(), &self.root, cell, &dir);
        }
        self.open_cell(cell)?;
        Ok(now)
    }

    fn join_files(&mut self, cell: u64, _pid: u32) -> Result<Vec<std::fs::File>> {
        let dir = self.open_cell(cell)?.dir.clone();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(rustix::fs::OFlags::DIRECTORY.bits() as i32)
            .open(&dir)
            .map_err(err(format!("open {}", dir.display())))?;
        Ok(vec![f])
    }

    fn attach(&mut self, cell: u64, pid: u32) -> Result<()> {
        let dir = self.open_cell(cell)?.dir.clone();
        // Started inside by a launcher (`clone3(CLONE_INTO_CGROUP)`), or
        // ended: a move by pid would take the kernel's global lock.
        let group = crate::Group {
            controller: None,
            mount: &self.mount,
            dir: &dir,
        };
        if crate::needs_no_move(&*self.fs, &self.proc, pid, &[group]) {
            return Ok(());
        }
        self.fs
            .write(&dir.join("cgroup.procs"), &pid.to_string())
            .map_err(err(format!("move process {pid} into cell {cell}")))
    }

    fn apply(&mut self, cell: u64, a: &Applied) -> Result<()> {
        let last = self.open_cell(cell)?.last;
        // A partition's CPUs change only as a plain cell: the broker makes
        // it a partition again over its new grant.
        if last.map(|l| l.cpus) != Some(a.cpus) && self.partitions.holds(cell) {
            let dir = self.dir_of(cell);
            self.partitions
                .unmake(self.fs.as_ref(), &self.root, cell, &dir);
        }
        let c = self.open_cell(cell)?;
        if last.map(|l| l.cpus) != Some(a.cpus) {
            c.cpus
                .set(&a.cpus.to_string())
                .map_err(err(format!("set CPUs of cell {cell} to {}", a.cpus)))?;
        }
        if last.map(|l| l.weight) != Some(a.weight) {
            c.weight
                .set(&v2_weight(a.weight).to_string())
                .map_err(err(format!("set weight of cell {cell}")))?;
        }
        let (cpus_moved, weight_moved) = (
            last.map(|l| l.cpus) != Some(a.cpus),
            last.map(|l| l.weight) != Some(a.weight),
        );
        if cpus_moved || weight_moved {
            crate::launcher::write(
                &mut c.groups,
                cpus_moved.then(|| a.cpus.to_string()).as_deref(),
                weight_moved
                    .then(|| v2_weight(a.weight).to_string())
                    .as_deref(),
            )
            .map_err(err(format!("set CPUs of cell {cell}'s launcher groups")))?;
        }
        if last.map(|l| l.bandwidth) != Some(a.bandwidth)
            && (a.bandwidth.is_some() || last.is_some_and(|l| l.bandwidth.is_some()))
        {
            let max = match a.bandwidth {
                Some(b) => format!("{} {}", b.quota_us, b.period_us),
                None => "max".to_string(),
            };
            self.fs
                .write(&self.dir_of(cell).join("cpu.max"), &max)
                .map_err(err(format!("set the CPU bandwidth of cell {cell}")))?;
        }
        let c = self.cells.get_mut(&cell).expect("opened above");
        c.last = Some(*a);
        Ok(())
    }

    fn has_weights(&self) -> bool {
        true
    }

    fn cpuset_confines(&self) -> bool {
        true
    }

    fn max_weight(&self) -> u32 {
        MAX_WEIGHT
    }

    fn set_together_weight(&mut self, weight: u32) -> Result<bool> {
        if !self.weighs_root {
            return Ok(false);
        }
        self.fs
            .write(
                &self.root.join("cpu.weight"),
                &v2_weight(weight).to_string(),
            )
            .map(|()| true)
            .map_err(err(format!("set the weight of {}", self.root.display())))
    }

    fn set_io_weights(&mut self, cell: u64, weights: &crate::IoWeights) -> Result<bool> {
        let dir = self.open_cell(cell)?.dir.clone();
        let file = ["io.bfq.weight", "io.weight"]
            .map(|f| dir.join(f))
            .into_iter()
            .find(|f| self.fs.exists(f));
        let Some(file) = file else {
            return Ok(false);
        };
        let c = self.cells.get_mut(&cell).expect("opened above");
        crate::apply_io_weights(self.fs.as_ref(), &file, &mut c.io, weights)
            .map(|()| true)
            .map_err(err(format!("set the I/O weights of cell {cell}")))
    }

    fn remove(&mut self, cell: u64) -> Result<()> {
        let dir = self.dir_of(cell);
        // A partition this broker made, or one an earlier broker left (a
        // cell that ended while no broker ran): plain first, so that the
        // root takes its CPUs back.
        let left = || {
            self.fs
                .read(&dir.join("cpuset.cpus.partition"))
                .is_ok_and(|p| p.trim() != "member")
        };
        if self.partitions.holds(cell) || left() {
            self.partitions
                .unmake(self.fs.as_ref(), &self.root, cell, &dir);
        }
        if let Some(c) = self.cells.remove(&cell) {
            // The launcher's CPUs again (an empty list: its parent's), and
            // thawed if the cell was paused; the directory and its
            // processes are the launcher's.
            for mut g in c.groups {
                crate::launcher::restore(self.fs.as_ref(), &mut g);
                self.thaw(&g.dir);
            }
        }
        self.thaw(&dir);
        // allot's root has controllers enabled for its children, so (by the
        // v2 no-internal-process rule) leftovers go to the root's parent.
        let out = self
            .root
            .parent()
            .map(|p| p.to_path_buf())
            .unwrap_or_default();
        let removed = crate::cgroupfs::evict_and_remove(self.fs.as_ref(), &dir, &out);
        if removed.is_ok() {
            self.apart.remove(&cell);
            self.not_apart.remove(&cell);
        }
        removed.map_err(err(format!("remove cell {cell}")))
    }

    fn set_memory(&mut self, cell: u64, m: &allot_spec::Memory) -> Result<bool> {
        let dir = self.open_cell(cell)?.dir.clone();
        if !self.fs.exists(&dir.join("memory.max")) {
            return crate::memory::without_control(
                cell,
                m,
                "the memory controller is not enabled for allot's cgroups \
                 (not in the parent's cgroup.controllers)",
            );
        }
        crate::memory::set(self.fs.as_ref(), crate::memory::Version::V2, &dir, m)
            .map(|()| true)
            .map_err(err(format!("set the memory of cell {cell}")))
    }

    fn memory_use(&mut self, cell: u64) -> Option<allot_spec::MemoryUse> {
        let dir = self.dir_of(cell);
        crate::memory::read(self.fs.as_ref(), crate::memory::Version::V2, &dir)
    }

    fn memory_capacity(&mut self) -> Option<u64> {
        if !self.fs.exists(&self.root.join("memory.max")) {
            return None;
        }
        let top = self
            .root
            .ancestors()
            .last()
            .unwrap_or(&self.root)
            .to_path_buf();
        Some(crate::memory::capacity_below(
            self.fs.as_ref(),
            crate::memory::Version::V2,
            &self.root,
            &top,
        ))
    }

    fn usage_ns(&mut self, cell: u64) -> Option<u64> {
        let own = UsageFile::CpuStat(self.dir_of(cell).join("cpu.stat")).read(self.fs.as_ref())?;
        // A v2 cpu.stat counts the whole subtree: each group once.
        let groups: u64 = self.cells.get(&cell).map_or(0, |c| {
            c.groups
                .iter()
                .filter_map(|g| UsageFile::CpuStat(g.dir.join("cpu.stat")).read(self.fs.as_ref()))
                .sum()
        });
        Some(own + groups)
    }

    fn cpu_pressure_us(&mut self, cell: u64) -> Option<u64> {
        let text = self.fs.read(&self.dir_of(cell).join("cpu.pressure")).ok()?;
        crate::os::parse_pressure(&text)
    }

    fn pids(&mut self, cell: u64) -> Vec<u32> {
        let mut pids = crate::cgroupfs::procs(self.fs.as_ref(), &self.dir_of(cell));
        if let Some(c) = self.cells.get(&cell) {
            for g in &c.groups {
                pids.extend(crate::launcher::procs_below(
                    self.fs.as_ref(),
                    &g.dir,
                    crate::launcher::PROCS_MAX,
                ));
            }
        }
        pids
    }

    fn existing(&mut self) -> Vec<u64> {
        let mut ids = crate::cell_dirs(self.fs.as_ref(), &self.root);
        ids.extend(self.apart_dirs());
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    fn include_group(&mut self, cell: u64, dir: &Path) -> Result<bool> {
        let what = || format!("include {} in cell {cell}", dir.display());
        if let Some(why) = crate::launcher::check(self.fs.as_ref(), &self.root, dir) {
            return Err(EnforceError::new(what(), std::io::Error::other(why)));
        }
        let fs = self.fs.clone();
        let c = self.open_cell(cell)?;
        if c.groups.iter().any(|g| g.dir == dir) {
            return Ok(true);
        }
        let g = crate::launcher::Group::open(fs.as_ref(), dir).map_err(err(what()))?;
        let mut one = vec![g];
        if let Some(a) = c.last {
            let (cpus, weight) = (a.cpus.to_string(), v2_weight(a.weight).to_string());
            crate::launcher::write(&mut one, Some(&cpus), Some(&weight)).map_err(err(what()))?;
        }
        c.groups.append(&mut one);
        Ok(true)
    }

    fn set_partition(&mut self, cell: u64, cpus: Option<CpuSet>) -> Result<crate::Partitioning> {
        use crate::Partitioning;
        let dir = self.open_cell(cell)?.dir.clone();
        let Some(cpus) = cpus else {
            if self.partitions.holds(cell) {
                self.partitions
                    .unmake(self.fs.as_ref(), &self.root, cell, &dir);
            }
            return Ok(Partitioning::Plain);
        };
        if let Err(why) = &self.scheme {
            return Ok(Partitioning::Unavailable(why.clone()));
        }
        if self.scheme == Ok(Scheme::Local) && !self.apart.contains(&cell) {
            return Ok(Partitioning::Unavailable(
                self.not_apart.get(&cell).cloned().unwrap_or_else(|| {
                    "a partition must be a child of the hierarchy's root on this kernel \
                     (before 6.7), and the cell was not made there (it was not exclusive \
                     when it was made)"
                        .to_string()
                }),
            ));
        }
        if let Some(g) = self.cells.get(&cell).and_then(|c| c.groups.first()) {
            // A partition's CPUs leave every other cgroup's effective set:
            // the launcher's group would fall back to all of its parent's.
            return Ok(Partitioning::Unavailable(format!(
                "it includes the launcher's cgroup {}, which a partition's CPUs cannot reach",
                g.dir.display()
            )));
        }
        let made = self
            .partitions
            .make(self.fs.as_ref(), &self.root, cell, &dir, cpus);
        if self.partitions.lacks_isolated() {
            // Partitions, but not isolated ones (5.2 to 6.0): no more
            // cells beside the root for nothing.
            let why = "this kernel has no isolated partitions (before 6.1)".to_string();
            self.scheme = Err(why.clone());
            return Ok(Partitioning::Unavailable(why));
        }
        made.map(|()| Partitioning::Isolated).map_err(|why| {
            EnforceError::new(
                format!("make cell {cell} an isolated partition over CPUs {cpus}"),
                std::io::Error::other(why),
            )
        })
    }

    fn can_pause(&self) -> bool {
        // Every cell is a child of the root, and has a freezer when it has.
        self.fs.exists(&self.root.join("cgroup.freeze"))
    }

    fn gate(&mut self, cell: u64) -> Result<Option<Box<dyn Gate>>> {
        let dir = self.dir_of(cell);
        if !self.fs.exists(&dir.join("cgroup.freeze")) {
            // Kernels before 5.2 have no cgroup v2 freezer.
            return Ok(None);
        }
        let gate = CgroupGate::v2(self.fs.clone(), &dir)
            .map_err(err(format!("open cgroup.freeze of cell {cell}")))?;
        let groups = self.cells.get(&cell).map_or(&[][..], |c| &c.groups[..]);
        if groups.is_empty() {
            return Ok(Some(Box::new(gate)));
        }
        // The launcher's groups hold the cell's processes: they stop and
        // go on with it.
        let mut all: Vec<Box<dyn Gate>> = vec![Box::new(gate)];
        for g in groups {
            let one = CgroupGate::v2(self.fs.clone(), &g.dir)
                .map_err(err(format!("open cgroup.freeze of {}", g.dir.display())))?;
            all.push(Box::new(one));
        }
        Ok(Some(Box::new(crate::gate::Gates(all))))
    }

    fn cleanup(&mut self) -> Result<()> {
        let cells: Vec<u64> = self.cells.keys().copied().collect();
        for c in cells {
            let _ = self.remove(c);
        }
        ahead::discard(self);
        crate::remove_stray_cells(self.fs.as_ref(), &self.root);
        for id in self.apart_dirs() {
            let dir = crate::partition::apart_dir(&self.root, id);
            if crate::cgroupfs::procs(self.fs.as_ref(), &dir).is_empty() {
                let _ = self.fs.rmdir(&dir);
            }
        }
        if self.remove_root
            && self
                .fs
                .children(&self.root)
                .map(|c| c.is_empty())
                .unwrap_or(false)
        {
            self.fs
                .rmdir(&self.root)
                .map_err(err(format!("remove {}", self.root.display())))?;
        }
        Ok(())
    }
}
