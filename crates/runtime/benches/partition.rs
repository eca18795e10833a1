//! A partition's polling pool against the ways an ordinary thread reaches
//! another: waking a worker, and calling into a worker over channels.
//!
//! `cargo bench -p allot-runtime --bench partition`
//!
//! The benchmark thread is pinned to the first CPU this process may use;
//! the pools get the last one (a one-CPU partition beside the caller).
//! Every sample is taken after 300 µs idle ("cold": an ordinary pool's
//! worker has parked by then; a polling one never does) or back to back.
//!
//! - `wake`: `spawn` + `join` of an empty task into a polling pool and into
//!   an ordinary one (its worker parks after 20 µs of spinning).
//! - `call`: a synchronous call (8 bytes each way) into a task that serves
//!   a channel pair on the polling pool's worker
//!   (`allot_channel::call::Server::serve_polling`), and eight calls
//!   started at once and then finished (asynchronous), per call.
//!
//! Baselines for the same round trip through the kernel (UNIX socket,
//! pipe, eventfd, condvar) are in `cargo bench -p allot-channel --bench
//! channel` (`roundtrip`).

#![cfg_attr(loom, allow(unused))]

#[cfg(not(loom))]
use allot_channel::call::{Caller, Server, pair};
#[cfg(not(loom))]
use allot_client::Cell;
#[cfg(not(loom))]
use allot_runtime::Pool;
use allot_topo::CpuSet;
use divan::{Bencher, black_box};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn main() {
    #[cfg(not(loom))]
    divan::main();
}

const COLD: Duration = Duration::from_micros(300);

fn cpus() -> (usize, usize) {
    let all: Vec<usize> = allot_topo::allowed_cpus()
        .expect("allowed CPUs")
        .iter()
        .collect();
    (all[0], *all.last().expect("a CPU"))
}

/// Pins the calling thread to `cpu` until dropped, then restores it.
struct Pinned(rustix::thread::CpuSet);

impl Pinned {
    fn to(cpu: usize) -> Pinned {
        let before = rustix::thread::sched_getaffinity(None).expect("affinity");
        let mut one = rustix::thread::CpuSet::new();
        one.set(cpu);
        rustix::thread::sched_setaffinity(None, &one).expect("pin");
        Pinned(before)
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = rustix::thread::sched_setaffinity(None, &self.0);
    }
}

#[cfg(not(loom))]
fn pool_on_last_cpu(poll: bool) -> Pool {
    let (_, last) = cpus();
    let (cell, writer) = Cell::manual(CpuSet::from_iter([last])).expect("manual cell");
    std::mem::forget(writer); // the grant never changes
    let b = Pool::builder()
        .cell(cell)
        .max_workers(1)
        .name("partition-bench");
    let pool = if poll { b.poll() } else { b }.build().expect("pool");
    while pool.workers() < 1 {
        std::thread::sleep(Duration::from_millis(1));
    }
    pool
}

#[cfg(not(loom))]
mod wake {
    use super::*;

    fn cold(b: Bencher, poll: bool) {
        let (first, last) = cpus();
        if first == last {
            return; // one CPU: no partition beside the caller
        }
        let pool = pool_on_last_cpu(poll);
        let _pin = Pinned::to(first);
        b.with_inputs(|| std::thread::sleep(COLD))
            .bench_values(|()| pool.spawn(|| black_box(1)).join().unwrap());
    }

    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn polling_pool_cold(b: Bencher) {
        cold(b, true);
    }

    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn ordinary_pool_cold(b: Bencher) {
        cold(b, false);
    }
}

#[cfg(not(loom))]
mod call {
    use super::*;

    /// A caller whose server runs as a task on a polling pool's worker
    /// until the returned flag is set.
    fn partition_server() -> (Pool, Caller, Arc<AtomicBool>, allot_runtime::JoinHandle<()>) {
        let pool = pool_on_last_cpu(true);
        let (req, ans) = pair(16, 64).expect("channels");
        let caller = Caller::new(req.sender(), ans.receiver().expect("receiver"));
        let mut server = Server::new(req.receiver().expect("receiver"), ans.sender());
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let task = pool.spawn(move || {
            server
                .serve_polling(
                    |req, out| out.extend_from_slice(req),
                    || s.load(Ordering::Relaxed),
                )
                .expect("serve")
        });
        (pool, caller, stop, task)
    }

    fn run(b: Bencher, cold: bool, batch: usize) {
        let (first, last) = cpus();
        if first == last {
            return;
        }
        let (pool, mut caller, stop, task) = partition_server();
        let _pin = Pinned::to(first);
        let mut one = |()| {
            for i in 0..batch {
                caller.start(&(i as u64).to_le_bytes()).unwrap();
            }
            for _ in 0..batch {
                black_box(caller.finish(None).unwrap());
            }
        };
        if cold {
            b.with_inputs(|| std::thread::sleep(COLD))
                .bench_local_values(&mut one);
        } else {
            b.bench_local(|| one(()));
        }
        stop.store(true, Ordering::Relaxed);
        task.join().expect("the server task");
        drop(pool);
    }

    #[divan::bench(sample_size = 1, sample_count = 1000)]
    fn sync_cold(b: Bencher) {
        run(b, true, 1);
    }

    #[divan::bench]
    fn sync_hot(b: Bencher) {
        run(b, false, 1);
    }

    /// Eight calls started, then eight answers taken: per batch (divide
    /// by eight for a call).
    #[divan::bench]
    fn async_batch_of_8(b: Bencher) {
        run(b, false, 8);
    }
}
