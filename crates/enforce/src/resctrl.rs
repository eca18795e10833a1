//! Cache ways and memory bandwidth per cell: the kernel's resctrl
//! filesystem (Intel RDT's CAT and MBA, AMD's QoS equivalents), the last
//! resources Tessellation's cells partition besides CPUs and memory.
//!
//! resctrl offers a few *classes of service* (`info/L3/num_closids`,
//! `info/MB/num_closids`; the default group, the filesystem's root, holds
//! one). A class has a capacity bitmask of L3 ways per cache domain
//! (`L3:0=ff0;1=ff0`) and a share of memory bandwidth per domain
//! (`MB:0=50;1=50`, percent); a thread runs with the class of the group
//! whose `tasks` lists it, and the threads it creates inherit it.
//!
//! [`Facts`] reads what the hardware offers from a mount (the kernel's or a
//! fixture tree); the policy, a pure function from what cells ask for to
//! classes, is the planner's (`allot_plan::cache::allocate`); [`Resctrl`]
//! is the mechanism that writes them.
//!
//! Invariants (those of the classes themselves are `allot_plan::cache`'s):
//! - **Shrink before grow**: every group that loses ways is narrowed
//!   first, and a group grows only into ways no other group holds at that
//!   moment ([`steps`]), so no two masks of groups holding threads overlap
//!   at any moment ([`Resctrl::apply`]).
//! - Groups a previous broker left are read back at [`Resctrl::open`]: the
//!   first `apply` keeps those of cells still asking and removes the rest.
//! - Absent resctrl (no mount, or a CPU without the features), every ask
//!   is refused with [`Absent`]'s reason; nothing is written.

use crate::cgroupfs::CgroupFs;
use allot_topo::resctrl::{Class, L3, Mb, Offer};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the kernel mounts resctrl.
pub const MOUNT: &str = "/sys/fs/resctrl";

/// What a resctrl mount offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// L3 cache and memory bandwidth allocation, each if the CPU has it.
    pub offer: Offer,
    /// The cache domains (the ids in the root's `schemata`).
    pub domains: Vec<u32>,
    /// Monitoring events the hardware counts (`info/L3_MON/mon_features`).
    pub monitoring: Vec<String>,
}

/// Why cache and bandwidth cannot be partitioned here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Absent(pub String);

impl fmt::Display for Absent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Facts {
    /// Reads the mount at `root`.
    pub fn read(fs: &dyn CgroupFs, root: &Path) -> Result<Facts, Absent> {
        let schemata = fs.read(&root.join("schemata")).map_err(|_| {
            Absent(format!(
                "no resctrl at {} (cache ways and memory bandwidth need a CPU with Intel RDT or \
                 AMD QoS and `mount -t resctrl resctrl {}`)",
                root.display(),
                root.display()
            ))
        })?;
        let num = |p: &str| -> Option<u32> { fs.read(&root.join(p)).ok()?.trim().parse().ok() };
        let l3 = fs
            .read(&root.join("info/L3/cbm_mask"))
            .ok()
            .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
            .map(|mask| L3 {
                ways: mask.count_ones(),
                min_bits: num("info/L3/min_cbm_bits").unwrap_or(1).max(1),
                closids: num("info/L3/num_closids").unwrap_or(1),
            });
        let mb = num("info/MB/min_bandwidth").map(|min| Mb {
            min,
            gran: num("info/MB/bandwidth_gran").unwrap_or(10).max(1),
            closids: num("info/MB/num_closids").unwrap_or(1),
        });
        if l3.is_none() && mb.is_none() {
            return Err(Absent(format!(
                "resctrl at {} offers neither L3 allocation nor memory bandwidth allocation",
                root.display()
            )));
        }
        let monitoring = fs
            .read(&root.join("info/L3_MON/mon_features"))
            .map(|t| t.lines().map(|l| l.trim().to_string()).collect())
            .unwrap_or_default();
        Ok(Facts {
            offer: Offer { l3, mb },
            domains: domains(&schemata),
            monitoring,
        })
    }
}

/// The cache domain ids of a `schemata` text (its first resource line).
fn domains(schemata: &str) -> Vec<u32> {
    let Some(line) = schemata.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return vec![];
    };
    let Some((_, list)) = line.split_once(':') else {
        return vec![];
    };
    list.split(';')
        .filter_map(|d| d.split_once('=')?.0.trim().parse().ok())
        .collect()
}

/// The first domain's value of resource `res` in a `schemata` text.
fn first_value(schemata: &str, res: &str, radix: u32) -> Option<u64> {
    let line = schemata
        .lines()
        .map(str::trim)
        .find(|l| l.split(':').next() == Some(res))?;
    let (_, list) = line.split_once(':')?;
    let (_, v) = list.split(';').next()?.split_once('=')?;
    u64::from_str_radix(v.trim(), radix).ok()
}

/// The order in which to write the masks `new` over `old` (the default
/// group is `None`; a group absent from `old` is new and holds no thread
/// yet): every group that loses ways first goes to what it keeps
/// (`old ∩ new`, when that is still a mask of `min_bits`); then, one at a
/// time, a group whose new mask overlaps no other group's mask of the
/// moment goes to it. Since the old masks are disjoint and so are the new
/// ones, that order exists unless groups trade ways in a cycle, which
/// packing from the top never makes (the rest is then written in order).
pub fn steps(
    old: &[(Option<u64>, u64)],
    new: &[(Option<u64>, u64)],
    min_bits: u32,
) -> Vec<(Option<u64>, u64)> {
    let mut now: Vec<(Option<u64>, u64)> = old
        .iter()
        .copied()
        .filter(|(w, _)| new.iter().any(|(n, _)| n == w))
        .collect();
    let mut out = Vec::new();
    for &(who, mask) in new {
        if let Some(e) = now.iter_mut().find(|(w, _)| *w == who) {
            let keep = e.1 & mask;
            if keep != e.1 && keep.count_ones() >= min_bits {
                e.1 = keep;
                out.push((who, keep));
            }
        }
    }
    let mut left: Vec<(Option<u64>, u64)> = new
        .iter()
        .copied()
        .filter(|(w, m)| now.iter().find(|(n, _)| n == w).map(|(_, c)| c) != Some(m))
        .collect();
    while !left.is_empty() {
        let free = left
            .iter()
            .position(|(w, m)| now.iter().all(|(n, c)| n == w || c & m == 0));
        let (who, mask) = left.remove(free.unwrap_or(0));
        match now.iter_mut().find(|(w, _)| *w == who) {
            Some(e) => e.1 = mask,
            None => now.push((who, mask)),
        }
        out.push((who, mask));
    }
    out
}

/// The `schemata` text of a class over `domains`.
pub fn schemata(f: &Facts, mask: u64, bandwidth: u32) -> String {
    let line = |res: &str, v: &dyn Fn() -> String| {
        let parts: Vec<String> = f.domains.iter().map(|d| format!("{d}={}", v())).collect();
        format!("{res}:{}\n", parts.join(";"))
    };
    let mut out = String::new();
    if f.offer.l3.is_some() {
        out.push_str(&line("L3", &|| format!("{mask:x}")));
    }
    if f.offer.mb.is_some() {
        out.push_str(&line("MB", &|| bandwidth.to_string()));
    }
    out
}

/// The resctrl mechanism: one group `<prefix>-cell-N` per cell with a
/// class, and the default group's mask.
#[derive(Debug)]
pub struct Resctrl {
    fs: Arc<dyn CgroupFs>,
    root: PathBuf,
    prefix: String,
    facts: Facts,
    /// Classes written now.
    classes: Vec<Class>,
    /// The default group's mask now.
    default: u64,
}

impl Resctrl {
    /// Opens the mount at `root`; groups are named `<prefix>-cell-N`.
    pub fn open(fs: Arc<dyn CgroupFs>, root: &Path, prefix: &str) -> Result<Resctrl, Absent> {
        let facts = Facts::read(fs.as_ref(), root)?;
        let full = facts.offer.l3.map_or(0, |l| (1u64 << l.ways) - 1);
        // Groups an earlier broker left (its cells may still run, or may
        // have ended meanwhile): known, so the first `apply` keeps or
        // removes them and the default group gets their ways back.
        let leftover = format!("{prefix}-cell-");
        let classes: Vec<Class> = fs
            .children(root)
            .unwrap_or_default()
            .iter()
            .filter_map(|name| {
                let cell = name.strip_prefix(&leftover)?.parse().ok()?;
                let text = fs.read(&root.join(name).join("schemata")).ok()?;
                Some(Class {
                    cell,
                    mask: first_value(&text, "L3", 16).unwrap_or(full),
                    bandwidth: first_value(&text, "MB", 10).unwrap_or(100) as u32,
                })
            })
            .collect();
        let default = classes
            .iter()
            .filter(|c| c.mask != full)
            .fold(full, |d, c| d & !c.mask);
        Ok(Resctrl {
            fs,
            root: root.to_path_buf(),
            prefix: prefix.to_string(),
            facts,
            classes,
            default,
        })
    }

    /// What the hardware offers.
    pub fn facts(&self) -> &Facts {
        &self.facts
    }

    fn group(&self, cell: u64) -> PathBuf {
        self.root.join(format!("{}-cell-{cell}", self.prefix))
    }

    /// Makes `classes` and the default group's mask `default` (what
    /// `allot_plan::cache::allocate` decided) the kernel's, in the order
    /// [`steps`] gives (no two masks of groups with threads overlap at
    /// any moment); groups of cells without a class are removed first
    /// (their threads return to the default group).
    pub fn apply(&mut self, classes: &[Class], default: u64) -> Result<(), String> {
        let classes = classes.to_vec();
        for old in &self.classes {
            if !classes.iter().any(|c| c.cell == old.cell) {
                let _ = self.fs.rmdir(&self.group(old.cell));
            }
        }
        let old: Vec<(Option<u64>, u64)> = std::iter::once((None, self.default))
            .chain(self.classes.iter().map(|c| (Some(c.cell), c.mask)))
            .collect();
        let new: Vec<(Option<u64>, u64)> = std::iter::once((None, default))
            .chain(classes.iter().map(|c| (Some(c.cell), c.mask)))
            .collect();
        let min_bits = self.facts.offer.l3.map_or(1, |l| l.min_bits);
        let mut writes = steps(&old, &new, min_bits);
        // A class whose ways stay but whose bandwidth ceiling moved.
        for c in &classes {
            let moved = self
                .classes
                .iter()
                .any(|o| o.cell == c.cell && o.bandwidth != c.bandwidth);
            if moved && !writes.iter().any(|(w, _)| *w == Some(c.cell)) {
                writes.push((Some(c.cell), c.mask));
            }
        }
        for (who, mask) in writes {
            let (dir, bandwidth) = match who {
                None => (self.root.clone(), 100),
                Some(cell) => {
                    let g = self.group(cell);
                    if !self.fs.exists(&g) {
                        self.fs
                            .mkdir(&g)
                            .map_err(|e| format!("make {}: {e}", g.display()))?;
                    }
                    let bw = classes
                        .iter()
                        .find(|c| c.cell == cell)
                        .map_or(100, |c| c.bandwidth);
                    (g, bw)
                }
            };
            self.fs
                .write(
                    &dir.join("schemata"),
                    &schemata(&self.facts, mask, bandwidth),
                )
                .map_err(|e| format!("set the class of {}: {e}", dir.display()))?;
        }
        self.classes = classes;
        self.default = default;
        Ok(())
    }

    /// Puts threads `tids` of cell `cell` in its class (threads they
    /// create later inherit it). A cell without a class has nothing to do.
    pub fn join(&self, cell: u64, tids: &[u32]) -> Result<(), String> {
        if !self.classes.iter().any(|c| c.cell == cell) {
            return Ok(());
        }
        let tasks = self.group(cell).join("tasks");
        for t in tids {
            self.fs
                .write(&tasks, &t.to_string())
                .map_err(|e| format!("put thread {t} in cell {cell}'s class: {e}"))?;
        }
        Ok(())
    }

    /// Cell `cell`'s class, if it has one.
    pub fn class(&self, cell: u64) -> Option<Class> {
        self.classes.iter().find(|c| c.cell == cell).copied()
    }

    /// Last-level cache bytes and memory traffic (bytes so far) of cell
    /// `cell`'s class, summed over the domains, where the hardware counts
    /// them.
    pub fn usage(&self, cell: u64) -> Option<(u64, u64)> {
        self.class(cell)?;
        let mon = self.group(cell).join("mon_data");
        let mut occupancy = None;
        let mut traffic = None;
        for d in self.fs.children(&mon).unwrap_or_default() {
            let read = |f: &str| -> Option<u64> {
                self.fs
                    .read(&mon.join(&d).join(f))
                    .ok()?
                    .trim()
                    .parse()
                    .ok()
            };
            if let Some(v) = read("llc_occupancy") {
                *occupancy.get_or_insert(0) += v;
            }
            if let Some(v) = read("mbm_total_bytes") {
                *traffic.get_or_insert(0) += v;
            }
        }
        Some((occupancy?, traffic.unwrap_or(0)))
    }
}

/// A resctrl mount as a fixture tree under `dir`, for tests on machines
/// without one: 12 L3 ways (at least one per mask), memory bandwidth
/// allocation (10 % steps), four classes of service, cache occupancy and
/// traffic monitoring, on cache `domains`.
pub fn fixture(dir: &Path, domains: &[u32]) -> io::Result<Arc<crate::cgroupfs::FixtureFs>> {
    let fs = Arc::new(crate::cgroupfs::FixtureFs::new(
        crate::cgroupfs::FixtureLayout::Resctrl,
    ));
    fs.populate(dir)?;
    let each = |v: &str| {
        let parts: Vec<String> = domains.iter().map(|d| format!("{d}={v}")).collect();
        parts.join(";")
    };
    let schemata = format!("    L3:{}\n    MB:{}\n", each("fff"), each("100"));
    for (f, v) in [
        ("schemata", schemata.as_str()),
        ("info/L3/cbm_mask", "fff\n"),
        ("info/L3/min_cbm_bits", "1\n"),
        ("info/L3/num_closids", "4\n"),
        ("info/MB/min_bandwidth", "10\n"),
        ("info/MB/bandwidth_gran", "10\n"),
        ("info/MB/num_closids", "4\n"),
        (
            "info/L3_MON/mon_features",
            "llc_occupancy\nmbm_total_bytes\n",
        ),
    ] {
        let p = dir.join(f);
        std::fs::create_dir_all(p.parent().unwrap_or(dir))?;
        std::fs::write(p, v)?;
    }
    Ok(fs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(ways: u32, min_bits: u32, closids: u32, mb: bool) -> Facts {
        Facts {
            offer: Offer {
                l3: Some(L3 {
                    ways,
                    min_bits,
                    closids,
                }),
                mb: mb.then_some(Mb {
                    min: 10,
                    gran: 10,
                    closids,
                }),
            },
            domains: vec![0, 1],
            monitoring: vec![],
        }
    }

    /// Writes the classes the planner decides for `asks` (cell, ways,
    /// bandwidth).
    fn apply(r: &mut Resctrl, asks: &[(u64, u32, u32)]) -> Result<(), String> {
        let asks: Vec<allot_plan::cache::Ask> = asks
            .iter()
            .map(|&(cell, ways, bandwidth)| allot_plan::cache::Ask {
                cell,
                ways,
                bandwidth,
            })
            .collect();
        let (classes, default) = allot_plan::cache::allocate(&r.facts().offer, &asks)?;
        r.apply(&classes, default)
    }

    #[test]
    fn a_class_is_written_for_every_domain() {
        let f = facts(12, 1, 16, true);
        assert_eq!(schemata(&f, 0xc00, 100), "L3:0=c00;1=c00\nMB:0=100;1=100\n");
        let no_mb = facts(12, 1, 16, false);
        assert_eq!(schemata(&no_mb, 0x00f, 40), "L3:0=f;1=f\n");
    }

    #[test]
    fn masks_shrink_before_others_grow_into_them() {
        // Cell 1 had the top four ways; now cell 1 has two and cell 2 the
        // next two (both out of cell 1's old range), the default the rest.
        let old = [(None, 0x0ff), (Some(1), 0xf00)];
        let new = [(None, 0x0ff), (Some(1), 0xc00), (Some(2), 0x300)];
        let s = steps(&old, &new, 1);
        assert_eq!(s, [(Some(1), 0xc00), (Some(2), 0x300)]);
        // Every moment: the masks of groups that exist and hold threads
        // are disjoint (a new group holds none until written).
        let check = |old: &[(Option<u64>, u64)], new: &[(Option<u64>, u64)]| {
            // (`apply` removes the groups of cells no longer asking first.)
            let mut now: Vec<(Option<u64>, u64)> = old
                .iter()
                .copied()
                .filter(|(w, _)| w.is_none() || new.iter().any(|(n, _)| n == w))
                .collect();
            for (who, mask) in steps(old, new, 1) {
                match now.iter_mut().find(|(w, _)| *w == who) {
                    Some(e) => e.1 = mask,
                    None => now.push((who, mask)),
                }
                for (i, a) in now.iter().enumerate() {
                    for b in &now[i + 1..] {
                        assert_eq!(a.1 & b.1, 0, "{now:?}");
                    }
                }
            }
            let mut got = now.clone();
            got.sort();
            let mut want = new.to_vec();
            want.sort();
            assert_eq!(got, want);
        };
        check(&old, &new);
        // A cell ends its ways: the default widens after.
        check(&[(None, 0x0ff), (Some(1), 0xf00)], &[(None, 0xfff)]);
        // A cell's ways move wholly (nothing kept): it moves first, then
        // the default grows into what it left.
        check(
            &[(None, 0x03f), (Some(5), 0x0c0), (Some(9), 0xf00)],
            &[(None, 0x3ff), (Some(5), 0xc00)],
        );
        // Two cells swap sizes.
        check(
            &[(None, 0x00f), (Some(1), 0xf00), (Some(2), 0x0f0)],
            &[(None, 0x00f), (Some(1), 0xc00), (Some(2), 0x3f0)],
        );
    }

    fn mount(dir: &Path) -> Arc<crate::cgroupfs::FixtureFs> {
        fixture(dir, &[0, 1]).unwrap()
    }

    #[test]
    fn a_fixture_mount_gets_classes_and_threads_and_gives_them_back() {
        let dir = tempfile::tempdir().unwrap();
        let fs = mount(dir.path());
        let mut r = Resctrl::open(fs.clone(), dir.path(), "allot").unwrap();
        assert_eq!(r.facts().domains, [0, 1]);
        assert_eq!(r.facts().offer.classes_for_cells(), 3);
        assert_eq!(r.facts().monitoring, ["llc_occupancy", "mbm_total_bytes"]);
        apply(&mut r, &[(4, 3, 50)]).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(
            read("allot-cell-4/schemata"),
            "L3:0=e00;1=e00\nMB:0=50;1=50\n"
        );
        assert_eq!(read("schemata"), "L3:0=1ff;1=1ff\nMB:0=100;1=100\n");
        r.join(4, &[100, 101]).unwrap();
        assert_eq!(read("allot-cell-4/tasks"), "101");
        // A cell without a class has nothing to join.
        r.join(9, &[200]).unwrap();
        assert!(!dir.path().join("allot-cell-9").exists());
        // Monitoring, summed over the domains.
        for (d, occ) in [("mon_L3_00", "1000"), ("mon_L3_01", "24")] {
            let m = dir.path().join("allot-cell-4/mon_data").join(d);
            std::fs::create_dir_all(&m).unwrap();
            std::fs::write(m.join("llc_occupancy"), occ).unwrap();
            std::fs::write(m.join("mbm_total_bytes"), "5").unwrap();
        }
        assert_eq!(r.usage(4), Some((1024, 10)));
        // Its ceiling moves, its ways stay: the new ceiling is written.
        apply(&mut r, &[(4, 3, 30)]).unwrap();
        assert_eq!(
            read("allot-cell-4/schemata"),
            "L3:0=e00;1=e00\nMB:0=30;1=30\n"
        );
        // The cell stops asking: its group goes, the default gets it all.
        apply(&mut r, &[]).unwrap();
        assert!(!dir.path().join("allot-cell-4").exists());
        assert_eq!(read("schemata"), "L3:0=fff;1=fff\nMB:0=100;1=100\n");
        // A refusal writes nothing.
        let e = apply(&mut r, &[(1, 12, 0)]).unwrap_err();
        assert!(e.contains("11 of the 12 may be given"), "{e}");
        assert!(!dir.path().join("allot-cell-1").exists());
    }

    #[test]
    fn groups_an_earlier_broker_left_are_kept_or_removed_at_the_first_apply() {
        let dir = tempfile::tempdir().unwrap();
        let fs = mount(dir.path());
        for (cell, schemata) in [
            (9, "L3:0=f00;1=f00\nMB:0=50;1=50\n"),
            (5, "L3:0=0c0;1=0c0\n"),
        ] {
            let g = dir.path().join(format!("allot-cell-{cell}"));
            fs.mkdir(&g).unwrap();
            std::fs::write(g.join("schemata"), schemata).unwrap();
        }
        std::fs::write(
            dir.path().join("schemata"),
            "L3:0=03f;1=03f\nMB:0=100;1=100\n",
        )
        .unwrap();
        let mut r = Resctrl::open(fs, dir.path(), "allot").unwrap();
        assert_eq!(r.class(9).map(|c| (c.mask, c.bandwidth)), Some((0xf00, 50)));
        // Cell 5 still runs (now asking two ways); cell 9 ended.
        apply(&mut r, &[(5, 2, 0)]).unwrap();
        assert!(!dir.path().join("allot-cell-9").exists());
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(
            read("allot-cell-5/schemata"),
            "L3:0=c00;1=c00\nMB:0=100;1=100\n"
        );
        assert_eq!(read("schemata"), "L3:0=3ff;1=3ff\nMB:0=100;1=100\n");
    }

    #[test]
    fn without_resctrl_every_ask_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let fs = Arc::new(crate::cgroupfs::FixtureFs::new(
            crate::cgroupfs::FixtureLayout::Resctrl,
        ));
        let e = Resctrl::open(fs, &dir.path().join("resctrl"), "allot").unwrap_err();
        assert!(e.0.contains("Intel RDT or AMD QoS"), "{e}");
    }

    #[test]
    fn domains_come_from_the_schemata() {
        assert_eq!(
            domains("    L3:0=fffff;1=fffff\n    MB:0=100;1=100\n"),
            [0, 1]
        );
        assert_eq!(domains("MB:0=100\n"), [0]);
        assert!(domains("").is_empty());
    }
}
