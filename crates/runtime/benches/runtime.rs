//! allot-runtime against its baselines, measured in the same run:
//!
//! - spawn + join of an empty task vs `std::thread::spawn` + join and vs
//!   rayon (`spawn` + a completion signal, and `scope`);
//! - fork/join (fib with a sequential cutoff) vs `rayon::join`;
//! - fine-grained parallel-for vs rayon `par_iter` (same grain);
//! - wake-up of an idle pool / `Event` vs a `Mutex`+`Condvar` hand-off;
//! - resize: publish a grant → `pool.workers()` equals the new count.
//!
//! Run: `cargo bench -p allot-runtime --bench runtime`. Both pools get the
//! same number of threads (the CPUs this process may use), so the
//! comparison is like for like. Results and ratios:
//! `crates/runtime/BENCHMARKS.md`.

// The pool does not exist in loom builds (`--cfg loom`, for the models):
// there every item is left out and `main` does nothing.
#![cfg_attr(loom, allow(unused))]

#[cfg(not(loom))]
use allot_client::{Cell, GrantWriter};
#[cfg(not(loom))]
use allot_runtime::{Event, Pool};
use allot_topo::CpuSet;
use divan::{Bencher, black_box};
use rayon::prelude::*;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, LazyLock, Mutex};
use std::time::Duration;

fn main() {
    #[cfg(not(loom))]
    divan::main();
}

#[cfg(not(loom))]
static POOL: LazyLock<Pool> = LazyLock::new(|| {
    Pool::builder()
        .cell(Cell::standalone())
        .name("bench")
        .build()
        .expect("allot pool")
});

#[cfg(not(loom))]
static RAYON: LazyLock<rayon::ThreadPool> = LazyLock::new(|| {
    rayon::ThreadPoolBuilder::new()
        .num_threads(POOL.workers())
        .build()
        .expect("rayon pool")
});

/// Idle time before a "cold" sample: far above the 20 µs spin budget, so
/// every worker / helper is parked when the sample starts.
const COLD: Duration = Duration::from_micros(300);

#[cfg(not(loom))]
mod spawn {
    use super::*;

    const BATCH: usize = 100;

    /// One task from outside the pool: queue, wake, run, signal back.
    #[divan::bench]
    fn allot_external_roundtrip(b: Bencher) {
        let p = &*POOL;
        b.bench(|| p.spawn(|| black_box(1)).join().unwrap());
    }

    /// 100 tasks spawned and joined from inside the pool (per-task cost =
    /// time / 100).
    #[divan::bench(counters = [divan::counter::ItemsCount::new(BATCH)])]
    fn allot_batch_in_pool(b: Bencher) {
        let p = &*POOL;
        b.bench(|| {
            p.install(|| {
                let hs: [_; BATCH] = std::array::from_fn(|i| p.spawn(move || black_box(i)));
                hs.into_iter().map(|h| h.join().unwrap()).sum::<usize>()
            })
        });
    }

    /// 100 scoped tasks (per-task cost = time / 100).
    #[divan::bench(counters = [divan::counter::ItemsCount::new(BATCH)])]
    fn allot_scope_batch(b: Bencher) {
        let p = &*POOL;
        b.bench(|| {
            let n = AtomicUsize::new(0);
            p.scope(|s| {
                for _ in 0..BATCH {
                    s.spawn(|_| {
                        n.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            n.into_inner()
        });
    }

    /// A suspended task made, resumed and joined from outside the pool:
    /// `allot_external_roundtrip` plus the suspension's own cost.
    #[divan::bench]
    fn allot_suspend_resume_roundtrip(b: Bencher) {
        let p = &*POOL;
        b.bench(|| {
            let (r, h) = p
                .spawn_suspended(allot_runtime::SpawnOptions::new(), || black_box(1))
                .unwrap();
            r.resume();
            h.join().unwrap()
        });
    }

    /// A timed task due at once, joined from outside: the timer thread's
    /// reaction (a condvar wake-up) on top of the round trip.
    #[divan::bench]
    fn allot_timed_zero_roundtrip(b: Bencher) {
        let p = &*POOL;
        b.bench(|| {
            p.spawn_after(Duration::ZERO, allot_runtime::SpawnOptions::new(), || {
                black_box(1)
            })
            .unwrap()
            .join()
            .unwrap()
        });
    }

    /// 100 suspended tasks made and resumed inside the pool, then joined
    /// (per-task cost = time / 100; compare `allot_batch_in_pool`).
    #[divan::bench(counters = [divan::counter::ItemsCount::new(BATCH)])]
    fn allot_suspend_batch_in_pool(b: Bencher) {
        let p = &*POOL;
        b.bench(|| {
            p.install(|| {
                let hs: [_; BATCH] = std::array::from_fn(|i| {
                    let (r, h) = p
                        .spawn_suspended(allot_runtime::SpawnOptions::new(), move || black_box(i))
                        .unwrap();
                    r.resume();
                    h
                });
                hs.into_iter().map(|h| h.join().unwrap()).sum::<usize>()
            })
        });
    }

    /// A pthread per task.
    #[divan::bench]
    fn pthread_spawn_join(b: Bencher) {
        b.bench(|| std::thread::spawn(|| black_box(1)).join().unwrap());
    }

    /// rayon has no join handle: `spawn` + an `Event` as the signal, the
    /// same wait our `JoinHandle::join` does.
    #[divan::bench]
    fn rayon_external_roundtrip(b: Bencher) {
        let r = &*RAYON;
        b.bench(|| {
            let ev = Arc::new(Event::new());
            let e2 = ev.clone();
            r.spawn(move || {
                black_box(1);
                e2.set();
            });
            ev.wait();
        });
    }

    /// 100 rayon spawns with a completion signal each, from inside the pool.
    #[divan::bench(counters = [divan::counter::ItemsCount::new(BATCH)])]
    fn rayon_batch_in_pool(b: Bencher) {
        let r = &*RAYON;
        b.bench(|| {
            r.install(|| {
                let evs: [_; BATCH] = std::array::from_fn(|i| {
                    let ev = Arc::new(Event::new());
                    let e2 = ev.clone();
                    rayon::spawn(move || {
                        black_box(i);
                        e2.set();
                    });
                    ev
                });
                evs.iter().for_each(|e| e.wait());
            })
        });
    }

    /// 100 tasks in a `rayon::scope` (per-task cost = time / 100).
    #[divan::bench(counters = [divan::counter::ItemsCount::new(BATCH)])]
    fn rayon_scope_batch(b: Bencher) {
        let r = &*RAYON;
        b.bench(|| {
            let n = AtomicUsize::new(0);
            r.scope(|s| {
                for _ in 0..BATCH {
                    s.spawn(|_| {
                        n.fetch_add(1, Ordering::Relaxed);
                    });
                }
            });
            n.into_inner()
        });
    }
}

#[cfg(not(loom))]
mod forkjoin {
    use super::*;

    const CUTOFF: u64 = 12;

    fn seq(n: u64) -> u64 {
        if n < 2 { n } else { seq(n - 1) + seq(n - 2) }
    }

    fn allot_fib(n: u64) -> u64 {
        if n < CUTOFF {
            return seq(n);
        }
        let (a, b) = allot_runtime::join(|| allot_fib(n - 1), || allot_fib(n - 2));
        a + b
    }

    fn rayon_fib(n: u64) -> u64 {
        if n < CUTOFF {
            return seq(n);
        }
        let (a, b) = rayon::join(|| rayon_fib(n - 1), || rayon_fib(n - 2));
        a + b
    }

    #[divan::bench(args = [25, 30])]
    fn allot_join(b: Bencher, n: u64) {
        b.bench(|| POOL.install(|| allot_fib(black_box(n))));
    }

    #[divan::bench(args = [25, 30])]
    fn rayon_join(b: Bencher, n: u64) {
        b.bench(|| RAYON.install(|| rayon_fib(black_box(n))));
    }

    #[divan::bench(args = [25, 30])]
    fn sequential(b: Bencher, n: u64) {
        b.bench(|| seq(black_box(n)));
    }
}

#[cfg(not(loom))]
mod parfor {
    use super::*;

    const N: usize = 100_000;

    static OUT: LazyLock<Vec<AtomicU64>> =
        LazyLock::new(|| (0..N).map(|_| AtomicU64::new(0)).collect());

    #[inline]
    fn body(i: usize) {
        OUT[i].store((i as u64).wrapping_mul(2_654_435_761), Ordering::Relaxed);
    }

    #[divan::bench(args = [64, 256, 1024])]
    fn allot_for_each(b: Bencher, grain: usize) {
        LazyLock::force(&OUT);
        b.bench(|| POOL.for_each(0..N, grain, body));
    }

    #[divan::bench(args = [64, 256, 1024])]
    fn rayon_par_iter(b: Bencher, grain: usize) {
        LazyLock::force(&OUT);
        b.bench(|| RAYON.install(|| (0..N).into_par_iter().with_min_len(grain).for_each(body)));
    }

    /// rayon split into exactly the same chunks as `allot_for_each`.
    #[divan::bench(args = [64, 256, 1024])]
    fn rayon_par_iter_fixed(b: Bencher, grain: usize) {
        LazyLock::force(&OUT);
        b.bench(|| {
            RAYON.install(|| {
                (0..N)
                    .into_par_iter()
                    .with_min_len(grain)
                    .with_max_len(grain)
                    .for_each(body)
            })
        });
    }

    #[divan::bench]
    fn sequential(b: Bencher) {
        LazyLock::force(&OUT);
        b.bench(|| (0..N).for_each(body));
    }
}

#[cfg(not(loom))]
mod wake {
    use super::*;

    /// A helper thread that answers each request; it waits on an `Event`
    /// (spin, then park) or on a `Mutex`+`Condvar` (always blocks).
    struct Responder {
        event: Arc<Event>,
        cv: Arc<(Mutex<u64>, Condvar)>,
        done: Arc<AtomicU64>,
    }

    fn event_responder() -> Responder {
        let r = Responder {
            event: Arc::new(Event::new()),
            cv: Arc::new((Mutex::new(0), Condvar::new())),
            done: Arc::new(AtomicU64::new(0)),
        };
        let (ev, done) = (r.event.clone(), r.done.clone());
        std::thread::spawn(move || {
            loop {
                ev.wait();
                ev.reset();
                done.fetch_add(1, Ordering::Release);
            }
        });
        r
    }

    fn condvar_responder() -> Responder {
        let r = Responder {
            event: Arc::new(Event::new()),
            cv: Arc::new((Mutex::new(0), Condvar::new())),
            done: Arc::new(AtomicU64::new(0)),
        };
        let (cv, done) = (r.cv.clone(), r.done.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            let mut g = cv.0.lock().unwrap();
            loop {
                while *g == seen {
                    g = cv.1.wait(g).unwrap();
                }
                seen = *g;
                done.fetch_add(1, Ordering::Release);
            }
        });
        r
    }

    static EVENT: LazyLock<Responder> = LazyLock::new(event_responder);
    static CONDVAR: LazyLock<Responder> = LazyLock::new(condvar_responder);

    fn event_roundtrip() {
        let r = &*EVENT;
        let want = r.done.load(Ordering::Acquire) + 1;
        r.event.set();
        while r.done.load(Ordering::Acquire) != want {
            std::hint::spin_loop();
        }
    }

    fn condvar_roundtrip() {
        let r = &*CONDVAR;
        let want = r.done.load(Ordering::Acquire) + 1;
        *r.cv.0.lock().unwrap() += 1;
        r.cv.1.notify_one();
        while r.done.load(Ordering::Acquire) != want {
            std::hint::spin_loop();
        }
    }

    fn pool_roundtrip() {
        POOL.spawn(|| black_box(1)).join().unwrap();
    }

    /// Every sample starts with all workers parked.
    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn allot_pool_cold(b: Bencher) {
        b.with_inputs(|| std::thread::sleep(COLD))
            .bench_values(|()| pool_roundtrip());
    }

    /// Like `allot_pool_cold`, but the caller spins on `is_finished`
    /// (never parks), the same wait the `condvar` baseline uses.
    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn allot_pool_cold_spinwait(b: Bencher) {
        b.with_inputs(|| std::thread::sleep(COLD))
            .bench_values(|()| {
                let h = POOL.spawn(|| black_box(1));
                while !h.is_finished() {
                    std::hint::spin_loop();
                }
                h.join().unwrap()
            });
    }

    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn event_cold(b: Bencher) {
        LazyLock::force(&EVENT);
        b.with_inputs(|| std::thread::sleep(COLD))
            .bench_values(|()| event_roundtrip());
    }

    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn condvar_cold(b: Bencher) {
        LazyLock::force(&CONDVAR);
        b.with_inputs(|| std::thread::sleep(COLD))
            .bench_values(|()| condvar_roundtrip());
    }

    /// Back to back: the pool's workers / the `Event` waiter are still
    /// spinning when the next signal comes.
    #[divan::bench]
    fn allot_pool_hot(b: Bencher) {
        b.bench(pool_roundtrip);
    }

    #[divan::bench]
    fn event_hot(b: Bencher) {
        LazyLock::force(&EVENT);
        b.bench(event_roundtrip);
    }

    #[divan::bench]
    fn condvar_hot(b: Bencher) {
        LazyLock::force(&CONDVAR);
        b.bench(condvar_roundtrip);
    }
}

#[cfg(not(loom))]
mod resize {
    use super::*;

    struct Resizable {
        pool: Pool,
        writer: Mutex<GrantWriter>,
        cpus: Vec<usize>,
        flip: AtomicU64,
    }

    static R: LazyLock<Resizable> = LazyLock::new(|| {
        let allowed = allot_topo::allowed_cpus().expect("allowed cpus");
        let (cell, writer) = Cell::manual(allowed).expect("manual cell");
        let pool = Pool::builder()
            .cell(cell)
            .name("resize")
            .build()
            .expect("pool");
        Resizable {
            pool,
            writer: Mutex::new(writer),
            cpus: allowed.iter().collect(),
            flip: AtomicU64::new(0),
        }
    });

    /// Alternates between all allowed CPUs and one: publish, then spin
    /// until `workers()` equals the new count (shrink and grow alternate
    /// across samples).
    #[divan::bench(sample_size = 1, sample_count = 400)]
    fn publish_to_workers(b: Bencher) {
        let r = &*R;
        b.with_inputs(|| {
            let k = r.flip.fetch_add(1, Ordering::Relaxed);
            let n = if k.is_multiple_of(2) { 1 } else { r.cpus.len() };
            let set: CpuSet = r.cpus.iter().copied().take(n).collect();
            std::thread::sleep(Duration::from_micros(200));
            (set, n)
        })
        .bench_values(|(set, n)| {
            r.writer.lock().unwrap().publish(set, CpuSet::new());
            while r.pool.workers() != n {
                std::hint::spin_loop();
            }
        });
    }

    /// Same, until the grant is fully applied (every worker pinned and
    /// settled, `applied_generation`).
    #[divan::bench(sample_size = 1, sample_count = 400)]
    fn publish_to_applied(b: Bencher) {
        let r = &*R;
        b.with_inputs(|| {
            let k = r.flip.fetch_add(1, Ordering::Relaxed);
            let n = if k.is_multiple_of(2) { 1 } else { r.cpus.len() };
            std::thread::sleep(Duration::from_micros(200));
            r.cpus.iter().copied().take(n).collect::<CpuSet>()
        })
        .bench_values(|set| {
            let g = r.writer.lock().unwrap().publish(set, CpuSet::new());
            while r.pool.applied_generation() < g {
                std::hint::spin_loop();
            }
        });
    }
}
