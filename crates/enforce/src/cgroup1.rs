//! cgroup v1 backend.
//!
//! Layout: a directory `<name>` under the cpuset hierarchy (and under cpu,
//! cpuacct, freezer and blkio when they are mounted), with `cell-<id>`
//! inside per cell. In the memory hierarchy, `<name>` lies below the group
//! the broker runs in, not at the top (other software uses that hierarchy,
//! and an enclosing limit must keep counting); a process joins its cell's
//! memory group only from the broker's own group ([`crate::memory`]). A cell's I/O weights go to its blkio directory's
//! `blkio.bfq.weight_device` (BFQ's; a device scheduled otherwise refuses
//! them). allot's
//! cpuset directory gets the managed CPUs and the parent's memory nodes, and
//! `cgroup.clone_children` so new cells inherit the memory nodes.
//!
//! Per cell: `cpuset.cpus` (cpuset) and `cpu.shares` (cpu, 1024 per
//! ordinary thread's worth of weight) are opened once and rewritten in
//! place; `<name>`'s own `cpu.shares` is the cells' weight together
//! against what sits beside it ([`Enforcer::set_together_weight`]); usage is
//! `cpuacct.usage`; a process joins by writing its pid to `cgroup.procs` of
//! each hierarchy, once. A cell's gate is its `freezer.state`; `remove`
//! thaws the cell first (a broker that died mid-window). `adopt` leaves
//! the freezer as it finds it: the broker thaws each adopted cell it does
//! not keep paused.
//!
//! The v1 freezer switches a kernel static key on when the first cgroup
//! of the machine freezes and off when the last one thaws; each switch
//! patches kernel text on every CPU. With one windowed cell that is two
//! switches per period, and a thaw measured 130 µs here instead of 20 µs.
//! So when the first gate is handed out, an empty directory
//! `<name>/hold` in the freezer hierarchy is frozen and kept frozen (it
//! holds no process, so nothing stops): the key stays on and every window
//! edge is cheap. `cleanup` thaws and removes it.
//!
//! Making a cell's six directories takes about 0.6 ms, a fifth of what
//! `allot run` adds to a program's start, so the next cell's are made
//! between the broker's turns ([`Enforcer::make_ahead`], `ahead.rs`):
//! `create` then only opens their files.

use crate::ahead;
use crate::cgroupfs::{CgroupFs, ControlFile};
use crate::gate::{CgroupGate, Gate, UsageFile};
use crate::{Applied, BackendKind, EnforceError, Enforcer, Result, err};
use allot_topo::CpuSet;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the v1 hierarchies allot uses are mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Mounts {
    /// The cpuset hierarchy (required).
    pub cpuset: PathBuf,
    /// The cpu hierarchy (for weights), if mounted.
    pub cpu: Option<PathBuf>,
    /// The cpuacct hierarchy (for usage), if mounted. May equal `cpu`.
    pub cpuacct: Option<PathBuf>,
    /// The freezer hierarchy (for time-triggered windows), if mounted.
    pub freezer: Option<PathBuf>,
    /// The blkio hierarchy (for I/O weights), if mounted.
    pub blkio: Option<PathBuf>,
    /// The memory hierarchy (for memory limits), if mounted: its mount and
    /// the group the broker runs in there, as `/proc/self/cgroup` gives
    /// it (allot's groups nest below that one, [`crate::memory`]).
    pub memory: Option<(PathBuf, String)>,
}

/// A hierarchy's `tasks` file in `dir`, opened for writing: a join file.
fn open_tasks(dir: &std::path::Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join("tasks"))
}

/// The cgroup v1 backend.
#[derive(Debug)]
pub struct Cgroup1 {
    fs: Arc<dyn CgroupFs>,
    cpuset: PathBuf,
    cpu: Option<PathBuf>,
    cpuacct: Option<PathBuf>,
    freezer: Option<PathBuf>,
    blkio: Option<PathBuf>,
    memory: Option<MemoryGroups>,
    /// Where each hierarchy is mounted (what `/proc/PID/cgroup` paths
    /// start from).
    mounts: V1Mounts,
    /// Where processes' cgroup memberships are read (`/proc`).
    proc: PathBuf,
    /// The CPUs allot manages (`<cpuset>/<name>/cpuset.cpus`).
    usable: CpuSet,
    /// Whether `<freezer>/hold` is frozen (see the module docs).
    holding: bool,
    cells: HashMap<u64, Cell>,
    /// The id whose directories are made ahead, no cell holding it yet.
    ahead: Option<u64>,
    /// That id's `tasks` files, opened with them (a registration that
    /// hands out join files takes them: [`Enforcer::join_files`]).
    joins_ahead: Option<(u64, Vec<(PathBuf, std::fs::File)>)>,
    /// The flock on `<cpuset>/<name>` that keeps other brokers out of it
    /// ([`crate::cgroupfs::claim_own`]); held for the backend's lifetime.
    _claim: rustix::fd::OwnedFd,
}

/// allot's memory groups: `<mount><base>/<name>`, below the broker's own.
#[derive(Debug, Clone)]
struct MemoryGroups {
    /// `<mount><base>/<name>`: holds the cells' memory groups.
    dir: PathBuf,
    mount: PathBuf,
    /// The broker's group, `/proc/PID/cgroup` style.
    base: String,
    /// allot's group, the same style.
    allot: String,
}

/// The empty frozen directory that keeps the freezer's static key on.
pub const FREEZER_HOLD: &str = "hold";

#[derive(Debug)]
struct Cell {
    cpus: Box<dyn ControlFile>,
    shares: Option<Box<dyn ControlFile>>,
    last: Option<Applied>,
    io: crate::IoWeights,
}

/// The largest `cpu.shares` the kernel takes.
const MAX_SHARES: u64 = 262_144;

/// `cpu.shares` for a weight in hundredths of a thread ([`crate::THREAD`]:
/// 1024 shares each), within the kernel's 2..=262 144.
pub fn v1_shares(w: u32) -> u32 {
    (u64::from(w) * 1024 / u64::from(crate::THREAD)).clamp(2, MAX_SHARES) as u32
}

impl Cgroup1 {
    /// Sets up (or reopens) allot's directories named `name` in the v1
    /// hierarchies, confined to `usable`.
    pub fn new(
        fs: Arc<dyn CgroupFs>,
        mounts: &V1Mounts,
        name: &str,
        usable: CpuSet,
    ) -> Result<Cgroup1> {
        let cpuset = mounts.cpuset.join(name);
        fs.read(&mounts.cpuset.join("cpuset.mems"))
            .map_err(err(format!(
                "cgroup1 cpuset at {}",
                mounts.cpuset.display()
            )))?;
        fs.mkdir(&cpuset)
            .map_err(err(format!("create {}", cpuset.display())))?;
        // Another broker's directory is left as it is: claimed before
        // anything in it is written.
        let claim = crate::cgroupfs::claim_own(fs.as_ref(), &cpuset)?;
        let sub = |mount: &Option<PathBuf>| mount.as_ref().map(|m| m.join(name));
        let cpu = sub(&mounts.cpu);
        let cpuacct = if mounts.cpuacct == mounts.cpu {
            cpu.clone()
        } else {
            sub(&mounts.cpuacct)
        };
        let memory = mounts.memory.as_ref().map(|(mount, base)| {
            let allot = format!("{}/{name}", base.trim_end_matches('/'));
            MemoryGroups {
                dir: mount.join(allot.trim_start_matches('/')),
                mount: mount.clone(),
                base: base.clone(),
                allot,
            }
        });
        let backend = Cgroup1 {
            fs,
            cpuset,
            cpu,
            cpuacct,
            freezer: sub(&mounts.freezer),
            blkio: sub(&mounts.blkio),
            memory,
            mounts: mounts.clone(),
            usable,
            proc: PathBuf::from("/proc"),
            holding: false,
            cells: HashMap::new(),
            ahead: None,
            joins_ahead: None,
            _claim: claim,
        };
        backend.make_base()?;
        Ok(backend)
    }

    /// Creates (or finds) allot's directories and sets the cpuset one up:
    /// the managed CPUs, the parent's memory nodes and
    /// `cgroup.clone_children`. Run at start and again when a cell cannot
    /// be created because they are gone (someone removed them).
    fn make_base(&self) -> Result<()> {
        let cpuset = &self.cpuset;
        let parent = cpuset.parent().unwrap_or(cpuset);
        let mems = self
            .fs
            .read(&parent.join("cpuset.mems"))
            .map_err(err(format!("cgroup1 cpuset at {}", parent.display())))?;
        self.fs
            .mkdir(cpuset)
            .map_err(err(format!("create {}", cpuset.display())))?;
        self.fs
            .write(&cpuset.join("cpuset.cpus"), &self.usable.to_string())
            .map_err(err(format!("set CPUs of {}", cpuset.display())))?;
        self.fs
            .write(&cpuset.join("cpuset.mems"), mems.trim())
            .map_err(err(format!("set memory nodes of {}", cpuset.display())))?;
        self.fs
            .write(&cpuset.join("cgroup.clone_children"), "1")
            .map_err(err(format!("set clone_children in {}", cpuset.display())))?;
        let others = [&self.cpu, &self.cpuacct, &self.freezer, &self.blkio];
        let memory = self.memory.as_ref().map(|m| m.dir.clone());
        for dir in others.into_iter().flatten().chain(memory.as_ref()) {
            self.fs
                .mkdir(dir)
                .map_err(err(format!("create {}", dir.display())))?;
        }
        Ok(())
    }

    /// Reads processes' cgroup memberships under `proc` instead of
    /// `/proc` (tests).
    pub fn with_proc_root(mut self, proc: PathBuf) -> Cgroup1 {
        self.proc = proc;
        self
    }

    /// The v1 controller naming the hierarchy `dir` is in, and where that
    /// hierarchy is mounted.
    fn hierarchy_of(&self, dir: &std::path::Path) -> Option<(&'static str, &std::path::Path)> {
        let m = &self.mounts;
        [
            ("cpuset", Some(&m.cpuset)),
            ("cpu", m.cpu.as_ref()),
            ("cpuacct", m.cpuacct.as_ref()),
            ("freezer", m.freezer.as_ref()),
            ("blkio", m.blkio.as_ref()),
            ("memory", m.memory.as_ref().map(|(mount, _)| mount)),
        ]
        .into_iter()
        .find_map(|(c, mount)| Some((c, mount?.as_path())).filter(|(_, m)| dir.starts_with(m)))
    }

    /// Cell `cell`'s memory group, if the memory hierarchy is used.
    fn memory_dir(&self, cell: u64) -> Option<PathBuf> {
        Some(self.memory.as_ref()?.dir.join(format!("cell-{cell}")))
    }

    /// Whether process `pid` may join its cell's memory group (see
    /// [`crate::memory`]'s nesting invariant).
    fn may_move_memory(&self, pid: u32) -> bool {
        let Some(m) = &self.memory else { return false };
        self.fs
            .read(&self.proc.join(format!("{pid}/cgroup")))
            .ok()
            .and_then(|t| crate::memory::v1_group(&t))
            .is_some_and(|g| crate::memory::may_move(&g, &m.base, &m.allot))
    }

    /// Freezes the empty `hold` directory once (see the module docs). A
    /// failure only makes window edges slower, so it is not an error.
    fn hold_freezer_key(&mut self) {
        let Some(f) = &self.freezer else { return };
        if self.holding {
            return;
        }
        let hold = f.join(FREEZER_HOLD);
        if self.fs.mkdir(&hold).is_ok()
            && self
                .fs
                .write(&hold.join("freezer.state"), crate::gate::V1_FREEZER.close)
                .is_ok()
        {
            self.holding = true;
        }
    }

    /// Thaws cell `cell` if it has a freezer directory (errors ignored: a
    /// cell without one, or already gone, has nothing to thaw).
    fn thaw(&self, cell: u64) {
        if let Some(f) = &self.freezer {
            let state = f.join(format!("cell-{cell}/freezer.state"));
            if self.fs.exists(&state) {
                let _ = self.fs.write(&state, crate::gate::V1_FREEZER.open);
            }
        }
    }

    fn dirs(&self, cell: u64) -> Vec<PathBuf> {
        let leaf = format!("cell-{cell}");
        let mut out = vec![self.cpuset.join(&leaf)];
        out.extend(self.cpu.iter().map(|d| d.join(&leaf)));
        if self.cpuacct != self.cpu {
            out.extend(self.cpuacct.iter().map(|d| d.join(&leaf)));
        }
        out.extend(self.freezer.iter().map(|d| d.join(&leaf)));
        out.extend(self.blkio.iter().map(|d| d.join(&leaf)));
        out.extend(self.memory_dir(cell));
        out
    }

    /// [`Cgroup1::dirs`] that process `pid` may join: all but the memory
    /// group when it runs in a memory group of its own.
    fn dirs_for(&self, cell: u64, pid: u32) -> Vec<PathBuf> {
        let memory = self.memory_dir(cell);
        let keep_memory = self.may_move_memory(pid);
        self.dirs(cell)
            .into_iter()
            .filter(|d| keep_memory || Some(d) != memory.as_ref())
            .collect()
    }

    fn open_cell(&mut self, cell: u64) -> Result<&mut Cell> {
        if !self.cells.contains_key(&cell) {
            let leaf = format!("cell-{cell}");
            let cpus = self
                .fs
                .open(&self.cpuset.join(&leaf).join("cpuset.cpus"))
                .map_err(err(format!("cell {cell}")))?;
            let shares = match &self.cpu {
                Some(d) => Some(
                    self.fs
                        .open(&d.join(&leaf).join("cpu.shares"))
                        .map_err(err(format!("cell {cell}")))?,
                ),
                None => None,
            };
            self.cells.insert(
                cell,
                Cell {
                    cpus,
                    shares,
                    last: None,
                    io: Default::default(),
                },
            );
        }
        Ok(self.cells.get_mut(&cell).expect("inserted above"))
    }
}

/// A cell's directories, one in each hierarchy (`ahead.rs`).
impl ahead::Directories for Cgroup1 {
    fn ahead(&mut self) -> &mut Option<u64> {
        &mut self.ahead
    }

    /// Its directories in every hierarchy, with the cpuset's CPUs and
    /// memory nodes written.
    fn make(&self, cell: u64) -> Result<()> {
        for d in self.dirs(cell) {
            match self.fs.mkdir(&d) {
                // allot's own directory is gone (removed by someone): made
                // again, and the cell in it.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    self.make_base()?;
                    self.fs
                        .mkdir(&d)
                        .map_err(err(format!("create cell {cell}")))?;
                }
                other => other.map_err(err(format!("create cell {cell}")))?,
            }
        }
        let mems = self
            .fs
            .read(&self.cpuset.join("cpuset.mems"))
            .unwrap_or_default();
        let leaf = self.cpuset.join(format!("cell-{cell}"));
        // clone_children copies the parent's settings; write them anyway so
        // a cell is usable even if that flag was reset by someone else.
        if self
            .fs
            .read(&leaf.join("cpuset.mems"))
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            self.fs
                .write(&leaf.join("cpuset.mems"), mems.trim())
                .map_err(err(format!("cell {cell} memory nodes")))?;
        }
        if self
            .fs
            .read(&leaf.join("cpuset.cpus"))
            .unwrap_or_default()
            .trim()
            .is_empty()
        {
            let all = self
                .fs
                .read(&self.cpuset.join("cpuset.cpus"))
                .unwrap_or_default();
            self.fs
                .write(&leaf.join("cpuset.cpus"), all.trim())
                .map_err(err(format!("cell {cell} CPUs")))?;
        }
        Ok(())
    }

    fn unmake(&self, cell: u64) {
        for d in self.dirs(cell).iter().rev() {
            let _ = self.fs.rmdir(d);
        }
    }

    fn free(&self, cell: u64) -> bool {
        !self.cells.contains_key(&cell) && !self.dirs(cell).iter().any(|d| self.fs.exists(d))
    }

    fn open(&mut self, cell: u64) -> Result<()> {
        self.open_cell(cell).map(|_| ())
    }
}

impl Enforcer for Cgroup1 {
    fn kind(&self) -> BackendKind {
        BackendKind::Cgroup1
    }

    fn confined_elsewhere(&self, pid: u32, uid: u32) -> Option<String> {
        let text = self
            .fs
            .read(&self.proc.join(format!("{pid}/cgroup")))
            .ok()?;
        let group = crate::cgroupfs::group_in(&text, Some("cpuset"))?;
        let mount = self.cpuset.parent()?;
        let own = format!("/{}", self.cpuset.file_name()?.to_string_lossy());
        crate::cgroupfs::confined_elsewhere(
            self.fs.as_ref(),
            mount,
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
        // Closed before an id's directories made ahead are removed.
        if self.joins_ahead.as_ref().is_some_and(|(id, _)| *id != cell) {
            self.joins_ahead = None;
        }
        let made = ahead::make_ahead(self, cell)?;
        // Its join files too, opened now rather than while a launcher
        // waits for the registration's answer.
        if made && self.joins_ahead.as_ref().is_none_or(|(id, _)| *id != cell) {
            let files = self
                .dirs(cell)
                .into_iter()
                .filter_map(|d| open_tasks(&d).ok().map(|f| (d, f)))
                .collect();
            self.joins_ahead = Some((cell, files));
        }
        Ok(made)
    }

    fn made_ahead(&self) -> Option<u64> {
        self.ahead
    }

    fn adopt(&mut self, cell: u64, _members: &[u32]) -> Result<Option<CpuSet>> {
        let leaf = self.cpuset.join(format!("cell-{cell}"));
        let now = crate::adoptable(&*self.fs, &leaf, cell)?;
        for d in self.dirs(cell) {
            self.fs
                .mkdir(&d)
                .map_err(err(format!("adopt cell {cell}")))?;
        }
        self.open_cell(cell)?;
        Ok(now)
    }

    fn join_files(&mut self, cell: u64, pid: u32) -> Result<Vec<std::fs::File>> {
        self.open_cell(cell)?;
        let mut ahead = match self.joins_ahead.take() {
            Some((id, files)) if id == cell => files,
            other => {
                self.joins_ahead = other;
                Vec::new()
            }
        };
        self.dirs_for(cell, pid)
            .iter()
            .map(|d| {
                if let Some(at) = ahead.iter().position(|(dir, _)| dir == d) {
                    return Ok(ahead.swap_remove(at).1);
                }
                open_tasks(d).map_err(err(format!("open {}", d.join("tasks").display())))
            })
            .collect()
    }

    fn attach(&mut self, cell: u64, pid: u32) -> Result<()> {
        self.open_cell(cell)?;
        let dirs = self.dirs_for(cell, pid);
        // A process forked inside the cell (by a launcher that moved
        // itself in) is there already, and one that ended is nowhere:
        // moving either would take the kernel's global lock for nothing.
        let groups: Vec<crate::Group<'_>> = dirs
            .iter()
            .filter_map(|d| {
                let (controller, mount) = self.hierarchy_of(d)?;
                Some(crate::Group {
                    controller: Some(controller),
                    mount,
                    dir: d,
                })
            })
            .collect();
        if groups.len() == dirs.len() && crate::needs_no_move(&*self.fs, &self.proc, pid, &groups) {
            return Ok(());
        }
        for d in dirs {
            self.fs
                .write(&d.join("cgroup.procs"), &pid.to_string())
                .map_err(err(format!("move process {pid} into {}", d.display())))?;
        }
        Ok(())
    }

    fn apply(&mut self, cell: u64, a: &Applied) -> Result<()> {
        let c = self.open_cell(cell)?;
        let last = c.last;
        if last.map(|l| l.cpus) != Some(a.cpus) {
            c.cpus
                .set(&a.cpus.to_string())
                .map_err(err(format!("set CPUs of cell {cell} to {}", a.cpus)))?;
        }
        if let Some(s) = c.shares.as_mut()
            && last.map(|l| l.weight) != Some(a.weight)
        {
            s.set(&v1_shares(a.weight).to_string())
                .map_err(err(format!("set weight of cell {cell}")))?;
        }
        if last.map(|l| l.bandwidth) != Some(a.bandwidth)
            && (a.bandwidth.is_some() || last.is_some_and(|l| l.bandwidth.is_some()))
        {
            let Some(cpu) = &self.cpu else {
                return Err(EnforceError::new(
                    format!("cap the CPU time of cell {cell}"),
                    std::io::Error::other("the cgroup v1 cpu hierarchy is not mounted"),
                ));
            };
            let dir = cpu.join(format!("cell-{cell}"));
            let quota = dir.join("cpu.cfs_quota_us");
            let what = || format!("set the CPU bandwidth of cell {cell}");
            match a.bandwidth {
                Some(b) => {
                    // Lift the cap before changing the period: the kernel
                    // refuses a period its current quota cannot fit.
                    self.fs.write(&quota, "-1").map_err(err(what()))?;
                    self.fs
                        .write(&dir.join("cpu.cfs_period_us"), &b.period_us.to_string())
                        .map_err(err(what()))?;
                    self.fs
                        .write(&quota, &b.quota_us.to_string())
                        .map_err(err(what()))?;
                }
                None => self.fs.write(&quota, "-1").map_err(err(what()))?,
            }
        }
        let c = self.cells.get_mut(&cell).expect("opened above");
        c.last = Some(*a);
        Ok(())
    }

    fn has_weights(&self) -> bool {
        self.cpu.is_some()
    }

    fn cpuset_confines(&self) -> bool {
        true
    }

    fn max_weight(&self) -> u32 {
        (MAX_SHARES * u64::from(crate::THREAD) / 1024) as u32
    }

    fn set_together_weight(&mut self, weight: u32) -> Result<bool> {
        let Some(cpu) = &self.cpu else {
            return Ok(false);
        };
        self.fs
            .write(&cpu.join("cpu.shares"), &v1_shares(weight).to_string())
            .map(|()| true)
            .map_err(err(format!("set the weight of {}", cpu.display())))
    }

    fn set_io_weights(&mut self, cell: u64, weights: &crate::IoWeights) -> Result<bool> {
        let Some(blkio) = self.blkio.clone() else {
            return Ok(false);
        };
        let file = blkio.join(format!("cell-{cell}/blkio.bfq.weight_device"));
        let fs = self.fs.clone();
        let c = self.open_cell(cell)?;
        crate::apply_io_weights(fs.as_ref(), &file, &mut c.io, weights)
            .map(|()| true)
            .map_err(err(format!("set the I/O weights of cell {cell}")))
    }

    fn remove(&mut self, cell: u64) -> Result<()> {
        self.cells.remove(&cell);
        self.thaw(cell);
        let mut first_err = None;
        for d in self.dirs(cell) {
            // Processes still in the cell leave allot's confinement: they
            // move to the hierarchy's root, outside allot's directory.
            let root = d
                .parent()
                .and_then(|p| p.parent())
                .map(|p| p.to_path_buf())
                .unwrap_or_default();
            if let Err(e) = crate::cgroupfs::evict_and_remove(self.fs.as_ref(), &d, &root) {
                first_err.get_or_insert(EnforceError::new(format!("remove cell {cell}"), e));
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    fn set_memory(&mut self, cell: u64, m: &allot_spec::Memory) -> Result<bool> {
        let Some(dir) = self.memory_dir(cell) else {
            return crate::memory::without_control(
                cell,
                m,
                "the cgroup v1 memory hierarchy is not mounted",
            );
        };
        crate::memory::set(self.fs.as_ref(), crate::memory::Version::V1, &dir, m)
            .map(|()| true)
            .map_err(err(format!("set the memory of cell {cell}")))
    }

    fn memory_use(&mut self, cell: u64) -> Option<allot_spec::MemoryUse> {
        let dir = self.memory_dir(cell)?;
        crate::memory::read(self.fs.as_ref(), crate::memory::Version::V1, &dir)
    }

    fn memory_capacity(&mut self) -> Option<u64> {
        let m = self.memory.as_ref()?;
        Some(crate::memory::capacity_below(
            self.fs.as_ref(),
            crate::memory::Version::V1,
            &m.dir,
            &m.mount,
        ))
    }

    fn usage_ns(&mut self, cell: u64) -> Option<u64> {
        let dir = self.cpuacct.as_ref()?.join(format!("cell-{cell}"));
        UsageFile::Cpuacct(dir.join("cpuacct.usage")).read(self.fs.as_ref())
    }

    fn pids(&mut self, cell: u64) -> Vec<u32> {
        crate::cgroupfs::procs(self.fs.as_ref(), &self.cpuset.join(format!("cell-{cell}")))
    }

    fn existing(&mut self) -> Vec<u64> {
        crate::cell_dirs(self.fs.as_ref(), &self.cpuset)
    }

    fn can_pause(&self) -> bool {
        self.freezer.is_some()
    }

    fn gate(&mut self, cell: u64) -> Result<Option<Box<dyn Gate>>> {
        if self.freezer.is_none() {
            return Ok(None);
        }
        self.hold_freezer_key();
        let Some(f) = &self.freezer else {
            return Ok(None);
        };
        let leaf = format!("cell-{cell}");
        let acct = self.cpuacct.as_ref().map(|d| d.join(&leaf));
        let gate = CgroupGate::v1(self.fs.clone(), &f.join(&leaf), acct.as_deref())
            .map_err(err(format!("open the freezer of cell {cell}")))?;
        Ok(Some(Box::new(gate)))
    }

    fn cleanup(&mut self) -> Result<()> {
        let cells: Vec<u64> = self.cells.keys().copied().collect();
        for c in cells {
            let _ = self.remove(c);
        }
        self.joins_ahead = None;
        ahead::discard(self);
        // allot's directories, whoever created them: `<name>` in each
        // hierarchy is allot's alone.
        let mut tops = vec![self.cpuset.clone()];
        tops.extend(self.cpu.iter().cloned());
        tops.extend(
            self.cpuacct
                .iter()
                .filter(|d| Some(*d) != self.cpu.as_ref())
                .cloned(),
        );
        tops.extend(self.freezer.iter().cloned());
        tops.extend(self.blkio.iter().cloned());
        tops.extend(self.memory.iter().map(|m| m.dir.clone()));
        // The hold directory (also one a crashed broker left).
        if let Some(f) = &self.freezer {
            let hold = f.join(FREEZER_HOLD);
            if self.fs.exists(&hold) {
                let _ = self
                    .fs
                    .write(&hold.join("freezer.state"), crate::gate::V1_FREEZER.open);
                let _ = self.fs.rmdir(&hold);
            }
            self.holding = false;
        }
        for d in tops {
            crate::remove_stray_cells(self.fs.as_ref(), &d);
            if self.fs.children(&d).map(|c| c.is_empty()).unwrap_or(false) {
                self.fs
                    .rmdir(&d)
                    .map_err(err(format!("remove {}", d.display())))?;
            }
        }
        Ok(())
    }
}
