//! How the Sting benchmark's algorithms run: the one fork/join operation
//! they are written against ([`Fork`]: allot, rayon or sequential execute
//! the very same code), the spawners of the knapsack search, and the
//! thread policies every benchmark runs under.

use super::knapsack::Spawner;
use allot_runtime::{Pool, Priority, SpawnOptions};
use std::sync::Arc;

/// Every shipped policy kind with one and three priority levels, and the
/// local kinds also with the placements of Sting's evaluation (a spawned
/// task goes to a round-robin or random worker instead of the spawner's).
pub const POLICIES: [&str; 15] = [
    "local-lifo:levels=1",
    "local-lifo",
    "local-lifo:place=round-robin",
    "local-lifo:place=random",
    "local-fifo:levels=1",
    "local-fifo",
    "local-fifo:place=round-robin",
    "local-fifo:place=random",
    "local-lifo:victims=nearest",
    "local-fifo:victims=most-loaded,place=overflow,overflow=8",
    "global-fifo:levels=1",
    "global-fifo",
    "global-lifo:levels=1",
    "global-lifo",
    "global-fifo:victims=nearest",
];

/// Runs two closures, possibly in parallel, and returns both results.
pub trait Fork: Sync {
    /// Runs `a` and `b` and returns `(a(), b())`.
    fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send;
}

/// One after the other on the calling thread.
pub struct Seq;

impl Fork for Seq {
    fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        (a(), b())
    }
}

/// `allot_runtime::join`: on the worker's pool when called on one.
pub struct Allot;

impl Fork for Allot {
    fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        allot_runtime::join(a, b)
    }
}

/// `rayon::join`: on the current rayon pool.
pub struct Rayon;

impl Fork for Rayon {
    fn join<A, B, RA, RB>(&self, a: A, b: B) -> (RA, RB)
    where
        A: FnOnce() -> RA + Send,
        B: FnOnce() -> RB + Send,
        RA: Send,
        RB: Send,
    {
        rayon::join(a, b)
    }
}

/// Spawns on an allot pool with the task's priority.
pub struct AllotSpawner(pub Arc<Pool>);

impl Spawner for AllotSpawner {
    fn spawn(&self, p: Priority, f: Box<dyn FnOnce() + Send>) {
        // The handle is dropped: the search counts its tasks itself.
        drop(self.0.spawn_with(SpawnOptions::new().priority(p), f));
    }

    fn workers(&self) -> usize {
        self.0.workers()
    }
}

/// Spawns on a rayon pool (no priorities: `p` is ignored).
pub struct RayonSpawner(pub Arc<rayon::ThreadPool>);

impl Spawner for RayonSpawner {
    fn spawn(&self, _p: Priority, f: Box<dyn FnOnce() + Send>) {
        self.0.spawn(f);
    }

    fn workers(&self) -> usize {
        self.0.current_num_threads()
    }
}
