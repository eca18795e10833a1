//! Branch-and-bound 0/1 knapsack: the tree search with priorities.
//!
//! Items are taken in order of value per weight; a node decides item `i`
//! (take it if it fits, or leave it) and is pruned when its fractional
//! bound (Dantzig's: fill the rest greedily, the last item in part) cannot
//! beat the best value found so far, which all tasks share in an
//! `AtomicU64`. The top `SPAWN_DEPTH` levels spawn every child as an
//! independent task (`Pool::spawn_with`, so the thread policy orders and
//! places them); deeper subtrees are searched depth-first in their task.
//!
//! # Splitting by demand
//!
//! How much work lies below a node is unknown until it is searched, and
//! with a good incumbent nearly all of it lies below one node of the
//! spawn depth (the greedy path's). So a depth-first task also gives work
//! away while it runs: it notes each open branch of its path (the
//! leave-it child while the take-it subtree is searched), and whenever
//! the search has fewer tasks in flight than the pool has
//! workers (some worker has nothing to do), it spawns its *shallowest*
//! open branch — the largest piece it holds — with that branch's priority.
//! The check is one relaxed load of a counter that changes only when a
//! task starts or ends. Without demand the order is exactly the recursive
//! search's (take the item first, then leave it).
//!
//! Priorities follow the greedy choice: a child that makes no more
//! departures from "take the item if it fits" than the search has made so
//! far (a *discrepancy*, as in limited discrepancy search) is `High` when
//! the path has none, `Normal` with one or two and `Low` beyond. Run first,
//! the few greedy paths find a good incumbent early and it prunes the rest;
//! run late (a FIFO order without priority levels reaches them only after
//! a whole level of the tree) they leave more nodes to expand. The
//! answer is the same in every order; the count of nodes expanded is not,
//! and the benchmark reports it. `benches/sting/sting.c` is the same search
//! for OpenMP (`#pragma omp task priority(..)`).

use allot_runtime::{Event, Priority};
use std::mem;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Levels of the tree whose children are spawned as tasks.
pub const SPAWN_DEPTH: usize = 14;

/// A knapsack instance, items sorted by value per weight, best first.
#[derive(Debug, Clone)]
pub struct Instance {
    pub weight: Vec<u64>,
    pub value: Vec<u64>,
    pub capacity: u64,
}

/// A strongly correlated instance (value = weight + 100, weights 1..=1000,
/// capacity half the total weight) of `n` items from `seed`; the order of
/// items is a total one (ties by generation index), as in the C version.
pub fn instance(n: usize, seed: u64) -> Instance {
    let mut s = seed;
    let mut items: Vec<(u64, u64, usize)> = (0..n)
        .map(|i| {
            let w = 1 + super::abisort::splitmix64(&mut s) % 1000;
            (w, w + 100, i)
        })
        .collect();
    // v_a / w_a > v_b / w_b  <=>  v_a * w_b > v_b * w_a
    items.sort_by(|a, b| (b.1 * a.0).cmp(&(a.1 * b.0)).then(a.2.cmp(&b.2)));
    let capacity = items.iter().map(|it| it.0).sum::<u64>() / 2;
    Instance {
        weight: items.iter().map(|it| it.0).collect(),
        value: items.iter().map(|it| it.1).collect(),
        capacity,
    }
}

impl Instance {
    /// The fractional bound of a node at item `i` holding `w`, worth `v`.
    pub fn bound(&self, mut i: usize, mut w: u64, mut v: u64) -> u64 {
        while i < self.weight.len() && w + self.weight[i] <= self.capacity {
            w += self.weight[i];
            v += self.value[i];
            i += 1;
        }
        if i < self.weight.len() {
            v += self.value[i] * (self.capacity - w) / self.weight[i];
        }
        v
    }

    /// The optimum by dynamic programming over capacities (the reference).
    pub fn optimum(&self) -> u64 {
        let cap = self.capacity as usize;
        let mut best = vec![0u64; cap + 1];
        for (&w, &v) in self.weight.iter().zip(&self.value) {
            for c in (w as usize..=cap).rev() {
                best[c] = best[c].max(best[c - w as usize] + v);
            }
        }
        best[cap]
    }
}

/// Raises `best` to `v` if `v` is larger. Reads first: almost every node
/// offers less than the incumbent, and a read-modify-write on every node
/// would take the shared line from the other workers each time (as the C
/// version, which compares before it swaps).
fn offer(best: &AtomicU64, v: u64) {
    if v > best.load(Ordering::Relaxed) {
        best.fetch_max(v, Ordering::Relaxed);
    }
}

/// Depth-first branch and bound below a node (take first); counts nodes.
pub fn dfs(inst: &Instance, best: &AtomicU64, i: usize, w: u64, v: u64, nodes: &mut u64) {
    *nodes += 1;
    offer(best, v);
    if i == inst.weight.len() || inst.bound(i, w, v) <= best.load(Ordering::Relaxed) {
        return;
    }
    if w + inst.weight[i] <= inst.capacity {
        dfs(
            inst,
            best,
            i + 1,
            w + inst.weight[i],
            v + inst.value[i],
            nodes,
        );
    }
    dfs(inst, best, i + 1, w, v, nodes);
}

/// The sequential search: (optimum, nodes expanded).
pub fn search_seq(inst: &Instance) -> (u64, u64) {
    let best = AtomicU64::new(0);
    let mut nodes = 0;
    dfs(inst, &best, 0, 0, 0, &mut nodes);
    (best.into_inner(), nodes)
}

/// Starts an independent task with a priority (allot's `spawn_with`,
/// rayon's `spawn`, which has none).
pub trait Spawner: Send + Sync + 'static {
    fn spawn(&self, p: Priority, f: Box<dyn FnOnce() + Send>);
    /// Threads that run the spawned tasks.
    fn workers(&self) -> usize;
}

/// The priority of a path with `d` discrepancies.
pub fn priority(d: u32) -> Priority {
    match d {
        0 => Priority::High,
        1 | 2 => Priority::Normal,
        _ => Priority::Low,
    }
}

/// A parallel search in progress, shared by its tasks.
struct Search<S> {
    inst: Instance,
    best: AtomicU64,
    nodes: AtomicU64,
    /// Tasks spawned and not yet finished; the one that brings it to 0
    /// sets `done`.
    pending: AtomicUsize,
    done: Event,
    /// `spawner.workers()`: below this many tasks in flight, a running
    /// search gives a branch away.
    workers: usize,
    spawner: S,
}

/// Searches `inst` with tasks started by `spawner` from this thread (not a
/// worker of the pool it spawns on); returns (optimum, nodes expanded).
pub fn search_par<S: Spawner>(inst: &Instance, spawner: S) -> (u64, u64) {
    let s = Arc::new(Search {
        inst: inst.clone(),
        best: AtomicU64::new(0),
        nodes: AtomicU64::new(0),
        pending: AtomicUsize::new(0),
        done: Event::new(),
        workers: spawner.workers().max(1),
        spawner,
    });
    spawn_node(&s, 0, 0, 0, 0);
    s.done.wait();
    // The last task may still be dropping its reference (and with it the
    // spawner): wait until the search is ours alone.
    while Arc::strong_count(&s) > 1 {
        std::thread::yield_now();
    }
    (
        s.best.load(Ordering::SeqCst),
        s.nodes.load(Ordering::SeqCst),
    )
}

fn spawn_node<S: Spawner>(s: &Arc<Search<S>>, i: usize, w: u64, v: u64, disc: u32) {
    s.pending.fetch_add(1, Ordering::SeqCst);
    let task = s.clone();
    s.spawner.spawn(
        priority(disc),
        Box::new(move || {
            let mut nodes = 0;
            expand(&task, i, w, v, disc, &mut nodes);
            task.nodes.fetch_add(nodes, Ordering::Relaxed);
            if task.pending.fetch_sub(1, Ordering::SeqCst) == 1 {
                task.done.set();
            }
        }),
    );
}

fn expand<S: Spawner>(s: &Arc<Search<S>>, i: usize, w: u64, v: u64, disc: u32, nodes: &mut u64) {
    let inst = &s.inst;
    if i >= SPAWN_DEPTH {
        return dfs_donating(s, i, w, v, disc, nodes);
    }
    *nodes += 1;
    offer(&s.best, v);
    if i == inst.weight.len() || inst.bound(i, w, v) <= s.best.load(Ordering::Relaxed) {
        return;
    }
    let fits = w + inst.weight[i] <= inst.capacity;
    // Spawn the leave-it child first: under LIFO orders the greedy child,
    // pushed last, runs first.
    spawn_node(s, i + 1, w, v, disc + u32::from(fits));
    if fits {
        spawn_node(s, i + 1, w + inst.weight[i], v + inst.value[i], disc);
    }
}

/// [`dfs`] from the node deciding item `i` (weight `w`, value `v`, `disc`
/// departures from the greedy choice so far), giving away the shallowest
/// open branch while the search has fewer tasks than workers (see
/// "Splitting by demand").
fn dfs_donating<S: Spawner>(
    s: &Arc<Search<S>>,
    i: usize,
    w: u64,
    v: u64,
    disc: u32,
    nodes: &mut u64,
) {
    let mut open = vec![Open::NONE; s.inst.weight.len() + 1];
    visit(s, i, w, v, disc, &mut open, nodes);
}

/// The leave-it branch at one item of a path: weight, value and
/// discrepancies so far (`disc == u32::MAX`: none is open there).
#[derive(Debug, Clone, Copy)]
struct Open {
    w: u64,
    v: u64,
    disc: u32,
}

impl Open {
    const NONE: Open = Open {
        w: 0,
        v: 0,
        disc: u32::MAX,
    };
}

/// One node of [`dfs_donating`], like [`dfs`]. `open[i]` holds the
/// leave-it branch at item `i` of the path from the task's root to here
/// while the take-it subtree below it is searched; a donation takes the
/// shallowest one. Every call leaves its own entry empty when it returns.
fn visit<S: Spawner>(
    s: &Arc<Search<S>>,
    i: usize,
    w: u64,
    v: u64,
    disc: u32,
    open: &mut [Open],
    nodes: &mut u64,
) {
    let inst = &s.inst;
    *nodes += 1;
    offer(&s.best, v);
    if i == inst.weight.len() || inst.bound(i, w, v) <= s.best.load(Ordering::Relaxed) {
        return;
    }
    if w + inst.weight[i] > inst.capacity {
        // Only the leave-it child, which departs from the greedy choice
        // only if the item fits: no departure here.
        return visit(s, i + 1, w, v, disc, open, nodes);
    }
    open[i] = Open {
        w,
        v,
        disc: disc + 1,
    };
    if s.pending.load(Ordering::Relaxed) < s.workers {
        donate(s, open);
    }
    visit(
        s,
        i + 1,
        w + inst.weight[i],
        v + inst.value[i],
        disc,
        open,
        nodes,
    );
    let leave = mem::replace(&mut open[i], Open::NONE);
    if leave.disc != u32::MAX {
        visit(s, i + 1, leave.w, leave.v, leave.disc, open, nodes);
    }
}

/// Spawns the shallowest open branch of `open`, if any, as its own task.
#[cold]
fn donate<S: Spawner>(s: &Arc<Search<S>>, open: &mut [Open]) {
    if let Some(i) = open.iter().position(|o| o.disc != u32::MAX) {
        let g = mem::replace(&mut open[i], Open::NONE);
        spawn_node(s, i + 1, g.w, g.v, g.disc);
    }
}
