//! Prometheus metrics: what the broker counts, and the text exposition
//! format it serves at `/metrics` (`allot daemon --metrics ADDR`).
//!
//! - [`Counters`]: kept by [`crate::core::Engine`] as things happen
//!   (admissions, refusals, grant changes, reclaims) and by the event loop
//!   (the time of each turn). Plain integers and fixed-bucket histograms:
//!   counting costs an add.
//! - [`Snapshot`]: the counters plus the gauges of the moment (cells,
//!   their CPUs and busy-ness, the queue), taken by the event loop only
//!   when a scrape asks for it, so an unscraped broker pays nothing more.
//! - [`render`] (`render.rs`): a pure function from a snapshot to the
//!   exposition text (format version 0.0.4), unit-tested against the
//!   format's rules.
//! - [`ProcessGauges`] (`process.rs`): the broker's own process in the
//!   names every Prometheus client library uses (`process_*`), read from
//!   `/proc/self` at each scrape.
//! - [`Exporter`] (`exporter.rs`): a thread that answers HTTP
//!   `GET /metrics`; it asks the event loop for a fresh snapshot through a
//!   pipe the loop polls and waits up to [`FRESH_WAIT`] for it (else
//!   serves the last one; 503 before the first). One connection at a
//!   time, each with one deadline.
//!
//! Cells are labelled by id and uid; their names only when the
//! configuration shows other users' names (`show_other_users`), because
//! whoever reaches the port sees every cell.
//!
//! Metric names and meanings are listed once, in [`render`], and in
//! docs/operations.md.

mod exporter;
mod process;
mod render;
#[cfg(test)]
mod tests;

pub use exporter::Exporter;
pub use process::ProcessGauges;
pub use render::render;

use std::collections::BTreeMap;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How long a scrape waits for the event loop's fresh snapshot.
pub const FRESH_WAIT: Duration = Duration::from_secs(1);

/// A histogram with the fixed [`BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative).
    counts: [u64; BUCKETS.len()],
    /// Observations above the last bound.
    over: u64,
    sum: f64,
}

impl Histogram {
    /// Records one observation of `d`.
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        self.sum += s;
        match BUCKETS.iter().position(|&b| s <= b) {
            Some(i) => self.counts[i] += 1,
            None => self.over += 1,
        }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.over
    }
}

/// What the broker counts as it runs.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Cells admitted (at once or from the queue).
    pub admitted: u64,
    /// Registrations that were queued (`--wait`).
    pub queued: u64,
    /// Registrations answered with an error, by error code.
    pub refused: BTreeMap<&'static str, u64>,
    /// Cells ended (their last process gone, or released).
    pub ended: u64,
    /// Grants published (every cell's generation step).
    pub grant_changes: u64,
    /// From noticing a cell's last process exit to every survivor's new
    /// grant applied and published.
    pub reclaim: Histogram,
    /// The work of one event-loop turn (requests, exits, ticks).
    pub turn: Histogram,
}

/// One cell's gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct CellGauges {
    pub id: u64,
    /// Owner.
    pub uid: u32,
    /// Name, when it may be shown.
    pub name: Option<String>,
    /// CPUs granted.
    pub cpus: u32,
    /// Of which lent by idle cells.
    pub lent: u32,
    /// Recommended thread count.
    pub threads: u32,
    /// CPUs busy (the demand estimator's smoothed value).
    pub busy: f64,
    /// Grant changes published to it.
    pub generation: u64,
    /// Member processes.
    pub members: u32,
    /// CPU time its processes used since the cell began, seconds (`None`:
    /// the backend cannot tell).
    pub cpu_seconds: Option<f64>,
    /// Time some of its runnable threads waited for a CPU, seconds, from
    /// the kernel's pressure stall information of its cgroup (`None`: the
    /// backend has none, such as cgroup v1 and affinity).
    pub cpu_pressure_seconds: Option<f64>,
    /// Its memory as the kernel counts it (`None`: no memory control).
    pub memory: Option<allot_spec::MemoryUse>,
    /// CPUs' worth of work outside every cell on its CPUs at the last
    /// tick, and the CPUs its team leaves to that work (`None`: not
    /// read yet).
    pub outside: Option<(f64, u32)>,
    /// For an exclusive cell, whether the kernel isolates it as a cpuset
    /// partition (`None`: not exclusive, or not decided yet).
    pub partition: Option<bool>,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Seconds since the broker started.
    pub uptime_s: f64,
    /// CPUs the broker manages.
    pub capacity: u32,
    /// Of which held by no cell.
    pub idle: u32,
    /// Cells waiting for admission.
    pub queue: u32,
    /// CPUs' worth used outside every cell over the last second (`None`:
    /// not measurable).
    pub outside_cpus: Option<f64>,
    /// The cells' weight together against work outside them, in
    /// ordinary threads (`None`: not allot's to set).
    pub together_threads: Option<f64>,
    /// Admitted cells.
    pub cells: Vec<CellGauges>,
    pub counters: Counters,
    /// The broker's own process (`None`: `/proc/self` unreadable).
    pub process: Option<ProcessGauges>,
}
