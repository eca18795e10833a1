//! What the broker measures of each cell, tick by tick, kept as a short
//! time series (Tessellation's performance reports, ARS's application
//! poller): the CPUs the cell held, the CPU time it used, the time its
//! threads waited for a CPU, the cycles and instructions they retired
//! (where the machine has hardware counters), and what it reported on its
//! report page (heartbeats, request latencies; `allot_proto::report`).
//!
//! Every counter in a [`Sample`] is cumulative; a [`Perf::over`] stretch
//! reads the differences between its newest sample and the oldest within
//! the span. The report counters are the cell's own (untrusted) and wrap;
//! they are only ever differenced. When the set of pages the broker reads
//! changes (a member rejoined with another page), the sums jump: the
//! series restarts instead of reading the jump as work.
//!
//! The machine's load is kept the same way ([`Load`]): CPU time busy in
//! all, the part the cells used, what is left to processes outside every
//! cell (work the cells must not be promised), and the pressure stall
//! information (`/proc/pressure/cpu`).
//!
//! Both are a [`Samples`]: at most [`SAMPLES`] readings, oldest first, and
//! the stretch of a span is read from its newest reading back to the
//! oldest at least that span before it.
//!
//! Pure: the broker's core fills the samples (`core::measure`).

use allot_enforce::counters::Count;
use allot_enforce::os::SystemCpu;
use allot_proto::Reports;
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Samples kept per cell: 6.4 s at the default 100 ms tick.
pub const SAMPLES: usize = 64;

/// The span a rate is read over.
pub const RATE_SPAN: Duration = Duration::from_secs(1);

/// Latencies a p99 wants: the span grows (up to [`SAMPLES`]) until it
/// holds this many, so that the 99th percentile is not the largest of a
/// handful.
pub const P99_LATENCIES: u64 = 200;

/// A cell's report totals at one tick (its counters' values). The latency buckets (most of a
/// reading's size) are kept only once the cell has recorded a latency.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Totals {
    /// Heartbeats.
    pub beats: u64,
    /// Latencies recorded.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// Latencies per bucket (`None`: none recorded yet).
    pub buckets: Option<Box<[u64; allot_proto::report::BUCKETS]>>,
}

impl From<Reports> for Totals {
    fn from(r: Reports) -> Totals {
        Totals {
            beats: r.beats,
            count: r.count,
            sum_ns: r.sum_ns,
            buckets: (r.count != 0 || r.buckets.iter().any(|b| *b != 0))
                .then(|| Box::new(r.buckets)),
        }
    }
}

impl Totals {
    /// The counters as a [`Reports`].
    pub fn reports(&self) -> Reports {
        Reports {
            beats: self.beats,
            count: self.count,
            sum_ns: self.sum_ns,
            buckets: self
                .buckets
                .as_deref()
                .copied()
                .unwrap_or([0; allot_proto::report::BUCKETS]),
        }
    }
}

/// One tick's reading of a cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub at: Instant,
    /// CPUs the cell held until now: its grant's, or for a cell on the
    /// stacked pool its share of the pool.
    pub cpus: f64,
    /// CPU time used so far, ns (`None`: the backend cannot tell).
    pub usage_ns: Option<u64>,
    /// Time its members' threads waited for a CPU so far, ns (`None`: not
    /// read at this tick).
    pub run_delay_ns: Option<u64>,
    /// Cycles and instructions its counted threads retired so far (`None`:
    /// not read at this tick, or no hardware counters).
    pub hw: Option<Count>,
    /// Its report pages' counters, summed.
    pub reports: Totals,
    /// Which pages were summed (their count and addresses, hashed): a
    /// change restarts the series.
    pub pages: u64,
}

/// A reading taken at a moment.
pub trait Stamped {
    /// When it was taken.
    fn at(&self) -> Instant;
}

/// The last [`SAMPLES`] readings, oldest first.
#[derive(Debug, Clone)]
pub struct Samples<S> {
    samples: VecDeque<S>,
}

impl<S> Default for Samples<S> {
    fn default() -> Self {
        Samples {
            samples: VecDeque::new(),
        }
    }
}

impl<S: Stamped> Samples<S> {
    /// Adds a reading, forgetting the oldest when [`SAMPLES`] are kept.
    pub fn push(&mut self, s: S) {
        if self.samples.len() == SAMPLES {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    /// Forgets every reading.
    pub fn clear(&mut self) {
        self.samples.clear();
    }

    /// The newest reading.
    pub fn newest(&self) -> Option<&S> {
        self.samples.back()
    }

    /// The readings, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &S> {
        self.samples.iter()
    }

    /// The oldest reading at least `span` before the newest (or the
    /// oldest kept) and the newest; `None` when empty.
    pub fn span(&self, span: Duration) -> Option<(&S, &S)> {
        self.span_until(span, |_, _| true)
    }

    /// The newest reading back to the most recent one at least `span`
    /// before it that also satisfies `enough(oldest, newest)`, or the
    /// oldest kept; `None` when empty.
    pub fn span_until(&self, span: Duration, enough: impl Fn(&S, &S) -> bool) -> Option<(&S, &S)> {
        let new = self.samples.back()?;
        let from = self
            .samples
            .iter()
            .rev()
            .filter(|s| new.at().duration_since(s.at()) >= span)
            .find(|s| enough(s, new))
            .or_else(|| self.samples.front())?;
        Some((from, new))
    }
}

impl Stamped for Sample {
    fn at(&self) -> Instant {
        self.at
    }
}

impl Stamped for LoadSample {
    fn at(&self) -> Instant {
        self.at
    }
}

/// A cell's recent samples.
#[derive(Debug, Clone, Default)]
pub struct Perf {
    samples: Samples<Sample>,
    /// Whether the cell ever counted a heartbeat or a latency: a cell
    /// that never did has no rate or latency (rather than zero).
    pub beats_seen: bool,
    /// Whether it ever recorded a latency.
    pub latencies_seen: bool,
    /// CPU time used, summed from each reading's increase over the one
    /// before (a reading below the last, as when a member exits on the
    /// affinity backend, adds nothing): never decreases, so it serves as a
    /// counter. `None` until a reading had the cell's usage.
    used_ns: Option<u64>,
    /// The last reading's usage, which the next increase is taken from.
    last_usage_ns: Option<u64>,
}

/// What a stretch of the series says.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Stretch {
    /// Its length, s.
    pub secs: f64,
    /// CPUs held on average.
    pub cpus: f64,
    /// Heartbeats per second (`None`: the cell never counted any).
    pub rate_per_s: Option<f64>,
    /// CPUs' worth of CPU time used (`None`: not measurable).
    pub cpu_used: Option<f64>,
    /// Runnable threads waiting for a CPU, on average (`None`: not read).
    pub waiting: Option<f64>,
    /// Instructions retired per cycle by its counted threads (`None`: no
    /// hardware counters, or no cycles counted).
    pub ipc: Option<f64>,
    /// Latencies recorded.
    pub latencies: u64,
    /// Their 99th percentile, µs (`None`: none recorded).
    pub p99_us: Option<u64>,
}

impl Perf {
    /// Adds the reading of this tick.
    pub fn record(&mut self, s: Sample) {
        if self
            .samples
            .newest()
            .is_some_and(|last| last.pages != s.pages)
        {
            self.samples.clear();
        }
        if let Some(last) = self.samples.newest() {
            self.beats_seen |= s.reports.beats != last.reports.beats;
            self.latencies_seen |= s.reports.count != last.reports.count;
        }
        if let Some(now) = s.usage_ns {
            let added = now.saturating_sub(self.last_usage_ns.unwrap_or(0));
            self.used_ns = Some(self.used_ns.unwrap_or(0).saturating_add(added));
            self.last_usage_ns = Some(now);
        }
        self.samples.push(s);
    }

    /// CPU time the cell used since its first reading with usage, ns; never
    /// decreases (`None`: never measurable).
    pub fn used_ns(&self) -> Option<u64> {
        self.used_ns
    }

    /// The newest sample.
    pub fn last(&self) -> Option<&Sample> {
        self.samples.newest()
    }

    /// When run delay was last read.
    pub fn last_run_delay(&self) -> Option<Instant> {
        self.samples
            .iter()
            .rev()
            .find(|s| s.run_delay_ns.is_some())
            .map(|s| s.at)
    }

    /// The stretch from the newest sample back to the oldest at least
    /// `span` before it (or the oldest kept); `None` with fewer than two
    /// samples.
    pub fn over(&self, span: Duration) -> Option<Stretch> {
        let (from, new) = self.samples.span(span)?;
        self.between(from, new)
    }

    /// The shortest stretch of at least `span` that holds
    /// [`P99_LATENCIES`] latencies, or all samples when none does.
    pub fn latency_stretch(&self, span: Duration) -> Option<Stretch> {
        let (from, new) = self.samples.span_until(span, |old, new| {
            new.reports.count.wrapping_sub(old.reports.count) >= P99_LATENCIES
        })?;
        self.between(from, new)
    }

    fn between(&self, from: &Sample, new: &Sample) -> Option<Stretch> {
        let secs = new.at.duration_since(from.at).as_secs_f64();
        if secs <= 0.0 {
            return None;
        }
        let d = new.reports.reports().since(&from.reports.reports());
        // CPUs held: each later sample's grant held since the one before.
        let mut held = 0.0;
        let mut prev = from;
        for s in self
            .samples
            .iter()
            .filter(|s| s.at > from.at && s.at <= new.at)
        {
            held += s.cpus * s.at.duration_since(prev.at).as_secs_f64();
            prev = s;
        }
        let per_s = |ns: u64| ns as f64 / 1e9 / secs;
        let delta = |a: Option<u64>, b: Option<u64>| Some(b?.saturating_sub(a?));
        // Run delay is read every few ticks: use the newest and oldest
        // samples that have it.
        let waits: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| s.at >= from.at && s.at <= new.at && s.run_delay_ns.is_some())
            .collect();
        let waiting = match (waits.first(), waits.last()) {
            (Some(a), Some(b)) if b.at > a.at => Some(
                b.run_delay_ns?.saturating_sub(a.run_delay_ns?) as f64
                    / b.at.duration_since(a.at).as_nanos() as f64,
            ),
            _ => None,
        };
        // So are the hardware counters.
        let counted: Vec<Count> = self
            .samples
            .iter()
            .filter(|s| s.at >= from.at && s.at <= new.at)
            .filter_map(|s| s.hw)
            .collect();
        let ipc = match (counted.first(), counted.last()) {
            (Some(a), Some(b)) => b.ratio_since(*a),
            _ => None,
        };
        Some(Stretch {
            secs,
            cpus: held / secs,
            rate_per_s: self.beats_seen.then(|| d.beats as f64 / secs),
            cpu_used: delta(from.usage_ns, new.usage_ns).map(per_s),
            waiting,
            ipc,
            latencies: d.count,
            p99_us: d.latency_quantile_us(0.99),
        })
    }
}

/// One tick's reading of the machine.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadSample {
    pub at: Instant,
    /// The machine's counters.
    pub system: SystemCpu,
    /// CPU time the cells used so far, summed, ns (`None`: some cell's
    /// use cannot be measured, so the rest cannot be told apart).
    pub cells_ns: Option<u64>,
}

/// The machine's recent load.
#[derive(Debug, Clone, Default)]
pub struct Load {
    samples: Samples<LoadSample>,
}

/// What a stretch of the machine's series says.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LoadWindow {
    /// Its length, s.
    pub secs: f64,
    /// CPUs busy on average.
    pub busy: f64,
    /// Of those, CPUs' worth used by the cells (`None`: not measurable).
    pub cells: Option<f64>,
    /// CPUs' worth used outside every cell: `busy − cells`, never below 0
    /// (`None` when the cells' use is not measurable).
    pub unmanaged: Option<f64>,
    /// Share of the time some runnable thread waited for a CPU (`None`:
    /// no pressure stall information).
    pub pressure: Option<f64>,
    /// Threads runnable at the newest sample.
    pub running: u32,
}

impl Load {
    /// Adds the reading of this tick. A cell set that changed makes the
    /// cells' sum jump; the caller passes `None` for `cells_ns` then, and
    /// the series restarts at the next sample that has it.
    pub fn record(&mut self, s: LoadSample) {
        self.samples.push(s);
    }

    /// The stretch from the newest sample back `span` (or the oldest kept).
    pub fn over(&self, span: Duration) -> Option<LoadWindow> {
        let (from, new) = self.samples.span(span)?;
        let wall = new.at.duration_since(from.at).as_nanos() as f64;
        if wall <= 0.0 {
            return None;
        }
        let busy = new.system.busy_ns.saturating_sub(from.system.busy_ns) as f64 / wall;
        let cells = match (from.cells_ns, new.cells_ns) {
            (Some(a), Some(b)) if b >= a => Some((b - a) as f64 / wall),
            _ => None,
        };
        let pressure = match (from.system.pressure_some_us, new.system.pressure_some_us) {
            (Some(a), Some(b)) => Some((b.saturating_sub(a) as f64 * 1000.0 / wall).min(1.0)),
            _ => None,
        };
        Some(LoadWindow {
            secs: wall / 1e9,
            busy,
            cells,
            unmanaged: cells.map(|c| (busy - c).max(0.0)),
            pressure,
            running: new.system.running,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t0: Instant, ms: u64, cpus: u32, usage_ms: u64, beats: u64) -> Sample {
        Sample {
            at: t0 + Duration::from_millis(ms),
            cpus: f64::from(cpus),
            usage_ns: Some(usage_ms * 1_000_000),
            run_delay_ns: None,
            hw: None,
            reports: Reports {
                beats,
                ..Reports::default()
            }
            .into(),
            pages: 1,
        }
    }

    #[test]
    fn a_stretch_reads_rate_cpus_and_cpu_use_from_differences() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        // 2 CPUs, both busy, 100 beats a second, for 2 s at 100 ms ticks.
        for k in 0..=20 {
            p.record(sample(t0, k * 100, 2, k * 200, k * 10));
        }
        let w = p.over(RATE_SPAN).unwrap();
        assert!((w.secs - 1.0).abs() < 1e-9);
        assert!((w.rate_per_s.unwrap() - 100.0).abs() < 1e-6);
        assert!((w.cpus - 2.0).abs() < 1e-9);
        assert!((w.cpu_used.unwrap() - 2.0).abs() < 1e-9);
        assert_eq!((w.latencies, w.p99_us, w.waiting), (0, None, None));
    }

    #[test]
    fn a_cell_that_never_beats_has_no_rate_and_one_that_stopped_has_zero() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        for k in 0..5 {
            p.record(sample(t0, k * 100, 1, 0, 0));
        }
        assert_eq!(p.over(RATE_SPAN).unwrap().rate_per_s, None);
        p.record(sample(t0, 500, 1, 0, 5));
        for k in 6..30 {
            p.record(sample(t0, k * 100, 1, 0, 5));
        }
        assert_eq!(p.over(RATE_SPAN).unwrap().rate_per_s, Some(0.0));
    }

    #[test]
    fn the_latency_stretch_grows_until_it_holds_enough_latencies() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        let mut r = Reports::default();
        // 50 latencies of 100 µs a tick, one of 20 ms every tenth tick.
        for k in 0..40u64 {
            r.count += 50;
            r.buckets[allot_proto::report::bucket_of(100)] += 50;
            if k % 10 == 0 {
                r.count += 1;
                r.buckets[allot_proto::report::bucket_of(20_000)] += 1;
            }
            p.record(Sample {
                reports: r.into(),
                ..sample(t0, k * 100, 1, 0, 0)
            });
        }
        let w = p.latency_stretch(Duration::from_millis(100)).unwrap();
        assert!(w.latencies >= P99_LATENCIES && w.secs < 1.0, "{w:?}");
        let all = p.latency_stretch(Duration::from_secs(60)).unwrap();
        assert!((all.secs - 3.9).abs() < 1e-9, "{all:?}");
        assert!(all.p99_us.unwrap() >= 100, "{all:?}");
    }

    #[test]
    fn run_delay_read_now_and_then_gives_the_threads_waiting() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        for k in 0..=10u64 {
            let mut s = sample(t0, k * 100, 1, 0, 0);
            // Read every fifth tick: 1.5 threads waiting on average.
            if k % 5 == 0 {
                s.run_delay_ns = Some(k * 150_000_000);
            }
            p.record(s);
        }
        let w = p.over(RATE_SPAN).unwrap();
        assert!((w.waiting.unwrap() - 1.5).abs() < 1e-9, "{w:?}");
    }

    #[test]
    fn cpu_time_used_only_grows() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        assert_eq!(p.used_ns(), None);
        p.record(Sample {
            usage_ns: None,
            ..sample(t0, 0, 1, 0, 0)
        });
        assert_eq!(p.used_ns(), None, "nothing measured yet");
        for (k, used_ms) in [(1, 100), (2, 300), (3, 250), (4, 400)] {
            p.record(sample(t0, k * 100, 1, used_ms, 0));
        }
        // 100, +200, a drop to 250 (a member gone) adds nothing, +150.
        assert_eq!(p.used_ns(), Some(450_000_000));
        // A restarted series (another set of pages) keeps the total.
        p.record(Sample {
            pages: 2,
            ..sample(t0, 500, 1, 500, 0)
        });
        assert_eq!(p.used_ns(), Some(550_000_000));
    }

    #[test]
    fn another_set_of_pages_restarts_the_series() {
        let t0 = Instant::now();
        let mut p = Perf::default();
        for k in 0..5 {
            p.record(sample(t0, k * 100, 1, 0, k));
        }
        // A rejoin: the sum now includes a page whose counters are large.
        p.record(Sample {
            pages: 2,
            ..sample(t0, 500, 1, 0, 1_000_000)
        });
        assert!(p.over(RATE_SPAN).is_none(), "one sample: no stretch");
        p.record(Sample {
            pages: 2,
            ..sample(t0, 600, 1, 0, 1_000_010)
        });
        let w = p.over(RATE_SPAN).unwrap();
        assert!((w.rate_per_s.unwrap() - 100.0).abs() < 1e-6, "{w:?}");
    }

    #[test]
    fn the_load_outside_the_cells_is_what_they_do_not_account_for() {
        let t0 = Instant::now();
        let mut l = Load::default();
        // 2 s: the machine 1.5 CPUs busy, the cells 1 CPU; some thread
        // waited a fifth of the time.
        for k in 0..=20u64 {
            l.record(LoadSample {
                at: t0 + Duration::from_millis(100 * k),
                system: SystemCpu {
                    busy_ns: k * 150_000_000,
                    per_cpu_busy_ns: Vec::new(),
                    total_ns: k * 200_000_000,
                    running: 3,
                    pressure_some_us: Some(k * 20_000),
                },
                cells_ns: Some(k * 100_000_000),
            });
        }
        let w = l.over(Duration::from_secs(1)).unwrap();
        assert!((w.busy - 1.5).abs() < 1e-9, "{w:?}");
        assert!((w.unmanaged.unwrap() - 0.5).abs() < 1e-9, "{w:?}");
        assert!((w.pressure.unwrap() - 0.2).abs() < 1e-9, "{w:?}");
        assert_eq!(w.running, 3);
        // Cells whose use cannot be measured leave the rest unknown.
        l.record(LoadSample {
            at: t0 + Duration::from_millis(2100),
            system: SystemCpu::default(),
            cells_ns: None,
        });
        assert_eq!(l.over(Duration::from_secs(1)).unwrap().unmanaged, None);
    }
}
