//! The require runtime of a process: scopes, waiting, spawning, blocking,
//! and the OS effects of each thread's allocation.
//!
//! One lock guards everything (kinds, trees, waiters), as in Poli-C; a
//! condition variable wakes waiting threads whenever an allocation is given
//! back (the *epoch* counts those events). Every operation is on the calling
//! thread, identified by its kernel thread id.
//!
//! Entering a scope: resolve the requests (amounts given as a share of what
//! is available become absolute, policies run on a view of every device),
//! then acquire everything at once. If that cannot happen now, the thread
//! gives back what it holds (so no two waiting threads can hold what the
//! other needs), waits for the epoch to move, retakes what it held, and runs
//! the policies again. A request larger than its enclosing allocation is a
//! programming error reported with the scope's source location.
//!
//! Timing options: `BeforeSpawn` and `AfterSpawn` requests wait until the
//! scope's first spawn (just before it / just after it); `ForChild`
//! requests are made by each thread spawned in the scope when it starts;
//! `ForDescendants` by every descendant. Spawn points — allot's runtime,
//! [`spawn`], and the `pthread_create` preload shim — call
//! [`Runtime::spawn_prepare`], [`Runtime::spawn_done`] and, in the child,
//! [`Runtime::child_start`].

use super::kind::{self, Kind};
use super::ledger::{self, Denied, Link};
use super::policy::{DevView, Outcome, Policy, View};
use super::tree::{Ask, Dev, IntMap, KindId, NodeId, Ownership, Refusal, Tid, Trees};
use allot_proto::{DeviceDef, LedgerItem};
use allot_topo::Machine;
use std::borrow::Cow;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// Asks resolved from requests, and what a policy reported.
type Resolved = (Vec<Ask>, Option<Box<Outcome>>);
/// Frames pushed by an acquisition, and what a policy reported.
type Acquired = (Vec<(Dev, NodeId)>, Option<Box<Outcome>>);

/// How much of a device.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// An absolute amount (1.0 = a whole CPU, bytes for memory, …).
    Abs(f64),
    /// A fraction (0..1) of what is available in the enclosing allocation
    /// when the scope is entered (the paper's `50%` is `Share(0.5)`).
    Share(f64),
}

/// When a request takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Timing {
    /// On entering the scope.
    #[default]
    Now,
    /// Just before the scope's first spawned thread is created.
    BeforeSpawn,
    /// Just after the scope's first spawned thread is created.
    AfterSpawn,
    /// Made by each thread spawned in the scope, when it starts.
    ForChild,
    /// Made by every descendant spawned in the scope, when it starts.
    ForDescendants,
}

/// What is requested.
#[derive(Debug, Clone)]
pub enum What {
    /// An amount of one device of a kind.
    Device {
        /// Kind name.
        kind: String,
        /// Device name or index.
        dev: String,
        /// Amount.
        amount: Amount,
    },
    /// A policy.
    Policy(Arc<dyn Policy>),
}

/// One request of a `require`.
#[derive(Debug, Clone)]
pub struct Request {
    /// What.
    pub what: What,
    /// Ownership.
    pub own: Ownership,
    /// When.
    pub timing: Timing,
}

impl Request {
    /// `kind(dev, amount)`.
    pub fn device(kind: &str, dev: impl ToString, amount: f64) -> Request {
        Request {
            what: What::Device {
                kind: kind.into(),
                dev: dev.to_string(),
                amount: Amount::Abs(amount),
            },
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// `kind(dev, share%)`: a share of what is available.
    pub fn device_share(kind: &str, dev: impl ToString, share: f64) -> Request {
        Request {
            what: What::Device {
                kind: kind.into(),
                dev: dev.to_string(),
                amount: Amount::Share(share),
            },
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// A policy.
    pub fn policy(p: Arc<dyn Policy>) -> Request {
        Request {
            what: What::Policy(p),
            own: Ownership::Default,
            timing: Timing::Now,
        }
    }
    /// With ownership `own`.
    pub fn owned(mut self, own: Ownership) -> Request {
        self.own = own;
        self
    }
    /// With timing `t`.
    pub fn when(mut self, t: Timing) -> Request {
        self.timing = t;
        self
    }
}

/// Why a require failed.
#[derive(Debug, thiserror::Error)]
pub enum RequireError {
    /// No such kind.
    #[error("{site}: unknown resource kind {kind:?} (known: {known})")]
    UnknownKind {
        /// The name.
        kind: String,
        /// Kinds that exist.
        known: String,
        /// Where.
        site: &'static Location<'static>,
    },
    /// No such device.
    #[error("{site}: resource kind {kind:?} has no device {dev:?} (it has {count})")]
    UnknownDevice {
        /// Kind.
        kind: String,
        /// Device asked.
        dev: String,
        /// How many it has.
        count: usize,
        /// Where.
        site: &'static Location<'static>,
    },
    /// Asked more than the enclosing allocation (a programming error).
    #[error(
        "{site}: requires {asked} of {kind} device {dev} inside a scope that holds {enclosing}: a nested require may not ask for more than its enclosing one"
    )]
    TooLarge {
        /// Kind.
        kind: String,
        /// Device.
        dev: String,
        /// Asked.
        asked: f64,
        /// Enclosing.
        enclosing: f64,
        /// Where.
        site: &'static Location<'static>,
    },
    /// An amount outside 0..=max, or a share outside 0..=1.
    #[error("{site}: invalid amount {amount} for {kind} device {dev} (0 to {max})")]
    BadAmount {
        /// Kind.
        kind: String,
        /// Device.
        dev: String,
        /// Amount.
        amount: f64,
        /// Device maximum.
        max: f64,
        /// Where.
        site: &'static Location<'static>,
    },
    /// A policy that can never be met on this machine did not succeed even
    /// with everything free.
    #[error("{site}: policy {policy} cannot be met on this machine even with every device free")]
    Impossible {
        /// Policy name.
        policy: String,
        /// Where.
        site: &'static Location<'static>,
    },
    /// Registering a kind failed.
    #[error("resource kind {0:?} already exists with other devices")]
    KindExists(String),
}

#[derive(Debug)]
struct ScopeRec {
    id: u64,
    frames: Vec<(Dev, NodeId)>,
    before: Vec<Request>,
    after: Vec<Request>,
    for_child: Vec<Request>,
    for_desc: Vec<Request>,
    spawned: bool,
    site: &'static Location<'static>,
}

#[derive(Debug, Default)]
struct ThreadRec {
    scopes: Vec<ScopeRec>,
    /// `ForDescendants` requests inherited from ancestors.
    inherited: Vec<Request>,
    /// Last OS state applied, per kind.
    applied: IntMap<KindId, Vec<Option<f64>>>,
    /// Frame vectors of left scopes, kept for reuse (no allocation per
    /// scope on the hot path).
    spare: Vec<Vec<(Dev, NodeId)>>,
}

#[derive(Debug)]
struct State {
    trees: Trees,
    kinds: Vec<Kind>,
    by_name: HashMap<String, KindId>,
    waiting: IntMap<Dev, u32>,
    total_waiting: u32,
    epoch: u64,
    threads: IntMap<Tid, ThreadRec>,
    next_scope: u64,
    /// The broker's ledger, when one answers: roots then hold only what it
    /// granted.
    link: Option<Link>,
    /// What each root got from the broker (given back item by item).
    root_items: IntMap<Dev, Vec<LedgerItem>>,
    /// Threads waiting in other processes too (from the broker).
    broker_waiters: u32,
    /// Ledger epoch last seen, and whether a watcher thread runs.
    ledger_epoch: u64,
    watching: bool,
    /// Threads sleeping on the condition variable (no wake-up call is made
    /// when there are none: it is a system call).
    sleepers: u32,
    /// Scratch buffers reused by every acquisition.
    scratch_asks: Vec<Ask>,
    scratch_nodes: Vec<NodeId>,
    scratch_holdings: Vec<Option<f64>>,
}

/// The require runtime of a process (or a simulated one).
#[derive(Debug)]
pub struct Runtime {
    state: Mutex<State>,
    cond: Condvar,
    machine: Machine,
    apply_os: bool,
    /// Set when the runtime is made `'static` (the ledger watcher needs it).
    this: OnceLock<&'static Runtime>,
}

/// The process's runtime ([`Runtime::global`]).
static GLOBAL: OnceLock<&'static Runtime> = OnceLock::new();

/// Runtimes the calling thread has a record in; when the thread ends,
/// each forgets it (and releases whatever it still held, as a child's
/// guard does), so records do not pile up with short-lived threads.
struct ForgetAtExit(std::cell::RefCell<Vec<(&'static Runtime, Tid)>>);

impl Drop for ForgetAtExit {
    fn drop(&mut self) {
        for (rt, tid) in self.0.take() {
            rt.thread_exit(tid);
        }
    }
}

thread_local! {
    static FORGET: ForgetAtExit = const { ForgetAtExit(std::cell::RefCell::new(Vec::new())) };
}

fn forget_at_exit(rt: &'static Runtime, tid: Tid) {
    let _ = FORGET.try_with(|f| {
        let mut v = f.0.borrow_mut();
        if !v.iter().any(|(r, _)| std::ptr::eq(*r, rt)) {
            v.push((rt, tid));
        }
    });
}

/// The calling thread's kernel id.
pub fn current_tid() -> Tid {
    thread_local! {
        static TID: Tid = rustix::thread::gettid().as_raw_nonzero().get() as Tid;
    }
    TID.with(|t| *t)
}

impl Runtime {
    /// A runtime for `machine` with the built-in kinds over `machine`'s
    /// usable CPUs, each device's whole amount in the process root.
    /// `apply_os` makes scopes change the calling thread's affinity, memory
    /// policy and I/O priority (false for simulations on fixture machines).
    pub fn new(machine: Machine, apply_os: bool) -> Runtime {
        Runtime::with_broker(machine, apply_os, None)
    }

    /// Like [`Runtime::new`], coordinated with other processes through the
    /// broker's ledger at `socket` when one answers there.
    pub fn with_broker(
        machine: Machine,
        apply_os: bool,
        socket: Option<&std::path::Path>,
    ) -> Runtime {
        let kinds = kind::builtin(&machine, machine.usable());
        let mut st = State {
            trees: Trees::new(),
            kinds: Vec::new(),
            by_name: HashMap::new(),
            waiting: IntMap::default(),
            total_waiting: 0,
            epoch: 0,
            threads: IntMap::default(),
            next_scope: 1,
            link: socket.and_then(Link::connect),
            root_items: IntMap::default(),
            broker_waiters: 0,
            ledger_epoch: 0,
            watching: false,
            sleepers: 0,
            scratch_asks: Vec::new(),
            scratch_nodes: Vec::new(),
            scratch_holdings: Vec::new(),
        };
        for k in kinds {
            add_kind(&mut st, k);
        }
        Runtime {
            state: Mutex::new(st),
            cond: Condvar::new(),
            machine,
            apply_os,
            this: OnceLock::new(),
        }
    }

    /// The process's runtime (this machine, OS effects on), created on first
    /// use and coordinated through the broker at the default socket when
    /// one answers.
    pub fn global() -> &'static Runtime {
        GLOBAL.get_or_init(|| {
            let m = allot_topo::discover_live().unwrap_or_else(|_| Machine::uniform(1));
            Runtime::with_broker(m, true, Some(&allot_proto::default_socket_path())).into_static()
        })
    }

    /// The process's runtime if something already created it: hooks that
    /// run on every thread creation or wait (the preload shim's) use this
    /// to cost nothing in processes that never entered a scope.
    pub fn global_if_started() -> Option<&'static Runtime> {
        GLOBAL.get().copied()
    }

    /// Leaks the runtime for the life of the process (what a runtime shared
    /// by threads, and one coordinated through a broker, needs).
    pub fn into_static(self) -> &'static Runtime {
        let r: &'static Runtime = Box::leak(Box::new(self));
        let _ = r.this.set(r);
        r
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The machine.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Registers a virtual (counting) kind: `count` devices of `max` each.
    /// Registering the same definition twice is fine.
    pub fn register_virtual(&self, name: &str, count: usize, max: f64) -> Result<(), RequireError> {
        let mut st = self.lock();
        if let Some(&k) = st.by_name.get(name) {
            let same = st.kinds[k].devices.len() == count
                && st.kinds[k].devices.iter().all(|d| d.max == max);
            return if same {
                Ok(())
            } else {
                Err(RequireError::KindExists(name.into()))
            };
        }
        if let Some(link) = st.link.as_mut() {
            let devs = (0..count)
                .map(|i| DeviceDef {
                    name: i.to_string(),
                    min: 0.0,
                    max,
                })
                .collect();
            link.define(name, devs)
                .map_err(|_| RequireError::KindExists(name.into()))?;
        }
        add_kind(&mut st, kind::virtual_kind(name, count, max));
        Ok(())
    }

    /// Whether this runtime coordinates with a broker.
    pub fn coordinated(&self) -> bool {
        self.lock().link.is_some()
    }

    /// Names of the registered kinds.
    pub fn kinds(&self) -> Vec<String> {
        self.lock().kinds.iter().map(|k| k.name.clone()).collect()
    }

    /// Enters a scope on the calling thread, waiting until its requests can
    /// be met.
    #[track_caller]
    pub fn enter(&self, reqs: Vec<Request>) -> Result<Scope<'_>, RequireError> {
        self.enter_as(current_tid(), reqs, true, Location::caller())
            .map(|s| s.expect("blocking enter returns a scope"))
    }

    /// Like [`Runtime::enter`] for simulated thread `tid`; with `block` false
    /// it returns `Ok(None)` instead of waiting.
    pub fn enter_as(
        &self,
        tid: Tid,
        reqs: Vec<Request>,
        block: bool,
        site: &'static Location<'static>,
    ) -> Result<Option<Scope<'_>>, RequireError> {
        self.enter_inner(tid, &reqs, None, block, site)
    }

    /// Resolves `reqs` once (kinds and devices looked up, amounts checked),
    /// so entering them again costs no lookup and no allocation for them.
    #[track_caller]
    pub fn prepare(&self, reqs: Vec<Request>) -> Result<Prepared, RequireError> {
        let site = Location::caller();
        let st = self.lock();
        let mut devs = Vec::with_capacity(reqs.len());
        for r in &reqs {
            devs.push(match &r.what {
                What::Device { kind, dev, amount } => {
                    let (k, d) = lookup(&st, kind, dev, site)?;
                    let max = st.kinds[k].devices[d].max;
                    if let Amount::Abs(a) = *amount
                        && !(0.0..=max + 1e-9).contains(&a)
                    {
                        return Err(RequireError::BadAmount {
                            kind: kind.clone(),
                            dev: dev.clone(),
                            amount: a,
                            max,
                            site,
                        });
                    }
                    Some((k, d))
                }
                What::Policy(_) => None,
            });
        }
        Ok(Prepared { reqs, devs, site })
    }

    /// Enters a scope of prepared requests on the calling thread.
    pub fn enter_prepared(&self, p: &Prepared) -> Result<Scope<'_>, RequireError> {
        self.enter_inner(current_tid(), &p.reqs, Some(&p.devs), true, p.site)
            .map(|s| s.expect("blocking enter returns a scope"))
    }

    fn enter_inner(
        &self,
        tid: Tid,
        reqs: &[Request],
        devs: Option<&[Option<Dev>]>,
        block: bool,
        site: &'static Location<'static>,
    ) -> Result<Option<Scope<'_>>, RequireError> {
        let deferred = reqs.iter().any(|r| r.timing != Timing::Now);
        // Requests for later (spawn timings) are kept aside; the rest are
        // acquired now. Without deferred requests nothing is copied.
        let (now, mut later, now_devs): (Cow<'_, [Request]>, Vec<Request>, Option<Vec<_>>) =
            if deferred {
                let mut now = Vec::new();
                let mut nd = Vec::new();
                let mut later = Vec::new();
                for (i, r) in reqs.iter().enumerate() {
                    if r.timing == Timing::Now {
                        now.push(r.clone());
                        nd.push(devs.and_then(|d| d[i]));
                    } else {
                        later.push(r.clone());
                    }
                }
                (Cow::Owned(now), later, Some(nd))
            } else {
                (Cow::Borrowed(reqs), Vec::new(), None)
            };
        let now_devs: Option<&[Option<Dev>]> = match &now_devs {
            Some(v) => Some(v),
            None => devs,
        };
        let mut st = self.lock();
        let id = st.next_scope;
        st.next_scope += 1;
        let (guard, acquired) = self.acquire(st, tid, &now, now_devs, block, site);
        st = guard;
        let Some((frames, outcome)) = acquired? else {
            return Ok(None);
        };
        let mut rec = ScopeRec {
            id,
            frames,
            before: Vec::new(),
            after: Vec::new(),
            for_child: Vec::new(),
            for_desc: Vec::new(),
            spawned: false,
            site,
        };
        for r in later.drain(..) {
            match r.timing {
                Timing::BeforeSpawn => rec.before.push(r),
                Timing::AfterSpawn => rec.after.push(r),
                Timing::ForChild => rec.for_child.push(r),
                _ => rec.for_desc.push(r),
            }
        }
        let first = !st.threads.contains_key(&tid);
        st.threads.entry(tid).or_default().scopes.push(rec);
        self.apply(&mut st, tid);
        if first
            && tid == current_tid()
            && let Some(rt) = self.this.get()
        {
            forget_at_exit(rt, tid);
        }
        Ok(Some(Scope {
            rt: self,
            id,
            tid,
            outcome,
            _not_send: PhantomData,
        }))
    }

    /// Resolves and acquires `reqs` for `tid` as one unit, waiting (when
    /// `block`) until they can be met. Takes and returns the lock guard,
    /// which waiting hands to the condition variable.
    #[allow(clippy::type_complexity)]
    fn acquire<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
        reqs: &[Request],
        devs: Option<&[Option<Dev>]>,
        block: bool,
        site: &'static Location<'static>,
    ) -> (
        MutexGuard<'s, State>,
        Result<Option<Acquired>, RequireError>,
    ) {
        if reqs.is_empty() {
            return (st, Ok(Some((Vec::new(), None))));
        }
        let has_policy = reqs.iter().any(|r| matches!(r.what, What::Policy(_)));
        loop {
            let buf = std::mem::take(&mut st.scratch_asks);
            let resolved = match resolve(&st, &self.machine, tid, reqs, devs, site, buf) {
                Ok(r) => r,
                Err(e) => return (st, Err(e)),
            };
            let failure = match resolved {
                Some((asks, outcome)) => {
                    let mut nodes = std::mem::take(&mut st.scratch_nodes);
                    let got =
                        st.trees
                            .acquire_into(tid, &asks, has_policy || asks.len() > 1, &mut nodes);
                    if got.is_ok() {
                        let mut frames = st
                            .threads
                            .get_mut(&tid)
                            .and_then(|t| t.spare.pop())
                            .unwrap_or_default();
                        frames.extend(asks.iter().map(|a| a.dev).zip(nodes.iter().copied()));
                        st.scratch_nodes = nodes;
                        st.scratch_asks = asks;
                        // A nested acquisition moves this thread off its
                        // enclosing allocations (and denials stop its use of
                        // others): a sibling waiting to carve from them may
                        // proceed now.
                        if st.sleepers > 0 {
                            st.epoch += 1;
                            self.cond.notify_all();
                        }
                        return (st, Ok(Some((frames, outcome))));
                    }
                    st.scratch_nodes = nodes;
                    match got.map(|_| ()) {
                        Ok(()) => unreachable!("handled above"),
                        Err(Refusal::TooLarge {
                            dev,
                            asked,
                            enclosing,
                        }) => {
                            let k = &st.kinds[dev.0];
                            let e = RequireError::TooLarge {
                                kind: k.name.clone(),
                                dev: k.devices[dev.1].name.clone(),
                                asked,
                                enclosing,
                                site,
                            };
                            return (st, Err(e));
                        }
                        Err(Refusal::Wait { devs, root_short }) => {
                            if !root_short.is_empty()
                                && st.link.is_some()
                                && self.grow_from_broker(&mut st, &root_short)
                            {
                                continue; // the roots grew: try again at once
                            }
                            devs
                        }
                    }
                }
                None => Vec::new(),
            };
            if !block {
                return (st, Ok(None));
            }
            if has_policy && policy_impossible(&st, &self.machine, reqs) {
                let name = reqs
                    .iter()
                    .find_map(|r| {
                        if let What::Policy(p) = &r.what {
                            Some(p.name().to_string())
                        } else {
                            None
                        }
                    })
                    .unwrap_or_default();
                return (st, Err(RequireError::Impossible { policy: name, site }));
            }
            st = self.wait(st, tid, &failure);
        }
    }

    /// Gives back what `tid` holds, waits for a release, retakes.
    fn wait<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
        devs: &[Dev],
    ) -> MutexGuard<'s, State> {
        for d in devs {
            *st.waiting.entry(*d).or_default() += 1;
        }
        st.total_waiting += 1;
        // Giving back what the thread holds may let a sleeper proceed, so
        // it wakes them. A thread that holds nothing changes nothing for
        // the others by starting to wait: waking them then made every
        // waiter that failed again wake all the others in turn, a storm
        // that kept waiting threads busy on the CPUs the running ones need.
        let gives_back = st.trees.holds_any(tid);
        st.trees.block(tid);
        if gives_back {
            st.epoch += 1;
            if st.sleepers > 0 {
                self.cond.notify_all();
            }
        }
        self.watch_ledger(&mut st);
        let seen = st.epoch;
        while st.epoch == seen {
            st.sleepers += 1;
            st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
            st.sleepers -= 1;
        }
        for d in devs {
            if let Some(w) = st.waiting.get_mut(d) {
                *w -= 1;
                if *w == 0 {
                    st.waiting.remove(d);
                }
            }
        }
        st.total_waiting -= 1;
        self.retake(st, tid)
    }

    /// Retakes `tid`'s allocations after it was blocked, waiting as needed.
    fn retake<'s>(&'s self, mut st: MutexGuard<'s, State>, tid: Tid) -> MutexGuard<'s, State> {
        loop {
            match st.trees.unblock(tid) {
                Ok(()) => return st,
                Err(_) => {
                    let seen = st.epoch;
                    while st.epoch == seen {
                        st.sleepers += 1;
                        st = self.cond.wait(st).unwrap_or_else(|p| p.into_inner());
                        st.sleepers -= 1;
                    }
                }
            }
        }
    }

    fn exit(&self, tid: Tid, id: u64) {
        let mut st = self.lock();
        let Some(t) = st.threads.get_mut(&tid) else {
            return;
        };
        let Some(pos) = t.scopes.iter().position(|s| s.id == id) else {
            return;
        };
        if pos + 1 != t.scopes.len() {
            let site = t.scopes[pos].site;
            drop(st);
            panic!("{site}: a require scope was left before the scopes nested inside it");
        }
        let mut rec = t.scopes.pop().expect("position found");
        let was_running = !st.trees.is_blocked(tid);
        if !st.trees.release(tid, &rec.frames) {
            let site = rec.site;
            drop(st);
            panic!("{site}: a require scope was left out of order");
        }
        rec.frames.clear();
        if let Some(t) = st.threads.get_mut(&tid) {
            t.spare.push(std::mem::take(&mut rec.frames));
        }
        give_back(&mut st);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
        if was_running && st.trees.is_blocked(tid) {
            // A denial left uncovered an allocation that was given back
            // while this thread did not use it: take it back first.
            st = self.retake(st, tid);
        }
        self.apply(&mut st, tid);
    }

    /// The calling thread is about to block (a join, a condition wait, an
    /// idle park): it gives back what no other running thread uses.
    pub fn block_current(&self) {
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return;
        }
        st.trees.block(tid);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }

    /// The calling thread continues after blocking: it retakes its
    /// allocations, waiting until it can.
    pub fn unblock_current(&self) {
        let tid = current_tid();
        let st = self.lock();
        // A thread without frames was never blocked (see `block_current`);
        // leave it unregistered so waits of unrelated threads cost no entry.
        if !st.trees.holds_any(tid) {
            return;
        }
        drop(self.retake(st, tid));
    }

    /// Like [`Runtime::unblock_current`] but never waits: returns false
    /// (the thread stays blocked) if its allocations cannot be retaken now.
    /// For callers that hold a lock another thread may need before the
    /// allocations come back (a condition wait's mutex): they drop the
    /// lock, call `unblock_current`, and lock again.
    pub fn try_unblock_current(&self) -> bool {
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return true;
        }
        st.trees.unblock(tid).is_ok()
    }

    /// Before the calling thread creates a thread: runs the pending
    /// `BeforeSpawn` requests (see [`Runtime::spawn_done`] for which scopes)
    /// and returns what the child inherits (`None` if the thread is in no
    /// scope and inherits nothing). The child is attached to the calling
    /// thread's allocations *now*: it shares what the parent used at this
    /// point, whatever the parent does before the child runs (an
    /// `AfterSpawn` request, a nested scope, leaving the scope). Hand the
    /// context to [`Runtime::child_start`] in the child, or to
    /// [`Runtime::spawn_cancel`] if the thread could not be created.
    pub fn spawn_prepare(&self) -> Option<SpawnCtx> {
        let tid = current_tid();
        let mut st = self.lock();
        let t = st.threads.get(&tid)?;
        if t.scopes.is_empty() && t.inherited.is_empty() {
            return None;
        }
        st = self.run_spawn_timed(st, tid, false);
        let t = st.threads.get(&tid)?;
        // The child makes these when it starts: they are immediate there.
        let now = |r: &Request| r.clone().when(Timing::Now);
        let mut for_child: Vec<Request> = t.inherited.clone();
        for s in &t.scopes {
            for_child.extend(s.for_desc.iter().map(now));
        }
        let descendants = for_child.clone();
        for s in &t.scopes {
            for_child.extend(s.for_child.iter().map(now));
        }
        // A dormant stand-in holds the child's share until it starts.
        let pending = PENDING_CHILD | NEXT_PENDING.fetch_add(1, Ordering::Relaxed);
        st.trees.spawn(tid, pending);
        Some(SpawnCtx {
            pending,
            for_child,
            descendants,
        })
    }

    /// The thread `ctx` was prepared for was not created: drops what was
    /// set aside for it.
    pub fn spawn_cancel(&self, ctx: SpawnCtx) {
        let mut st = self.lock();
        st.trees.thread_exit(ctx.pending);
        give_back(&mut st);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }

    /// After the calling thread created a thread: runs the pending
    /// `AfterSpawn` requests, once, at the first spawn.
    ///
    /// Spawn-timed requests belong to the innermost scope and to the
    /// enclosing scopes below it as long as every scope nested in them holds
    /// nothing yet (so `require(cores(BeforeSpawn, n)) { require(cores(
    /// AfterSpawn, Private, 1), cores(ForChild, 1)) { parallel region } }`
    /// takes the outer `n` cores just before the region's first thread);
    /// they run outermost first, so their frames nest like the scopes.
    pub fn spawn_done(&self) {
        let tid = current_tid();
        let st = self.lock();
        drop(self.run_spawn_timed(st, tid, true));
    }

    /// Acquires the pending `BeforeSpawn` (`after` false) or `AfterSpawn`
    /// (`after` true) requests of the scopes a spawn concerns (see
    /// [`Runtime::spawn_done`]). Errors leave the requests unmade: a spawn
    /// point has no one to report them to.
    fn run_spawn_timed<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
        tid: Tid,
        after: bool,
    ) -> MutexGuard<'s, State> {
        let ids: Vec<u64> = match st.threads.get(&tid) {
            Some(t) if !t.scopes.is_empty() => {
                let mut first = t.scopes.len() - 1;
                while first > 0 && t.scopes[first].frames.is_empty() {
                    first -= 1;
                }
                t.scopes[first..].iter().map(|s| s.id).collect()
            }
            _ => return st,
        };
        let mut changed = false;
        for id in ids {
            let Some(rec) = st
                .threads
                .get_mut(&tid)
                .and_then(|t| t.scopes.iter_mut().find(|s| s.id == id))
            else {
                continue;
            };
            let reqs = if after {
                if rec.spawned {
                    continue;
                }
                rec.spawned = true;
                std::mem::take(&mut rec.after)
            } else {
                std::mem::take(&mut rec.before)
            };
            if reqs.is_empty() {
                continue;
            }
            let site = rec.site;
            let (guard, got) = self.acquire(st, tid, &reqs, None, true, site);
            st = guard;
            if let Ok(Some((frames, _))) = got
                && let Some(rec) = st
                    .threads
                    .get_mut(&tid)
                    .and_then(|t| t.scopes.iter_mut().find(|s| s.id == id))
            {
                rec.frames.extend(frames);
                changed = true;
            }
        }
        if changed {
            self.apply(&mut st, tid);
        }
        st
    }

    /// In a new thread: shares the allocations its parent had when it
    /// called [`Runtime::spawn_prepare`], then makes its
    /// `ForChild`/`ForDescendants` requests. Returns the guard that releases
    /// everything when the thread ends.
    pub fn child_start(&self, ctx: SpawnCtx) -> ChildGuard<'_> {
        let tid = current_tid();
        let mut st = self.lock();
        st.trees.spawn(ctx.pending, tid);
        st.trees.thread_exit(ctx.pending);
        st = self.retake(st, tid);
        st.threads.entry(tid).or_default().inherited = ctx.descendants;
        drop(st);
        let scope = if ctx.for_child.is_empty() {
            None
        } else {
            let reqs = ctx.for_child;
            self.enter_as(tid, reqs, true, Location::caller())
                .ok()
                .flatten()
                .map(|mut s| {
                    // The guard leaves the scope by id; the outcome (a
                    // box) is not needed.
                    let id = s.id;
                    drop(s.outcome.take());
                    std::mem::forget(s);
                    id
                })
        };
        let mut st = self.lock();
        self.apply(&mut st, tid);
        ChildGuard {
            rt: self,
            tid,
            scope,
            _not_send: PhantomData,
        }
    }

    fn thread_exit(&self, tid: Tid) {
        let mut st = self.lock();
        st.trees.thread_exit(tid);
        st.threads.remove(&tid);
        give_back(&mut st);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }

    /// What `tid` holds on `kind` device `dev` (None: unconstrained).
    pub fn holding(&self, tid: Tid, kind: &str, dev: usize) -> Option<f64> {
        let st = self.lock();
        let k = *st.by_name.get(kind)?;
        match st.trees.holding(tid, (k, dev)) {
            super::tree::Holding::Unconstrained => None,
            super::tree::Holding::Amount(a) => Some(a),
        }
    }

    /// Threads the runtime keeps a record of (diagnostics: records of
    /// ended threads are dropped when they end).
    pub fn thread_records(&self) -> usize {
        let st = self.lock();
        st.threads.len().max(st.trees.thread_count())
    }

    /// Threads waiting now.
    pub fn waiting(&self) -> u32 {
        self.lock().total_waiting
    }

    /// Asks the broker for what the roots lack; true if granted (the roots
    /// grew). A broker that went away leaves the process standalone: every
    /// root gets its whole device.
    fn grow_from_broker(&self, st: &mut MutexGuard<'_, State>, short: &[(Dev, f64, bool)]) -> bool {
        let items: Vec<(Dev, LedgerItem)> = short
            .iter()
            .map(|&(dev, amount, shared)| {
                let kind = st.kinds[dev.0].name.clone();
                (
                    dev,
                    LedgerItem {
                        kind,
                        dev: dev.1 as u32,
                        amount,
                        shared,
                    },
                )
            })
            .collect();
        let Some(link) = st.link.as_mut() else {
            return false;
        };
        match link.acquire(items.iter().map(|(_, i)| i.clone()).collect()) {
            Ok(()) => {
                for (dev, it) in items {
                    let (amount, _) = st.trees.root(dev).unwrap_or((0.0, 0.0));
                    st.trees.set_root(dev, amount + it.amount);
                    st.root_items.entry(dev).or_default().push(it);
                }
                true
            }
            Err(Denied::NotNow(_)) => false,
            Err(Denied::Gone(_)) => {
                st.link = None;
                for k in 0..st.kinds.len() {
                    for d in 0..st.kinds[k].devices.len() {
                        let max = st.kinds[k].devices[d].max;
                        st.trees.set_root((k, d), max);
                    }
                }
                st.root_items.clear();
                true
            }
        }
    }

    /// Starts the watcher thread (if not running) that turns ledger changes
    /// into wake-ups of this process's waiting threads.
    fn watch_ledger(&self, st: &mut MutexGuard<'_, State>) {
        if st.watching {
            return;
        }
        let Some(socket) = st.link.as_ref().map(|l| l.socket().to_path_buf()) else {
            return;
        };
        let Some(me) = self.as_static() else { return };
        st.watching = true;
        let _ = std::thread::Builder::new()
            .name("allot-ledger".into())
            .spawn(move || {
                loop {
                    let (epoch, waiting) = {
                        let mut st = me.lock();
                        if st.total_waiting == 0 || st.link.is_none() {
                            st.watching = false;
                            return;
                        }
                        (st.ledger_epoch, st.total_waiting)
                    };
                    let got = ledger::watch(&socket, epoch, waiting);
                    let mut st = me.lock();
                    match got {
                        Some((e, w)) => {
                            st.ledger_epoch = e;
                            st.broker_waiters = w;
                        }
                        None => st.watching = false,
                    }
                    st.epoch += 1;
                    if st.sleepers > 0 {
                        me.cond.notify_all();
                    }
                    if !st.watching {
                        return;
                    }
                }
            });
    }

    /// `self` as `'static`, if it was made so (see [`Runtime::into_static`]).
    fn as_static(&self) -> Option<&'static Runtime> {
        self.this.get().copied()
    }

    /// Applies `tid`'s holdings to the OS when it is the calling thread and
    /// they changed.
    fn apply(&self, st: &mut MutexGuard<'_, State>, tid: Tid) {
        if !self.apply_os || tid != current_tid() {
            return;
        }
        let st = &mut **st;
        let mut holdings = std::mem::take(&mut st.scratch_holdings);
        for k in 0..st.kinds.len() {
            let Some(ops) = st.kinds[k].ops.as_ref() else {
                continue;
            };
            let n = st.kinds[k].devices.len();
            let constrained = st.trees.holdings_of_kind(tid, k, n, &mut holdings);
            let t = st.threads.entry(tid).or_default();
            let unchanged = match t.applied.get(&k) {
                Some(b) => constrained && *b == holdings,
                None => !constrained,
            };
            if unchanged {
                continue;
            }
            if !constrained {
                holdings.resize(n, None); // every device unconstrained
            }
            // Failures (e.g. memory binding on a kernel without NUMA) leave
            // the allocation accounted but not enforced.
            let _ = ops.restrict(&holdings);
            let _ = ops.throttle(tid, &holdings);
            let old = if constrained {
                t.applied.insert(k, std::mem::take(&mut holdings))
            } else {
                t.applied.remove(&k)
            };
            if let Some(v) = old {
                holdings = v; // reuse its memory next time
            }
        }
        st.scratch_holdings = holdings;
    }
}

/// Gives the broker back what idle roots got from it.
fn give_back(st: &mut State) {
    if st.link.is_none() {
        return;
    }
    let mut items = Vec::new();
    for (dev, _) in st.trees.idle_roots() {
        if let Some(its) = st.root_items.remove(&dev) {
            items.extend(its);
            st.trees.set_root(dev, 0.0);
        }
    }
    if !items.is_empty()
        && let Some(l) = st.link.as_mut()
    {
        l.release(items);
    }
}

fn add_kind(st: &mut State, k: Kind) {
    let id = st.kinds.len();
    // With a broker, roots start empty and grow with what it grants.
    let coordinated = st.link.is_some();
    for (d, dev) in k.devices.iter().enumerate() {
        st.trees
            .set_root((id, d), if coordinated { 0.0 } else { dev.max });
    }
    st.by_name.insert(k.name.clone(), id);
    st.kinds.push(k);
}

/// Resolves requests into asks: devices looked up, shares made absolute,
/// policies run. `None` when a policy fails now.
fn resolve(
    st: &State,
    machine: &Machine,
    tid: Tid,
    reqs: &[Request],
    devs: Option<&[Option<Dev>]>,
    site: &'static Location<'static>,
    mut asks: Vec<Ask>,
) -> Result<Option<Resolved>, RequireError> {
    asks.clear();
    // Only policies report an outcome; device requests leave it empty and
    // skip moving it around on the enter path.
    let mut outcome = None;
    for (i, r) in reqs.iter().enumerate() {
        match &r.what {
            What::Device { kind, dev, amount } => {
                let (k, d) = match devs.and_then(|v| v[i]) {
                    Some(kd) => kd,
                    None => lookup(st, kind, dev, site)?,
                };
                let max = st.kinds[k].devices[d].max;
                let abs = match *amount {
                    Amount::Abs(a) => a,
                    Amount::Share(s) if (0.0..=1.0).contains(&s) => {
                        s * st.trees.available(tid, (k, d))
                    }
                    Amount::Share(s) => s * 100.0 + max + 1.0, // out of range: reported below
                };
                if !(0.0..=max + 1e-9).contains(&abs) || abs.is_nan() {
                    return Err(RequireError::BadAmount {
                        kind: kind.clone(),
                        dev: dev.clone(),
                        amount: abs,
                        max,
                        site,
                    });
                }
                asks.push(Ask {
                    dev: (k, d),
                    amount: abs,
                    own: r.own,
                });
            }
            What::Policy(p) => {
                let mut view = view_for(st, machine, tid, r.own);
                if !p.run(&mut view) {
                    return Ok(None);
                }
                for d in view.requests() {
                    let k = st.by_name[&d.kind];
                    asks.push(Ask {
                        dev: (k, d.index),
                        amount: d.request.unwrap_or(0.0).max(0.0),
                        own: d.ownership,
                    });
                }
                outcome = Some(Box::new(view.out));
            }
        }
    }
    Ok(Some((asks, outcome)))
}

fn lookup(
    st: &State,
    kind: &str,
    dev: &str,
    site: &'static Location<'static>,
) -> Result<(KindId, usize), RequireError> {
    let Some(&k) = st.by_name.get(kind) else {
        return Err(RequireError::UnknownKind {
            kind: kind.into(),
            known: st
                .kinds
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            site,
        });
    };
    let d = st.kinds[k]
        .device(dev)
        .ok_or_else(|| RequireError::UnknownDevice {
            kind: kind.into(),
            dev: dev.into(),
            count: st.kinds[k].devices.len(),
            site,
        })?;
    Ok((k, d))
}

/// What a policy sees. With a broker, the process's roots start empty and
/// grow with what the broker's ledger grants, so at the top level a policy
/// also sees what the root could still grow by (the device's whole amount
/// less what the root holds): it chooses, the acquisition asks the ledger
/// for what the root lacks, and the scope waits while another process
/// holds it. (The policy does not see other processes' holdings, so it may
/// pick a device held elsewhere and wait although another is free.)
fn view_for<'m>(st: &State, machine: &'m Machine, tid: Tid, own: Ownership) -> View<'m> {
    let mut devs = Vec::new();
    let coordinated = st.link.is_some();
    for (k, kind) in st.kinds.iter().enumerate() {
        for (d, dev) in kind.devices.iter().enumerate() {
            let growable = if coordinated && st.trees.at_root(tid, (k, d)) {
                let (held, _) = st.trees.root((k, d)).unwrap_or((0.0, 0.0));
                (dev.max - held).max(0.0)
            } else {
                0.0
            };
            devs.push(DevView {
                kind: kind.name.clone(),
                index: d,
                name: dev.name.clone(),
                max: dev.max,
                available: st.trees.available(tid, (k, d)) + growable,
                shared_available: st.trees.shared_available(tid, (k, d)) + growable,
                waiters: st.waiting.get(&(k, d)).copied().unwrap_or(0),
                request: None,
                ownership: own,
            });
        }
    }
    View::new(devs, machine, st.total_waiting.max(st.broker_waiters), own)
}

/// Whether a policy fails even on a completely free machine.
fn policy_impossible(st: &State, machine: &Machine, reqs: &[Request]) -> bool {
    let mut devs = Vec::new();
    for (k, kind) in st.kinds.iter().enumerate() {
        for (d, dev) in kind.devices.iter().enumerate() {
            let _ = k;
            devs.push(DevView {
                kind: kind.name.clone(),
                index: d,
                name: dev.name.clone(),
                max: dev.max,
                available: dev.max,
                shared_available: dev.max,
                waiters: 0,
                request: None,
                ownership: Ownership::Default,
            });
        }
    }
    reqs.iter().any(|r| match &r.what {
        What::Policy(p) => !p.run(&mut View::new(devs.clone(), machine, 0, r.own)),
        _ => false,
    })
}

/// Requests resolved once against a runtime ([`Runtime::prepare`]).
#[derive(Debug, Clone)]
pub struct Prepared {
    reqs: Vec<Request>,
    devs: Vec<Option<Dev>>,
    site: &'static Location<'static>,
}

/// An entered scope; leaving it (drop) releases what it acquired.
#[derive(Debug)]
pub struct Scope<'r> {
    rt: &'r Runtime,
    id: u64,
    tid: Tid,
    outcome: Option<Box<Outcome>>,
    _not_send: PhantomData<*const ()>,
}

impl Scope<'_> {
    /// What the scope's policy obtained (empty for device requests).
    pub fn outcome(&self) -> &Outcome {
        static NONE: Outcome = Outcome {
            ncores: 0,
            cpus: allot_topo::CpuSet::new(),
            nodes: Vec::new(),
        };
        self.outcome.as_deref().unwrap_or(&NONE)
    }

    /// The scope's thread.
    pub fn tid(&self) -> Tid {
        self.tid
    }
}

impl Drop for Scope<'_> {
    fn drop(&mut self) {
        self.rt.exit(self.tid, self.id);
    }
}

/// What a spawned thread inherits.
#[derive(Debug)]
pub struct SpawnCtx {
    /// The dormant stand-in that holds the child's share until it starts.
    pending: Tid,
    for_child: Vec<Request>,
    descendants: Vec<Request>,
}

/// Stand-ins for children not started yet have ids with the top bit set
/// (kernel thread ids never do).
const PENDING_CHILD: Tid = 1 << 63;
static NEXT_PENDING: AtomicU64 = AtomicU64::new(0);

/// Held by a spawned thread while it runs.
#[derive(Debug)]
pub struct ChildGuard<'r> {
    rt: &'r Runtime,
    tid: Tid,
    scope: Option<u64>,
    _not_send: PhantomData<*const ()>,
}

impl Drop for ChildGuard<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.scope.take() {
            self.rt.exit(self.tid, id);
        }
        self.rt.thread_exit(self.tid);
    }
}

/// Spawns a thread that shares the calling thread's allocations (and makes
/// its scopes' `ForChild` requests), like `std::thread::spawn`.
pub fn spawn<F, T>(f: F) -> std::thread::JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let rt = Runtime::global();
    let ctx = rt.spawn_prepare();
    let h = std::thread::spawn(move || {
        let _g = ctx.map(|c| rt.child_start(c));
        f()
    });
    rt.spawn_done();
    h
}

/// Runs `f` (a blocking call) with the calling thread's allocations given
/// back meanwhile, as Poli-C does for threads blocked outside I/O.
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let rt = Runtime::global();
    rt.block_current();
    let r = f();
    rt.unblock_current();
    r
}
