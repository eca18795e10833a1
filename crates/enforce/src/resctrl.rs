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
//! fixture tree); [`allocate`] is the policy, a pure function from what
//! cells ask for to classes; [`Resctrl`] is the mechanism.
//!
//! Invariants:
//! - **Classes are scarce**: at most `closids - 1` cells have a class (the
//!   default group keeps one); an ask past that is refused with the reason,
//!   never given a shared class silently.
//! - **Ways are exclusive and contiguous**: a cell's ways are a contiguous
//!   range no other group's mask covers (CAT requires contiguous masks);
//!   cells are packed from the highest way down in cell order, and the
//!   default group keeps the lowest ways, at least `min_cbm_bits` of them.
//!   So asks never sum past `ways - min_cbm_bits`.
//! - **Shrink before grow**: every group that loses ways is narrowed
//!   first, and a group grows only into ways no other group holds at that
//!   moment ([`steps`]), so no two masks of groups holding threads overlap
//!   at any moment ([`Resctrl::apply`]).
//! - Groups a previous broker left are read back at [`Resctrl::open`]: the
//!   first `apply` keeps those of cells still asking and removes the rest.
//! - Bandwidth is a per-domain ceiling, rounded up to the hardware's
//!   granularity and never below its minimum; it is not exclusive (MBA
//!   throttles, it does not reserve).
//! - Absent resctrl (no mount, or a CPU without the features), every ask
//!   is refused with [`Absent`]'s reason; nothing is written.

use crate::cgroupfs::CgroupFs;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Where the kernel mounts resctrl.
pub const MOUNT: &str = "/sys/fs/resctrl";

/// What the L3 cache allocation offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L3 {
    /// Ways per cache domain (bits in `cbm_mask`).
    pub ways: u32,
    /// The fewest ways a mask may have.
    pub min_bits: u32,
    /// Classes of service.
    pub closids: u32,
}

/// What the memory bandwidth allocation offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mb {
    /// The lowest share, percent.
    pub min: u32,
    /// Shares are multiples of this, percent.
    pub gran: u32,
    /// Classes of service.
    pub closids: u32,
}

/// What a resctrl mount offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// L3 cache allocation, if the CPU has it.
    pub l3: Option<L3>,
    /// Memory bandwidth allocation, if the CPU has it.
    pub mb: Option<Mb>,
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
            l3,
            mb,
            domains: domains(&schemata),
            monitoring,
        })
    }

    /// Classes of service cells may have (the default group keeps one).
    pub fn classes_for_cells(&self) -> u32 {
        let all = [self.l3.map(|l| l.closids), self.mb.map(|m| m.closids)];
        all.into_iter()
            .flatten()
            .min()
            .unwrap_or(1)
            .saturating_sub(1)
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

/// What a cell asks for: L3 ways of its own (0: none) and a bandwidth
/// ceiling, percent (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub cell: u64,
    /// Ways of every cache domain it alone may fill.
    pub ways: u32,
    /// Its memory bandwidth ceiling, percent.
    pub bandwidth: u32,
}

/// A cell's class of service.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    pub cell: u64,
    /// Its capacity bitmask (the default group's when it asked for no
    /// ways of its own).
    pub mask: u64,
    /// Its bandwidth ceiling, percent (100 when it asked for none).
    pub bandwidth: u32,
}

/// Classes for every cell of `asks` and the default group's mask
/// (see the module's invariants), or why they cannot be had.
pub fn allocate(f: &Facts, asks: &[Ask]) -> Result<(Vec<Class>, u64), String> {
    let mut asks: Vec<Ask> = asks
        .iter()
        .copied()
        .filter(|a| a.ways > 0 || a.bandwidth > 0)
        .collect();
    asks.sort_by_key(|a| a.cell);
    if asks.len() as u32 > f.classes_for_cells() {
        return Err(format!(
            "{} cells ask for cache ways or memory bandwidth, and the hardware has classes of \
             service for {} besides the default group",
            asks.len(),
            f.classes_for_cells()
        ));
    }
    let full = f.l3.map_or(0, |l| (1u64 << l.ways) - 1);
    let mut next_top = f.l3.map_or(0, |l| l.ways);
    let mut out = Vec::with_capacity(asks.len());
    let asked_ways: u32 = asks.iter().map(|a| a.ways).sum();
    if asked_ways > 0 {
        let Some(l3) = f.l3 else {
            return Err("this CPU has no L3 cache allocation (resctrl offers no L3)".into());
        };
        if asked_ways > l3.ways - l3.min_bits {
            return Err(format!(
                "cells ask for {asked_ways} L3 ways of their own; {} of the {} may be given, \
                 the default group keeping {}",
                l3.ways - l3.min_bits,
                l3.ways,
                l3.min_bits
            ));
        }
        if let Some(a) = asks.iter().find(|a| a.ways > 0 && a.ways < l3.min_bits) {
            return Err(format!(
                "cell {} asks for {} L3 ways; a mask has at least {}",
                a.cell, a.ways, l3.min_bits
            ));
        }
    }
    if asks.iter().any(|a| a.bandwidth > 100) {
        return Err("a bandwidth ceiling is a percentage, 1 to 100".into());
    }
    if asks.iter().any(|a| a.bandwidth > 0) && f.mb.is_none() {
        return Err("this CPU has no memory bandwidth allocation (resctrl offers no MB)".into());
    }
    let mut taken = 0u64;
    for a in &asks {
        let mask = if a.ways > 0 {
            next_top -= a.ways;
            let m = ((1u64 << a.ways) - 1) << next_top;
            taken |= m;
            Some(m)
        } else {
            None
        };
        let bandwidth = match (a.bandwidth, f.mb) {
            (0, _) | (_, None) => 100,
            (b, Some(mb)) => b
                .div_ceil(mb.gran)
                .saturating_mul(mb.gran)
                .clamp(mb.min, 100),
        };
        out.push((a.cell, mask, bandwidth));
    }
    let default = full & !taken;
    Ok((
        out.into_iter()
            .map(|(cell, mask, bandwidth)| Class {
                cell,
                mask: mask.unwrap_or(default),
                bandwidth,
            })
            .collect(),
        default,
    ))
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
    if f.l3.is_some() {
        out.push_str(&line("L3", &|| format!("{mask:x}")));
    }
    if f.mb.is_some() {
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
        let full = facts.l3.map_or(0, |l| (1u64 << l.ways) - 1);
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

    /// Makes the classes of `asks` the kernel's, in the order
    /// [`steps`] gives (no two masks of groups with threads overlap at
    /// any moment); groups of cells no longer asking are removed first
    /// (their threads return to the default group). Nothing is written
    /// when [`allocate`] refuses.
    pub fn apply(&mut self, asks: &[Ask]) -> Result<(), String> {
        let (classes, default) = allocate(&self.facts, asks)?;
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
        let min_bits = self.facts.l3.map_or(1, |l| l.min_bits);
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
            domains: vec![0, 1],
            monitoring: vec![],
        }
    }

    fn ask(cell: u64, ways: u32, bandwidth: u32) -> Ask {
        Ask {
            cell,
            ways,
            bandwidth,
        }
    }

    #[test]
    fn ways_are_exclusive_contiguous_and_packed_from_the_top() {
        let f = facts(12, 1, 16, true);
        let (classes, default) =
            allocate(&f, &[ask(3, 4, 0), ask(1, 2, 0), ask(7, 0, 35)]).unwrap();
        // Cell order: 1 takes the top two ways, 3 the next four; 7 shares
        // the default group's ways with a 40 % ceiling (35 rounded up).
        assert_eq!(
            classes[0],
            Class {
                cell: 1,
                mask: 0xc00,
                bandwidth: 100
            }
        );
        assert_eq!(
            classes[1],
            Class {
                cell: 3,
                mask: 0x3c0,
                bandwidth: 100
            }
        );
        assert_eq!(default, 0x03f);
        assert_eq!(
            classes[2],
            Class {
                cell: 7,
                mask: 0x03f,
                bandwidth: 40
            }
        );
        let masks: Vec<u64> = classes.iter().take(2).map(|c| c.mask).collect();
        assert_eq!(masks[0] & masks[1], 0);
        assert_eq!((masks[0] | masks[1]) & default, 0);
        assert_eq!(schemata(&f, 0xc00, 100), "L3:0=c00;1=c00\nMB:0=100;1=100\n");
    }

    #[test]
    fn scarce_classes_and_ways_are_refused_with_the_reason() {
        let f = facts(12, 2, 3, true);
        let e = allocate(&f, &[ask(1, 2, 0), ask(2, 2, 0), ask(3, 2, 0)]).unwrap_err();
        assert!(
            e.contains("classes of service for 2 besides the default group"),
            "{e}"
        );
        let e = allocate(&f, &[ask(1, 6, 0), ask(2, 5, 0)]).unwrap_err();
        assert!(e.contains("10 of the 12 may be given"), "{e}");
        let e = allocate(&f, &[ask(1, 1, 0)]).unwrap_err();
        assert!(e.contains("a mask has at least 2"), "{e}");
        let e = allocate(&facts(12, 1, 16, false), &[ask(1, 0, 50)]).unwrap_err();
        assert!(e.contains("no memory bandwidth allocation"), "{e}");
        // Nothing asked: no class, the default group keeps everything.
        let (classes, default) = allocate(&f, &[ask(1, 0, 0)]).unwrap();
        assert!(classes.is_empty());
        assert_eq!(default, 0xfff);
        // A tiny ceiling is raised to the hardware's minimum.
        let (classes, _) = allocate(&f, &[ask(1, 0, 1)]).unwrap();
        assert_eq!(classes[0].bandwidth, 10);
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
        assert_eq!(r.facts().classes_for_cells(), 3);
        assert_eq!(r.facts().monitoring, ["llc_occupancy", "mbm_total_bytes"]);
        r.apply(&[ask(4, 3, 50)]).unwrap();
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
        r.apply(&[ask(4, 3, 30)]).unwrap();
        assert_eq!(
            read("allot-cell-4/schemata"),
            "L3:0=e00;1=e00\nMB:0=30;1=30\n"
        );
        // The cell stops asking: its group goes, the default gets it all.
        r.apply(&[]).unwrap();
        assert!(!dir.path().join("allot-cell-4").exists());
        assert_eq!(read("schemata"), "L3:0=fff;1=fff\nMB:0=100;1=100\n");
        // A refusal writes nothing.
        let e = r.apply(&[ask(1, 12, 0)]).unwrap_err();
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
        r.apply(&[ask(5, 2, 0)]).unwrap();
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
