//! Topology discovery from a sysfs tree.
//!
//! Reads only files under `<root>/devices/system/{cpu,node}`, so the same code
//! runs on the live `/sys` and on the fixture machines checked into
//! `crates/topo/fixtures/`. Missing optional information degrades gracefully:
//!
//! | missing                         | assumed                                  |
//! |---------------------------------|------------------------------------------|
//! | `cpuN/topology/thread_siblings` | the CPU is its own core                   |
//! | `cpuN/cache/*`                  | the package is the LLC                    |
//! | `devices/system/node`           | one node holding every CPU, distance 10   |
//! | `nodeN/meminfo`                 | 0 KiB                                     |
//!
//! Missing *required* information (the online list, a CPU directory named
//! by it) is an error naming the path.

use crate::cpuset::{CpuListError, CpuSet};
use crate::machine::{Machine, MachineError, RawCpu, RawNode};
use std::fs;
use std::path::{Path, PathBuf};

/// Why discovery failed.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// A required file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// Full path of the file, under the sysfs root discovery was given.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file held something unexpected.
    #[error("unexpected contents in {path}: {detail}")]
    Parse {
        /// Full path of the file, under the sysfs root discovery was given.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The facts did not form a consistent machine.
    #[error("inconsistent topology under {root}: {source}")]
    Machine {
        /// The sysfs root.
        root: PathBuf,
        /// What is inconsistent in the facts read (a CPU described twice, an unknown node, …).
        source: MachineError,
    },
    /// The allowed-CPU mask could not be read.
    #[error("cannot read this process's CPU affinity: {0}")]
    Affinity(std::io::Error),
}

fn read(path: &Path) -> Result<String, DiscoverError> {
    fs::read_to_string(path).map_err(|source| DiscoverError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_opt(path: &Path) -> Option<String> {
    fs::read_to_string(path).ok()
}

fn list(path: &Path) -> Result<CpuSet, DiscoverError> {
    CpuSet::parse_list(&read(path)?).map_err(|e: CpuListError| DiscoverError::Parse {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

fn list_opt(path: &Path) -> Option<CpuSet> {
    read_opt(path).and_then(|t| CpuSet::parse_list(&t).ok())
}

fn num_opt<T: std::str::FromStr>(path: &Path) -> Option<T> {
    read_opt(path).and_then(|t| t.trim().parse().ok())
}

/// Parses a cache size like `2048K`, `8M` or `512` (bytes) into KiB.
fn size_kib(text: &str) -> u64 {
    let t = text.trim();
    let (digits, mult) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 1),
        Some('M') => (&t[..t.len() - 1], 1024),
        Some('G') => (&t[..t.len() - 1], 1024 * 1024),
        _ => return t.parse::<u64>().map(|b| b / 1024).unwrap_or(0),
    };
    digits.parse::<u64>().map(|v| v * mult).unwrap_or(0)
}

/// The highest-level data or unified cache of `cpu_dir`: (level, KiB, CPUs).
fn last_level_cache(cpu_dir: &Path) -> Option<(u8, u64, CpuSet)> {
    let entries = fs::read_dir(cpu_dir.join("cache")).ok()?;
    let mut best: Option<(u8, u64, CpuSet)> = None;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let dir = entry.path();
        let kind = read_opt(&dir.join("type")).unwrap_or_default();
        if kind.trim() == "Instruction" {
            continue;
        }
        let (Some(level), Some(shared)) = (
            num_opt::<u8>(&dir.join("level")),
            list_opt(&dir.join("shared_cpu_list")),
        ) else {
            continue;
        };
        let size = read_opt(&dir.join("size")).map_or(0, |s| size_kib(&s));
        if best.as_ref().is_none_or(|(l, _, _)| level > *l) {
            best = Some((level, size, shared));
        }
    }
    best
}

fn mem_total_kib(meminfo: &str) -> u64 {
    meminfo
        .lines()
        .find(|l| l.contains("MemTotal:"))
        .and_then(|l| l.split_whitespace().rev().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Reads the topology under `root` (the directory playing `/sys`) and keeps
/// the online CPUs that are also in `allowed` (`None`: all online CPUs).
pub fn discover(
    root: &Path,
    name: &str,
    allowed: Option<&CpuSet>,
) -> Result<Machine, DiscoverError> {
    let cpu_root = root.join("devices/system/cpu");
    let online = list(&cpu_root.join("online"))?;

    // NUMA nodes: ids from `node/online`, else the nodeN directories.
    let node_root = root.join("devices/system/node");
    let mut node_ids: Vec<u32> = match list_opt(&node_root.join("online")) {
        Some(set) => set.iter().map(|n| n as u32).collect(),
        None => Vec::new(),
    };
    if node_ids.is_empty() {
        node_ids.push(0);
    }
    let have_nodes = node_root.join(format!("node{}", node_ids[0])).is_dir();
    let mut raw_nodes = Vec::new();
    let mut node_of_cpu = std::collections::HashMap::new();
    for &id in &node_ids {
        let dir = node_root.join(format!("node{id}"));
        let cpus = if have_nodes {
            list(&dir.join("cpulist"))?
        } else {
            online
        };
        for cpu in cpus.iter() {
            node_of_cpu.insert(cpu, id);
        }
        let distances = if have_nodes {
            let path = dir.join("distance");
            read(&path)?
                .split_whitespace()
                .map(|d| {
                    d.parse::<u32>().map_err(|_| DiscoverError::Parse {
                        path: path.clone(),
                        detail: format!("distance {d:?} is not a number"),
                    })
                })
                .collect::<Result<Vec<_>, _>>()?
        } else {
            vec![10]
        };
        raw_nodes.push(RawNode {
            id,
            mem_total_kib: read_opt(&dir.join("meminfo")).map_or(0, |m| mem_total_kib(&m)),
            distances,
        });
    }

    let mut raw_cpus = Vec::new();
    for cpu in online.iter() {
        let dir = cpu_root.join(format!("cpu{cpu}"));
        if !dir.is_dir() {
            return Err(DiscoverError::Read {
                path: dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "CPU listed online but has no directory",
                ),
            });
        }
        let topo = dir.join("topology");
        let mut siblings = list_opt(&topo.join("thread_siblings_list"))
            .or_else(|| list_opt(&topo.join("core_cpus_list")))
            .unwrap_or_default();
        siblings.insert(cpu);
        raw_cpus.push(RawCpu {
            id: cpu,
            package: num_opt(&topo.join("physical_package_id")).unwrap_or(0),
            siblings,
            llc: last_level_cache(&dir),
            node: node_of_cpu.get(&cpu).copied().unwrap_or(node_ids[0]),
        });
    }
    let usable = match allowed {
        Some(a) => online.intersection(a),
        None => online,
    };
    Machine::from_cpus(name, &raw_cpus, &raw_nodes, &usable).map_err(|source| {
        DiscoverError::Machine {
            root: root.to_path_buf(),
            source,
        }
    })
}

/// The CPUs this process may run on (`sched_getaffinity`).
pub fn allowed_cpus() -> Result<CpuSet, DiscoverError> {
    let set =
        rustix::thread::sched_getaffinity(None).map_err(|e| DiscoverError::Affinity(e.into()))?;
    Ok((0..crate::MAX_CPUS.min(rustix::thread::CpuSet::MAX_CPU))
        .filter(|&c| set.is_set(c))
        .collect())
}

/// This machine, as the calling process may use it: `/sys` intersected with
/// the process's affinity mask.
pub fn discover_live() -> Result<Machine, DiscoverError> {
    let allowed = allowed_cpus()?;
    discover(Path::new("/sys"), "this machine", Some(&allowed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes() {
        assert_eq!(size_kib("2048K\n"), 2048);
        assert_eq!(size_kib("8M"), 8192);
        assert_eq!(size_kib("65536"), 64);
        assert_eq!(size_kib("junk"), 0);
    }

    #[test]
    fn meminfo_total() {
        let text = "Node 0 MemTotal:        4417740 kB\nNode 0 MemFree:  1 kB\n";
        assert_eq!(mem_total_kib(text), 4417740);
    }

    #[test]
    fn missing_root_names_the_path() {
        let err = discover(Path::new("/nonexistent-sysfs"), "x", None).unwrap_err();
        assert!(
            err.to_string()
                .contains("/nonexistent-sysfs/devices/system/cpu/online"),
            "{err}"
        );
    }
}
