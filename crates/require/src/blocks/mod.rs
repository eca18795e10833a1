//! A process's require blocks ([`Blocks`]): scopes, waiting, spawning,
//! blocking, and the OS effects of each thread's allocation. ("Runtime"
//! elsewhere in allot means the work-stealing pool, `allot-runtime`, or a
//! parallel runtime such as libgomp; this is neither.)
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
//! the policies again (`wait`). A request larger than its enclosing
//! allocation is a programming error reported with the scope's source
//! location.
//!
//! Timing options: `BeforeSpawn` and `AfterSpawn` requests wait until the
//! scope's first spawn (just before it / just after it); `ForChild`
//! requests are made by each thread spawned in the scope when it starts;
//! `ForDescendants` by every descendant. Spawn points — allot's runtime,
//! [`spawn`], and the `pthread_create` preload shim — call
//! [`Blocks::spawn_prepare`], [`Blocks::spawn_done`] and, in the child,
//! [`Blocks::child_start`]. A thread and the threads it spawned that way
//! form a team, placed one thread per CPU of their block (`place`); the
//! OS effects are applied in `apply`.

mod acquire;
mod apply;
mod block;
mod broker;
mod locked;
mod need;
mod place;
mod resolve;
mod spawn;
mod wait;

pub use block::{Wait, Waits, given_back, may_hold_current, release_on, releases, releasing};
pub use need::{Amount, Need, RequireError, Timing, What};
use resolve::{add_kind, add_kind_local, give_back, lookup, policy_impossible, resolve};
pub use spawn::{ChildGuard, SpawnCtx, blocking, spawn};
pub use wait::{DEFAULT_GATHER_WINDOW, PROBE_PART, QUIET_WINDOWS};

use super::builtin;
use super::kind::{self, Kind};
use super::ledger::{self, Denied, Link};
use super::policy::{DevView, Outcome, Policy, View};
use super::tree::{Ask, Dev, IntMap, KindId, NodeId, Ownership, Refusal, Tid, Trees};
use allot_proto::{DeviceDef, LedgerItem};
use allot_topo::Machine;
use locked::Locked;
use std::borrow::Cow;
use std::collections::HashMap;
use std::marker::PhantomData;
use std::panic::Location;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

/// Asks resolved from requests, and what a policy reported.
type Resolved = (Vec<Ask>, Option<Box<Outcome>>);
/// Frames pushed by an acquisition, and what a policy reported.
type Acquired = (Vec<(Dev, NodeId)>, Option<Box<Outcome>>);

#[derive(Debug)]
struct ScopeRec {
    id: u64,
    frames: Vec<(Dev, NodeId)>,
    before: Vec<Need>,
    after: Vec<Need>,
    for_child: Vec<Need>,
    for_desc: Vec<Need>,
    spawned: bool,
    site: &'static Location<'static>,
}

#[derive(Debug, Default)]
struct ThreadRec {
    scopes: Vec<ScopeRec>,
    /// `ForDescendants` requests inherited from ancestors.
    inherited: Vec<Need>,
    /// Last OS state applied, per kind.
    applied: IntMap<KindId, Vec<Option<f64>>>,
    /// Frame vectors of left scopes, kept for reuse (no allocation per
    /// scope on the hot path).
    spare: Vec<Vec<(Dev, NodeId)>>,
    /// The thread that spawned this one through a spawn point, sharing its
    /// allocation with it (a team member: [`place`]).
    parent: Option<Tid>,
    /// Live threads this one spawned through spawn points (started or
    /// not): while there are any, it leads a team ([`place`]).
    children: u32,
    /// The device it is placed on, per kind ([`place`]).
    placed: IntMap<KindId, usize>,
    /// It let its placement go for a wait, for a teammate to use its
    /// device ([`Blocks::lend_placement`]); placed again when it retakes.
    lent: bool,
}

impl ThreadRec {
    /// Whether the thread is in a team: its threads are placed.
    fn in_team(&self) -> bool {
        self.parent.is_some() || self.children > 0
    }
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
    /// Threads placed on each device ([`place`]).
    placed_on: IntMap<Dev, u32>,
    next_scope: u64,
    /// The broker's ledger, when one answers: roots then hold only what it
    /// granted.
    link: Option<Link>,
    /// What each root got from the broker (given back item by item).
    root_items: IntMap<Dev, Vec<LedgerItem>>,
    /// Each device the broker shares: its index in the broker's list
    /// (`ledger::Link::device_index`).
    broker_dev: HashMap<Dev, u32>,
    /// Threads waiting in other processes too (from the broker).
    broker_waiters: u32,
    /// What the broker last said was free to each thread's acquisition
    /// (what is free depends on its place in the broker's line), per device
    /// of the kinds it asked for: (exclusive, shared). Its policy chooses
    /// from it until the thread waits or the acquisition ends
    /// (`broker.rs`).
    broker_free: IntMap<Tid, IntMap<Dev, (f64, f64)>>,
    /// The number the next waiting acquisition's place in the broker's
    /// line takes (from 1).
    next_place: u64,
    /// Ledger epoch last seen, and whether a watcher thread runs.
    ledger_epoch: u64,
    watching: bool,
    /// How many times the broker woke the watcher, and the places in line
    /// it named the last time (those that could take something then):
    /// a thread whose place was refused asks again only once a later
    /// wake-up names it (`acquire.rs`).
    ledger_wakes: u64,
    ledger_due: Vec<allot_proto::DuePlace>,
    /// Threads sleeping on the condition variable (no wake-up call is made
    /// when there are none: it is a system call).
    sleepers: u32,
    /// Scratch buffers reused by every acquisition.
    scratch_asks: Vec<Ask>,
    scratch_nodes: Vec<NodeId>,
    scratch_holdings: Vec<Option<f64>>,
    /// The last probe of each device of a measured kind (for rates in
    /// policy views, which read the state without changing it otherwise).
    samples: std::cell::RefCell<IntMap<Dev, Sample>>,
    /// Threads entering with a policy that divides among requests
    /// arriving together ([`Policy::gathers`]), and when each arrived; a
    /// thread leaves the list once its policy has run. See
    /// [`Blocks::set_gather_window`].
    gathering: Vec<(Tid, std::time::Instant)>,
    /// How long a batch of such arrivals stays open.
    gather_window: std::time::Duration,
    /// The connection on which such arrivals are gathered with other
    /// processes' at the broker, once made; whether making it was tried.
    gatherer: Option<ledger::Gatherer>,
    gatherer_tried: bool,
    /// Threads whose arrival the broker answered and whose policy has not
    /// chosen yet: (arrival, others of its batch that have not chosen).
    gathered: IntMap<Tid, (u64, u32)>,
    /// When the last such request arrived (one in a quiet spell waits only
    /// part of the window for company: `wait::alone_wait`).
    last_gathering: Option<std::time::Instant>,
}

impl State {
    /// A state with no kinds, talking to the broker through `link`.
    fn new(link: Option<Link>) -> State {
        State {
            trees: Trees::new(),
            kinds: Vec::new(),
            by_name: HashMap::new(),
            waiting: IntMap::default(),
            total_waiting: 0,
            epoch: 0,
            threads: IntMap::default(),
            placed_on: IntMap::default(),
            next_scope: 1,
            link,
            root_items: IntMap::default(),
            broker_dev: HashMap::new(),
            broker_waiters: 0,
            broker_free: IntMap::default(),
            next_place: 1,
            ledger_epoch: 0,
            watching: false,
            ledger_wakes: 0,
            ledger_due: Vec::new(),
            sleepers: 0,
            scratch_asks: Vec::new(),
            scratch_nodes: Vec::new(),
            scratch_holdings: Vec::new(),
            samples: Default::default(),
            gathering: Vec::new(),
            gather_window: wait::gather_window_from_env(),
            gatherer: None,
            gatherer_tried: false,
            gathered: IntMap::default(),
            last_gathering: None,
        }
    }

    /// The kind's and the device's names of `dev`, for an error.
    fn names(&self, dev: Dev) -> (String, String) {
        let k = &self.kinds[dev.0];
        (k.name.clone(), k.devices[dev.1].name.clone())
    }
}

/// A device's counters as last probed, and the rate they gave.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: std::time::Instant,
    counters: (u64, u64),
    rate: Option<f64>,
}

/// Shortest time between two probes of a device that make a rate.
const RATE_SPAN: std::time::Duration = std::time::Duration::from_millis(50);

/// Every require block of a process (or of a simulated one): the kinds,
/// the allocation trees, and the threads waiting to enter a block.
#[derive(Debug)]
pub struct Blocks {
    state: Mutex<State>,
    cond: Condvar,
    machine: Machine,
    apply_os: bool,
    /// Set when the runtime is made `'static` (the ledger watcher needs it).
    this: OnceLock<&'static Blocks>,
}

/// The process's blocks ([`Blocks::global`]).
static GLOBAL: OnceLock<&'static Blocks> = OnceLock::new();

/// Runtimes the calling thread has a record in; when the thread ends,
/// each forgets it (and releases whatever it still held, as a child's
/// guard does), so records do not pile up with short-lived threads.
struct ForgetAtExit(std::cell::RefCell<Vec<(&'static Blocks, Tid)>>);

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

fn forget_at_exit(rt: &'static Blocks, tid: Tid) {
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

impl Blocks {
    /// A runtime for `machine` with the built-in kinds over `machine`'s
    /// usable CPUs, each device's whole amount in the process root.
    /// `apply_os` makes scopes change the calling thread's affinity, memory
    /// policy and I/O priority (false for simulations on fixture machines).
    pub fn new(machine: Machine, apply_os: bool) -> Blocks {
        Blocks::with_broker(machine, apply_os, None)
    }

    /// Like [`Blocks::new`], coordinated with other processes through the
    /// broker's ledger at `socket` when one answers there.
    pub fn with_broker(
        machine: Machine,
        apply_os: bool,
        socket: Option<&std::path::Path>,
    ) -> Blocks {
        let kinds = builtin::builtin(&machine, machine.usable());
        let mut st = State::new(socket.and_then(Link::connect));
        for k in kinds {
            add_kind(&mut st, k);
        }
        Blocks {
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
    pub fn global() -> &'static Blocks {
        GLOBAL.get_or_init(|| {
            let m = allot_topo::discover_live().unwrap_or_else(|_| Machine::uniform(1));
            Blocks::with_broker(m, true, Some(&allot_proto::default_socket_path())).into_static()
        })
    }

    /// The process's runtime if something already created it: hooks that
    /// run on every thread creation or wait (the preload shim's) use this
    /// to cost nothing in processes that never entered a scope.
    pub fn global_if_started() -> Option<&'static Blocks> {
        GLOBAL.get().copied()
    }

    /// Leaks the runtime for the life of the process (what a runtime shared
    /// by threads, and one coordinated through a broker, needs).
    pub fn into_static(self) -> &'static Blocks {
        let r: &'static Blocks = Box::leak(Box::new(self));
        let _ = r.this.set(r);
        r
    }

    /// The machine the runtime was built for, whose usable CPUs its `cpu` kind holds.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }

    /// Registers a kind of the program's own with OS operations (Poli-C's
    /// `register_resource`): its devices, each with the minimum left to
    /// threads that asked for nothing and the most it supports, and its
    /// [`KindOps`](kind::KindOps) — `probe`/`rate` (what policies see as
    /// each device's [`DevView::rate`] when `kind.measured`), `restrict`
    /// and `throttle` (applied to a thread's holdings as for the built-in
    /// kinds). Policies and per-device requests use it exactly like those.
    /// With a broker the kind is the machine's (Poli-C registers kinds
    /// through policd): its name and devices, with each device's minimum,
    /// are defined there, every process that registers the same definition
    /// shares the devices, and what one holds exclusively no other holds;
    /// the operations stay in each registering process. Without a broker
    /// the devices are this process's. Errors: a kind of that name exists
    /// ([`RequireError::KindExists`]), or the kind has no operations, no
    /// devices, a device whose maximum is not positive and finite or whose
    /// minimum is outside 0..=max ([`RequireError::BadKind`]), or the
    /// broker refused the definition (another process defined the name with
    /// other devices: [`RequireError::KindRefused`]).
    pub fn register_kind(&self, kind: kind::Kind) -> Result<(), RequireError> {
        let bad = |why: String| Err(RequireError::BadKind(kind.name.clone(), why));
        if kind.ops.is_none() {
            return bad("it has no operations (a counting kind is a virtual kind)".into());
        }
        if kind.devices.is_empty() {
            return bad("it has no devices".into());
        }
        if let Some(d) = kind
            .devices
            .iter()
            .find(|d| !(d.max.is_finite() && d.max > 0.0 && (0.0..=d.max).contains(&d.min)))
        {
            return bad(format!(
                "device {:?} has minimum {} and maximum {} (want 0 <= minimum <= maximum, maximum above 0)",
                d.name, d.min, d.max
            ));
        }
        let mut st = self.lock();
        if st.by_name.contains_key(&kind.name) {
            return Err(RequireError::KindExists(kind.name.clone()));
        }
        // With a broker the kind is the machine's: its devices and their
        // minimums are defined there (the same definition from another
        // process makes it a definer too), so what one process holds
        // exclusively no other holds; the operations stay here.
        let Some(link) = st.link.as_mut() else {
            add_kind_local(&mut st, kind);
            return Ok(());
        };
        let devs = kind
            .devices
            .iter()
            .map(|d| DeviceDef {
                name: d.name.clone(),
                min: d.min,
                max: d.max,
            })
            .collect();
        link.define(&kind.name, devs)
            .map_err(|why| RequireError::KindRefused(kind.name.clone(), why))?;
        add_kind(&mut st, kind);
        Ok(())
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
    pub fn enter(&self, reqs: Vec<Need>) -> Result<Block<'_>, RequireError> {
        self.enter_as(current_tid(), reqs, true, Location::caller())
            .map(|s| s.expect("blocking enter returns a scope"))
    }

    /// Like [`Blocks::enter`] for simulated thread `tid`; with `block` false
    /// it returns `Ok(None)` instead of waiting.
    pub fn enter_as(
        &self,
        tid: Tid,
        reqs: Vec<Need>,
        block: bool,
        site: &'static Location<'static>,
    ) -> Result<Option<Block<'_>>, RequireError> {
        self.enter_inner(tid, &reqs, None, block, site)
    }

    /// Resolves `reqs` once (kinds and devices looked up, amounts checked),
    /// so entering them again costs no lookup and no allocation for them.
    #[track_caller]
    pub fn prepare(&self, reqs: Vec<Need>) -> Result<Prepared, RequireError> {
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
    pub fn enter_prepared(&self, p: &Prepared) -> Result<Block<'_>, RequireError> {
        self.enter_inner(current_tid(), &p.reqs, Some(&p.devs), true, p.site)
            .map(|s| s.expect("blocking enter returns a scope"))
    }

    fn enter_inner(
        &self,
        tid: Tid,
        reqs: &[Need],
        devs: Option<&[Option<Dev>]>,
        block: bool,
        site: &'static Location<'static>,
    ) -> Result<Option<Block<'_>>, RequireError> {
        if tid == current_tid() {
            block::mark_may_hold();
        }
        let deferred = reqs.iter().any(|r| r.timing != Timing::Now);
        // Requests for later (spawn timings) are kept aside; the rest are
        // acquired now. Without deferred requests nothing is copied.
        let (now, mut later, now_devs): (Cow<'_, [Need]>, Vec<Need>, Option<Vec<_>>) = if deferred {
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
        Ok(Some(Block {
            rt: self,
            id,
            tid,
            outcome,
            _not_send: PhantomData,
        }))
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
}

/// Requests resolved once against a runtime ([`Blocks::prepare`]).
#[derive(Debug, Clone)]
pub struct Prepared {
    reqs: Vec<Need>,
    devs: Vec<Option<Dev>>,
    site: &'static Location<'static>,
}

/// An entered `require` block (Poli-C's word; the code it covers is its
/// scope); leaving it (drop) releases what it acquired.
#[derive(Debug)]
pub struct Block<'r> {
    rt: &'r Blocks,
    id: u64,
    tid: Tid,
    outcome: Option<Box<Outcome>>,
    _not_send: PhantomData<*const ()>,
}

impl Block<'_> {
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

impl Drop for Block<'_> {
    fn drop(&mut self) {
        self.rt.exit(self.tid, self.id);
    }
}
