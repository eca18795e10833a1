//! `allot bench noise`: the OS noise a spinning thread sees on its CPU
//! (the detours of FWQ/selfish-style measurements).
//!
//! One thread, pinned to the first CPU it may use, reads the monotonic
//! clock in a tight loop for `--seconds`. Any gap between two readings
//! longer than `--threshold-us` is a detour: time the CPU spent on
//! something else (an interrupt, a kernel thread, another process). It
//! prints one JSON object: the CPU, the number of detours, their total
//! (as a share of the time), the longest, and the 99th and 99.9th
//! percentiles of their lengths. Run it in a partition (`allot run
//! --partition 1 -- allot bench noise`) and in an ordinary cell beside
//! other work to compare (`scripts/bench-noise.sh`).

use serde::Serialize;
use std::time::{Duration, Instant};

/// Arguments of `allot bench noise`.
#[derive(Debug, clap::Args)]
pub struct NoiseArgs {
    /// How long to measure.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    seconds: f64,
    /// Shortest gap counted as a detour.
    #[arg(long, default_value_t = 2.0, value_name = "µs")]
    threshold_us: f64,
}

/// What the spinning thread saw.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NoiseReport {
    /// The CPU it spun on.
    pub cpu: usize,
    /// How long the thread spun, in seconds: the time `lost` is a share of.
    pub seconds: f64,
    /// Gaps over the threshold.
    pub detours: usize,
    /// Their sum as a share of the time.
    pub lost: f64,
    /// The longest, µs.
    pub max_us: f64,
    /// 99th percentile of their lengths, µs (0 without detours).
    pub p99_us: f64,
    /// 99.9th percentile, µs.
    pub p999_us: f64,
}

/// The `q` quantile of sorted `v` (0 for none).
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() as f64 * q).ceil() as usize).clamp(1, v.len()) - 1]
}

/// Summarises `detours` (µs) over `seconds` on `cpu`.
pub fn summarise(cpu: usize, seconds: f64, mut detours: Vec<f64>) -> NoiseReport {
    detours.sort_by(f64::total_cmp);
    let total: f64 = detours.iter().sum();
    NoiseReport {
        cpu,
        seconds,
        detours: detours.len(),
        lost: if seconds > 0.0 {
            total / (seconds * 1e6)
        } else {
            0.0
        },
        max_us: detours.last().copied().unwrap_or(0.0),
        p99_us: quantile(&detours, 0.99),
        p999_us: quantile(&detours, 0.999),
    }
}

pub fn run(a: NoiseArgs) -> Result<(), String> {
    if !(0.0..=3600.0).contains(&a.seconds) || a.seconds == 0.0 {
        return Err(format!("--seconds {}: give 0 to 3600 seconds", a.seconds));
    }
    if a.threshold_us.is_nan() || a.threshold_us <= 0.0 {
        return Err(format!(
            "--threshold-us {}: give a positive time",
            a.threshold_us
        ));
    }
    let cpu = allot_topo::allowed_cpus()
        .map_err(|e| format!("cannot read this process's CPUs: {e}"))?
        .first()
        .ok_or("this process may run on no CPU")?;
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    rustix::thread::sched_setaffinity(None, &one)
        .map_err(|e| format!("cannot pin to CPU {cpu}: {e}"))?;
    let threshold = Duration::from_secs_f64(a.threshold_us / 1e6);
    let span = Duration::from_secs_f64(a.seconds);
    let mut detours = Vec::new();
    let start = Instant::now();
    let mut last = start;
    loop {
        let now = Instant::now();
        let gap = now - last;
        if gap > threshold {
            detours.push(gap.as_secs_f64() * 1e6);
        }
        last = now;
        if now - start >= span {
            break;
        }
    }
    let report = summarise(cpu, start.elapsed().as_secs_f64(), detours);
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detours_are_summarised() {
        let r = summarise(3, 2.0, vec![5.0, 3.0, 100.0, 4.0]);
        assert_eq!((r.cpu, r.detours), (3, 4));
        assert_eq!(r.max_us, 100.0);
        assert_eq!(r.p99_us, 100.0);
        assert!((r.lost - 112.0 / 2e6).abs() < 1e-12);
        let none = summarise(0, 1.0, vec![]);
        assert_eq!((none.max_us, none.p999_us, none.lost), (0.0, 0.0, 0.0));
        let many: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(summarise(0, 1.0, many.clone()).p999_us, 999.0);
        assert_eq!(summarise(0, 1.0, many).p99_us, 990.0);
    }
}
