//! The `io` kind: a thread's share of each block device, as a weight
//! 1..[`IO_MAX`].
//!
//! Two mechanisms, chosen once when the kind is built:
//!
//! - **cgroup weights** ([`IoOps::Weights`]) when `ALLOT_IO_CGROUP` names a
//!   cgroup v1 `blkio` directory this process may write (its cell's, or
//!   one an operator delegated): a thread holding weights moves itself
//!   into the group of exactly those weights under `<dir>` ([`group_of`]:
//!   made on first use, one `blkio.bfq.weight_device` line per device it
//!   holds; devices it does not constrain keep BFQ's default weight) and
//!   back to `<dir>` when it holds nothing. So threads of one process get
//!   different weights (v1 places threads, not only processes, in blkio
//!   groups). The kernel honours the weight only on devices scheduled by
//!   BFQ: a request with a non-zero weight on a device with another
//!   scheduler is refused ([`IoOps::unenforced`]) with the command that
//!   switches it. cgroup v2's `io.weight` applies to whole processes
//!   (`io` is not a threaded controller), so per-thread weights need v1.
//! - **I/O priority** ([`IoOps::Priority`]) otherwise: the thread's
//!   best-effort level from the largest weight it holds, the idle class
//!   when every device is 0 (`ioprio_set`). It orders requests of one
//!   device queue; no scheduler but BFQ honours it either, so it is
//!   advisory.
//!
//! With priorities a thread has one value for every device: the largest
//! weight it holds (a device it does not constrain counts as the most).

use super::kind::{Device, KindOps};
use std::path::{Path, PathBuf};

/// Largest `io` weight (BFQ's range is 1..=1000).
pub const IO_MAX: f64 = 1000.0;

/// `io`'s operations.
#[derive(Debug)]
pub enum IoOps {
    /// Threads move into per-weight blkio groups under `dir`; `devices`
    /// are the kind's devices (`major:minor`).
    Weights {
        /// The blkio directory (`ALLOT_IO_CGROUP`).
        dir: PathBuf,
        /// Device index → `major:minor`.
        devices: Vec<String>,
    },
    /// The thread's I/O priority.
    Priority,
}

impl IoOps {
    /// Weights under `ALLOT_IO_CGROUP` when it names a writable cgroup v1
    /// blkio directory with BFQ weights, else priorities.
    pub fn from_env(devices: &[Device]) -> IoOps {
        let dir = std::env::var_os(allot_proto::env::IO_CGROUP).map(PathBuf::from);
        match dir {
            Some(dir) if dir.join("blkio.bfq.weight").exists() => IoOps::Weights {
                dir,
                devices: devices.iter().map(|d| d.name.clone()).collect(),
            },
            _ => IoOps::Priority,
        }
    }

    fn set_ioprio(class: i32, level: i32) -> std::io::Result<()> {
        const IOPRIO_WHO_PROCESS: libc::c_int = 1;
        let value = (class << 13) | level;
        // SAFETY: ioprio_set takes plain integers; who = 0 is the caller
        // (for IOPRIO_WHO_PROCESS, a thread id; 0 means the calling thread).
        let r = unsafe { libc::syscall(libc::SYS_ioprio_set, IOPRIO_WHO_PROCESS, 0, value) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }

    fn priority(amounts: &[Option<f64>]) -> std::io::Result<()> {
        const CLASS_BE: i32 = 2;
        const CLASS_IDLE: i32 = 3;
        match weight_of(amounts) {
            None => Self::set_ioprio(0, 0),
            Some(w) if w <= 0.0 => Self::set_ioprio(CLASS_IDLE, 0),
            // Weight 1..1000 → best-effort level 7 (lowest) .. 0 (highest).
            Some(w) => Self::set_ioprio(
                CLASS_BE,
                7 - ((w / IO_MAX) * 7.0).round().clamp(0.0, 7.0) as i32,
            ),
        }
    }
}

/// The thread's weight: the largest it holds (`None`: unconstrained on
/// every device; a device it is unconstrained on counts as the maximum).
pub fn weight_of(amounts: &[Option<f64>]) -> Option<f64> {
    if amounts.iter().all(Option::is_none) {
        return None;
    }
    Some(
        amounts
            .iter()
            .map(|a| a.unwrap_or(IO_MAX))
            .fold(0.0, f64::max),
    )
}

/// BFQ's weight for an amount (1..=1000: 0 gets the lowest).
pub fn bfq_weight(amount: f64) -> u32 {
    (amount.round() as u32).clamp(1, IO_MAX as u32)
}

/// The blkio group under `dir` for the weights a thread holds, and its
/// `blkio.bfq.weight_device` lines: one per device it constrains
/// (`devices[i]` is device `i`'s `major:minor`), named after them
/// (`d7.0w100-d8.0w900`). `None` when it constrains no device.
pub fn group_of(
    dir: &Path,
    devices: &[String],
    amounts: &[Option<f64>],
) -> Option<(PathBuf, Vec<String>)> {
    let held: Vec<(&String, u32)> = devices
        .iter()
        .zip(amounts)
        .filter_map(|(d, a)| a.map(|a| (d, bfq_weight(a))))
        .collect();
    if held.is_empty() {
        return None;
    }
    let name: Vec<String> = held
        .iter()
        .map(|(d, w)| format!("d{}w{w}", d.replace(':', ".")))
        .collect();
    let lines = held.iter().map(|(d, w)| format!("{d} {w}")).collect();
    Some((dir.join(name.join("-")), lines))
}

/// The scheduler the kernel uses for block device `majmin`, from
/// `/sys/dev/block/MAJ:MIN/queue/scheduler` (the bracketed one).
pub fn scheduler(majmin: &str) -> Option<String> {
    let text = std::fs::read_to_string(format!("/sys/dev/block/{majmin}/queue/scheduler")).ok()?;
    active_scheduler(&text)
}

/// The bracketed name of a `queue/scheduler` file (`none [bfq]` → `bfq`;
/// a device without a choice says only `none`).
pub fn active_scheduler(text: &str) -> Option<String> {
    let t = text.trim();
    match (t.find('['), t.find(']')) {
        (Some(a), Some(b)) if a < b => Some(t[a + 1..b].to_string()),
        _ if !t.is_empty() && !t.contains(' ') => Some(t.to_string()),
        _ => None,
    }
}

impl KindOps for IoOps {
    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()> {
        let IoOps::Weights { dir, devices } = self else {
            return Self::priority(amounts);
        };
        let tid = rustix::thread::gettid().as_raw_nonzero().get().to_string();
        let target = match group_of(dir, devices, amounts) {
            None => dir.clone(),
            Some((group, lines)) => {
                match std::fs::create_dir(&group) {
                    Ok(()) => {
                        // One line per write: the kernel parses one.
                        for l in &lines {
                            std::fs::write(group.join("blkio.bfq.weight_device"), l)?;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e),
                }
                group
            }
        };
        std::fs::write(target.join("tasks"), tid)
    }

    fn unenforced(&self, dev: usize) -> Option<String> {
        let IoOps::Weights { devices, .. } = self else {
            return None;
        };
        let majmin = devices.get(dev)?;
        match scheduler(majmin) {
            Some(s) if s == "bfq" => None,
            s => {
                let name = std::fs::read_link(format!("/sys/dev/block/{majmin}"))
                    .ok()
                    .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .unwrap_or_else(|| majmin.clone());
                Some(format!(
                    "block device {majmin} ({name}) is scheduled by {}, which ignores I/O \
                     weights; as root, switch it to BFQ (echo bfq > \
                     /sys/block/{name}/queue/scheduler) or ask for no weight on it",
                    s.as_deref().unwrap_or("an unknown scheduler")
                ))
            }
        }
    }
}

/// Whole-disk block devices (`/sys/block/*`): disks, and the loop devices
/// attached to a file (a loop device without one holds no I/O); not RAM
/// disks, zram or unattached loops.
pub fn block_devices() -> Vec<Device> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir("/sys/block") else {
        return out;
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    names.sort();
    for n in names {
        if n.starts_with("ram") || n.starts_with("zram") {
            continue;
        }
        if n.starts_with("loop") && !Path::new(&format!("/sys/block/{n}/loop")).exists() {
            continue;
        }
        if let Ok(dev) = std::fs::read_to_string(format!("/sys/block/{n}/dev")) {
            out.push(Device {
                name: dev.trim().to_string(),
                min: 0.0,
                max: IO_MAX,
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_weight_is_the_largest_held_and_none_when_unconstrained() {
        assert_eq!(weight_of(&[None, None]), None);
        assert_eq!(weight_of(&[Some(100.0), Some(700.0)]), Some(700.0));
        assert_eq!(weight_of(&[Some(0.0), Some(0.0)]), Some(0.0));
        // Unconstrained on one device: as much as anyone there.
        assert_eq!(weight_of(&[Some(100.0), None]), Some(IO_MAX));
        assert_eq!(bfq_weight(0.0), 1);
        assert_eq!(bfq_weight(499.6), 500);
        assert_eq!(bfq_weight(5000.0), 1000);
    }

    #[test]
    fn a_group_is_named_after_the_weights_held_and_sets_only_those() {
        let d = Path::new("/x");
        let devs = ["8:0".to_string(), "7:1".to_string()];
        assert_eq!(group_of(d, &devs, &[None, None]), None);
        assert_eq!(
            group_of(d, &devs, &[None, Some(100.0)]),
            Some((PathBuf::from("/x/d7.1w100"), vec!["7:1 100".to_string()]))
        );
        assert_eq!(
            group_of(d, &devs, &[Some(900.0), Some(0.0)]),
            Some((
                PathBuf::from("/x/d8.0w900-d7.1w1"),
                vec!["8:0 900".to_string(), "7:1 1".to_string()]
            ))
        );
    }

    #[test]
    fn the_active_scheduler_is_the_bracketed_one() {
        assert_eq!(
            active_scheduler("none mq-deadline kyber [bfq]\n"),
            Some("bfq".into())
        );
        assert_eq!(
            active_scheduler("[none] mq-deadline\n"),
            Some("none".into())
        );
        assert_eq!(active_scheduler("none\n"), Some("none".into()));
        assert_eq!(active_scheduler(""), None);
    }

    #[test]
    fn priorities_apply_to_the_calling_thread() {
        std::thread::spawn(|| {
            IoOps::Priority.restrict(&[Some(500.0)]).unwrap();
            IoOps::Priority.restrict(&[Some(0.0)]).unwrap();
            IoOps::Priority.restrict(&[None]).unwrap();
        })
        .join()
        .unwrap();
    }
}
