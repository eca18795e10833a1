//! Counting what threads do on the CPU with `perf_event_open(2)`: cycles
//! and instructions retired (instructions per cycle is an efficiency
//! signal: a cell whose IPC falls as it gains CPUs is fighting over caches
//! or memory bandwidth), or, where the machine has no hardware counters
//! (most virtual machines), the software clock and context switches.
//!
//! **Mechanism.** One counter group per thread: the first event leads, the
//! second follows, and both are read with one `read(2)` of the leader
//! (`PERF_FORMAT_GROUP`). A group is scheduled on the PMU as a unit, so
//! the ratio of its two counts is exact even when the kernel multiplexes
//! more groups than the PMU has counters (the absolute counts are then
//! scaled by time enabled over time running). Counters exclude the kernel
//! and the hypervisor: what a program's own code does, and what an
//! unprivileged broker may count for processes of its own user
//! (`perf_event_paranoid` 2).
//!
//! A counter on a thread keeps its final count after the thread exits, so
//! [`ThreadCounts`] reads a group one last time when its thread is gone
//! and adds it to what the cell retired. Threads are counted per cell up
//! to a bound the caller gives: the ratio over a sample of a cell's
//! threads is what is wanted, not every cycle.
//!
//! [`RealCounters`] is the kernel; [`FakeCounters`] an in-memory table for
//! the layers above. The contract tests in `tests/counters_contract.rs` run
//! the same assertions on both against threads the test starts, with the
//! software events (which every Linux machine has); the hardware events
//! differ only in two constants.

use std::collections::BTreeMap;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::{Arc, Mutex};

/// Which pair of events a counter group counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// Cycles (leader) and instructions retired: the hardware PMU.
    CyclesInstructions,
    /// The thread's CPU clock, ns (leader), and its context switches:
    /// software events, present on every Linux machine.
    ClockSwitches,
}

impl Events {
    /// The `(type, config)` pairs of the leader and the follower.
    fn codes(self) -> [(u32, u64); 2] {
        match self {
            Events::CyclesInstructions => [
                (PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES),
                (PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS),
            ],
            Events::ClockSwitches => [
                (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK),
                (PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CONTEXT_SWITCHES),
            ],
        }
    }

    /// The events' names, leader first.
    pub fn names(self) -> [&'static str; 2] {
        match self {
            Events::CyclesInstructions => ["cycles", "instructions"],
            Events::ClockSwitches => ["task-clock", "context-switches"],
        }
    }
}

/// The counts of one group (or a sum of groups): the leader's event and
/// the follower's, scaled for the time the group was not on the PMU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Count {
    /// The leader's count (cycles, or clock ns).
    pub lead: u64,
    /// The follower's count (instructions, or context switches).
    pub follow: u64,
}

impl Count {
    /// The sum of two counts (saturating).
    pub fn plus(self, o: Count) -> Count {
        Count {
            lead: self.lead.saturating_add(o.lead),
            follow: self.follow.saturating_add(o.follow),
        }
    }

    /// Follower per leader between `before` and `self` (instructions per
    /// cycle); `None` when the leader did not move.
    pub fn ratio_since(self, before: Count) -> Option<f64> {
        let lead = self.lead.checked_sub(before.lead)?;
        let follow = self.follow.checked_sub(before.follow)?;
        (lead > 0).then(|| follow as f64 / lead as f64)
    }
}

/// One open counter group.
pub trait ThreadCounter: Send + fmt::Debug {
    /// The counts so far.
    fn read(&self) -> io::Result<Count>;
}

/// Opening counter groups on threads.
pub trait PerfCounters: Send + Sync + fmt::Debug {
    /// Whether this machine counts `events` for this process's user;
    /// `Err` says why not (to show to the operator).
    fn check(&self, events: Events) -> Result<(), String>;
    /// Opens a group counting `events` on thread `tid`.
    fn open(&self, tid: u32, events: Events) -> io::Result<Box<dyn ThreadCounter>>;
}

// perf_event_open(2) ABI constants (include/uapi/linux/perf_event.h).
const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
const PERF_COUNT_SW_CONTEXT_SWITCHES: u64 = 3;
const PERF_FORMAT_TOTAL_TIME_ENABLED: u64 = 1 << 0;
const PERF_FORMAT_TOTAL_TIME_RUNNING: u64 = 1 << 1;
const PERF_FORMAT_GROUP: u64 = 1 << 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
/// `perf_event_attr` flag bits: exclude_kernel, exclude_hv.
const EXCLUDE_KERNEL: u64 = 1 << 5;
const EXCLUDE_HV: u64 = 1 << 6;

/// The first 64 bytes of `struct perf_event_attr` (`PERF_ATTR_SIZE_VER0`),
/// all a counting (not sampling) event needs; the kernel zero-extends.
#[repr(C)]
#[derive(Default)]
struct Attr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const _: () = assert!(std::mem::size_of::<Attr>() == 64);

fn open_event(kind: u32, config: u64, tid: i32, group: i32) -> io::Result<OwnedFd> {
    let attr = Attr {
        kind,
        size: std::mem::size_of::<Attr>() as u32,
        config,
        read_format: PERF_FORMAT_GROUP
            | PERF_FORMAT_TOTAL_TIME_ENABLED
            | PERF_FORMAT_TOTAL_TIME_RUNNING,
        flags: EXCLUDE_KERNEL | EXCLUDE_HV,
        ..Attr::default()
    };
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr prefix
    // whose `size` field says how much of it the kernel may read.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const Attr,
            tid,
            -1i32,
            group,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Counter groups from the kernel.
#[derive(Debug, Clone, Copy, Default)]
pub struct RealCounters;

#[derive(Debug)]
struct RealGroup {
    leader: OwnedFd,
    _follower: OwnedFd,
}

impl ThreadCounter for RealGroup {
    fn read(&self) -> io::Result<Count> {
        // nr, time_enabled, time_running, value[nr]
        let mut buf = [0u64; 5];
        let n = rustix::io::read(&self.leader, bytemuck_u64(&mut buf))?;
        if n < 5 * 8 || buf[0] != 2 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a counter group read {n} bytes for {} events", buf[0]),
            ));
        }
        Ok(scaled(buf[1], buf[2], buf[3], buf[4]))
    }
}

/// The counts scaled for the time the group was not on the PMU.
fn scaled(enabled: u64, running: u64, lead: u64, follow: u64) -> Count {
    if running == 0 {
        return Count::default();
    }
    let scale = |v: u64| {
        if running >= enabled {
            v
        } else {
            (u128::from(v) * u128::from(enabled) / u128::from(running)).min(u128::from(u64::MAX))
                as u64
        }
    };
    Count {
        lead: scale(lead),
        follow: scale(follow),
    }
}

fn bytemuck_u64(buf: &mut [u64; 5]) -> &mut [u8] {
    // SAFETY: u64 has no invalid bit patterns and a stricter alignment
    // than u8; the slice covers exactly the array.
    unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr().cast::<u8>(), 40) }
}

impl PerfCounters for RealCounters {
    fn check(&self, events: Events) -> Result<(), String> {
        // This thread, briefly: what the kernel says is what every later
        // open would meet.
        let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        match self.open(tid, events) {
            Ok(_) => Ok(()),
            Err(e) => {
                let [lead, _] = events.names();
                Err(match e.raw_os_error() {
                    Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                        format!(
                            "this machine has no {lead} counter ({e}; a virtual machine often exposes no PMU)"
                        )
                    }
                    Some(libc::EACCES) | Some(libc::EPERM) => format!(
                        "not allowed to count {lead} ({e}; see /proc/sys/kernel/perf_event_paranoid)"
                    ),
                    _ => format!("cannot count {lead}: {e}"),
                })
            }
        }
    }

    fn open(&self, tid: u32, events: Events) -> io::Result<Box<dyn ThreadCounter>> {
        let tid = i32::try_from(tid).map_err(|_| io::Error::from_raw_os_error(libc::ESRCH))?;
        let [(lt, lc), (ft, fc)] = events.codes();
        let leader = open_event(lt, lc, tid, -1)?;
        let follower = open_event(ft, fc, tid, leader.as_raw_fd())?;
        Ok(Box::new(RealGroup {
            leader,
            _follower: follower,
        }))
    }
}

/// An in-memory table of threads and their counts, for tests of the
/// layers above: [`FakeCounters::set`] a thread's counts, and every group
/// open on it reads them.
#[derive(Debug, Clone, Default)]
pub struct FakeCounters {
    table: Arc<Mutex<FakeTable>>,
}

#[derive(Debug, Default)]
struct FakeTable {
    counts: BTreeMap<u32, Count>,
    /// Final counts of exited threads.
    exited: BTreeMap<u32, Count>,
    /// What `check` answers (`None`: available).
    unavailable: Option<String>,
    opened: usize,
}

#[derive(Debug)]
struct FakeGroup {
    table: Arc<Mutex<FakeTable>>,
    tid: u32,
}

impl FakeCounters {
    /// An empty table; every event available.
    pub fn new() -> FakeCounters {
        FakeCounters::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, FakeTable> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Thread `tid` now has counted `count` (it must only grow).
    pub fn set(&self, tid: u32, count: Count) {
        self.lock().counts.insert(tid, count);
    }

    /// Thread `tid` exited: groups open on it keep its final count, and
    /// new ones cannot be opened.
    pub fn exit(&self, tid: u32) {
        let mut t = self.lock();
        if let Some(c) = t.counts.remove(&tid) {
            t.exited.insert(tid, c);
        }
    }

    /// `check` answers `Err(reason)` from now on.
    pub fn set_unavailable(&self, reason: &str) {
        self.lock().unavailable = Some(reason.to_owned());
    }

    /// Groups opened so far.
    pub fn opened(&self) -> usize {
        self.lock().opened
    }
}

impl ThreadCounter for FakeGroup {
    fn read(&self) -> io::Result<Count> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        Ok(t.counts
            .get(&self.tid)
            .or_else(|| t.exited.get(&self.tid))
            .copied()
            .unwrap_or_default())
    }
}

impl PerfCounters for FakeCounters {
    fn check(&self, _events: Events) -> Result<(), String> {
        match &self.lock().unavailable {
            Some(r) => Err(r.clone()),
            None => Ok(()),
        }
    }

    fn open(&self, tid: u32, _events: Events) -> io::Result<Box<dyn ThreadCounter>> {
        let mut t = self.lock();
        if t.unavailable.is_some() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        }
        if !t.counts.contains_key(&tid) {
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        t.opened += 1;
        Ok(Box::new(FakeGroup {
            table: self.table.clone(),
            tid,
        }))
    }
}

/// One cell's counter groups, one per counted thread, and what its gone
/// threads counted.
///
/// Invariant: [`ThreadCounts::total`] never decreases while the cell
/// lives: a thread's group is read one last time when the thread leaves
/// the list it is refreshed with, and what it counted moves to `retired`.
#[derive(Debug, Default)]
pub struct ThreadCounts {
    live: BTreeMap<u32, Counted>,
    retired: Count,
}

/// A thread's group, its count when it was opened and at its last read.
#[derive(Debug)]
struct Counted {
    group: Box<dyn ThreadCounter>,
    start: Count,
    last: Count,
}

impl Counted {
    fn counted(&self) -> Count {
        Count {
            lead: self.last.lead.saturating_sub(self.start.lead),
            follow: self.last.follow.saturating_sub(self.start.follow),
        }
    }
}

impl ThreadCounts {
    /// Follows `tids` (the cell's threads now): retires the groups of
    /// threads no longer listed, opens groups on new threads while fewer
    /// than `max` are open (a thread that cannot be counted, gone or not
    /// allowed, is skipped), and reads every group. Returns the total.
    pub fn refresh(
        &mut self,
        counters: &dyn PerfCounters,
        events: Events,
        tids: &[u32],
        max: usize,
    ) -> Count {
        let listed: std::collections::BTreeSet<u32> = tids.iter().copied().collect();
        let gone: Vec<u32> = self
            .live
            .keys()
            .filter(|t| !listed.contains(t))
            .copied()
            .collect();
        for t in gone {
            if let Some(mut c) = self.live.remove(&t) {
                if let Ok(last) = c.group.read() {
                    c.last = last;
                }
                self.retired = self.retired.plus(c.counted());
            }
        }
        for &t in tids {
            if self.live.len() >= max {
                break;
            }
            if self.live.contains_key(&t) {
                continue;
            }
            if let Ok(group) = counters.open(t, events) {
                // Counted from now (a kernel counter starts at zero).
                let start = group.read().unwrap_or_default();
                self.live.insert(
                    t,
                    Counted {
                        group,
                        start,
                        last: start,
                    },
                );
            }
        }
        for c in self.live.values_mut() {
            if let Ok(last) = c.group.read() {
                c.last = last;
            }
        }
        self.total()
    }

    /// What the cell's counted threads did since each was first counted.
    pub fn total(&self) -> Count {
        self.live
            .values()
            .fold(self.retired, |a, c| a.plus(c.counted()))
    }

    /// How many threads have a counter group open now (the live ones, not the retired).
    pub fn open(&self) -> usize {
        self.live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_scale_for_time_off_the_pmu() {
        assert_eq!(scaled(100, 100, 7, 9), Count { lead: 7, follow: 9 });
        assert_eq!(
            scaled(200, 100, 7, 9),
            Count {
                lead: 14,
                follow: 18
            }
        );
        assert_eq!(scaled(100, 0, 7, 9), Count::default(), "never ran");
        let c = Count {
            lead: 1000,
            follow: 1500,
        };
        assert_eq!(c.ratio_since(Count::default()), Some(1.5));
        assert_eq!(c.ratio_since(c), None, "no cycles, no ratio");
    }

    #[test]
    fn a_cell_keeps_what_its_gone_threads_counted_and_counts_new_ones_from_their_start() {
        let fake = FakeCounters::new();
        let e = Events::CyclesInstructions;
        fake.set(
            10,
            Count {
                lead: 500,
                follow: 100,
            },
        ); // before the cell saw it
        fake.set(11, Count::default());
        let mut cell = ThreadCounts::default();
        assert_eq!(cell.refresh(&fake, e, &[10, 11], 8), Count::default());
        fake.set(
            10,
            Count {
                lead: 600,
                follow: 250,
            },
        );
        fake.set(
            11,
            Count {
                lead: 50,
                follow: 20,
            },
        );
        assert_eq!(
            cell.refresh(&fake, e, &[10, 11], 8),
            Count {
                lead: 150,
                follow: 170
            }
        );
        // Thread 10 counts a little more, then exits; 12 starts.
        fake.set(
            10,
            Count {
                lead: 700,
                follow: 400,
            },
        );
        fake.exit(10);
        fake.set(12, Count { lead: 5, follow: 5 });
        let t = cell.refresh(&fake, e, &[11, 12], 8);
        assert_eq!(
            t,
            Count {
                lead: 250,
                follow: 320
            },
            "10's last count kept"
        );
        assert_eq!(cell.open(), 2);
        // A bound: with one group at most, a new thread waits.
        let mut small = ThreadCounts::default();
        small.refresh(&fake, e, &[11, 12], 1);
        assert_eq!(small.open(), 1);
        // A thread that cannot be opened is skipped, not fatal.
        let mut other = ThreadCounts::default();
        other.refresh(&fake, e, &[99, 11], 8);
        assert_eq!(other.open(), 1);
    }
}
