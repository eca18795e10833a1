//! Policies (Poli-C §4.3): functions that look at every device's available
//! amount and waiters and write requests.
//!
//! A policy gets a [`View`] of every device of every kind, as the calling
//! thread sees them (available = what a new request of this thread could get
//! now), and writes `request` (and optionally `ownership`) on the devices it
//! wants. It returns true on success. The runtime then acquires everything
//! written, atomically, as one *unit* (given back and retaken together when
//! threads block). If the policy fails, or the acquisition does, the thread
//! gives up what it holds, waits until availability changes, and runs the
//! policy again.
//!
//! The view offers the paper's helpers: iterating a kind's devices
//! ([`View::devices`]), looking one up ([`View::dev`]), counting them,
//! the device with the most available or the fewest waiters, and the
//! total number of waiting threads (system-wide with a broker). Policies
//! run under the runtime's lock: they must be quick and must not block.
//!
//! Shipped: [`cores`], [`min_cores`], [`numa_nodes`], [`fair_cores`],
//! [`fair_numa`], the join case study's [`strong_numa_node`] /
//! [`weak_numa_node`], and [`constrained`] — declarative constraints ("n to m
//! cores, exclusive, all on one NUMA node / LLC") solved by allot instead of
//! hand-written loops (the paper's §9).

use super::tree::Ownership;
use allot_topo::{CpuSet, Machine};
use std::fmt;
use std::sync::Arc;

/// One device as a policy sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct DevView {
    /// Name of the device's kind (`cpu`, `memory`, `io` or a registered one).
    pub kind: String,
    /// Device index within its kind.
    pub index: usize,
    /// Device name: the CPU number for `cpu`, `nodeN` for `memory`, `MAJ:MIN` for `io`.
    pub name: String,
    /// Largest allocation the device supports.
    pub max: f64,
    /// Available to this thread now for an exclusive request.
    pub available: f64,
    /// Available for a shared request (shared holdings coexist).
    pub shared_available: f64,
    /// Threads waiting for it.
    pub waiters: u32,
    /// The device's use per second, from its kind's probe (a kind
    /// registered with [`Blocks::register_kind`](super::Blocks::register_kind)
    /// whose operations measure it), `None` when not measured or before
    /// the second look.
    pub rate: Option<f64>,
    /// What the policy asks for (`None`: nothing).
    pub request: Option<f64>,
    /// Ownership of the request.
    pub ownership: Ownership,
}

/// What a policy tells the block about what it got (the `c` of
/// `require(c = cores(2))`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// How many CPUs the policy obtained (the size of `cpus`); 0 when it reports none.
    pub ncores: u32,
    /// The CPUs obtained, by kernel CPU number; empty when the policy reports none.
    pub cpus: CpuSet,
    /// NUMA nodes (kernel ids) obtained.
    pub nodes: Vec<u32>,
}

/// Every device, as one thread sees it, for a policy to fill in.
#[derive(Debug)]
pub struct View<'a> {
    devs: Vec<DevView>,
    machine: &'a Machine,
    total_waiters: u32,
    /// The result the block receives.
    pub out: Outcome,
    /// Requested ownership (the option given to the policy).
    pub own: Ownership,
}

impl<'a> View<'a> {
    /// A view over `devs` (built by the runtime).
    pub fn new(
        devs: Vec<DevView>,
        machine: &'a Machine,
        total_waiters: u32,
        own: Ownership,
    ) -> View<'a> {
        View {
            devs,
            machine,
            total_waiters,
            out: Outcome::default(),
            own,
        }
    }

    /// The machine (for topology-aware policies).
    pub fn machine(&self) -> &Machine {
        self.machine
    }

    /// The resource kinds, in registration order (Poli-C's `res_iter`):
    /// each appears once, whether it has one device or many.
    pub fn kinds(&self) -> Vec<&str> {
        let mut kinds: Vec<&str> = Vec::new();
        for d in &self.devs {
            if kinds.last() != Some(&d.kind.as_str()) && !kinds.contains(&d.kind.as_str()) {
                kinds.push(&d.kind);
            }
        }
        kinds
    }

    /// Every device of `kind` (Poli-C's `dev_iter`).
    pub fn devices(&mut self, kind: &str) -> impl Iterator<Item = &mut DevView> {
        let kind = kind.to_string();
        self.devs.iter_mut().filter(move |d| d.kind == kind)
    }

    /// Device `name` (or index) of `kind` (Poli-C's `dev`).
    pub fn dev(&mut self, kind: &str, name: &str) -> Option<&mut DevView> {
        let idx = name.parse::<usize>().ok();
        self.devs
            .iter_mut()
            .find(|d| d.kind == kind && (d.name == name || Some(d.index) == idx))
    }

    /// Every device of every kind, kinds in registration order and each
    /// kind's devices by index (for code that walks the view itself, such
    /// as the C ABI's device iteration).
    pub fn devs_mut(&mut self) -> &mut [DevView] {
        &mut self.devs
    }

    /// Number of devices of `kind`.
    pub fn dev_count(&self, kind: &str) -> usize {
        self.devs.iter().filter(|d| d.kind == kind).count()
    }

    /// Index of the device of `kind` with the most available.
    pub fn max_available_dev(&self, kind: &str) -> Option<usize> {
        self.devs
            .iter()
            .filter(|d| d.kind == kind)
            .max_by(|a, b| {
                a.available
                    .total_cmp(&b.available)
                    .then(b.index.cmp(&a.index))
            })
            .map(|d| d.index)
    }

    /// Index of the device of `kind` with the fewest waiters.
    pub fn min_waiters_dev(&self, kind: &str) -> Option<usize> {
        self.devs
            .iter()
            .filter(|d| d.kind == kind)
            .min_by_key(|d| (d.waiters, d.index))
            .map(|d| d.index)
    }

    /// Threads waiting for resources (across the system with a broker).
    pub fn total_waiters(&self) -> u32 {
        self.total_waiters
    }

    /// The devices the policy wrote a request on.
    pub fn requests(&self) -> impl Iterator<Item = &DevView> {
        self.devs.iter().filter(|d| d.request.is_some())
    }

    /// The CPU number of `cpu` device `index`.
    pub fn cpu_of(&self, index: usize) -> Option<usize> {
        self.devs
            .iter()
            .find(|d| d.kind == "cpu" && d.index == index)
            .and_then(|d| d.name.parse().ok())
    }
}

/// A policy: runs on a [`View`], writes requests, says whether it succeeded.
pub trait Policy: Send + Sync + fmt::Debug {
    /// Name, for errors and the C registry.
    fn name(&self) -> &str;
    /// Fills in requests; false means the policy cannot be met now.
    fn run(&self, view: &mut View<'_>) -> bool;
    /// Whether it divides among the requests that arrive together: then
    /// each request waits for the others of its batch (a short window,
    /// `Blocks::set_gather_window`) and its view's
    /// [`View::total_waiters`] counts them, so that four requests
    /// arriving together on 64 free cores get 16 each (Poli-C's
    /// `fair_cores`). Default: no.
    fn gathers(&self) -> bool {
        false
    }
}

/// A policy that divides among concurrent arrivals ([`Policy::gathers`]).
#[derive(Debug)]
struct Gathering(Arc<dyn Policy>);

impl Policy for Gathering {
    fn name(&self) -> &str {
        self.0.name()
    }
    fn run(&self, view: &mut View<'_>) -> bool {
        self.0.run(view)
    }
    fn gathers(&self) -> bool {
        true
    }
}

/// A policy from a closure.
pub struct FnPolicy<F> {
    name: String,
    f: F,
}

impl<F> fmt::Debug for FnPolicy<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "policy {}", self.name)
    }
}

impl<F: Fn(&mut View<'_>) -> bool + Send + Sync> Policy for FnPolicy<F> {
    fn name(&self) -> &str {
        &self.name
    }
    fn run(&self, view: &mut View<'_>) -> bool {
        (self.f)(view)
    }
}

/// A policy named `name` running `f`.
pub fn from_fn(
    name: &str,
    f: impl Fn(&mut View<'_>) -> bool + Send + Sync + 'static,
) -> Arc<dyn Policy> {
    Arc::new(FnPolicy {
        name: name.to_string(),
        f,
    })
}

/// `p`, dividing among concurrent arrivals ([`Policy::gathers`]).
pub fn gathering(p: Arc<dyn Policy>) -> Arc<dyn Policy> {
    Arc::new(Gathering(p))
}

const FULL: f64 = 1.0 - 1e-9;

/// Takes CPU devices `picked` exclusively (1.0) and denies the others (0.0).
fn take_cores(v: &mut View<'_>, picked: &[usize]) {
    let own = v.own;
    let mut cpus = CpuSet::new();
    for d in v.devices("cpu") {
        if picked.contains(&d.index) {
            d.request = Some(1.0);
            if let Ok(c) = d.name.parse::<usize>() {
                cpus.insert(c);
            }
        } else {
            d.request = Some(0.0);
        }
        d.ownership = own;
    }
    v.out.ncores = picked.len() as u32;
    v.out.cpus = cpus;
}

/// Indices of fully available CPUs, nearest-first by topology: whole
/// cores, then LLC, then node, from the lowest CPU.
fn free_cores(v: &mut View<'_>) -> Vec<usize> {
    let mut free: Vec<(usize, usize)> = v
        .devices("cpu")
        .filter(|d| d.available >= FULL)
        .filter_map(|d| d.name.parse::<usize>().ok().map(|c| (c, d.index)))
        .collect();
    let m = v.machine;
    free.sort_by_key(|&(c, _)| {
        m.cpu(c)
            .map(|x| (x.node, x.llc, x.core, c))
            .unwrap_or((usize::MAX, 0, 0, c))
    });
    free.into_iter().map(|(_, i)| i).collect()
}

/// Exclusive access to `n` cores (any), the others denied.
pub fn cores(n: u32) -> Arc<dyn Policy> {
    from_fn(&format!("cores({n})"), move |v| {
        let free = free_cores(v);
        if (free.len() as u32) < n {
            return false;
        }
        take_cores(v, &free[..n as usize]);
        true
    })
}

/// Exclusive access to as many cores as available, at least `n`.
pub fn min_cores(n: u32) -> Arc<dyn Policy> {
    from_fn(&format!("min_cores({n})"), move |v| {
        let free = free_cores(v);
        if (free.len() as u32) < n.max(1) {
            return false;
        }
        take_cores(v, &free);
        true
    })
}

/// CPU device indices of each NUMA node whose CPUs are all available.
fn free_nodes(v: &mut View<'_>) -> Vec<(u32, Vec<usize>)> {
    let m = v.machine;
    let avail: std::collections::HashMap<usize, (f64, usize)> = v
        .devices("cpu")
        .filter_map(|d| {
            d.name
                .parse::<usize>()
                .ok()
                .map(|c| (c, (d.available, d.index)))
        })
        .collect();
    m.nodes()
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .filter_map(|n| {
            let idx: Option<Vec<usize>> = n
                .cpus
                .iter()
                .map(|c| avail.get(&c).filter(|(a, _)| *a >= FULL).map(|(_, i)| *i))
                .collect();
            idx.map(|i| (n.id, i))
        })
        .collect()
}

/// Binds memory to `nodes` (shared limit on them, others denied).
fn bind_memory(v: &mut View<'_>, nodes: &[u32]) {
    for d in v.devices("memory") {
        let id: u32 = d
            .name
            .trim_start_matches("node")
            .parse()
            .unwrap_or(u32::MAX);
        d.request = Some(if nodes.contains(&id) { d.max } else { 0.0 });
        d.ownership = Ownership::Shared;
    }
}

/// Exclusive access to `n` whole NUMA nodes (their cores, their memory).
pub fn numa_nodes(n: u32) -> Arc<dyn Policy> {
    from_fn(&format!("numa_nodes({n})"), move |v| {
        let nodes = free_nodes(v);
        if (nodes.len() as u32) < n {
            return false;
        }
        let chosen: Vec<(u32, Vec<usize>)> = nodes.into_iter().take(n as usize).collect();
        let picked: Vec<usize> = chosen.iter().flat_map(|(_, c)| c.iter().copied()).collect();
        take_cores(v, &picked);
        let ids: Vec<u32> = chosen.iter().map(|(id, _)| *id).collect();
        bind_memory(v, &ids);
        v.out.nodes = ids;
        true
    })
}

/// A fair share of the available cores among the threads asking now:
/// `available ÷ (waiters + 1)`, at least one, where the waiters include
/// the requests arriving together with this one ([`Policy::gathers`]).
pub fn fair_cores() -> Arc<dyn Policy> {
    gathering(from_fn("fair_cores()", |v| {
        let free = free_cores(v);
        if free.is_empty() {
            return false;
        }
        let n = (free.len() / (v.total_waiters() as usize + 1)).max(1);
        take_cores(v, &free[..n]);
        true
    }))
}

/// Like [`fair_cores`], NUMA-aware: whole free nodes when the share covers
/// a node, else the share's cores on a single node.
pub fn fair_numa() -> Arc<dyn Policy> {
    gathering(from_fn("fair_numa()", |v| {
        let free = free_cores(v);
        if free.is_empty() {
            return false;
        }
        let share = (free.len() / (v.total_waiters() as usize + 1)).max(1);
        let node_size = v.machine.largest_node().max(1);
        if share >= node_size {
            let nodes = free_nodes(v);
            let whole = (share / node_size).min(nodes.len()).max(1);
            if nodes.len() >= whole && !nodes.is_empty() {
                let chosen: Vec<(u32, Vec<usize>)> = nodes.into_iter().take(whole).collect();
                let picked: Vec<usize> =
                    chosen.iter().flat_map(|(_, c)| c.iter().copied()).collect();
                take_cores(v, &picked);
                let ids: Vec<u32> = chosen.iter().map(|(id, _)| *id).collect();
                bind_memory(v, &ids);
                v.out.nodes = ids;
                return true;
            }
        }
        solve_constraint(
            v,
            Constraint {
                min: 1,
                max: share as u32,
                domain: Domain::Numa,
            },
        )
    }))
}

/// Where a set of cores must lie.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Domain {
    /// Any CPUs, wherever they lie.
    Any,
    /// One last-level cache domain.
    Llc,
    /// One NUMA node.
    Numa,
}

/// A declarative request: between `min` and `max` exclusive cores, all in
/// one `domain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Constraint {
    /// Fewest cores acceptable.
    pub min: u32,
    /// Most cores wanted.
    pub max: u32,
    /// Where they must lie.
    pub domain: Domain,
}

/// Picks the domain with the most free cores (ties: lowest), at least
/// `min`, takes up to `max` of them.
fn solve_constraint(v: &mut View<'_>, c: Constraint) -> bool {
    let free = free_cores(v);
    let m = v.machine;
    let cpu_of = |i: usize, v: &View<'_>| v.cpu_of(i);
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> =
        std::collections::BTreeMap::new();
    for &i in &free {
        let Some(cpu) = cpu_of(i, v).and_then(|c| m.cpu(c)) else {
            continue;
        };
        let key = match c.domain {
            Domain::Any => 0,
            Domain::Llc => cpu.llc,
            Domain::Numa => cpu.node,
        };
        groups.entry(key).or_default().push(i);
    }
    let best = groups
        .into_values()
        .filter(|g| g.len() as u32 >= c.min.max(1))
        .max_by_key(|g| (g.len(), std::cmp::Reverse(g[0])));
    let Some(g) = best else { return false };
    let take: Vec<usize> = g
        .into_iter()
        .take(c.max.max(c.min).max(1) as usize)
        .collect();
    take_cores(v, &take);
    if c.domain == Domain::Numa
        && let Some(node) = take
            .first()
            .and_then(|&i| v.cpu_of(i))
            .and_then(|c| m.cpu(c))
            .map(|x| m.nodes()[x.node].id)
    {
        bind_memory(v, &[node]);
        v.out.nodes = vec![node];
    }
    true
}

/// Declarative constraints solved by allot.
pub fn constrained(c: Constraint) -> Arc<dyn Policy> {
    from_fn(
        &format!("constrained({}..{} in {:?})", c.min, c.max, c.domain),
        move |v| solve_constraint(v, c),
    )
}

/// The join case study: a *strong* join (cache-sensitive) and a *weak*
/// one must never share a core. Each join takes every core of one NUMA node
/// with shared ownership, one unit of its class's virtual counter on each
/// (`StrongCore` or `WeakCore`, at most `max` joins per core), and a shared
/// reservation of *all* of the other class's counter on each, which keeps
/// the other class out for as long as any join of this class runs there.
/// Empty nodes first, then the least-full node of the same class.
pub fn strong_numa_node() -> Arc<dyn Policy> {
    from_fn("strong_numa_node()", |v| {
        join_node(v, "StrongCore", "WeakCore")
    })
}

/// See [`strong_numa_node`].
pub fn weak_numa_node() -> Arc<dyn Policy> {
    from_fn("weak_numa_node()", |v| {
        join_node(v, "WeakCore", "StrongCore")
    })
}

fn join_node(v: &mut View<'_>, mine: &str, other: &str) -> bool {
    let m = v.machine;
    let find = |v: &View<'_>, kind: &str, name: &str| {
        v.devs
            .iter()
            .find(|d| d.kind == kind && d.name == name)
            .cloned()
    };
    // (used of my class, node index) of every node we may join.
    let mut best: Option<(f64, usize)> = None;
    for (ni, node) in m
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| !n.cpus.is_empty())
    {
        let mut used = 0.0;
        let ok = node.cpus.iter().all(|c| {
            let name = c.to_string();
            match (find(v, mine, &name), find(v, other, &name)) {
                (Some(s), Some(o)) => {
                    used += s.max - s.available;
                    // Room for one more of us; no join of the other class.
                    s.available >= 1.0 - 1e-9 && o.shared_available >= o.max - 1e-9
                }
                _ => false,
            }
        });
        if ok && best.is_none_or(|(u, _)| used < u) {
            best = Some((used, ni));
        }
    }
    let Some((_, ni)) = best else { return false };
    let node = &m.nodes()[ni];
    let cpus: Vec<String> = node.cpus.iter().map(|c| c.to_string()).collect();
    for d in v.devs.iter_mut() {
        let on = cpus.contains(&d.name);
        if d.kind == "cpu" {
            d.request = Some(if on { 1.0 } else { 0.0 });
            d.ownership = Ownership::Shared;
        } else if d.kind == mine && on {
            d.request = Some(1.0);
            d.ownership = Ownership::Default;
        } else if d.kind == other && on {
            d.request = Some(d.max);
            d.ownership = Ownership::Shared;
        }
    }
    v.out.nodes = vec![node.id];
    v.out.ncores = cpus.len() as u32;
    v.out.cpus = node.cpus;
    true
}
