//! The broker's status document: one definition, written by the broker,
//! read by `allot status` and by scripts (`allot status --json`).
//!
//! It travels as JSON in `Status` reply chunks ([`crate::msg::Reply::Status`]).
//! CPU sets are cpulist strings (`"0-3,8"`, empty for none). Fields are only
//! ever added, with defaults for readers of older documents; a change that
//! removes or retypes a field bumps [`STATUS_VERSION`].
//!
//! What a client may see of other users' cells is the broker's choice
//! (`show_other_users` in its configuration): by default a non-root client
//! sees their CPUs and sizes but not their names or processes, and such a
//! cell is marked [`CellStatus::private`].

// The spec's own types, in the document as they are: a placement's serde
// form is its name (`any`, `llc`, `numa`); a cell's memory as the kernel
// counts it is the one type the backends read into.
use allot_spec::{MemoryUse, Placement};
use serde::{Deserialize, Serialize};

/// Version of the document's shape.
pub const STATUS_VERSION: u32 = 2;

/// The whole document.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Status {
    /// [`STATUS_VERSION`] of the writer (1 for brokers that did not say).
    #[serde(default = "one")]
    pub version: u32,
    /// The broker itself.
    pub broker: BrokerStatus,
    /// The machine and how its CPUs are used.
    pub machine: MachineStatus,
    /// Admitted cells, by id.
    pub cells: Vec<CellStatus>,
    /// Cells waiting for admission, in order.
    pub queue: Vec<QueuedStatus>,
    /// The machine's recent load (absent from older brokers, and until
    /// two ticks have passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load: Option<LoadStatus>,
    /// Named channels the reader may see (its own; all for root and the
    /// broker's owner), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<ChannelStatus>,
}

/// A named channel (`allot_channel`, opened through the broker).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChannelStatus {
    /// The name its ends open it by (1 to 64 of `A-Z a-z 0-9 . _ -`).
    pub name: String,
    /// The user who created it.
    pub uid: u32,
    /// Slots in its ring.
    pub slots: u32,
    /// Longest message, bytes.
    pub message_max: u32,
    /// Open sending ends.
    pub senders: u32,
    /// Whether its receiving end is open.
    pub receiver: bool,
    /// Messages waiting in it.
    pub waiting: u32,
}

fn one() -> u32 {
    1
}

/// The broker process that wrote the document, and how it is configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokerStatus {
    /// Its process id.
    pub pid: u32,
    /// Random id of this run (changes on restart).
    pub instance: u64,
    /// The enforcement backend in use: `cgroup2`, `cgroup1`, `affinity` or `dry-run`.
    pub backend: String,
    /// The policy that divides CPUs among cells: `fair-share`, `priority` or `goals`.
    pub policy: String,
    /// Whether idle CPUs are lent.
    pub lend: bool,
    /// Seconds since it started.
    pub uptime_s: f64,
    /// Notes from start-up (backends skipped and why).
    pub notes: Vec<String>,
    /// Why the journal cannot be written now, if it cannot (new cells are
    /// refused meanwhile); `None` when it is healthy.
    #[serde(default)]
    pub journal_problem: Option<String>,
    /// How the cells weigh against work outside them: `threads` (as their
    /// programs' threads would) or `group` (together as one process);
    /// empty from older brokers.
    #[serde(default)]
    pub weigh: String,
    /// The weight the cells together have against work outside them, in
    /// hundredths of an ordinary thread (`None`: not set by allot: a
    /// subtree systemd or an operator delegated, whose weight is theirs;
    /// a backend without weights; or the kernel refused every value so
    /// far, as the broker's log says).
    #[serde(default)]
    pub together_weight: Option<u32>,
    /// What the cells together weigh as `weigh` says, in the same unit,
    /// whether or not allot may write it (where it may not, what the
    /// directory's owner would set to match; 0 from older brokers).
    #[serde(default)]
    pub weight_wanted: u32,
    /// The cell id whose groups the backend made ahead of its
    /// registration: no cell's yet (a directory `cell-N` no cell lists),
    /// taken by the next registration. `None` where none is made ahead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub made_ahead: Option<u64>,
}

/// The machine's CPUs and how the broker divides them now (CPU lists such as `0-3,8`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineStatus {
    /// Its name (`this machine`, or a fixture's).
    pub name: String,
    /// One-line summary of CPUs, cores, caches and nodes.
    pub summary: String,
    /// CPUs the broker manages.
    pub usable: String,
    /// CPUs available to cells (usable minus the reserve).
    pub capacity: u32,
    /// CPUs kept for processes outside any cell.
    pub reserve: String,
    /// CPUs shared by stacked cells.
    pub pool: String,
    /// The time region: CPUs carrying time cells' promises (best-effort
    /// cells run there too).
    #[serde(default)]
    pub time: String,
    /// Share of every CPU never promised to time cells.
    #[serde(default)]
    pub time_reserve: f64,
    /// CPUs nobody holds.
    pub idle: String,
    /// CPUs processes outside every cell hold exclusively through
    /// `require`: no cell runs on them (the one account).
    #[serde(default)]
    pub held_outside: String,
    /// Memory cells may be guaranteed, and how much is (absent from
    /// brokers without memory control).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MachineMemory>,
}

/// The machine's memory as the broker admits it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineMemory {
    /// Bytes the broker's cells live within: the machine's memory, or the
    /// limit of the memory group the broker runs in when lower.
    pub capacity: u64,
    /// Bytes never guaranteed to cells (the configured reserve).
    pub reserve: u64,
    /// Bytes guaranteed to cells now (their `memory_min`, summed).
    pub guaranteed: u64,
}

/// A cell's request, as shown.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecStatus {
    /// CPUs guaranteed (0: best effort); for a time cell, the CPUs its contract covers.
    pub min: u32,
    /// Most CPUs (0: the machine).
    pub max: u32,
    /// Share of contended CPUs relative to other cells (1 to 10000).
    pub weight: u32,
    /// CPUs no other cell may use.
    pub exclusive: bool,
    /// `any`, `llc` or `numa`.
    pub placement: Placement,
    /// The contract's name: `pinned`, `best-effort`, `time-fraction`,
    /// `time-triggered` or `message-triggered` (empty from older brokers).
    #[serde(default)]
    pub contract: String,
    /// The time contract's terms.
    #[serde(default)]
    pub time: TimeStatus,
    /// The goal (`{"kind":"none"}` from older brokers).
    #[serde(default)]
    pub goal: GoalStatus,
    /// Bytes of memory guaranteed (0: none).
    #[serde(default)]
    pub memory_min: u64,
    /// Most bytes of memory (0: no limit but what encloses the cell).
    #[serde(default)]
    pub memory_max: u64,
    /// L3 ways of its own (0: none).
    #[serde(default)]
    pub cache_ways: u32,
    /// Memory bandwidth ceiling, percent (0: none).
    #[serde(default)]
    pub mem_bandwidth: u32,
}

impl From<&allot_spec::CellSpec> for SpecStatus {
    /// A spec as the document shows it.
    fn from(s: &allot_spec::CellSpec) -> SpecStatus {
        SpecStatus {
            min: s.min,
            max: s.max,
            weight: s.weight,
            exclusive: s.exclusive,
            placement: s.placement,
            contract: s.kind_name().to_string(),
            time: match s.time {
                allot_spec::TimeContract::Space => TimeStatus::Space,
                allot_spec::TimeContract::Fraction { .. } => TimeStatus::TimeFraction {
                    ppm: s.time.ppm(),
                    slice_us: s.time.slice_us(),
                },
                allot_spec::TimeContract::Triggered {
                    period_us,
                    budget_us,
                } => TimeStatus::TimeTriggered {
                    period_us,
                    budget_us,
                },
                allot_spec::TimeContract::Message { idle_ms } => {
                    TimeStatus::MessageTriggered { idle_ms }
                }
            },
            goal: match s.goal {
                allot_spec::Goal::None => GoalStatus::None,
                allot_spec::Goal::Rate { milli_per_s } => GoalStatus::Rate { milli_per_s },
                allot_spec::Goal::P99 { us } => GoalStatus::P99 { us },
            },
            memory_min: s.memory.min,
            memory_max: s.memory.max,
            cache_ways: s.cache.ways,
            mem_bandwidth: s.cache.bandwidth,
        }
    }
}

/// A goal in the document (`{"kind":"none"}`,
/// `{"kind":"rate","milli_per_s":200000}`, `{"kind":"p99","us":5000}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GoalStatus {
    /// No goal: the cell gets what the policy gives it.
    #[default]
    None,
    /// Units of work per second, in thousandths.
    Rate {
        /// Thousandths per second.
        milli_per_s: u64,
    },
    /// Latency bound, µs.
    P99 {
        /// Bound on the 99th-percentile latency, in microseconds.
        us: u32,
    },
}

/// A time contract's terms in the document (`{"kind":"space"}`,
/// `{"kind":"time-fraction","ppm":250000,"slice_us":2000}`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TimeStatus {
    /// Whole CPUs or a best-effort share.
    #[default]
    Space,
    /// A fraction of each CPU.
    TimeFraction {
        /// Parts per million.
        ppm: u32,
        /// Shortest piece, µs.
        slice_us: u32,
    },
    /// A budget every period, gang-scheduled.
    TimeTriggered {
        /// Period, µs.
        period_us: u32,
        /// Budget, µs.
        budget_us: u32,
    },
    /// Activated by messages.
    MessageTriggered {
        /// Idle time before the grant goes back, ms.
        idle_ms: u32,
    },
}

/// An admitted cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellStatus {
    /// The broker's id of the cell, never reused while its journal lives.
    pub id: u64,
    /// Its name (empty when [`CellStatus::private`]).
    pub name: String,
    /// Uid of the user whose connection registered the cell.
    pub uid: u32,
    /// Another user's cell whose name and processes are not shown.
    #[serde(default)]
    pub private: bool,
    /// Member processes (empty when private).
    pub pids: Vec<u32>,
    /// CPUs it may run on.
    pub cpus: String,
    /// The part of `cpus` lent by other cells.
    pub lent: String,
    /// CPUs it is entitled to.
    pub entitled: String,
    /// The part of `entitled` its processes hold exclusively through
    /// `require`: kept in its grant, no other cell runs on them.
    #[serde(default)]
    pub held: String,
    /// Recommended worker count.
    pub threads: u32,
    /// The generation of the cell's grant page; grows with every change to the grant.
    pub generation: u64,
    /// Shares the stacked pool.
    pub stacked: bool,
    /// Fair share in CPUs.
    pub share: f64,
    /// CPUs it can use now, as estimated (`None`: unknown).
    pub demand: Option<u32>,
    /// Busy fraction of its grant at the last tick.
    pub busy: f64,
    /// The progress counter its runtime last reported.
    pub progress: u64,
    /// Busy workers its runtime last reported.
    pub busy_reported: u32,
    /// Its runtime pool's statistics, summed over the workers, as last
    /// reported (`None`: no allot runtime pool reported).
    #[serde(default)]
    pub pool_stats: Option<crate::msg::PoolStatsWire>,
    /// What it asked for.
    pub spec: SpecStatus,
    /// Parallel runtimes found in its processes (empty when private, or
    /// from brokers that do not look).
    #[serde(default)]
    pub runtimes: Vec<RuntimeStatus>,
    /// Processes of the cell whose mappings the broker has not read yet
    /// (it reads them off its event loop; the next status has them).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub runtimes_unread: u32,
    /// What a time-triggered cell's windows delivered (absent for other
    /// cells, and for time-triggered cells on a backend without a freezer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<DeliveryStatus>,
    /// What it achieved recently, as the broker measured it (absent from
    /// older brokers, and until two ticks have passed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf: Option<PerfStatus>,
    /// A message-triggered cell holding nothing until a message arrives on
    /// one of its channels (suspended; its CPUs are the others').
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub waiting_for_message: bool,
    /// A best-effort cell paused (frozen, holding no CPU) while guarantees
    /// take every CPU; it runs again when one frees (absent when running).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<PausedStatus>,
    /// For an exclusive cell: whether the kernel keeps its CPUs apart as
    /// a cpuset partition, or why not (absent for other cells, from older
    /// brokers, and until its first grant).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<PartitionStatus>,
    /// Its memory as the kernel counts it (absent when its backend has no
    /// memory control, or its processes are charged elsewhere).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryUse>,
    /// Its class of service (cache ways, bandwidth), when it asked for one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<CellCache>,
    /// What the broker did for the cell and when (absent from older
    /// brokers, and for another user's private cell).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline: Option<Timeline>,
    /// Work outside every cell on the cell's CPUs (absent from older
    /// brokers, and until two ticks have passed on its CPUs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outside: Option<OutsideStatus>,
}

/// Work outside every cell on one cell's CPUs (the stacked pool's, for a
/// stacked cell), at the last tick.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OutsideStatus {
    /// CPUs' worth it used there.
    pub used: f64,
    /// CPUs' worth the cell's threads there waited to run (`None`: not
    /// read, as where no outside work was seen).
    pub waiting: Option<f64>,
    /// CPUs there the cell's team leaves to that work, so that no
    /// barrier waits for a thread the kernel gave to it: a whole-CPU
    /// cell's team (`threads`) is that much smaller; for a stacked cell,
    /// the stacked cells' teams together are (0 for a guaranteed cell,
    /// whose team stays).
    pub taken: u32,
}

/// A cell's class of service in the kernel's resctrl.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CellCache {
    /// Its L3 capacity bitmask, hexadecimal (every cache domain the same).
    pub mask: String,
    /// Its memory bandwidth ceiling, percent.
    pub bandwidth: u32,
    /// Last-level cache it occupies now, bytes (where the hardware counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llc_bytes: Option<u64>,
}

/// A cell's timeline: the broker's steps for it, from the arrival of its
/// registration on. Bounded: the first [`Timeline::FIRST`] steps and the
/// latest ones up to [`Timeline::MAX`] in all; `dropped` counts those left
/// out between them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    /// When the registration arrived: `CLOCK_MONOTONIC`, ns (the same
    /// clock on every process of the machine, so a client can place its
    /// own steps beside these).
    pub origin_ns: u64,
    /// The steps, oldest first.
    pub steps: Vec<TimelineStep>,
    /// Steps left out between the first ones and the latest.
    #[serde(default)]
    pub dropped: u32,
}

impl Timeline {
    /// Steps kept from the start.
    pub const FIRST: usize = 24;
    /// Steps kept in all.
    pub const MAX: usize = 48;
}

/// One step of a [`Timeline`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineStep {
    /// Since [`Timeline::origin_ns`], µs.
    pub at_us: u64,
    /// What happened: `request`, `admission`, `queued`, `journal`,
    /// `cgroup`, `cpuset`, `grant`, `joined`, `exited`, `spec`, `adopted`,
    /// `paused`, `resumed`, `oom`.
    pub step: String,
    /// Its particulars (CPUs, threads, a pid, a verdict).
    pub detail: String,
    /// What the step itself took, µs (kernel writes, planning, journal
    /// appends), where it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_us: Option<u64>,
}

/// What a cell achieved recently: from the broker's own readings (CPU
/// time, time its threads waited for a CPU) and from the cell's report
/// page (heartbeats, request latencies).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerfStatus {
    /// The span the rate and CPU figures are read over, s.
    pub window_s: f64,
    /// CPUs held on average.
    pub cpus: f64,
    /// CPUs' worth of CPU time used (`None`: the backend cannot tell).
    pub cpu_used: Option<f64>,
    /// Its threads waiting for a CPU, on average (`None`: not read yet).
    pub waiting: Option<f64>,
    /// Units of work a second, from its heartbeats (`None`: it never
    /// counted any).
    pub rate_per_s: Option<f64>,
    /// Latencies recorded in the latency span.
    pub latencies: u64,
    /// The latency span, s (grown until it holds enough latencies).
    pub latency_window_s: f64,
    /// Their 99th percentile, µs (`None`: none recorded).
    pub p99_us: Option<u64>,
    /// Instructions retired per cycle by its threads (`None`: no goal, no
    /// hardware counters on this machine, or not counted yet; see
    /// [`LoadStatus::counters`]).
    #[serde(default)]
    pub ipc: Option<f64>,
    /// Whether the goal is met (`None`: no goal, or not measured yet).
    pub goal_met: Option<bool>,
    /// About the goal: what is missing, or what the policy does about it
    /// (empty when there is nothing to say).
    #[serde(default)]
    pub goal_note: String,
}

/// Why and for how long a cell is paused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PausedStatus {
    /// Why, and when it runs again.
    pub reason: String,
    /// For how long, s.
    pub for_s: f64,
}

/// An exclusive cell's kernel partition: an isolated cpuset partition
/// (no load balancing across its CPUs, nothing outside the cell runs
/// there), or exclusive by its cpuset alone, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PartitionStatus {
    /// The kernel isolates the cell's CPUs as a partition.
    pub isolated: bool,
    /// Why it is not one (empty when `isolated`): the backend, the
    /// kernel's version, where allot's directory is, the configuration,
    /// or the kernel's refusal.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why_not: String,
}

/// The machine's recent load (ARS's system poller): what the cells used
/// and what runs outside every cell, which the broker does not promise.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadStatus {
    /// The span, s.
    pub window_s: f64,
    /// CPUs busy on average.
    pub busy: f64,
    /// Of those, CPUs' worth the cells used (`None`: not measurable).
    pub cells: Option<f64>,
    /// CPUs' worth used outside every cell (`None`: not measurable).
    pub unmanaged: Option<f64>,
    /// Share of the time some runnable thread waited for a CPU
    /// (`/proc/pressure/cpu`; `None` without it).
    pub pressure: Option<f64>,
    /// Threads runnable at the last reading.
    pub running: u32,
    /// Why the cells' cycles and instructions are not counted (`None`:
    /// they are, for cells with a goal).
    #[serde(default)]
    pub counters: Option<String>,
}

/// What a time-triggered cell's windows delivered, as the broker measured
/// it: CPU time per period from the cell's usage counter, and the time
/// from each window's scheduled start to the broker's opening of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliveryStatus {
    /// CPU time due per period (budget × CPUs), µs.
    pub budget_us: u64,
    /// Periods accounted so far.
    pub periods: u64,
    /// CPU time used in the last accounted period, µs.
    pub last_used_us: u64,
    /// Mean |delivered − budget| / budget over the periods.
    pub mean_error: f64,
    /// Periods more than 10 % under budget (the cell idled, or it could
    /// not run in its window).
    pub under: u64,
    /// Periods more than 10 % over budget (a late suspension; the next
    /// window was shortened by as much).
    pub over: u64,
    /// Windows the broker could not open before their end.
    pub missed: u64,
    /// Suspensions sent again because a thread still ran after the first
    /// (a kernel race the broker works around; absent from older brokers).
    #[serde(default)]
    pub resent: u64,
    /// Scheduled window start → opened, median of recent windows, µs.
    pub open_latency_p50_us: f64,
    /// The same, 99th percentile, µs.
    pub open_latency_p99_us: f64,
}

/// A parallel runtime found in a cell's processes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeStatus {
    /// `libgomp`, `libomp`, `openblas`, `blis`, `mkl`, `onetbb`, `tbb`,
    /// `go1.N` or `liballot`.
    pub name: String,
    /// How it follows the cell's grant.
    pub follows: Follows,
}

/// How a runtime follows its cell's grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Follows {
    /// It resizes while it runs, as the grant changes.
    RunTime,
    /// It was sized once, at start (from the variables `allot run` sets, or
    /// the CPUs it started on), and keeps that size.
    Launch,
}

impl Follows {
    /// As `allot status` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            Follows::RunTime => "run-time",
            Follows::Launch => "launch",
        }
    }
}

/// A cell waiting for admission.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueuedStatus {
    /// The id reserved for it.
    pub id: u64,
    /// Its name (empty when private).
    pub name: String,
    /// Uid of the user whose connection asked for the cell.
    pub uid: u32,
    /// Another user's request whose name is not shown.
    #[serde(default)]
    pub private: bool,
    /// 1 for the head of the queue.
    pub position: u32,
    /// Why it waits.
    pub reason: String,
    /// What it asked for.
    pub spec: SpecStatus,
}

impl Status {
    /// The document as JSON text.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the status document always serializes")
    }

    /// Parses a document.
    pub fn from_json(text: &str) -> Result<Status, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// Whether `n` is zero (serde: a field left out of the JSON when zero).
fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_document_still_parses() {
        // As brokers of protocol version 2 wrote it.
        let v1 = r#"{"broker":{"pid":1,"instance":2,"backend":"cgroup1","policy":"fair-share","lend":true,"uptime_s":3.5,"notes":[]},
          "machine":{"name":"this machine","summary":"2 CPUs","usable":"0-1","capacity":2,"reserve":"","pool":"","idle":""},
          "cells":[{"id":1,"name":"make","uid":0,"pids":[42],"cpus":"0","lent":"","entitled":"0","threads":1,"generation":3,
                    "stacked":false,"share":1.0,"demand":null,"busy":0.98,"progress":0,"busy_reported":0,
                    "spec":{"min":0,"max":0,"weight":1,"exclusive":false,"placement":"any"}}],
          "queue":[]}"#;
        let s = Status::from_json(v1).unwrap();
        assert_eq!(s.version, 1);
        assert_eq!(s.cells[0].name, "make");
        assert!(!s.cells[0].private);
        assert_eq!(s.broker.journal_problem, None);
        let again = Status::from_json(&s.to_json()).unwrap();
        assert_eq!(again, s);
    }

    /// What the document shows of a spec: placement names, goals and time
    /// contracts with their kinds, the default slice filled in.
    #[test]
    fn specs_are_shown_by_name() {
        use allot_spec::{CellSpec, Goal, TimeContract};
        for p in [Placement::Any, Placement::Llc, Placement::Numa] {
            let s = CellSpec {
                placement: p,
                ..CellSpec::default()
            };
            let shown = serde_json::to_value(SpecStatus::from(&s).placement).unwrap();
            assert_eq!(shown.as_str().unwrap(), p.to_string());
        }
        for (goal, shown) in [
            (Goal::None, r#"{"kind":"none"}"#),
            (
                Goal::Rate {
                    milli_per_s: 12_500,
                },
                r#"{"kind":"rate","milli_per_s":12500}"#,
            ),
            (Goal::P99 { us: 5_000 }, r#"{"kind":"p99","us":5000}"#),
        ] {
            let s = CellSpec {
                goal,
                ..CellSpec::default()
            };
            assert_eq!(
                serde_json::to_string(&SpecStatus::from(&s).goal).unwrap(),
                shown
            );
        }
        for (time, kind) in [
            (TimeContract::Space, "space"),
            (
                TimeContract::Fraction {
                    ppm: 250_000,
                    slice_us: 0,
                },
                "time-fraction",
            ),
            (
                TimeContract::Triggered {
                    period_us: 10_000,
                    budget_us: 3_000,
                },
                "time-triggered",
            ),
            (TimeContract::Message { idle_ms: 40 }, "message-triggered"),
        ] {
            let s = CellSpec {
                min: 1,
                time,
                ..CellSpec::default()
            };
            let shown = serde_json::to_value(SpecStatus::from(&s).time).unwrap();
            assert_eq!(shown["kind"], kind);
        }
        let f = CellSpec {
            min: 1,
            time: TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 0,
            },
            ..CellSpec::default()
        };
        let shown = SpecStatus::from(&f);
        assert_eq!(
            shown.time,
            TimeStatus::TimeFraction {
                ppm: 250_000,
                slice_us: 2_000
            }
        );
        assert_eq!(shown.contract, "time-fraction");
    }
}
