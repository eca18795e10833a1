//! Allocation trees (Poli-C §6.2): who holds how much of each device, inside
//! one process.
//!
//! A pure data structure: threads are plain ids, nothing blocks, nothing
//! touches the OS. The runtime (`blocks/`) drives it under the
//! process-wide lock, sleeps threads when it says "wait", and applies the
//! OS effects it reports.
//!
//! # Model
//!
//! For every device of every resource kind there is a tree of allocation
//! *nodes*. The root holds what the process may use of the device (all of
//! it when standalone; what the broker granted otherwise). Every other node
//! is an allocation carved out of its parent by a `require`.
//!
//! Every thread has, per device, a *stack* of frames pointing at nodes (an
//! empty stack means the root). A frame is *active* when it is the top of a
//! running thread's stack — the thread uses that allocation now; otherwise it
//! is *dormant* (the "dotted arrow": the thread may use it again later).
//!
//! A node is **held** — its amount is taken out of its parent — while it is
//! active, or any of its children is held, or it belongs to a policy unit of
//! which some node is active. A node that stops being held gives its amount
//! back to its parent, up the tree; a node that must become held again takes
//! it back, which may have to wait. This is how a blocked thread gives its
//! allocation back and retakes it before it continues, so requires cannot
//! deadlock.
//!
//! # Invariants (checked by [`Trees::check`], used in tests)
//!
//! 1. `free(n) = amount(n) − Σ amount(c)` over held exclusive children `c`,
//!    and `free(n) ≥ max amount(s)` over held shared children `s`.
//! 2. A held node's parent is held; the root is always held.
//! 3. A node exists while a frame points at it or it has children.
//! 4. A child never asks for more than its context's amount: a nested
//!    request larger than the enclosing allocation is refused as a
//!    programming error, not made to wait.

mod query;
mod threads;

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A fast hasher for the small integer keys of these maps (thread ids,
/// device pairs): a rotate-xor-multiply per word. Not for untrusted keys.
#[derive(Debug, Default, Clone, Copy)]
pub struct IntHasher(u64);

impl Hasher for IntHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` keyed by small integers.
pub type IntMap<K, V> = HashMap<K, V, BuildHasherDefault<IntHasher>>;

/// Identifies a thread (the OS thread id, or any unique number in tests).
pub type Tid = u64;
/// Index of a resource kind.
pub type KindId = usize;
/// Index of a device within its kind.
pub type DevId = usize;
/// Identifies a node.
pub type NodeId = usize;
/// Identifies a policy unit.
pub type UnitId = usize;

/// A (kind, device) pair.
pub type Dev = (KindId, DevId);

/// Who else may use an allocation (Poli-C's ownership options).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Ownership {
    /// Exclusive, shared with threads spawned inside the scope.
    #[default]
    Default,
    /// Exclusive, not even shared with spawned threads.
    Private,
    /// A limit without exclusivity: coexists with other shared allocations
    /// of the same device.
    Shared,
}

#[derive(Debug, Clone)]
struct Node {
    dev: Dev,
    parent: Option<NodeId>,
    amount: f64,
    free: f64,
    own: Ownership,
    /// Frames that are the top of a running thread's stack.
    active: u32,
    /// All frames pointing here.
    frames: u32,
    children: u32,
    held: bool,
    unit: Option<UnitId>,
    /// Held shared children's amounts (the largest bounds exclusive use).
    shared: Vec<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Frame {
    /// The allocation (for a deny frame: the context it denies within).
    node: NodeId,
    /// A zero request: the thread may not use the device. Deny frames take
    /// nothing, create no node and leave reference counts alone, so a
    /// policy can deny hundreds of devices cheaply. The thread stops being
    /// a running user of the allocation below a denial (it may not use it),
    /// until the denial is popped.
    deny: bool,
}

#[derive(Debug, Default, Clone)]
struct Thread {
    stacks: Stacks,
    running: bool,
}

/// The root node of every device, indexed by kind then device (looked up
/// on every enter and leave, so without hashing).
#[derive(Debug, Default, Clone)]
struct Roots(Vec<Vec<Option<NodeId>>>);

impl Roots {
    fn get(&self, dev: &Dev) -> Option<&NodeId> {
        self.0.get(dev.0)?.get(dev.1)?.as_ref()
    }

    fn insert(&mut self, dev: Dev, n: NodeId) {
        if self.0.len() <= dev.0 {
            self.0.resize(dev.0 + 1, Vec::new());
        }
        let k = &mut self.0[dev.0];
        if k.len() <= dev.1 {
            k.resize(dev.1 + 1, None);
        }
        k[dev.1] = Some(n);
    }

    fn iter(&self) -> impl Iterator<Item = (Dev, NodeId)> + '_ {
        self.0.iter().enumerate().flat_map(|(k, devs)| {
            devs.iter()
                .enumerate()
                .filter_map(move |(d, n)| n.map(|n| ((k, d), n)))
        })
    }
}

/// A thread's frame stacks by device. Threads touch few devices, so a
/// short list searched in order beats hashing on the enter/leave path.
#[derive(Debug, Default, Clone)]
struct Stacks(Vec<(Dev, Vec<Frame>)>);

impl Stacks {
    fn get(&self, dev: &Dev) -> Option<&Vec<Frame>> {
        self.0.iter().find(|(d, _)| d == dev).map(|(_, s)| s)
    }

    fn get_mut(&mut self, dev: &Dev) -> Option<&mut Vec<Frame>> {
        self.0.iter_mut().find(|(d, _)| d == dev).map(|(_, s)| s)
    }

    /// The stack of `dev`, created empty if the thread has none yet.
    fn at(&mut self, dev: Dev) -> &mut Vec<Frame> {
        match self.0.iter().position(|(d, _)| *d == dev) {
            Some(i) => &mut self.0[i].1,
            None => {
                self.0.push((dev, Vec::new()));
                &mut self.0.last_mut().expect("just pushed").1
            }
        }
    }

    fn iter(&self) -> impl Iterator<Item = (&Dev, &Vec<Frame>)> {
        self.0.iter().map(|(d, s)| (d, s))
    }

    fn values(&self) -> impl Iterator<Item = &Vec<Frame>> {
        self.0.iter().map(|(_, s)| s)
    }
}

#[derive(Debug, Default, Clone)]
struct Unit {
    nodes: Vec<NodeId>,
    active: u32,
}

/// One request of an atomic acquisition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ask {
    /// The (kind, device) to allocate from.
    pub dev: Dev,
    /// How much, in the kind's unit (never a share: shares are resolved first).
    pub amount: f64,
    /// Whether the holding is exclusive, private to the thread, or shared.
    pub own: Ownership,
}

/// Why an acquisition did not happen now.
#[derive(Debug, Clone, PartialEq)]
pub enum Refusal {
    /// Not enough now; wait for a release on these devices and retry. The
    /// roots' shortfall (what the process root lacks) is listed so the caller
    /// can ask the broker for it.
    Wait {
        /// Devices to wait on.
        devs: Vec<Dev>,
        /// Shortfall at roots: (device, amount missing, shared).
        root_short: Vec<(Dev, f64, bool)>,
    },
    /// A programming error: the request exceeds its enclosing allocation.
    TooLarge {
        /// The (kind, device) asked for.
        dev: Dev,
        /// The amount asked for, in the kind's unit.
        asked: f64,
        /// What the enclosing allocation holds of the device (0 inside a scope that denied it).
        enclosing: f64,
    },
}

/// What the thread now holds on a device (for the OS effects).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Holding {
    /// No frame: what every thread shares by default.
    Unconstrained,
    /// An allocation of this amount.
    Amount(f64),
}

const EPS: f64 = 1e-9;

/// Every allocation tree of the process.
#[derive(Debug, Default, Clone)]
pub struct Trees {
    nodes: Vec<Option<Node>>,
    free_slots: Vec<NodeId>,
    roots: Roots,
    threads: IntMap<Tid, Thread>,
    units: Vec<Option<Unit>>,
    /// Unit slots free for reuse, with their node lists' memory.
    free_units: Vec<(usize, Vec<NodeId>)>,
    /// Scratch space of `acquire_into` (kept to avoid an allocation per call).
    scratch: Vec<(NodeId, f64, Vec<f64>)>,
}

impl Trees {
    /// Trees with no roots, nodes or threads yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn node(&self, n: NodeId) -> &Node {
        self.nodes[n].as_ref().expect("live node")
    }

    fn node_mut(&mut self, n: NodeId) -> &mut Node {
        self.nodes[n].as_mut().expect("live node")
    }

    fn new_unit(&mut self) -> usize {
        match self.free_units.pop() {
            Some((u, nodes)) => {
                self.units[u] = Some(Unit { nodes, active: 0 });
                u
            }
            None => {
                self.units.push(Some(Unit::default()));
                self.units.len() - 1
            }
        }
    }

    fn alloc(&mut self, node: Node) -> NodeId {
        match self.free_slots.pop() {
            Some(i) => {
                self.nodes[i] = Some(node);
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        }
    }

    /// Creates (or resizes) the root of a device: `amount` is what the
    /// process may use of it. Growing a root adds free amount; shrinking it
    /// removes free amount only (the caller never shrinks below what is
    /// handed out).
    pub fn set_root(&mut self, dev: Dev, amount: f64) {
        match self.roots.get(&dev) {
            Some(&r) => {
                let n = self.node_mut(r);
                let used = n.amount - n.free;
                n.amount = amount.max(used);
                n.free = n.amount - used;
            }
            None => {
                let r = self.alloc(Node {
                    dev,
                    parent: None,
                    amount,
                    free: amount,
                    own: Ownership::Default,
                    active: 0,
                    frames: 0,
                    children: 0,
                    held: true,
                    unit: None,
                    shared: Vec::new(),
                });
                self.roots.insert(dev, r);
            }
        }
    }

    /// The root's (amount, free) of a device.
    pub fn root(&self, dev: Dev) -> Option<(f64, f64)> {
        self.roots
            .get(&dev)
            .map(|&r| (self.node(r).amount, self.node(r).free))
    }

    /// Devices whose root holds something but has no children: what can go
    /// back to the broker.
    pub fn idle_roots(&self) -> Vec<(Dev, f64)> {
        self.roots
            .iter()
            .filter_map(|(d, r)| {
                let n = self.node(r);
                (n.children == 0 && n.amount > 0.0).then_some((d, n.amount))
            })
            .collect()
    }

    /// Whether the root of `dev` has no children (its holdings can go back
    /// to the broker).
    pub fn root_idle(&self, dev: Dev) -> bool {
        self.roots
            .get(&dev)
            .is_none_or(|&r| self.node(r).children == 0)
    }

    /// Registers a running thread (idempotent).
    pub fn thread_start(&mut self, tid: Tid) {
        self.threads.entry(tid).or_default().running = true;
    }

    /// Whether `tid` takes from `dev`'s root (no enclosing scope holds it).
    pub fn at_root(&self, tid: Tid, dev: Dev) -> bool {
        self.top_frame(tid, dev).is_none()
    }

    /// The top frame of `tid` on `dev`, if any.
    fn top_frame(&self, tid: Tid, dev: Dev) -> Option<Frame> {
        self.threads
            .get(&tid)
            .and_then(|t| t.stacks.get(&dev))
            .and_then(|s| s.last())
            .copied()
    }

    /// The node at the top of `tid`'s stack for `dev` (the root if empty).
    fn top(&self, tid: Tid, dev: Dev) -> Option<NodeId> {
        self.threads
            .get(&tid)
            .and_then(|t| t.stacks.get(&dev))
            .and_then(|s| s.last())
            .map(|f| f.node)
            .or_else(|| self.roots.get(&dev).copied())
    }

    fn is_root(&self, n: NodeId) -> bool {
        self.node(n).parent.is_none()
    }

    fn unit_active(&self, n: NodeId) -> bool {
        match self.node(n).unit {
            Some(u) => self.units[u].as_ref().is_some_and(|u| u.active > 0),
            None => false,
        }
    }

    /// Whether `n` must be held given its own state.
    fn needs_hold(&self, n: NodeId) -> bool {
        let node = self.node(n);
        node.parent.is_none() || node.active > 0 || self.unit_active(n) || self.has_held_child(n)
    }

    fn has_held_child(&self, n: NodeId) -> bool {
        // Children are found by scanning: trees are small (a few nodes per
        // device per active scope) and this keeps nodes free of child lists.
        self.nodes
            .iter()
            .flatten()
            .any(|c| c.parent == Some(n) && c.held)
    }

    /// Exclusive availability in `n` (what a Default/Private child can take).
    fn excl_free(&self, n: NodeId) -> f64 {
        let node = self.node(n);
        let peak = node.shared.iter().copied().fold(0.0, f64::max);
        node.free - peak
    }

    fn take(&mut self, parent: NodeId, amount: f64, own: Ownership) {
        let p = self.node_mut(parent);
        match own {
            Ownership::Shared => p.shared.push(amount),
            _ => p.free -= amount,
        }
    }

    fn give(&mut self, parent: NodeId, amount: f64, own: Ownership) {
        let p = self.node_mut(parent);
        match own {
            Ownership::Shared => {
                if let Some(i) = p.shared.iter().position(|&a| (a - amount).abs() < EPS) {
                    p.shared.swap_remove(i);
                }
            }
            _ => p.free += amount,
        }
    }

    /// Gives back `n` and then its ancestors while they no longer need to
    /// be held.
    fn release_up(&mut self, mut n: NodeId) {
        loop {
            if !self.node(n).held || self.needs_hold(n) {
                return;
            }
            let (parent, amount, own) = {
                let node = self.node(n);
                (node.parent.expect("roots stay held"), node.amount, node.own)
            };
            self.node_mut(n).held = false;
            self.give(parent, amount, own);
            // Siblings in the same unit may now be releasable too.
            if let Some(u) = self.node(n).unit {
                let others: Vec<NodeId> = self.units[u]
                    .as_ref()
                    .map(|u| u.nodes.clone())
                    .unwrap_or_default();
                for o in others {
                    if o != n && self.nodes.get(o).is_some_and(Option::is_some) {
                        self.release_up(o);
                    }
                }
            }
            n = parent;
        }
    }

    /// The chain of unheld nodes from `n` up (n first) and the shortfalls
    /// that stop re-holding it, if any.
    fn hold_chain(&self, n: NodeId) -> Result<Vec<NodeId>, Vec<Dev>> {
        let mut chain = Vec::new();
        let mut cur = n;
        while !self.node(cur).held {
            chain.push(cur);
            cur = self.node(cur).parent.expect("roots stay held");
        }
        // `cur` is held; check top-down that each can be taken.
        let mut sim: HashMap<NodeId, (f64, Vec<f64>)> = HashMap::new();
        for &c in chain.iter().rev() {
            let node = self.node(c);
            let parent = node.parent.expect("non-root");
            let (free, shared) = sim
                .entry(parent)
                .or_insert_with(|| (self.node(parent).free, self.node(parent).shared.clone()));
            let peak = shared.iter().copied().fold(0.0, f64::max);
            let ok = match node.own {
                Ownership::Shared => *free + EPS >= node.amount,
                _ => *free - peak + EPS >= node.amount,
            };
            if !ok {
                return Err(vec![node.dev]);
            }
            match node.own {
                Ownership::Shared => shared.push(node.amount),
                _ => *free -= node.amount,
            }
        }
        Ok(chain)
    }

    fn hold(&mut self, chain: &[NodeId]) {
        for &c in chain.iter().rev() {
            let (parent, amount, own) = {
                let node = self.node(c);
                (node.parent.expect("non-root"), node.amount, node.own)
            };
            self.take(parent, amount, own);
            self.node_mut(c).held = true;
        }
    }

    fn set_active(&mut self, n: NodeId, delta: i32) {
        let node = self.node_mut(n);
        node.active = (node.active as i32 + delta).max(0) as u32;
        if let Some(u) = node.unit
            && let Some(unit) = self.units[u].as_mut()
        {
            unit.active = (unit.active as i32 + delta).max(0) as u32;
        }
    }

    /// Tries to acquire every `ask` at once for running thread `tid`.
    /// On success pushes one frame per ask (grouped in a unit when
    /// `as_unit`), and returns the new nodes. Nothing changes on refusal.
    pub fn acquire_into(
        &mut self,
        tid: Tid,
        asks: &[Ask],
        as_unit: bool,
        made: &mut Vec<NodeId>,
    ) -> Result<(), Refusal> {
        self.thread_start(tid);
        // Simulate the takes so asks on the same device add up; the
        // buffer is kept between calls so the hot path does not allocate.
        let mut taken = std::mem::take(&mut self.scratch);
        taken.clear();
        let fits = self.simulate(tid, asks, &mut taken);
        self.scratch = taken;
        fits?;
        let unit = as_unit.then(|| self.new_unit());
        made.clear();
        for a in asks {
            if a.amount <= 0.0 {
                let ctx = self.top(tid, a.dev).ok_or_else(|| Refusal::Wait {
                    devs: vec![a.dev],
                    root_short: vec![],
                })?;
                // The allocation below stops being used by this thread: it
                // no longer counts it as a running user (so a sibling may
                // carve from it) and gives it back if no one else runs on it.
                let below = self.active_below(tid, a.dev);
                self.threads
                    .entry(tid)
                    .or_default()
                    .stacks
                    .at(a.dev)
                    .push(Frame {
                        node: ctx,
                        deny: true,
                    });
                if let Some(b) = below {
                    self.set_active(b, -1);
                    self.release_up(b);
                }
                made.push(ctx);
                continue;
            }
            let ctx = self.top(tid, a.dev).expect("checked above");
            self.take(ctx, a.amount, a.own);
            let n = self.alloc(Node {
                dev: a.dev,
                parent: Some(ctx),
                amount: a.amount,
                free: a.amount,
                own: a.own,
                active: 0,
                frames: 0,
                children: 0,
                held: true,
                unit,
                shared: Vec::new(),
            });
            self.node_mut(ctx).children += 1;
            if let Some(u) = unit {
                self.units[u].as_mut().expect("just made").nodes.push(n);
            }
            // The old top goes dormant, the new node becomes the active top.
            self.push_frame(tid, a.dev, n);
            made.push(n);
        }
        Ok(())
    }

    /// [`Trees::acquire_into`] returning the new nodes in a new vector.
    pub fn acquire(
        &mut self,
        tid: Tid,
        asks: &[Ask],
        as_unit: bool,
    ) -> Result<Vec<NodeId>, Refusal> {
        let mut made = Vec::with_capacity(asks.len());
        self.acquire_into(tid, asks, as_unit, &mut made)?;
        Ok(made)
    }

    /// Checks that every ask fits, accumulating takes per context in
    /// `taken`. Changes nothing.
    fn simulate(
        &self,
        tid: Tid,
        asks: &[Ask],
        taken: &mut Vec<(NodeId, f64, Vec<f64>)>,
    ) -> Result<(), Refusal> {
        let mut wait = Vec::new();
        let mut root_short = Vec::new();
        for a in asks {
            if a.amount <= 0.0 {
                continue; // a deny frame takes nothing
            }
            let frame = self.top_frame(tid, a.dev);
            if frame.is_some_and(|f| f.deny) {
                return Err(Refusal::TooLarge {
                    dev: a.dev,
                    asked: a.amount,
                    enclosing: 0.0,
                });
            }
            let ctx = frame
                .map(|f| f.node)
                .or_else(|| self.roots.get(&a.dev).copied())
                .ok_or_else(|| Refusal::Wait {
                    devs: vec![a.dev],
                    root_short: vec![(a.dev, a.amount, a.own == Ownership::Shared)],
                })?;
            let ctx_node = self.node(ctx);
            // A root may hold less than the device (what the broker granted
            // so far); the caller checks requests against the device maximum.
            if !self.is_root(ctx) && a.amount > ctx_node.amount + EPS {
                return Err(Refusal::TooLarge {
                    dev: a.dev,
                    asked: a.amount,
                    enclosing: ctx_node.amount,
                });
            }
            // Nested requests need the context held and this thread to be
            // its only running user (no revocation from siblings).
            if !self.is_root(ctx) && (!ctx_node.held || ctx_node.active > 1) {
                wait.push(a.dev);
                continue;
            }
            let i = match taken.iter().position(|t| t.0 == ctx) {
                Some(i) => i,
                None => {
                    taken.push((ctx, ctx_node.free, ctx_node.shared.clone()));
                    taken.len() - 1
                }
            };
            let (_, free, shared) = &mut taken[i];
            let peak = shared.iter().copied().fold(0.0, f64::max);
            let ok = match a.own {
                Ownership::Shared => *free + EPS >= a.amount,
                _ => *free - peak + EPS >= a.amount,
            };
            if ok {
                match a.own {
                    Ownership::Shared => shared.push(a.amount),
                    _ => *free -= a.amount,
                }
            } else {
                wait.push(a.dev);
                if self.is_root(ctx) {
                    let have = match a.own {
                        Ownership::Shared => *free,
                        _ => *free - peak,
                    };
                    root_short.push((a.dev, a.amount - have.max(0.0), a.own == Ownership::Shared));
                }
            }
        }
        if !wait.is_empty() {
            return Err(Refusal::Wait {
                devs: wait,
                root_short,
            });
        }
        Ok(())
    }

    /// The node `tid` uses on `dev` as a running thread: its top frame's,
    /// unless that frame is a denial or the root (neither counts users).
    fn active_below(&self, tid: Tid, dev: Dev) -> Option<NodeId> {
        let t = self.threads.get(&tid).filter(|t| t.running)?;
        let f = t.stacks.get(&dev).and_then(|s| s.last())?;
        (!f.deny && !self.is_root(f.node)).then_some(f.node)
    }

    fn push_frame(&mut self, tid: Tid, dev: Dev, n: NodeId) {
        let running = self.threads.get(&tid).is_some_and(|t| t.running);
        let old = self.top(tid, dev);
        let t = self.threads.entry(tid).or_default();
        t.stacks.at(dev).push(Frame {
            node: n,
            deny: false,
        });
        self.node_mut(n).frames += 1;
        if running {
            self.set_active(n, 1);
            if let Some(o) = old.filter(|&o| !self.is_root(o)) {
                self.set_active(o, -1);
                self.release_up(o);
            }
        }
    }

    /// Pops `tid`'s top frame of every device in `devs` (leaving a scope).
    /// Returns false (changing nothing) if one of them is not `expected`'s
    /// node — a scope left out of order, a programming error. When a popped
    /// denial uncovers an allocation that was given back meanwhile, the
    /// thread is left blocked ([`Trees::is_blocked`]) and must unblock.
    pub fn release(&mut self, tid: Tid, frames: &[(Dev, NodeId)]) -> bool {
        for &(dev, n) in frames {
            if self
                .threads
                .get(&tid)
                .and_then(|t| t.stacks.get(&dev))
                .and_then(|s| s.last())
                .map(|f| f.node)
                != Some(n)
            {
                return false;
            }
        }
        let running = self.threads.get(&tid).is_some_and(|t| t.running);
        let mut retake = false;
        for &(dev, n) in frames.iter().rev() {
            let stack = self
                .threads
                .get_mut(&tid)
                .and_then(|t| t.stacks.get_mut(&dev))
                .expect("checked");
            let popped = stack.pop().expect("checked");
            if popped.deny {
                // The allocation below is used again. It may have been given
                // back meanwhile: then the thread must retake it first.
                if let Some(b) = self.active_below(tid, dev) {
                    self.set_active(b, 1);
                    retake |= !self.node(b).held;
                }
                continue;
            }
            let below = self.top(tid, dev).filter(|&b| !self.is_root(b));
            // Activate what is below first, so it stays held when `n` goes.
            if running {
                if let Some(b) = below {
                    self.set_active(b, 1);
                }
                self.set_active(n, -1);
            }
            self.node_mut(n).frames -= 1;
            self.drop_if_unused(n);
        }
        if retake {
            // Blocked, so that unblocking holds the allocation again (the
            // caller retakes, waiting if it must; see `is_blocked`).
            self.block(tid);
        }
        true
    }
}

#[cfg(test)]
mod tests;
