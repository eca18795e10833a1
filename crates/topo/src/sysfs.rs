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
//!
//! The tree is a directory (`/sys`, or a copy of its files), or the same
//! files packed into one text file ([`Packed`]: the fixtures are kept so,
//! one file per machine instead of thousands). Both are read through
//! [`Tree`], so discovery cannot tell them apart.

use crate::cpuset::{CpuListError, CpuSet};
use crate::machine::{Machine, MachineError, RawCpu, RawNode};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

/// What discovery reads of a sysfs tree, by full path (under its root).
trait Tree {
    /// The text of file `path`.
    fn read(&self, path: &Path) -> std::io::Result<String>;
    /// Whether `path` is a directory.
    fn is_dir(&self, path: &Path) -> bool;
    /// The names of the entries of directory `path`.
    fn entries(&self, path: &Path) -> std::io::Result<Vec<String>>;
}

/// A directory of the file system.
struct Dir;

impl Tree for Dir {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        fs::read_to_string(path)
    }
    fn is_dir(&self, path: &Path) -> bool {
        path.is_dir()
    }
    fn entries(&self, path: &Path) -> std::io::Result<Vec<String>> {
        fs::read_dir(path)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect()
    }
}

/// The first line of a packed tree.
pub const PACKED_MAGIC: &str = "# allot sysfs tree";

/// A sysfs tree packed into one text file at `root`: a first line starting
/// with [`PACKED_MAGIC`], then each file as a line `== <path under the
/// root>` followed by its text (which never holds a line starting with
/// `== `).
struct Packed {
    root: PathBuf,
    files: BTreeMap<String, String>,
}

impl Packed {
    /// Reads the packed tree at `root`; `None` if the file is not one.
    fn open(root: &Path) -> std::io::Result<Option<Packed>> {
        let text = fs::read_to_string(root)?;
        if !text.starts_with(PACKED_MAGIC) {
            return Ok(None);
        }
        let mut files = BTreeMap::new();
        let mut current: Option<(String, String)> = None;
        for line in text.split_inclusive('\n').skip(1) {
            if let Some(name) = line.strip_prefix("== ") {
                files.extend(current.take());
                current = Some((name.trim_end().to_string(), String::new()));
            } else if let Some((_, body)) = &mut current {
                body.push_str(line);
            }
        }
        files.extend(current);
        Ok(Some(Packed {
            root: root.to_path_buf(),
            files,
        }))
    }

    /// `path` under the root, as the pack names it.
    fn key(&self, path: &Path) -> Option<String> {
        let rel = path.strip_prefix(&self.root).ok()?;
        Some(rel.to_string_lossy().into_owned())
    }

    /// The paths of the files below directory `path`, relative to it.
    fn below(&self, path: &Path) -> Vec<&str> {
        let Some(dir) = self.key(path) else {
            return Vec::new();
        };
        let prefix = format!("{dir}/");
        self.files
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .map(|(k, _)| &k[prefix.len()..])
            .collect()
    }
}

impl Tree for Packed {
    fn read(&self, path: &Path) -> std::io::Result<String> {
        self.key(path)
            .and_then(|k| self.files.get(&k).cloned())
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::NotFound))
    }
    fn is_dir(&self, path: &Path) -> bool {
        !self.below(path).is_empty()
    }
    fn entries(&self, path: &Path) -> std::io::Result<Vec<String>> {
        let mut names: Vec<String> = self
            .below(path)
            .into_iter()
            .map(|rest| rest.split('/').next().unwrap_or(rest).to_string())
            .collect();
        names.dedup();
        if names.is_empty() {
            return Err(std::io::ErrorKind::NotFound.into());
        }
        Ok(names)
    }
}

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

fn read(t: &dyn Tree, path: &Path) -> Result<String, DiscoverError> {
    t.read(path).map_err(|source| DiscoverError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn read_opt(t: &dyn Tree, path: &Path) -> Option<String> {
    t.read(path).ok()
}

fn list(t: &dyn Tree, path: &Path) -> Result<CpuSet, DiscoverError> {
    CpuSet::parse_list(&read(t, path)?).map_err(|e: CpuListError| DiscoverError::Parse {
        path: path.to_path_buf(),
        detail: e.to_string(),
    })
}

fn list_opt(t: &dyn Tree, path: &Path) -> Option<CpuSet> {
    read_opt(t, path).and_then(|x| CpuSet::parse_list(&x).ok())
}

fn num_opt<T: std::str::FromStr>(t: &dyn Tree, path: &Path) -> Option<T> {
    read_opt(t, path).and_then(|x| x.trim().parse().ok())
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
fn last_level_cache(t: &dyn Tree, cpu_dir: &Path) -> Option<(u8, u64, CpuSet)> {
    let cache = cpu_dir.join("cache");
    let entries = t.entries(&cache).ok()?;
    let mut best: Option<(u8, u64, CpuSet)> = None;
    for name in entries {
        if !name.starts_with("index") {
            continue;
        }
        let dir = cache.join(name);
        let kind = read_opt(t, &dir.join("type")).unwrap_or_default();
        if kind.trim() == "Instruction" {
            continue;
        }
        let (Some(level), Some(shared)) = (
            num_opt::<u8>(t, &dir.join("level")),
            list_opt(t, &dir.join("shared_cpu_list")),
        ) else {
            continue;
        };
        let size = read_opt(t, &dir.join("size")).map_or(0, |s| size_kib(&s));
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

/// Reads the topology under `root` (the directory playing `/sys`, or a
/// file holding such a tree packed: [`PACKED_MAGIC`]) and keeps the
/// online CPUs that are also in `allowed` (`None`: all online CPUs).
pub fn discover(
    root: &Path,
    name: &str,
    allowed: Option<&CpuSet>,
) -> Result<Machine, DiscoverError> {
    if root.is_file() {
        let packed = Packed::open(root).map_err(|source| DiscoverError::Read {
            path: root.to_path_buf(),
            source,
        })?;
        let Some(packed) = packed else {
            return Err(DiscoverError::Parse {
                path: root.to_path_buf(),
                detail: format!(
                    "a file, but not a packed sysfs tree (its first line must start with \
                     {PACKED_MAGIC:?}); name a directory playing /sys, or a packed tree"
                ),
            });
        };
        return discover_in(&packed, root, name, allowed);
    }
    discover_in(&Dir, root, name, allowed)
}

/// [`discover`] in tree `t`.
fn discover_in(
    t: &dyn Tree,
    root: &Path,
    name: &str,
    allowed: Option<&CpuSet>,
) -> Result<Machine, DiscoverError> {
    let cpu_root = root.join("devices/system/cpu");
    let online = list(t, &cpu_root.join("online"))?;

    // NUMA nodes: ids from `node/online`, else the nodeN directories.
    let node_root = root.join("devices/system/node");
    let mut node_ids: Vec<u32> = match list_opt(t, &node_root.join("online")) {
        Some(set) => set.iter().map(|n| n as u32).collect(),
        None => Vec::new(),
    };
    if node_ids.is_empty() {
        node_ids.push(0);
    }
    let have_nodes = t.is_dir(&node_root.join(format!("node{}", node_ids[0])));
    let mut raw_nodes = Vec::new();
    let mut node_of_cpu = std::collections::HashMap::new();
    for &id in &node_ids {
        let dir = node_root.join(format!("node{id}"));
        let cpus = if have_nodes {
            list(t, &dir.join("cpulist"))?
        } else {
            online
        };
        for cpu in cpus.iter() {
            node_of_cpu.insert(cpu, id);
        }
        let distances = if have_nodes {
            let path = dir.join("distance");
            read(t, &path)?
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
            mem_total_kib: read_opt(t, &dir.join("meminfo")).map_or(0, |m| mem_total_kib(&m)),
            distances,
        });
    }

    let mut raw_cpus = Vec::new();
    for cpu in online.iter() {
        let dir = cpu_root.join(format!("cpu{cpu}"));
        if !t.is_dir(&dir) {
            return Err(DiscoverError::Read {
                path: dir,
                source: std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "CPU listed online but has no directory",
                ),
            });
        }
        let topo = dir.join("topology");
        let mut siblings = list_opt(t, &topo.join("thread_siblings_list"))
            .or_else(|| list_opt(t, &topo.join("core_cpus_list")))
            .unwrap_or_default();
        siblings.insert(cpu);
        raw_cpus.push(RawCpu {
            id: cpu,
            package: num_opt(t, &topo.join("physical_package_id")).unwrap_or(0),
            siblings,
            llc: last_level_cache(t, &dir),
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

    /// A packed tree and the same files in a directory are one machine;
    /// a file missing from either is named by its path under the root.
    #[test]
    fn a_packed_tree_reads_as_the_directory_of_its_files() {
        let pack = crate::fixture_path("xeon-x5550-2s");
        let packed = Packed::open(&pack).unwrap().expect("a pack");
        let dir = tempfile::tempdir().unwrap();
        for (rel, text) in &packed.files {
            let p = dir.path().join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        }
        let a = discover(&pack, "x", None).unwrap();
        let b = discover(dir.path(), "x", None).unwrap();
        assert_eq!(format!("{a:?}"), format!("{b:?}"));
        let cpu = pack.join("devices/system/cpu");
        assert!(packed.is_dir(&cpu.join("cpu3")) && !packed.is_dir(&cpu.join("cpu99")));
        assert!(
            !packed.is_dir(&cpu.join("online")),
            "a file is no directory"
        );
        let mut caches = packed.entries(&cpu.join("cpu0/cache")).unwrap();
        caches.sort();
        assert_eq!(caches, ["index0", "index1", "index2", "index3"]);
        // A file that is not a pack is refused with what to do.
        let other = dir.path().join("notes.txt");
        fs::write(&other, "0-3\n").unwrap();
        let e = discover(&other, "x", None).unwrap_err().to_string();
        assert!(e.contains("not a packed sysfs tree"), "{e}");
        // A pack without the online list names it.
        let short = dir.path().join("short.sysfs");
        fs::write(
            &short,
            format!("{PACKED_MAGIC}\n== devices/system/cpu/possible\n0\n"),
        )
        .unwrap();
        let e = discover(&short, "x", None).unwrap_err().to_string();
        assert!(e.contains("short.sysfs/devices/system/cpu/online"), "{e}");
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
