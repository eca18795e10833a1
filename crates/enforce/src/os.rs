//! The operating system as the affinity backend and the monitor see it:
//! threads, children, affinity masks and CPU time of processes.
//!
//! [`RealOs`] reads `/proc` and calls `sched_setaffinity`; [`FakeOs`] is an
//! in-memory process table for unit tests of the layers above. The contract
//! tests in `tests/os_contract.rs` run the same assertions on both against
//! processes the test itself starts.

use crate::runtimes::GoRelease;
use allot_topo::CpuSet;
use std::collections::BTreeMap;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Process and thread operations.
pub trait Os: Send + Sync + std::fmt::Debug {
    /// Thread ids of process `pid` (including `pid` itself).
    fn threads(&self, pid: u32) -> io::Result<Vec<u32>>;
    /// Direct children of process `pid` (of any of its threads).
    fn children(&self, pid: u32) -> Vec<u32>;
    /// The parent of process `pid` (`None` when gone, or for init).
    fn parent(&self, pid: u32) -> Option<u32>;
    /// Sets the CPU affinity of thread `tid`.
    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()>;
    /// The CPU affinity of thread `tid`.
    fn affinity(&self, tid: u32) -> io::Result<CpuSet>;
    /// CPU time of process `pid` in nanoseconds: its own plus that of
    /// children it has reaped.
    fn cpu_time_ns(&self, pid: u32) -> Option<u64>;
    /// Whether process `pid` exists (zombies count as gone).
    fn alive(&self, pid: u32) -> bool;
    /// Process start time (clock ticks after boot), to tell a process from a
    /// later one that reused its pid.
    fn start_time(&self, pid: u32) -> Option<u64>;
    /// The user who owns process `pid`: its real user id when its
    /// effective and saved user ids are the same. A process whose ids
    /// differ (a set-user-id program, one that has changed its ids) is
    /// root's (0) here: whoever started it does not hold all of its
    /// identities, so only root may act on it.
    fn uid(&self, pid: u32) -> Option<u32>;
    /// Files process `pid` has mapped executable (its program, the shared
    /// objects it loaded), each once, in address order.
    fn mapped_objects(&self, pid: u32) -> io::Result<Vec<PathBuf>>;
    /// The Go release that built process `pid`'s program, if Go did.
    fn go_release(&self, pid: u32) -> Option<GoRelease>;
    /// Time the threads of process `pid` have spent runnable but waiting
    /// for a CPU, ns (the sum of `/proc/PID/task/*/schedstat`'s second
    /// field over at most `max_threads` threads); `None` when gone or
    /// when the kernel keeps no scheduler statistics.
    fn run_delay_ns(&self, pid: u32, max_threads: usize) -> Option<u64>;
    /// The machine's CPU load as a whole (ARS's system poller), `None`
    /// when it cannot be read.
    fn system_cpu(&self) -> Option<SystemCpu>;
    /// Memory process `pid` has resident now, bytes (`/proc/PID/statm`);
    /// `None` when gone.
    fn rss_bytes(&self, pid: u32) -> Option<u64>;
}

/// The machine's CPU counters at one moment; the differences between two
/// readings say what happened in between.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SystemCpu {
    /// CPU time spent busy (neither idle nor waiting for I/O), summed
    /// over every CPU, ns (`/proc/stat`).
    pub busy_ns: u64,
    /// The same per CPU, indexed by CPU number (`/proc/stat`'s `cpuN`
    /// lines; 0 for a CPU it does not list). Its resolution is the
    /// kernel's accounting tick, and `/proc/stat` reports it in
    /// hundredths of a second.
    pub per_cpu_busy_ns: Vec<u64>,
    /// CPU time in total, summed over every CPU, ns.
    pub total_ns: u64,
    /// Threads runnable or running now (`procs_running`).
    pub running: u32,
    /// Time some runnable thread waited for a CPU, µs
    /// (`/proc/pressure/cpu`, `some total`); `None` without pressure
    /// stall information.
    pub pressure_some_us: Option<u64>,
}

/// One `/proc/stat` CPU line's busy and total time, in its ticks.
fn busy_and_total(fields: &str) -> (u64, u64) {
    let v: Vec<u64> = fields
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal [guest guest_nice]:
    // guest time is already inside user, so only the first eight count.
    let total: u64 = v.iter().take(8).fold(0u64, |a, b| a.saturating_add(*b));
    let idle = v
        .get(3)
        .copied()
        .unwrap_or(0)
        .saturating_add(v.get(4).copied().unwrap_or(0));
    (total.saturating_sub(idle), total)
}

/// Parses `/proc/stat`'s aggregate `cpu` line, its per-CPU lines and
/// `procs_running`: the busy and total time in ns, the runnable threads
/// and each CPU's busy time in ns.
fn parse_proc_stat(text: &str, tick_ns: u64) -> Option<(u64, u64, u32, Vec<u64>)> {
    let cpu = text.lines().find_map(|l| l.strip_prefix("cpu "))?;
    let (busy, total) = busy_and_total(cpu);
    let mut per_cpu: Vec<u64> = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("cpu") else {
            continue;
        };
        let Some((n, fields)) = rest.split_once(' ') else {
            continue;
        };
        let Ok(n) = n.parse::<usize>() else { continue };
        if n >= 1 << 16 {
            continue;
        }
        if per_cpu.len() <= n {
            per_cpu.resize(n + 1, 0);
        }
        per_cpu[n] = busy_and_total(fields).0.saturating_mul(tick_ns);
    }
    let running = text
        .lines()
        .find_map(|l| l.strip_prefix("procs_running "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    Some((
        busy.saturating_mul(tick_ns),
        total.saturating_mul(tick_ns),
        running,
        per_cpu,
    ))
}

/// Parses a pressure file's `some ... total=US` (`/proc/pressure/cpu`, a
/// cgroup v2 group's `cpu.pressure`).
pub(crate) fn parse_pressure(text: &str) -> Option<u64> {
    let some = text.lines().find(|l| l.starts_with("some "))?;
    some.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// Reads a file the kernel makes up when it is read (`/proc`, sysfs,
/// cgroupfs): one `open`, reads into a page-sized buffer until the end,
/// no `stat`. Such files report a size of 0, so `std::fs::read_to_string`
/// would probe with 32 bytes and double from there, each read making the
/// whole text again (ten system calls for `/proc/PID/status`, two here).
pub fn read_kernel_file(path: impl AsRef<std::path::Path>) -> io::Result<String> {
    use std::io::Read;
    // Not `read_to_end`, which asks the file's size and offset first.
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 4096];
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(len * 2, 0);
        }
        match f.read(&mut buf[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf.truncate(len);
    String::from_utf8(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// The real thing: `/proc` and `sched_setaffinity`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealOs;

fn clock_ticks() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as u64 } else { 100 }
}

/// A `/proc/PID/stat` text after the command name (which may contain
/// spaces and parentheses, so it is split after the last `)`): the state
/// first.
pub(crate) fn stat_after_name(text: &str) -> Option<&str> {
    text.get(text.rfind(')')? + 2..)
}

/// Fields of `/proc/PID/stat` after the command name.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let text = read_kernel_file(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat_after_name(&text)?;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

impl Os for RealOs {
    fn parent(&self, pid: u32) -> Option<u32> {
        stat_fields(pid)?.get(1)?.parse().ok().filter(|&p| p != 0)
    }

    fn threads(&self, pid: u32) -> io::Result<Vec<u32>> {
        let mut out: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))?
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    fn children(&self, pid: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for tid in self.threads(pid).unwrap_or_default() {
            if let Ok(text) = read_kernel_file(format!("/proc/{pid}/task/{tid}/children")) {
                out.extend(
                    text.split_whitespace()
                        .filter_map(|c| c.parse::<u32>().ok()),
                );
            }
        }
        out.sort_unstable();
        out.dedup();
        out
    }

    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()> {
        let mut set = rustix::thread::CpuSet::new();
        for c in cpus.iter().filter(|&c| c < rustix::thread::CpuSet::MAX_CPU) {
            set.set(c);
        }
        let pid =
            rustix::process::Pid::from_raw(tid as i32).ok_or_else(|| io::Error::other("pid 0"))?;
        rustix::thread::sched_setaffinity(Some(pid), &set)?;
        Ok(())
    }

    fn affinity(&self, tid: u32) -> io::Result<CpuSet> {
        let pid =
            rustix::process::Pid::from_raw(tid as i32).ok_or_else(|| io::Error::other("pid 0"))?;
        let set = rustix::thread::sched_getaffinity(Some(pid))?;
        Ok(
            (0..rustix::thread::CpuSet::MAX_CPU.min(allot_topo::MAX_CPUS))
                .filter(|&c| set.is_set(c))
                .collect(),
        )
    }

    fn cpu_time_ns(&self, pid: u32) -> Option<u64> {
        let f = stat_fields(pid)?;
        // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
        let ticks: u64 = (11..=14)
            .filter_map(|i| f.get(i)?.parse::<u64>().ok())
            .sum();
        Some(ticks * 1_000_000_000 / clock_ticks())
    }

    fn alive(&self, pid: u32) -> bool {
        matches!(stat_fields(pid), Some(f) if f.first().is_some_and(|s| s != "Z" && s != "X"))
    }

    fn run_delay_ns(&self, pid: u32, max_threads: usize) -> Option<u64> {
        let threads = self.threads(pid).ok()?;
        let mut sum = None;
        for tid in threads.into_iter().take(max_threads) {
            // "run time (ns) run delay (ns) timeslices"
            let Ok(text) = read_kernel_file(format!("/proc/{pid}/task/{tid}/schedstat")) else {
                continue;
            };
            if let Some(d) = text
                .split_whitespace()
                .nth(1)
                .and_then(|d| d.parse::<u64>().ok())
            {
                sum = Some(sum.unwrap_or(0u64).saturating_add(d));
            }
        }
        sum
    }

    fn system_cpu(&self) -> Option<SystemCpu> {
        let stat = read_kernel_file("/proc/stat").ok()?;
        let (busy_ns, total_ns, running, per_cpu_busy_ns) =
            parse_proc_stat(&stat, 1_000_000_000 / clock_ticks())?;
        let pressure_some_us = read_kernel_file("/proc/pressure/cpu")
            .ok()
            .and_then(|t| parse_pressure(&t));
        Some(SystemCpu {
            busy_ns,
            per_cpu_busy_ns,
            total_ns,
            running,
            pressure_some_us,
        })
    }

    fn start_time(&self, pid: u32) -> Option<u64> {
        stat_fields(pid)?.get(19)?.parse().ok()
    }

    fn rss_bytes(&self, pid: u32) -> Option<u64> {
        let text = read_kernel_file(format!("/proc/{pid}/statm")).ok()?;
        let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * rustix::param::page_size() as u64)
    }

    fn uid(&self, pid: u32) -> Option<u32> {
        let text = read_kernel_file(format!("/proc/{pid}/status")).ok()?;
        owner(text.lines().find(|l| l.starts_with("Uid:"))?)
    }

    fn mapped_objects(&self, pid: u32) -> io::Result<Vec<PathBuf>> {
        let maps = read_kernel_file(format!("/proc/{pid}/maps"))?;
        Ok(executable_mappings(&maps))
    }

    fn go_release(&self, pid: u32) -> Option<GoRelease> {
        // The program as the process runs it, even if its path was
        // replaced since: /proc/PID/exe opens the mapped file itself.
        let mut exe = std::fs::File::open(format!("/proc/{pid}/exe")).ok()?;
        crate::runtimes::go_release(&mut exe)
    }
}

/// The owner ([`Os::uid`]) from a `Uid:` line of `/proc/PID/status`
/// (real, effective, saved and file-system user ids).
fn owner(line: &str) -> Option<u32> {
    let ids: Vec<u32> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let (&real, rest) = ids.split_first()?;
    let same = rest.iter().take(2).all(|&id| id == real);
    Some(if same { real } else { 0 })
}

/// The file-backed executable mappings in a `/proc/PID/maps` text, each
/// once, in address order. A line is `ADDR PERMS OFFSET DEV INODE PATH`;
/// the path (which may hold spaces) starts after the fifth field.
fn executable_mappings(maps: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for line in maps.lines() {
        let mut fields = line.splitn(6, ' ');
        let perms = fields.nth(1).unwrap_or_default();
        let path = fields.nth(3).unwrap_or_default().trim_start();
        if perms.as_bytes().get(2) != Some(&b'x') || !path.starts_with('/') {
            continue;
        }
        let path = PathBuf::from(path.strip_suffix(" (deleted)").unwrap_or(path));
        if !out.contains(&path) {
            out.push(path);
        }
    }
    out
}

/// One process in a [`FakeOs`].
#[derive(Debug, Clone, Default)]
pub struct FakeProc {
    /// Parent's pid; 0 for none (what `parent` then reports as `None`).
    pub parent: u32,
    /// Thread ids (the first is the pid).
    pub threads: Vec<u32>,
    /// CPU time in ns.
    pub cpu_ns: u64,
    /// Real user id, what `uid` reports.
    pub uid: u32,
    /// Start time in clock ticks after boot, what `start_time` reports.
    pub start: u64,
    /// Files mapped executable, in address order, what `mapped_objects` reports.
    pub objects: Vec<PathBuf>,
    /// The Go release that built it.
    pub go: Option<GoRelease>,
    /// Time its threads waited for a CPU, ns.
    pub run_delay_ns: u64,
}

/// An in-memory process table for tests. Cloning shares the table.
#[derive(Debug, Clone, Default)]
pub struct FakeOs {
    inner: Arc<Mutex<FakeState>>,
    /// Held by [`FakeOs::hold_reads`]: reads of mappings wait for it.
    reads: Arc<Mutex<()>>,
}

#[derive(Debug, Default)]
struct FakeState {
    procs: BTreeMap<u32, FakeProc>,
    affinity: BTreeMap<u32, CpuSet>,
    system: Option<SystemCpu>,
    rss: BTreeMap<u32, u64>,
}

impl FakeOs {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeState> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes every read of mappings ([`Os::mapped_objects`], from any
    /// thread) wait until the guard returned is dropped: a read that takes
    /// as long as a test likes.
    pub fn hold_reads(&self) -> std::sync::MutexGuard<'_, ()> {
        self.reads.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Sets the resident memory process `pid` reports.
    pub fn set_rss(&self, pid: u32, bytes: u64) {
        self.lock().rss.insert(pid, bytes);
    }

    /// Adds process `pid` with `nthreads` threads (tids pid, pid+1, …), a
    /// child of `parent` (0: none). New threads inherit the parent's
    /// affinity, as `clone` does.
    pub fn spawn(&self, pid: u32, parent: u32, nthreads: u32, all: &CpuSet) {
        let mut s = self.lock();
        let mask = s.affinity.get(&parent).copied().unwrap_or(*all);
        let threads: Vec<u32> = (0..nthreads).map(|i| pid + i).collect();
        for &t in &threads {
            s.affinity.insert(t, mask);
        }
        s.procs.insert(
            pid,
            FakeProc {
                parent,
                threads,
                uid: 0,
                start: pid as u64,
                cpu_ns: 0,
                objects: Vec::new(),
                go: None,
                run_delay_ns: 0,
            },
        );
    }

    /// Adds time `pid`'s threads waited for a CPU.
    pub fn wait(&self, pid: u32, ns: u64) {
        if let Some(p) = self.lock().procs.get_mut(&pid) {
            p.run_delay_ns += ns;
        }
    }

    /// Sets what [`Os::system_cpu`] reads.
    pub fn set_system(&self, s: SystemCpu) {
        self.lock().system = Some(s);
    }

    /// Removes process `pid` (its children are reparented to nobody).
    pub fn exit(&self, pid: u32) {
        let mut s = self.lock();
        if let Some(p) = s.procs.remove(&pid) {
            for t in p.threads {
                s.affinity.remove(&t);
            }
        }
    }

    /// Adds CPU time to `pid`.
    pub fn burn(&self, pid: u32, ns: u64) {
        if let Some(p) = self.lock().procs.get_mut(&pid) {
            p.cpu_ns += ns;
        }
    }

    /// Sets the owner of `pid`.
    pub fn set_uid(&self, pid: u32, uid: u32) {
        if let Some(p) = self.lock().procs.get_mut(&pid) {
            p.uid = uid;
        }
    }

    /// Sets the start time `pid` reports (a pid reused by a later
    /// process starts later).
    pub fn set_start(&self, pid: u32, start: u64) {
        if let Some(p) = self.lock().procs.get_mut(&pid) {
            p.start = start;
        }
    }

    /// Sets what `pid` has mapped and the Go release of its program.
    pub fn set_objects(&self, pid: u32, objects: &[&str], go: Option<GoRelease>) {
        if let Some(p) = self.lock().procs.get_mut(&pid) {
            p.objects = objects.iter().map(PathBuf::from).collect();
            p.go = go;
        }
    }
}

impl Os for FakeOs {
    fn parent(&self, pid: u32) -> Option<u32> {
        self.lock()
            .procs
            .get(&pid)
            .map(|p| p.parent)
            .filter(|&p| p != 0)
    }
    fn threads(&self, pid: u32) -> io::Result<Vec<u32>> {
        self.lock()
            .procs
            .get(&pid)
            .map(|p| p.threads.clone())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }
    fn children(&self, pid: u32) -> Vec<u32> {
        self.lock()
            .procs
            .iter()
            .filter(|(_, p)| p.parent == pid)
            .map(|(&c, _)| c)
            .collect()
    }
    fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> io::Result<()> {
        let mut s = self.lock();
        if cpus.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        match s.affinity.get_mut(&tid) {
            Some(m) => {
                *m = *cpus;
                Ok(())
            }
            None => Err(io::Error::from_raw_os_error(libc::ESRCH)),
        }
    }
    fn affinity(&self, tid: u32) -> io::Result<CpuSet> {
        self.lock()
            .affinity
            .get(&tid)
            .copied()
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }
    fn cpu_time_ns(&self, pid: u32) -> Option<u64> {
        self.lock().procs.get(&pid).map(|p| p.cpu_ns)
    }
    fn alive(&self, pid: u32) -> bool {
        self.lock().procs.contains_key(&pid)
    }
    fn start_time(&self, pid: u32) -> Option<u64> {
        self.lock().procs.get(&pid).map(|p| p.start)
    }
    fn uid(&self, pid: u32) -> Option<u32> {
        self.lock().procs.get(&pid).map(|p| p.uid)
    }
    fn mapped_objects(&self, pid: u32) -> io::Result<Vec<PathBuf>> {
        drop(self.reads.lock().unwrap_or_else(|p| p.into_inner()));
        self.lock()
            .procs
            .get(&pid)
            .map(|p| p.objects.clone())
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))
    }
    fn go_release(&self, pid: u32) -> Option<GoRelease> {
        self.lock().procs.get(&pid).and_then(|p| p.go)
    }
    fn run_delay_ns(&self, pid: u32, _max_threads: usize) -> Option<u64> {
        self.lock().procs.get(&pid).map(|p| p.run_delay_ns)
    }
    fn rss_bytes(&self, pid: u32) -> Option<u64> {
        let s = self.lock();
        s.procs
            .contains_key(&pid)
            .then(|| s.rss.get(&pid).copied().unwrap_or(0))
    }
    fn system_cpu(&self) -> Option<SystemCpu> {
        self.lock().system.clone()
    }
}

/// A process and all its descendants, parents first.
pub fn process_tree(os: &dyn Os, roots: &[u32]) -> Vec<u32> {
    process_tree_at_most(os, roots, usize::MAX)
}

/// [`process_tree`], stopping once it found `max` processes (the walk
/// reads each process's children: a tree of thousands costs as many
/// reads).
pub fn process_tree_at_most(os: &dyn Os, roots: &[u32], max: usize) -> Vec<u32> {
    let mut out = Vec::new();
    let mut stack: Vec<u32> = roots.iter().rev().copied().collect();
    let mut seen = std::collections::HashSet::new();
    while let Some(p) = stack.pop() {
        if out.len() >= max {
            break;
        }
        if !seen.insert(p) || !os.alive(p) {
            continue;
        }
        out.push(p);
        let mut kids = os.children(p);
        kids.reverse();
        stack.extend(kids);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whole texts, past the first buffer too, and the kernel's made-up
    /// files, whose size reads as 0.
    #[test]
    fn kernel_files_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let long: String = (0..3000).map(|i| format!("{i} ")).collect();
        assert!(long.len() > 3 * 4096);
        std::fs::write(dir.path().join("f"), &long).unwrap();
        assert_eq!(read_kernel_file(dir.path().join("f")).unwrap(), long);
        std::fs::write(dir.path().join("e"), "").unwrap();
        assert_eq!(read_kernel_file(dir.path().join("e")).unwrap(), "");
        let status = read_kernel_file("/proc/self/status").unwrap();
        assert!(
            status.starts_with("Name:") && status.ends_with('\n'),
            "{status}"
        );
        assert!(read_kernel_file(dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_process_tree_walk_stops_at_its_bound() {
        let os = FakeOs::new();
        let all = CpuSet::first_n(1);
        os.spawn(1, 0, 1, &all);
        for pid in 2..10 {
            os.spawn(pid, 1, 1, &all);
        }
        assert_eq!(process_tree(&os, &[1]).len(), 9);
        assert_eq!(process_tree_at_most(&os, &[1], 3), [1, 2, 3]);
    }

    #[test]
    fn a_process_whose_user_ids_differ_is_roots() {
        assert_eq!(owner("Uid:\t1000\t1000\t1000\t1000"), Some(1000));
        // A set-user-id root program its user started: root's.
        assert_eq!(owner("Uid:\t1000\t0\t0\t0"), Some(0));
        // Effective user changed back, saved id still root's: root's.
        assert_eq!(owner("Uid:\t1000\t1000\t0\t1000"), Some(0));
        // Only the file-system id differs: the user's.
        assert_eq!(owner("Uid:\t1000\t1000\t1000\t0"), Some(1000));
        assert_eq!(owner("Uid:\tx"), None);
        // Live: this process's ids agree.
        let me = std::process::id();
        assert_eq!(RealOs.uid(me), Some(rustix::process::getuid().as_raw()));
    }

    #[test]
    fn executable_mappings_of_a_maps_text() {
        let maps = "\
55d0c8a00000-55d0c8a28000 r--p 00000000 08:01 1234                       /usr/bin/python3.11
55d0c8a28000-55d0c8b00000 r-xp 00028000 08:01 1234                       /usr/bin/python3.11
7f00000000-7f00001000 r-xp 00000000 08:01 77                         /opt/my libs/libopenblas.so.0
7f00002000-7f00003000 r-xp 00000000 08:01 78                         /tmp/liballot_shim-1.so (deleted)
7f00004000-7f00005000 rw-p 00000000 00:00 0                          [heap]
7f00006000-7f00007000 r-xp 00000000 00:00 0                          [vdso]
7f00008000-7f00009000 r-xp 00002000 08:01 77                         /opt/my libs/libopenblas.so.0
7f0000a000-7f0000b000 rw-p 00000000 08:01 79                         /usr/lib/libdata.so
";
        assert_eq!(
            executable_mappings(maps),
            vec![
                PathBuf::from("/usr/bin/python3.11"),
                PathBuf::from("/opt/my libs/libopenblas.so.0"),
                PathBuf::from("/tmp/liballot_shim-1.so"),
            ]
        );
    }

    #[test]
    fn parents_are_read_the_same_from_proc_and_the_fake() {
        let real = RealOs;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        assert_eq!(real.parent(child.id()), Some(std::process::id()));
        assert_eq!(
            real.parent(std::process::id()),
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get() as u32))
        );
        assert_eq!(real.parent(1), None);
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(real.parent(child.id()), None);

        let fake = FakeOs::new();
        let all = CpuSet::parse_list("0-1").unwrap();
        fake.spawn(100, 0, 1, &all);
        fake.spawn(200, 100, 1, &all);
        assert_eq!(fake.parent(200), Some(100));
        assert_eq!(fake.parent(100), None);
        fake.exit(200);
        assert_eq!(fake.parent(200), None);
    }

    #[test]
    fn proc_stat_and_pressure_parse() {
        let stat = "cpu  100 5 50 800 20 1 2 3 7 0\ncpu0 50 2 25 400 10 0 1 1 0 0\n\
                    cpu2 50 3 25 400 10 1 1 2 7 0\nintr 1\nprocs_running 3\nprocs_blocked 0\n";
        // busy = user+nice+system+irq+softirq+steal = 161 ticks of 981;
        // per CPU 79 and 82 (CPU 1 is not listed: offline).
        assert_eq!(
            parse_proc_stat(stat, 10),
            Some((1610, 9810, 3, vec![790, 0, 820]))
        );
        let psi = "some avg10=0.41 avg60=3.14 avg300=27.28 total=1134095342\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(parse_pressure(psi), Some(1_134_095_342));
        assert_eq!(parse_pressure("garbage"), None);
    }
}
