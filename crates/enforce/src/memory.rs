//! Memory capacity per cell: the kernel files behind a cell's memory
//! guarantee and limit ([`allot_spec::Memory`]), what is read back, and
//! where a cell's memory group may live.
//!
//! | | guarantee (`min`) | limit (`max`) | use | at the limit | OOM kills | pressure |
//! |---|---|---|---|---|---|---|
//! | cgroup v2 | `memory.min` | `memory.max` | `memory.current` | `memory.events` `max` | `memory.events` `oom_kill` | `memory.pressure` `some avg10` |
//! | cgroup v1 | `memory.soft_limit_in_bytes` | `memory.limit_in_bytes` | `memory.usage_in_bytes` | `memory.failcnt` | `memory.oom_control` `oom_kill` | none |
//!
//! v1 has no hard protection: its soft limit only orders reclaim under
//! global pressure (groups above theirs first). v2's `memory.min` is a
//! hard protection. A cell's own limit never lifts one that encloses it.
//!
//! Invariants:
//! - **Nesting.** A cell's memory group lies below the memory group the
//!   broker runs in (a container's, a Slurm job's, a systemd slice's), so
//!   every enclosing limit still counts. On v1, where the memory hierarchy
//!   is separate from cpuset's, a process is moved into its cell's memory
//!   group only if it runs in the broker's own memory group or already in
//!   allot's ([`may_move`]): never out of a memory group of its own to the
//!   top of the hierarchy. One that runs elsewhere keeps being charged
//!   where it is (its cell's limit does not cover it, and `allot status`
//!   shows the cell's memory without it).
//! - **The program pays.** At its limit the kernel reclaims the cell's own
//!   memory and, failing that, kills one of *its* processes; nothing
//!   outside the cell is touched. The broker only reports it.
//! - On v1, memory a process allocated before it joined stays charged
//!   where it was (the kernel does not move charges by default).

use crate::cgroupfs::CgroupFs;
use allot_spec::{Memory, MemoryUse};
use std::io;
use std::path::{Path, PathBuf};

/// Which cgroup version's files a memory group has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// cgroup v1 `memory.*_in_bytes`.
    V1,
    /// cgroup v2 `memory.min`/`memory.max`.
    V2,
}

/// Writes `m` into the memory group `dir`.
pub fn set(fs: &dyn CgroupFs, version: Version, dir: &Path, m: &Memory) -> io::Result<()> {
    match version {
        Version::V2 => {
            // Lower the guarantee first: it may not stay above a new limit.
            fs.write(&dir.join("memory.min"), "0")?;
            fs.write(&dir.join("memory.max"), &limit_word(m.max, "max"))?;
            fs.write(&dir.join("memory.min"), &m.min.to_string())
        }
        Version::V1 => {
            fs.write(&dir.join("memory.limit_in_bytes"), &limit_word(m.max, "-1"))?;
            fs.write(
                &dir.join("memory.soft_limit_in_bytes"),
                &limit_word(m.min, "-1"),
            )
        }
    }
}

fn limit_word(bytes: u64, none: &str) -> String {
    if bytes == 0 {
        none.to_string()
    } else {
        bytes.to_string()
    }
}

/// Reads the memory group `dir`; `None` when it has no memory files.
pub fn read(fs: &dyn CgroupFs, version: Version, dir: &Path) -> Option<MemoryUse> {
    let num = |file: &str| -> Option<u64> { fs.read(&dir.join(file)).ok()?.trim().parse().ok() };
    match version {
        Version::V2 => {
            let events = fs.read(&dir.join("memory.events")).unwrap_or_default();
            Some(MemoryUse {
                current: num("memory.current")?,
                limit: num("memory.max").unwrap_or(0),
                at_limit: field(&events, "max").unwrap_or(0),
                oom_kills: field(&events, "oom_kill").unwrap_or(0),
                pressure: fs
                    .read(&dir.join("memory.pressure"))
                    .ok()
                    .and_then(|t| some_avg10(&t)),
            })
        }
        Version::V1 => {
            let oom = fs.read(&dir.join("memory.oom_control")).unwrap_or_default();
            Some(MemoryUse {
                current: num("memory.usage_in_bytes")?,
                limit: num("memory.limit_in_bytes")
                    .filter(|&l| l < UNLIMITED_V1)
                    .unwrap_or(0),
                at_limit: num("memory.failcnt").unwrap_or(0),
                oom_kills: field(&oom, "oom_kill").unwrap_or(0),
                pressure: None,
            })
        }
    }
}

/// The memory group a process is in, given its `/proc/PID/cgroup` text:
/// its v1 memory hierarchy's group where that is mounted (`v1_memory`),
/// else its cgroup v2 group under `cgroup2`.
pub fn group_of(
    proc_cgroup: &str,
    v1_memory: Option<&Path>,
    cgroup2: Option<&Path>,
) -> Option<(Version, std::path::PathBuf)> {
    if let Some(mount) = v1_memory {
        let g = v1_group(proc_cgroup)?;
        return Some((Version::V1, mount.join(g.trim_start_matches('/'))));
    }
    let g = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    Some((Version::V2, cgroup2?.join(g.trim().trim_start_matches('/'))))
}

/// The cell memory group (`cell-<id>`, or `<root>.cell-<id>`) process `pid` is in (`None`: it is
/// in none, or it is gone). On cgroup v1 `allot run` is in its program's
/// cell itself; on cgroup v2 only the program is (cloned into the cell), so
/// `allot run` asks for its program's.
pub fn cell_group_of(pid: u32) -> Option<(Version, std::path::PathBuf)> {
    let text = crate::os::read_kernel_file(format!("/proc/{pid}/cgroup")).ok()?;
    let mounts = crate::detect::Mounts::read();
    let (version, dir) = group_of(&text, mounts.v1_for("memory"), mounts.cgroup2.as_deref())?;
    // `cell-N`, or `<allot's root>.cell-N` beside it (an exclusive cell
    // on a kernel before 6.7, `crate::partition`).
    let in_cell = dir.file_name().is_some_and(|n| {
        let n = n.to_string_lossy();
        n.starts_with("cell-") || n.contains(".cell-")
    });
    in_cell.then_some((version, dir))
}

/// The kernel's count of OOM kills in a memory group ([`cell_group_of`]).
/// `allot run` compares it before and after its program to say that a
/// program killed by SIGKILL was killed for its cell's memory limit.
pub fn oom_kills(group: &(Version, std::path::PathBuf)) -> Option<u64> {
    Some(read(&crate::cgroupfs::KernelFs, group.0, &group.1)?.oom_kills)
}

/// v1 reports "no limit" as a huge page-rounded number.
const UNLIMITED_V1: u64 = 1 << 62;

/// The value of `key` in a flat keyed file (`key value` lines).
pub fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok())?
    })
}

/// `some avg10` of a pressure file, percent.
pub fn some_avg10(text: &str) -> Option<f64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("avg10="))?
        .parse()
        .ok()
}

/// The v1 memory group of a process, from its `/proc/PID/cgroup` text
/// (`N:memory:/path`); `None` when memory is not a v1 hierarchy.
pub fn v1_group(proc_cgroup: &str) -> Option<String> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, ctrls, path) = (parts.next()?, parts.next()?, parts.next()?);
        ctrls
            .split(',')
            .any(|c| c == "memory")
            .then(|| path.to_string())
    })
}

/// Whether a process whose memory group is `group` may be moved into a
/// memory group below `allot` (allot's directory, itself directly below
/// the broker's own group `base`): only from the broker's group itself
/// or from inside allot's (see the module's invariants). Paths as
/// `/proc/PID/cgroup` gives them.
pub fn may_move(group: &str, base: &str, allot: &str) -> bool {
    let inside = |outer: &str| {
        group == outer
            || group
                .strip_prefix(outer.trim_end_matches('/'))
                .is_some_and(|rest| rest.starts_with('/'))
    };
    group == base || inside(allot)
}

/// The path of the v1 memory group the calling process runs in, relative
/// to the memory hierarchy's root (`/` at the top).
pub fn own_v1_group() -> Option<String> {
    v1_group(&std::fs::read_to_string("/proc/self/cgroup").ok()?)
}

/// Bytes a broker's cells live within: the machine's memory, or less when
/// a memory group enclosing them is limited. `mem_total` from
/// `/proc/meminfo`; `enclosing` the limits read from the broker's group
/// up to the hierarchy's root (unlimited ones absent).
pub fn capacity(mem_total: u64, enclosing: &[u64]) -> u64 {
    enclosing.iter().copied().fold(mem_total, u64::min)
}

/// [`capacity`] for memory groups below `dir`: the machine's memory, or
/// the lowest limit of the groups from `dir` up to `top`.
pub fn capacity_below(fs: &dyn CgroupFs, version: Version, dir: &Path, top: &Path) -> u64 {
    capacity(machine_total(), &enclosing_limits(fs, version, dir, top))
}

/// What a backend's `set_memory` answers for cell `cell` where it has no
/// memory control (`why`): nothing to do when `m` asks for nothing, else
/// the error.
pub(crate) fn without_control(cell: u64, m: &Memory, why: &str) -> crate::Result<bool> {
    if m.is_none() {
        return Ok(false);
    }
    Err(crate::EnforceError::new(
        format!("set the memory of cell {cell}"),
        io::Error::other(why.to_string()),
    ))
}

/// `MemTotal` of `/proc/meminfo` text, bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The limits of the memory groups from `dir` up to `top` (inclusive;
/// `top` is the hierarchy's mount), unlimited ones left out.
pub fn enclosing_limits(fs: &dyn CgroupFs, version: Version, dir: &Path, top: &Path) -> Vec<u64> {
    let file = match version {
        Version::V2 => "memory.max",
        Version::V1 => "memory.limit_in_bytes",
    };
    let mut out = Vec::new();
    let mut d: Option<PathBuf> = Some(dir.to_path_buf());
    while let Some(cur) = d {
        if let Some(l) = fs
            .read(&cur.join(file))
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&l| l < UNLIMITED_V1)
        {
            out.push(l);
        }
        if cur == top {
            break;
        }
        d = cur
            .parent()
            .filter(|p| p.starts_with(top))
            .map(Path::to_path_buf);
    }
    out
}

/// The machine's memory, bytes (0 if `/proc/meminfo` cannot be read).
pub fn machine_total() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| mem_total(&t))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::{FixtureFs, FixtureLayout};

    #[test]
    fn a_process_memory_group_is_found_in_either_version() {
        let v1 = "12:memory:/user.slice/allot/cell-3\n3:cpuset:/allot/cell-3\n";
        assert_eq!(
            group_of(v1, Some(Path::new("/sys/fs/cgroup/memory")), None),
            Some((
                Version::V1,
                "/sys/fs/cgroup/memory/user.slice/allot/cell-3".into()
            ))
        );
        let v2 = "0::/allot/cell-4\n";
        assert_eq!(
            group_of(v2, None, Some(Path::new("/sys/fs/cgroup"))),
            Some((Version::V2, "/sys/fs/cgroup/allot/cell-4".into()))
        );
        assert_eq!(group_of(v2, None, None), None);
    }

    #[test]
    fn keyed_files_and_pressure_parse() {
        let events = "low 0\nhigh 3\nmax 17\noom 2\noom_kill 1\noom_group_kill 0\n";
        assert_eq!(field(events, "max"), Some(17));
        assert_eq!(field(events, "oom_kill"), Some(1));
        assert_eq!(field(events, "oom"), Some(2));
        assert_eq!(field(events, "absent"), None);
        let psi = "some avg10=12.50 avg60=3.00 avg300=1.00 total=123\n\
                   full avg10=1.00 avg60=0.00 avg300=0.00 total=9\n";
        assert_eq!(some_avg10(psi), Some(12.5));
        assert_eq!(
            mem_total("MemTotal:       24573440 kB\nMemFree: 1 kB\n"),
            Some(24573440 * 1024)
        );
    }

    #[test]
    fn a_process_moves_only_from_the_brokers_group_or_from_inside_allots() {
        let base = "/process_api/98a5";
        let allot = "/process_api/98a5/allot";
        assert!(may_move(base, base, allot));
        assert!(may_move("/process_api/98a5/allot/cell-3", base, allot));
        // Its own group below the broker's, a sibling, the root: it stays.
        assert!(!may_move("/process_api/98a5/job", base, allot));
        assert!(!may_move("/process_api/98a5/allotx", base, allot));
        assert!(!may_move("/other", base, allot));
        assert!(!may_move("/", base, allot));
        let cg = "12:pids:/\n4:memory:/process_api/98a5\n3:cpuset:/\n0::/\n";
        assert_eq!(v1_group(cg).as_deref(), Some(base));
        assert_eq!(v1_group("0::/user.slice\n"), None);
    }

    #[test]
    fn an_enclosing_limit_lowers_the_capacity() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FixtureFs::new(FixtureLayout::V1Memory);
        let top = dir.path();
        fs.populate(top).unwrap();
        fs.mkdir(&top.join("job")).unwrap();
        fs.mkdir(&top.join("job/step")).unwrap();
        fs.write(&top.join("job/memory.limit_in_bytes"), "8589934592")
            .unwrap();
        let limits = enclosing_limits(&fs, Version::V1, &top.join("job/step"), top);
        assert_eq!(limits, [8 << 30]);
        assert_eq!(capacity(24 << 30, &limits), 8 << 30);
        assert_eq!(capacity(24 << 30, &[]), 24 << 30);
    }

    #[test]
    fn v2_and_v1_files_are_written_and_read() {
        let dir = tempfile::tempdir().unwrap();
        let m = Memory {
            min: 1 << 30,
            max: 2 << 30,
        };
        let v2 = FixtureFs::new(FixtureLayout::V2);
        let d = dir.path().join("v2");
        v2.populate(&d).unwrap();
        let content = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        set(&v2, Version::V2, &d, &m).unwrap();
        assert_eq!(content("memory.max"), "2147483648");
        assert_eq!(content("memory.min"), "1073741824");
        set(&v2, Version::V2, &d, &Memory::default()).unwrap();
        assert_eq!(content("memory.max"), "max");
        assert_eq!(content("memory.min"), "0");
        v2.write(&d.join("memory.current"), "4096\n").unwrap();
        v2.write(&d.join("memory.max"), "2147483648\n").unwrap();
        v2.write(
            &d.join("memory.events"),
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\n",
        )
        .unwrap();
        v2.write(
            &d.join("memory.pressure"),
            "some avg10=2.00 avg60=0.00 avg300=0.00 total=1\n",
        )
        .unwrap();
        let u = read(&v2, Version::V2, &d).unwrap();
        assert_eq!(
            u,
            MemoryUse {
                current: 4096,
                limit: 2 << 30,
                at_limit: 4,
                oom_kills: 1,
                pressure: Some(2.0)
            }
        );
        let v1 = FixtureFs::new(FixtureLayout::V1Memory);
        let d = dir.path().join("v1");
        v1.populate(&d).unwrap();
        set(&v1, Version::V1, &d, &m).unwrap();
        let content = |f: &str| std::fs::read_to_string(d.join(f)).unwrap();
        assert_eq!(content("memory.limit_in_bytes"), "2147483648");
        assert_eq!(content("memory.soft_limit_in_bytes"), "1073741824");
        set(&v1, Version::V1, &d, &Memory::default()).unwrap();
        assert_eq!(content("memory.limit_in_bytes"), "-1");
        v1.write(&d.join("memory.usage_in_bytes"), "8192\n")
            .unwrap();
        v1.write(&d.join("memory.limit_in_bytes"), "9223372036854771712\n")
            .unwrap();
        v1.write(
            &d.join("memory.oom_control"),
            "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
        )
        .unwrap();
        let u = read(&v1, Version::V1, &d).unwrap();
        assert_eq!(
            (u.current, u.limit, u.oom_kills, u.pressure),
            (8192, 0, 2, None)
        );
        assert!(read(&v1, Version::V1, &dir.path().join("nowhere")).is_none());
    }
}
