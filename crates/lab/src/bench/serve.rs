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
    let start = Instant::now();
    let warm = start + Duration::from_secs_f64(a.warmup.max(0.0));
    let end = start + Duration::from_secs_f64(a.seconds);
    let queue = Arc::new((Mutex::new(Queue::default()), Condvar::new()));
    let service = Duration::from_micros(a.service_us);
    let workers: Vec<_> = (0..a.workers)
        .map(|_| {
            let (queue, cell) = (queue.clone(), cell.clone());
            std::thread::spawn(move || {
                let mut lat = Vec::new();
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
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ u64::from(std::process::id());
    let mut next = start;
    while next < end {
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
    let report = ServeReport {
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
