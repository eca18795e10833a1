//! Keeping the kernel's movable work off partition CPUs: interrupts whose
//! affinity may be set (`/proc/irq/N/smp_affinity_list`) and the kernel's
//! unbound workqueues (`/sys/devices/virtual/workqueue/cpumask`).
//!
//! This touches the whole machine, so the broker does it only when the
//! operator turns it on (`isolate = true` in its configuration), for the
//! CPUs of exclusive cells. The first value it changes of each file is
//! saved ([`Saved`], kept by the broker in its state directory), and
//! [`restore`] writes every saved value back: when no CPU needs isolating
//! any more, when the broker stops, and when a broker starts and finds
//! values a previous run saved (it was killed).
//!
//! Mechanism only: which CPUs to keep clear is the caller's decision. The
//! files are reached through [`SysFiles`], a root directory (`/` on the
//! machine, a fixture tree in tests).
//!
//! Rules: an interrupt keeps the CPUs of its affinity outside `keep_off`;
//! one whose affinity lies entirely inside `keep_off` moves to every other
//! CPU of the machine; one the kernel refuses to move (per-CPU and
//! managed interrupts answer `EIO`) is reported and left. The workqueue
//! mask becomes its current value minus `keep_off` (if anything is left).

use allot_topo::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

/// The workqueue mask file, relative to the root.
pub const WORKQUEUE_MASK: &str = "sys/devices/virtual/workqueue/cpumask";

/// The files isolation reads and writes, under a root directory.
#[derive(Debug, Clone)]
pub struct SysFiles {
    root: PathBuf,
}

impl SysFiles {
    /// Files under `root` (`/` for this machine).
    pub fn new(root: impl Into<PathBuf>) -> SysFiles {
        SysFiles { root: root.into() }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn read(&self, rel: &str) -> io::Result<String> {
        Ok(std::fs::read_to_string(self.path(rel))?.trim().to_string())
    }

    fn write(&self, rel: &str, value: &str) -> io::Result<()> {
        // Never created: these are kernel files that exist (truncation is
        // a no-op on them, and what a fixture file needs).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(self.path(rel))?;
        io::Write::write_all(&mut f, value.as_bytes())
    }

    /// The interrupts that have an affinity file.
    fn irqs(&self) -> Vec<u32> {
        let Ok(dir) = std::fs::read_dir(self.path("proc/irq")) else {
            return vec![];
        };
        let mut irqs: Vec<u32> = dir
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|n: &u32| self.path(&irq_file(*n)).exists())
            .collect();
        irqs.sort_unstable();
        irqs
    }
}

fn irq_file(irq: u32) -> String {
    format!("proc/irq/{irq}/smp_affinity_list")
}

/// Values as they were before isolation changed them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Saved {
    /// Interrupt → its affinity list.
    pub irqs: BTreeMap<u32, String>,
    /// The workqueue mask, if changed.
    pub workqueue: Option<String>,
}

impl Saved {
    /// Whether nothing is saved (nothing to restore).
    pub fn is_empty(&self) -> bool {
        self.irqs.is_empty() && self.workqueue.is_none()
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// How many interrupt affinity and workqueue mask files were written successfully.
    pub changed: usize,
    /// Files that could not be written or read, and why.
    pub failed: Vec<(String, String)>,
}

/// Moves what can be moved off `keep_off` (CPUs of a machine whose CPUs
/// are `machine`), saving each value before its first change into
/// `saved`.
pub fn isolate(fs: &SysFiles, machine: &CpuSet, keep_off: &CpuSet, saved: &mut Saved) -> Report {
    let mut r = Report::default();
    let rest = machine.difference(keep_off);
    if keep_off.is_empty() || rest.is_empty() {
        return r;
    }
    for irq in fs.irqs() {
        let file = irq_file(irq);
        let now = match fs.read(&file).map_err(|e| e.to_string()).and_then(|t| {
            CpuSet::parse_list(&t)
                .map(|c| (t, c))
                .map_err(|e| e.to_string())
        }) {
            Ok(v) => v,
            Err(e) => {
                r.failed.push((file, e));
                continue;
            }
        };
        let (text, cpus) = now;
        if !cpus.intersects(keep_off) {
            continue;
        }
        let mut want = cpus.difference(keep_off);
        if want.is_empty() {
            want = rest;
        }
        match fs.write(&file, &want.to_string()) {
            Ok(()) => {
                saved.irqs.entry(irq).or_insert(text);
                r.changed += 1;
            }
            Err(e) => r.failed.push((file, e.to_string())),
        }
    }
    match fs.read(WORKQUEUE_MASK) {
        Ok(text) => match parse_mask(&text) {
            Some(mask) if mask.intersects(keep_off) && !mask.difference(keep_off).is_empty() => {
                match fs.write(WORKQUEUE_MASK, &format_mask(&mask.difference(keep_off))) {
                    Ok(()) => {
                        saved.workqueue.get_or_insert(text);
                        r.changed += 1;
                    }
                    Err(e) => r.failed.push((WORKQUEUE_MASK.into(), e.to_string())),
                }
            }
            Some(_) => {}
            None => r
                .failed
                .push((WORKQUEUE_MASK.into(), format!("unreadable mask {text:?}"))),
        },
        // No such file (an old kernel): nothing to move.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => r.failed.push((WORKQUEUE_MASK.into(), e.to_string())),
    }
    r
}

/// Writes every saved value back; what was restored leaves `saved`.
pub fn restore(fs: &SysFiles, saved: &mut Saved) -> Report {
    let mut r = Report::default();
    let irqs = std::mem::take(&mut saved.irqs);
    for (irq, value) in irqs {
        let file = irq_file(irq);
        match fs.write(&file, &value) {
            Ok(()) => r.changed += 1,
            // An interrupt that went away (a device removed) has nothing
            // left to restore.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => {
                r.failed.push((file, e.to_string()));
                saved.irqs.insert(irq, value);
            }
        }
    }
    if let Some(mask) = saved.workqueue.take() {
        match fs.write(WORKQUEUE_MASK, &mask) {
            Ok(()) => r.changed += 1,
            Err(e) => {
                r.failed.push((WORKQUEUE_MASK.into(), e.to_string()));
                saved.workqueue = Some(mask);
            }
        }
    }
    r
}

/// Reads a kernel CPU mask: hexadecimal 32-bit groups, most significant
/// first, separated by commas (`ff,00000003`).
pub fn parse_mask(text: &str) -> Option<CpuSet> {
    let mut set = CpuSet::default();
    let groups: Vec<&str> = text.trim().split(',').collect();
    for (i, g) in groups.iter().rev().enumerate() {
        let bits = u32::from_str_radix(g, 16).ok()?;
        for b in 0..32 {
            if bits & (1 << b) != 0 {
                let cpu = i * 32 + b;
                if cpu >= allot_topo::MAX_CPUS {
                    return None;
                }
                set.insert(cpu);
            }
        }
    }
    Some(set)
}

/// Writes a kernel CPU mask (the form [`parse_mask`] reads).
pub fn format_mask(set: &CpuSet) -> String {
    let groups = set.last().map_or(1, |l| l / 32 + 1);
    (0..groups)
        .rev()
        .map(|g| {
            let bits = (0..32)
                .filter(|b| set.contains(g * 32 + b))
                .fold(0u32, |m, b| m | 1 << b);
            if g == groups - 1 {
                format!("{bits:x}")
            } else {
                format!("{bits:08x}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// Where the broker keeps [`Saved`] values between runs.
pub fn saved_path(state_dir: &Path) -> PathBuf {
    state_dir.join("isolation.json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(s: &str) -> CpuSet {
        CpuSet::parse_list(s).unwrap()
    }

    /// A fixture: four interrupts and the workqueue mask on 8 CPUs.
    fn fixture() -> (tempfile::TempDir, SysFiles) {
        let d = tempfile::tempdir().unwrap();
        for (irq, aff) in [(0, "0"), (9, "0-7"), (24, "6"), (30, "2-3,6")] {
            let p = d.path().join(format!("proc/irq/{irq}"));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("smp_affinity_list"), format!("{aff}\n")).unwrap();
        }
        // A directory without an affinity file is not an interrupt to move.
        std::fs::create_dir_all(d.path().join("proc/irq/default")).unwrap();
        let wq = d.path().join(WORKQUEUE_MASK);
        std::fs::create_dir_all(wq.parent().unwrap()).unwrap();
        std::fs::write(&wq, "ff\n").unwrap();
        let fs = SysFiles::new(d.path());
        (d, fs)
    }

    fn read(fs: &SysFiles, rel: &str) -> String {
        fs.read(rel).unwrap()
    }

    #[test]
    fn isolation_moves_what_touches_the_partition_and_restore_undoes_it() {
        let (_d, fs) = fixture();
        let mut saved = Saved::default();
        let r = isolate(&fs, &set("0-7"), &set("6-7"), &mut saved);
        assert_eq!(r.changed, 4, "{r:?}"); // irq 9, 24, 30 and the workqueue
        assert_eq!(read(&fs, &irq_file(0)), "0");
        assert_eq!(read(&fs, &irq_file(9)), "0-5");
        assert_eq!(
            read(&fs, &irq_file(24)),
            "0-5",
            "wholly inside: to the rest"
        );
        assert_eq!(read(&fs, &irq_file(30)), "2-3");
        assert_eq!(read(&fs, WORKQUEUE_MASK), "3f");
        // A second pass (the partition grew) keeps the first saved values.
        isolate(&fs, &set("0-7"), &set("5-7"), &mut saved);
        assert_eq!(read(&fs, &irq_file(9)), "0-4");
        assert_eq!(saved.irqs[&9], "0-7");
        assert_eq!(saved.workqueue.as_deref(), Some("ff"));
        let r = restore(&fs, &mut saved);
        assert_eq!(r.failed, vec![]);
        assert!(saved.is_empty());
        for (irq, aff) in [(0, "0"), (9, "0-7"), (24, "6"), (30, "2-3,6")] {
            assert_eq!(read(&fs, &irq_file(irq)), aff);
        }
        assert_eq!(read(&fs, WORKQUEUE_MASK), "ff");
    }

    #[test]
    fn nothing_is_touched_without_a_partition_or_without_room_for_the_rest() {
        let (_d, fs) = fixture();
        let mut saved = Saved::default();
        assert_eq!(
            isolate(&fs, &set("0-7"), &CpuSet::default(), &mut saved).changed,
            0
        );
        assert_eq!(
            isolate(&fs, &set("0-7"), &set("0-7"), &mut saved).changed,
            0
        );
        assert!(saved.is_empty());
    }

    #[test]
    fn unwritable_files_are_reported_and_kept_for_a_later_restore() {
        let (d, fs) = fixture();
        let mut saved = Saved::default();
        isolate(&fs, &set("0-7"), &set("6"), &mut saved);
        // The interrupt's file disappears (a device removed): nothing to
        // restore there; the mask's file becomes a directory (unwritable):
        // reported, and kept.
        std::fs::remove_dir_all(d.path().join("proc/irq/24")).unwrap();
        let wq = d.path().join(WORKQUEUE_MASK);
        std::fs::remove_file(&wq).unwrap();
        std::fs::create_dir(&wq).unwrap();
        let r = restore(&fs, &mut saved);
        assert_eq!(r.failed.len(), 1, "{r:?}");
        assert_eq!(saved.workqueue.as_deref(), Some("ff"));
        assert!(saved.irqs.is_empty());
    }

    #[test]
    fn masks_read_and_write_like_the_kernel_s() {
        assert_eq!(parse_mask("ff").unwrap(), set("0-7"));
        assert_eq!(parse_mask("1,00000003").unwrap(), set("0-1,32"));
        assert_eq!(format_mask(&set("0-1,32")), "1,00000003");
        assert_eq!(format_mask(&CpuSet::default()), "0");
        assert!(parse_mask("xyz").is_none());
    }

    proptest! {
        #[test]
        fn masks_round_trip(cpus in proptest::collection::btree_set(0usize..300, 0..40)) {
            let s: CpuSet = cpus.into_iter().collect();
            prop_assert_eq!(parse_mask(&format_mask(&s)).unwrap(), s);
        }
    }
}
