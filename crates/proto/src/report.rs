//! The report page: where a cell's processes tell the broker how well they
//! are doing (Tessellation's performance reports), without a system call.
//!
//! It is the second page of the cell's grant memfd ([`crate::shm`]): the
//! broker maps both pages, a client maps the grant page read-only and this
//! one read-write. Any process of the cell that holds the memfd (through
//! the client, or inherited from `allot run`) adds to it.
//!
//! # Layout (little-endian, all fields naturally aligned)
//!
//! ```text
//! offset size field     meaning
//!      0    4 magic     REPORT_MAGIC ("ARPT")
//!      4    4 version   REPORT_VERSION
//!      8    8 beats     units of work done (heartbeat(n) adds n)
//!     16    8 count     latencies recorded
//!     24    8 sum_ns    their sum, ns
//!     32  768 buckets   96 latency buckets (see `bucket_of`)
//!    800 3296 reserved  zero
//! ```
//!
//! # Protocol
//!
//! Writers (any number, any process): relaxed atomic adds; every field only
//! grows (wrapping at 2^64). Recording a latency is three adds (count,
//! sum, one bucket); a reader may see them out of step by one record.
//!
//! Reader (the broker): takes a [`Reports`] snapshot per tick and uses the
//! difference between two snapshots ([`Reports::since`]): the work done and
//! the latencies recorded in between. Everything on the page is written by
//! the cell and is therefore untrusted: differences are wrapping, and a
//! page that does not carry the magic is read as empty. A cell that lies
//! here can only misreport its own progress, which the broker bounds by
//! the cell's own limits (its maximum, and never anyone's minimum).
//!
//! # Latency buckets
//!
//! Bucket `i` holds latencies of `[lo(i), lo(i + 1))` microseconds, four
//! buckets per power of two (a quarter-octave, at most 25 % wide): 0–3 µs
//! one per microsecond, then `[(4 + m)·2^(e−2), (5 + m)·2^(e−2))` for bucket
//! `4(e − 1) + m`. The last bucket also takes everything above (from about
//! 29 s). Quantiles are read as the upper edge of the bucket that holds
//! them, so a reported p99 is at most one bucket above the true one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// "ARPT" in little-endian.
pub const REPORT_MAGIC: u32 = u32::from_le_bytes(*b"ARPT");

/// Version of the report page's layout.
pub const REPORT_VERSION: u32 = 1;

/// Latency buckets on the page.
pub const BUCKETS: usize = 96;

/// The report page as laid out in memory.
#[repr(C)]
#[derive(Debug)]
pub struct ReportPage {
    magic: AtomicU32,
    version: AtomicU32,
    beats: AtomicU64,
    count: AtomicU64,
    sum_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
    _tail: [u8; crate::PAGE_SIZE - 32 - 8 * BUCKETS],
}

const _: () = assert!(std::mem::size_of::<ReportPage>() == crate::PAGE_SIZE);
const _: () = assert!(std::mem::offset_of!(ReportPage, beats) == 8);
const _: () = assert!(std::mem::offset_of!(ReportPage, buckets) == 32);

/// The bucket that holds a latency of `us` microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us < 4 {
        return us as usize;
    }
    let e = 63 - us.leading_zeros() as usize; // 2^e ≤ us < 2^(e+1), e ≥ 2
    let m = ((us >> (e - 2)) - 4) as usize; // quarter of the octave, 0..4
    (4 * (e - 1) + m).min(BUCKETS - 1)
}

/// The lower edge of bucket `i`, µs (bucket `i` ends where `i + 1` starts).
pub fn bucket_floor_us(i: usize) -> u64 {
    if i < 4 {
        return i as u64;
    }
    let e = i / 4 + 1;
    let m = (i % 4) as u64;
    (4 + m) << (e - 2)
}

impl ReportPage {
    /// Writes the header. The broker calls this once, before sharing.
    pub fn init(&self) {
        self.magic.store(REPORT_MAGIC, Ordering::Relaxed);
        self.version.store(REPORT_VERSION, Ordering::Release);
    }

    /// Whether the header is this layout's.
    pub fn valid(&self) -> bool {
        self.magic.load(Ordering::Acquire) == REPORT_MAGIC
            && self.version.load(Ordering::Relaxed) == REPORT_VERSION
    }

    /// Counts `n` units of work done (frames, requests, iterations: the
    /// unit of the cell's rate goal). One atomic add.
    pub fn heartbeat(&self, n: u64) {
        self.beats.fetch_add(n, Ordering::Relaxed);
    }

    /// Records one request's latency. Three atomic adds.
    pub fn record_latency(&self, d: Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns.fetch_add(ns, Ordering::Relaxed);
        self.buckets[bucket_of(ns / 1000)].fetch_add(1, Ordering::Relaxed);
    }

    /// What the page holds now (all zero when its header is not valid).
    pub fn snapshot(&self) -> Reports {
        if !self.valid() {
            return Reports::default();
        }
        let mut buckets = [0u64; BUCKETS];
        for (b, a) in buckets.iter_mut().zip(&self.buckets) {
            *b = a.load(Ordering::Relaxed);
        }
        Reports {
            beats: self.beats.load(Ordering::Relaxed),
            count: self.count.load(Ordering::Relaxed),
            sum_ns: self.sum_ns.load(Ordering::Relaxed),
            buckets,
        }
    }
}

/// A copy of a report page's counters, or the difference of two copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reports {
    /// Units of work done.
    pub beats: u64,
    /// How many latencies were recorded; `sum_ns` and `buckets` cover the same ones.
    pub count: u64,
    /// Their sum, ns.
    pub sum_ns: u64,
    /// Latencies per bucket.
    pub buckets: [u64; BUCKETS],
}

impl Default for Reports {
    fn default() -> Reports {
        Reports {
            beats: 0,
            count: 0,
            sum_ns: 0,
            buckets: [0; BUCKETS],
        }
    }
}

impl Reports {
    /// What was added between `earlier` and `self` (wrapping: the counters
    /// only grow, and a writer cannot make a difference negative).
    pub fn since(&self, earlier: &Reports) -> Reports {
        let mut buckets = [0u64; BUCKETS];
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = self.buckets[i].wrapping_sub(earlier.buckets[i]);
        }
        Reports {
            beats: self.beats.wrapping_sub(earlier.beats),
            count: self.count.wrapping_sub(earlier.count),
            sum_ns: self.sum_ns.wrapping_sub(earlier.sum_ns),
            buckets,
        }
    }

    /// The sum of `self` and `other` (two pages of one cell).
    pub fn plus(&self, other: &Reports) -> Reports {
        let mut buckets = [0u64; BUCKETS];
        for (i, b) in buckets.iter_mut().enumerate() {
            *b = self.buckets[i].wrapping_add(other.buckets[i]);
        }
        Reports {
            beats: self.beats.wrapping_add(other.beats),
            count: self.count.wrapping_add(other.count),
            sum_ns: self.sum_ns.wrapping_add(other.sum_ns),
            buckets,
        }
    }

    /// The `q` quantile (0 < q ≤ 1) of the recorded latencies, µs: the
    /// upper edge of the bucket that holds it. `None` without latencies.
    pub fn latency_quantile_us(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets.iter().fold(0u64, |a, b| a.saturating_add(*b));
        if total == 0 {
            return None;
        }
        // The rank of the quantile, 1-based: the smallest value with at
        // least q·total samples at or below it.
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, b) in self.buckets.iter().enumerate() {
            seen = seen.saturating_add(*b);
            if seen >= rank {
                return Some(bucket_floor_us(i + 1));
            }
        }
        Some(bucket_floor_us(BUCKETS))
    }

    /// The mean recorded latency, µs; `None` without latencies.
    pub fn mean_latency_us(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum_ns as f64 / self.count as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page() -> Box<ReportPage> {
        // SAFETY: ReportPage is atomics and bytes; all-zero is a valid value.
        let p: Box<ReportPage> = unsafe { Box::new(std::mem::zeroed()) };
        p.init();
        p
    }

    #[test]
    fn buckets_tile_the_microseconds_a_quarter_octave_wide() {
        // Every value falls in the bucket whose edges hold it.
        for us in (0..5000).chain([65_535, 1 << 20, 29_000_000]) {
            let i = bucket_of(us);
            assert!(bucket_floor_us(i) <= us, "{us} in {i}");
            if i < BUCKETS - 1 {
                assert!(us < bucket_floor_us(i + 1), "{us} in {i}");
            }
        }
        // Edges grow, each bucket at most a quarter of its floor wide
        // (above the one-microsecond buckets).
        for i in 4..BUCKETS {
            let (lo, hi) = (bucket_floor_us(i), bucket_floor_us(i + 1));
            assert!(hi > lo && (hi - lo) * 4 <= lo, "{i}: {lo}..{hi}");
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1, "the last takes the rest");
    }

    #[test]
    fn the_differences_of_two_snapshots_give_rate_and_quantiles() {
        let p = page();
        p.heartbeat(5);
        let a = p.snapshot();
        p.heartbeat(7);
        // 98 requests of 100 µs and 2 of 10 ms.
        for _ in 0..98 {
            p.record_latency(Duration::from_micros(100));
        }
        for _ in 0..2 {
            p.record_latency(Duration::from_millis(10));
        }
        let d = p.snapshot().since(&a);
        assert_eq!((d.beats, d.count), (7, 100));
        let p50 = d.latency_quantile_us(0.5).unwrap();
        assert!((100..=125).contains(&p50), "{p50}");
        let p98 = d.latency_quantile_us(0.98).unwrap();
        assert!((100..=125).contains(&p98), "{p98}");
        let p99 = d.latency_quantile_us(0.99).unwrap();
        assert!((10_000..=12_500).contains(&p99), "{p99}");
        assert!((d.mean_latency_us().unwrap() - 298.0).abs() < 1e-6);
        assert_eq!(Reports::default().latency_quantile_us(0.99), None);
    }

    #[test]
    fn counters_that_wrap_still_differ_by_what_was_added() {
        let p = page();
        p.beats.store(u64::MAX - 1, Ordering::Relaxed);
        let a = p.snapshot();
        p.heartbeat(3);
        assert_eq!(p.snapshot().since(&a).beats, 3);
        let two = a.plus(&a);
        assert_eq!(two.beats, (u64::MAX - 1).wrapping_mul(2));
    }

    #[test]
    fn a_page_without_the_header_reads_as_empty() {
        // SAFETY: as in `page`.
        let p: Box<ReportPage> = unsafe { Box::new(std::mem::zeroed()) };
        p.heartbeat(9);
        assert_eq!(p.snapshot(), Reports::default());
    }
}
