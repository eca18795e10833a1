//! The soak's checks of what the kernel and the broker say: exclusivity
//! (in the status and in the kernel's cpusets, a cell that ran nothing
//! while they were read exempt), no
//! leaked cgroup, and what was seen around the first overlap of two cells.

use super::tally::Tally;
use crate::bench::broker::PrivateBroker;
use allot_proto::status::Status;
use allot_topo::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Instant;

pub(super) fn check_exclusive(st: &Status, broker: &PrivateBroker, t: &mut Tally) {
    let sets: Vec<(u64, bool, CpuSet)> = st
        .cells
        .iter()
        .map(|c| {
            (
                c.id,
                c.spec.exclusive,
                CpuSet::parse_list(&c.cpus).unwrap_or_default(),
            )
        })
        .collect();
    for (id, excl, cpus) in &sets {
        if !excl {
            continue;
        }
        for (other, _, theirs) in &sets {
            if other != id && cpus.intersects(theirs) {
                t.failures.push(format!(
                    "exclusive cell {id} holds {cpus} and cell {other} holds {theirs} (status)"
                ));
            }
        }
    }
    // The kernel's view, for cgroup v1: read twice, flag what both agree on.
    let dir = Path::new("/sys/fs/cgroup/cpuset").join(broker.cgroup());
    if !dir.exists() {
        return;
    }
    let exclusive: BTreeSet<u64> = sets.iter().filter(|s| s.1).map(|s| s.0).collect();
    // A frozen cell (a paused best-effort one) runs nowhere: its cpuset,
    // which cannot be empty, overlaps without running there. So does a
    // cell with no process. An overlap is a breach when the cell ran
    // while its cpuset overlapped: the cpusets are read, then which cells
    // are quiet (frozen, or holding no process), then the cpusets again;
    // an overlap both reads agree on, of a cell that was not quiet in
    // between, is one. (A paused cell resumed onto other CPUs has its
    // cpuset moved before it thaws; a cell frozen before another grows
    // into its CPUs is quiet: neither ran where it overlapped.)
    let frozen_dir = Path::new("/sys/fs/cgroup/freezer").join(broker.cgroup());
    let first = kernel_cpusets(&dir);
    let quiet_between = quiet_cells(&dir, &frozen_dir);
    let second = kernel_cpusets(&dir);
    let quiet = |id: &u64| quiet_between.is_quiet(*id);
    for (id, cpus) in &first {
        if !exclusive.contains(id) || second.get(id) != Some(cpus) {
            continue;
        }
        for (other, theirs) in &first {
            if quiet(other) {
                continue;
            }
            if other != id && cpus.intersects(theirs) && second.get(other) == Some(theirs) {
                t.failures.push(format!(
                    "exclusive cell {id}'s cpuset {cpus} overlaps cell {other}'s {theirs} (kernel)"
                ));
                t.diagnoses
                    .entry((*id, *other))
                    .or_insert_with(|| diagnose(st, broker, &dir, &[*id, *other]));
            }
        }
    }
}

/// What the status, the kernel and the broker's log say about `cells`
/// (under the cpuset directory `dir`): the evidence an overlap needs.
fn diagnose(st: &Status, broker: &PrivateBroker, dir: &Path, cells: &[u64]) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for &id in cells {
        match st.cells.iter().find(|c| c.id == id) {
            Some(c) => {
                let _ = writeln!(
                    out,
                    "cell {id} listed: cpus {} exclusive {} pids {:?}",
                    c.cpus, c.spec.exclusive, c.pids
                );
            }
            None => {
                let _ = writeln!(out, "cell {id} not listed");
            }
        }
        let freezer = Path::new("/sys/fs/cgroup/freezer")
            .join(broker.cgroup())
            .join(format!("cell-{id}/freezer.state"));
        if let Ok(state) = std::fs::read_to_string(freezer) {
            let _ = writeln!(out, "  cell-{id} freezer.state {}", state.trim());
        }
        let procs = std::fs::read_to_string(dir.join(format!("cell-{id}/cgroup.procs")))
            .unwrap_or_default();
        for pid in procs.split_whitespace() {
            let _ = writeln!(out, "  cell-{id} holds process {pid}:");
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"));
            for t in tasks.into_iter().flatten().flatten() {
                let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
                // pid (comm) state ...; the fields after the comm.
                let fields: Vec<&str> = stat
                    .rsplit_once(')')
                    .map_or(vec![], |(_, r)| r.split_whitespace().collect());
                let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "    thread {} {}: state {} utime {} stime {} cpu {} wchan {wchan}",
                    t.file_name().to_string_lossy(),
                    stat.split(") ")
                        .next()
                        .unwrap_or("")
                        .rsplit('(')
                        .next()
                        .unwrap_or(""),
                    fields.first().unwrap_or(&"?"),
                    fields.get(11).unwrap_or(&"?"),
                    fields.get(12).unwrap_or(&"?"),
                    fields.get(36).unwrap_or(&"?"),
                );
            }
        }
        let log = broker.log();
        let (named, colon) = (format!("cell {id} "), format!("cell {id}:"));
        let mentions: Vec<&str> = log
            .lines()
            .filter(|l| l.contains(&named) || l.contains(&colon))
            .collect();
        for l in &mentions[mentions.len().saturating_sub(12)..] {
            let _ = writeln!(out, "  log: {l}");
        }
    }
    out
}

/// The `cell-N` cgroups under the freezer directory `dir` that run
/// nowhere: frozen, or freezing with no thread runnable (a thread asleep
/// when the freeze came stops before it returns to its program).
/// The cells that run nothing at one moment: frozen, or holding no
/// process (a cell not there at all holds none).
struct Quiet {
    frozen: BTreeSet<u64>,
    populated: BTreeSet<u64>,
}

impl Quiet {
    fn is_quiet(&self, id: u64) -> bool {
        self.frozen.contains(&id) || !self.populated.contains(&id)
    }
}

/// [`Quiet`] under the cpuset directory `cpusets` and the freezer
/// directory `freezer`: the populated cells are read before the frozen
/// ones, so a process that joins a cell as it freezes is not missed.
fn quiet_cells(cpusets: &Path, freezer: &Path) -> Quiet {
    let populated = std::fs::read_dir(cpusets)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let id = allot_enforce::cell_id(&e.file_name().to_string_lossy())?;
            let procs = std::fs::read_to_string(e.path().join("cgroup.procs")).ok()?;
            (!procs.trim().is_empty()).then_some(id)
        })
        .collect();
    Quiet {
        populated,
        frozen: frozen_cells(freezer),
    }
}

fn frozen_cells(dir: &Path) -> BTreeSet<u64> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let id = allot_enforce::cell_id(&e.file_name().to_string_lossy())?;
            let state = std::fs::read_to_string(e.path().join("freezer.state")).ok()?;
            let stopped = match state.trim() {
                "FROZEN" => true,
                "FREEZING" => !any_runnable(&e.path().join("tasks")),
                _ => false,
            };
            stopped.then_some(id)
        })
        .collect()
}

/// Whether a thread listed in the cgroup `tasks` file is runnable (state
/// `R` in `/proc`); an unreadable list counts as runnable.
fn any_runnable(tasks: &Path) -> bool {
    let Ok(list) = std::fs::read_to_string(tasks) else {
        return true;
    };
    list.split_whitespace().any(|tid| {
        std::fs::read_to_string(format!("/proc/{tid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('R'))
        })
    })
}

/// cpusets of the populated `cell-N` cgroups under `dir`.
fn kernel_cpusets(dir: &Path) -> BTreeMap<u64, CpuSet> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Some(id) = allot_enforce::cell_id(&e.file_name().to_string_lossy()) else {
            continue;
        };
        let populated = std::fs::read_to_string(e.path().join("cgroup.procs"))
            .is_ok_and(|p| !p.trim().is_empty());
        if !populated {
            continue;
        }
        if let Some(c) = std::fs::read_to_string(e.path().join("cpuset.cpus"))
            .ok()
            .and_then(|t| CpuSet::parse_list(t.trim()).ok())
        {
            out.insert(id, c);
        }
    }
    out
}

pub(super) fn check_leaks(
    st: &Status,
    broker: &PrivateBroker,
    unlisted: &mut BTreeMap<u64, Instant>,
    t: &mut Tally,
) {
    // The id made ahead of the next registration counts as listed: its
    // directories are the broker's, for the next cell.
    let listed: BTreeSet<u64> = st
        .cells
        .iter()
        .map(|c| c.id)
        .chain(st.queue.iter().map(|q| q.id))
        .chain(st.broker.made_ahead)
        .collect();
    let mut present = BTreeSet::new();
    for h in ["cpuset", "cpu", "cpuacct", "freezer"] {
        let dir = Path::new("/sys/fs/cgroup").join(h).join(broker.cgroup());
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            if let Some(id) = allot_enforce::cell_id(&e.file_name().to_string_lossy()) {
                present.insert(id);
            }
        }
    }
    let now = Instant::now();
    unlisted.retain(|id, _| present.contains(id) && !listed.contains(id));
    for id in present.difference(&listed) {
        let since = *unlisted.entry(*id).or_insert(now);
        if now.duration_since(since) > t.bounds.leak_after {
            t.failures.push(format!(
                "cgroup cell-{id} is left {:?} after the broker stopped listing it",
                t.bounds.leak_after
            ));
            unlisted.insert(*id, now); // report once per period
        }
    }
}
