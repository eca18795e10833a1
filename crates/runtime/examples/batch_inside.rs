//! Spawn-and-join batches timed where divan cannot time them: on a worker.
//!
//! `cargo run --release -p allot-runtime --example batch_inside [scope]`
//!
//! The divan benchmark `allot_batch_in_pool` times a whole `install` from
//! the bench thread, so each sample also holds that thread's wait for the
//! result: it spins for `EVENT_SPIN` (20 µs) and then parks, and a batch
//! that takes a little longer than the spin pays a wake-up on top. This
//! program times the same batch of 100 spawned tasks, each joined in turn,
//! from inside one `install` (30 000 batches), then 100 scoped tasks from
//! outside the pool (3 000 scopes; 100 000 and no batches with `scope`),
//! and prints the 10th, 50th and 90th percentiles in microseconds. It uses
//! only API that every version of the runtime has, so two builds can be
//! compared (crates/runtime/BENCHMARKS.md, "Spawn and join against
//! cd7b486").

use allot_client::Cell;
use allot_runtime::Pool;
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

const BATCH: usize = 100;

fn micros_since(t: Instant) -> f64 {
    t.elapsed().as_secs_f64() * 1e6
}

/// "p10 a p50 b p90 c" of `samples` (sorted here).
fn percentiles(mut samples: Vec<f64>) -> String {
    if samples.is_empty() {
        return "none".into();
    }
    samples.sort_by(f64::total_cmp);
    let at = |q: usize| samples[(samples.len() * q / 10).min(samples.len() - 1)];
    format!("p10 {:.1} p50 {:.1} p90 {:.1}", at(1), at(5), at(9))
}

fn main() {
    let only_scope = std::env::args().any(|a| a == "scope");
    let (batches, scopes) = if only_scope {
        (0, 100_000)
    } else {
        (30_000, 3_000)
    };
    let pool = Pool::builder()
        .cell(Cell::standalone())
        .name("batch-inside")
        .build()
        .expect("pool");
    let batch = pool.install(|| {
        (0..batches)
            .map(|_| {
                let t = Instant::now();
                let hs: [_; BATCH] = std::array::from_fn(|i| pool.spawn(move || black_box(i)));
                black_box(hs.into_iter().map(|h| h.join().unwrap()).sum::<usize>());
                micros_since(t)
            })
            .collect::<Vec<_>>()
    });
    let scope = (0..scopes)
        .map(|_| {
            let t = Instant::now();
            let n = AtomicUsize::new(0);
            pool.scope(|s| {
                for _ in 0..BATCH {
                    s.spawn(|_| {
                        n.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            black_box(n.into_inner());
            micros_since(t)
        })
        .collect::<Vec<_>>();
    println!(
        "batch inside the pool (µs): {} | scope from outside (µs): {}",
        percentiles(batch),
        percentiles(scope)
    );
}
