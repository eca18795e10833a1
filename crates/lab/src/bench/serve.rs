//! `allot bench serve`: a request server that reports its latencies and
//! its work to its cell (a helper for goal tests and benchmarks).
//!
//! Requests arrive at random (a Poisson stream of `--rate` a second); each
//! takes `--service-us` of CPU time, spun on the clock by one of
//! `--workers` threads that take requests in arrival order. A request's
//! latency is from its arrival to the end of its service: queueing
//! included, so it grows when the server has too little CPU. Every
//! request is a heartbeat and a recorded latency on the cell's report page
//! (when the program runs in a cell: `allot run`), and at the end one JSON
//! object says what the server saw.
//!
//! With `--file` each request also reads `--reads` random pages of that
//! file (its data set: read whole once before serving, so that it starts
//! in the page cache); a page the kernel reclaimed meanwhile is read from
//! the disk again, inside the request's latency.

use allot_client::Cell;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Arguments of `allot bench serve`.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Requests a second (arriving at random).
    #[arg(long, default_value_t = 200.0, value_name = "R")]
    rate: f64,
    /// CPU time each request takes.
    #[arg(long, default_value_t = 2000, value_name = "µs")]
    service_us: u64,
    /// Threads serving requests.
    #[arg(long, default_value_t = 4, value_name = "N")]
    workers: usize,
    /// How long to serve.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    seconds: f64,
    /// Leave this long out of the report (the broker sizing the cell).
    #[arg(long, default_value_t = 0.0, value_name = "SECONDS")]
    warmup: f64,
    /// A data set: each request reads `--reads` random pages of it.
    #[arg(long, value_name = "PATH")]
    file: Option<std::path::PathBuf>,
    /// Pages of `--file` each request reads.
    #[arg(long, default_value_t = 16, value_name = "N")]
    reads: u32,
}

/// The page size of `--file` reads.
const PAGE: u64 = 4096;

/// Opens the data set and reads it whole once (into the page cache).
fn open_data(path: &std::path::Path) -> Result<(std::fs::File, u64), String> {
    use std::io::Read;
    let what = |e: std::io::Error| format!("--file {}: {e}", path.display());
    let mut f = std::fs::File::open(path).map_err(what)?;
    let mut buf = vec![0u8; 1 << 20];
    while f.read(&mut buf).map_err(what)? > 0 {}
    let pages = f.metadata().map_err(what)?.len() / PAGE;
    if pages == 0 {
        return Err(format!("--file {}: smaller than a page", path.display()));
    }
    Ok((f, pages))
}

/// What the server saw.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ServeReport {
    /// Requests served after the warm-up.
    pub requests: usize,
    /// Their latencies, µs.
    pub p50_us: f64,
    /// 99th percentile, µs.
    pub p99_us: f64,
    /// Largest, µs.
    pub max_us: f64,
    /// Requests still queued at the end.
    pub backlog: usize,
    /// Bytes this process read from storage after the warm-up (with
    /// `--file`: pages of the data set the kernel had reclaimed).
    pub disk_read_bytes: u64,
}

/// Bytes this process has read from storage (`/proc/self/io`).
fn disk_read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("read_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

#[derive(Default)]
struct Queue {
    arrivals: VecDeque<Instant>,
    done: bool,
}

/// A uniform draw in (0, 1] from a xorshift state.
fn uniform(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    ((*state >> 11) as f64 + 1.0) / (1u64 << 53) as f64
}

/// Runs `allot bench serve`.
pub fn run(a: ServeArgs) -> Result<(), String> {
    let positive = |v: f64| v.is_finite() && v > 0.0;
    if !positive(a.rate) || a.workers == 0 || !positive(a.seconds) {
        return Err("--rate, --workers and --seconds must be positive".into());
    }
    let cell = match Cell::from_env() {
        Some(Ok(c)) => c,
        _ => Cell::standalone(),
    };
    let data = match &a.file {
        Some(p) => Some(Arc::new(open_data(p)?)),
        None => None,
    };
    let start = Instant::now();
    let warm = start + Duration::from_secs_f64(a.warmup.max(0.0));
    let end = start + Duration::from_secs_f64(a.seconds);
    let queue = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
    let service = Duration::from_micros(a.service_us);
    let workers: Vec<_> = (0..a.workers)
        .map(|w| {
            let (queue, cell, data) = (queue.clone(), cell.clone(), data.clone());
            let reads = a.reads;
            std::thread::spawn(move || {
                let mut lat = Vec::new();
                let mut page = [0u8; PAGE as usize];
                let mut state = 0x2545_f491_4f6c_dd1du64 ^ (w as u64 + 1);
                loop {
                    let arrived = {
                        let (m, cv) = &*queue;
                        let mut q = m.lock().unwrap_or_else(|p| p.into_inner());
                        loop {
                            if let Some(t) = q.arrivals.pop_front() {
                                break Some(t);
                            }
                            if q.done {
                                break None;
                            }
                            q = cv.wait(q).unwrap_or_else(|p| p.into_inner());
                        }
                    };
                    let Some(arrived) = arrived else {
                        return lat;
                    };
                    // Serve: CPU time, as a thread measures it, so that a
                    // descheduled worker does not count waiting as work.
                    let cpu0 = thread_cpu();
                    while thread_cpu().saturating_sub(cpu0) < service {
                        std::hint::spin_loop();
                    }
                    if let Some((f, pages)) = data.as_deref() {
                        use std::os::unix::fs::FileExt;
                        for _ in 0..reads {
                            let at = (uniform(&mut state) * *pages as f64) as u64 % pages;
                            let _ = f.read_at(&mut page, at * PAGE);
                        }
                    }
                    let d = arrived.elapsed();
                    cell.report_latency(d);
                    cell.heartbeat(1);
                    if arrived >= warm {
                        lat.push(d.as_secs_f64() * 1e6);
                    }
                }
            })
        })
        .collect();
    // Arrivals: exponential gaps, slept on the clock.
    // Storage reads so far when the warm-up ended.
    let mut read_at_warm = None;
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut next = start;
    while next < end {
        if next >= warm {
            read_at_warm.get_or_insert_with(disk_read_bytes);
        }
        let gap = -uniform(&mut state).ln() / a.rate;
        next += Duration::from_secs_f64(gap);
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let (m, cv) = &*queue;
        m.lock()
            .unwrap_or_else(|p| p.into_inner())
            .arrivals
            .push_back(next);
        cv.notify_one();
    }
    let backlog = {
        let (m, cv) = &*queue;
        let mut q = m.lock().unwrap_or_else(|p| p.into_inner());
        let left = q.arrivals.len();
        q.arrivals.clear();
        q.done = true;
        cv.notify_all();
        left
    };
    let mut lat: Vec<f64> = Vec::new();
    for w in workers {
        lat.extend(w.join().map_err(|_| "a worker panicked".to_string())?);
    }
    lat.sort_by(f64::total_cmp);
    let at = |q: f64| {
        if lat.is_empty() {
            0.0
        } else {
            super::quantile(&lat, q)
        }
    };
    let since_warm = read_at_warm.unwrap_or(0);
    let report = ServeReport {
        disk_read_bytes: disk_read_bytes().saturating_sub(since_warm),
        requests: lat.len(),
        p50_us: at(0.5),
        p99_us: at(0.99),
        max_us: at(1.0),
        backlog,
    };
    println!(
        "{}",
        serde_json::to_string(&report).map_err(|e| e.to_string())?
    );
    Ok(())
}

/// This thread's CPU time.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}
