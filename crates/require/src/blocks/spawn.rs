//! Spawn points: what a new thread inherits from the scopes of the thread
//! that creates it, and the spawn-timed requests (`BeforeSpawn`,
//! `AfterSpawn`, `ForChild`, `ForDescendants`) made around it. See the
//! parent module for the protocol.

use super::*;

impl Blocks {
    /// Before the calling thread creates a thread: runs the pending
    /// `BeforeSpawn` requests (see [`Blocks::spawn_done`] for which scopes)
    /// and returns what the child inherits (`None` if the thread is in no
    /// scope and inherits nothing). The child is attached to the calling
    /// thread's allocations *now*: it shares what the parent used at this
    /// point, whatever the parent does before the child runs (an
    /// `AfterSpawn` request, a nested scope, leaving the scope). Hand the
    /// context to [`Blocks::child_start`] in the child, or to
    /// [`Blocks::spawn_cancel`] if the thread could not be created.
    pub fn spawn_prepare(&self) -> Option<SpawnCtx> {
        let tid = current_tid();
        let mut st = self.lock();
        let t = st.threads.get(&tid)?;
        if t.scopes.is_empty() && t.inherited.is_empty() {
            return None;
        }
        st = self.run_spawn_timed(st, tid, false);
        // The thread now shares its allocation with a thread of its own:
        // their team is placed, this thread first, before the child
        // inherits its mask.
        let t = st.threads.get_mut(&tid)?;
        t.children += 1;
        if t.children == 1 && t.parent.is_none() {
            self.apply(&mut st, tid);
        }
        let t = st.threads.get(&tid)?;
        // The child makes these when it starts: they are immediate there.
        let now = |r: &Need| r.clone().when(Timing::Now);
        let mut for_child: Vec<Need> = t.inherited.clone();
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
            parent: tid,
            pending,
            for_child,
            descendants,
            release_on: block::releasing(),
        })
    }

    /// The thread `ctx` was prepared for was not created: drops what was
    /// set aside for it.
    pub fn spawn_cancel(&self, ctx: SpawnCtx) {
        let mut st = self.lock();
        team_left(&mut st, ctx.parent);
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
    /// [`Blocks::spawn_done`]). Errors leave the requests unmade: a spawn
    /// point has no one to report them to.
    pub(super) fn run_spawn_timed<'s>(
        &'s self,
        mut st: Locked<'s>,
        tid: Tid,
        after: bool,
    ) -> Locked<'s> {
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
    /// called [`Blocks::spawn_prepare`], then makes its
    /// `ForChild`/`ForDescendants` requests. Returns the guard that releases
    /// everything when the thread ends.
    pub fn child_start(&self, ctx: SpawnCtx) -> ChildGuard<'_> {
        block::mark_may_hold();
        block::release_on(ctx.release_on);
        let tid = current_tid();
        let mut st = self.lock();
        st.trees.spawn(ctx.pending, tid);
        st.trees.thread_exit(ctx.pending);
        st = self.retake(st, tid);
        let t = st.threads.entry(tid).or_default();
        t.inherited = ctx.descendants;
        t.parent = Some(ctx.parent);
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

    pub(super) fn thread_exit(&self, tid: Tid) {
        let mut st = self.lock();
        st.trees.thread_exit(tid);
        let freed: Vec<(KindId, usize)> = st
            .threads
            .get(&tid)
            .map(|t| t.placed.iter().map(|(&k, &d)| (k, d)).collect())
            .unwrap_or_default();
        place::forget(&mut st, tid);
        for (k, d) in freed {
            self.rebalance(&mut st, k, d);
        }
        if let Some(parent) = st.threads.remove(&tid).and_then(|t| t.parent) {
            team_left(&mut st, parent);
        }
        give_back(&mut st);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }
}

/// What a spawned thread inherits.
#[derive(Debug)]
pub struct SpawnCtx {
    /// The spawning thread.
    parent: Tid,
    /// The dormant stand-in that holds the child's share until it starts.
    pending: Tid,
    for_child: Vec<Need>,
    descendants: Vec<Need>,
    /// The spawning thread's choice of waits that give back.
    release_on: block::Waits,
}

impl Blocks {
    /// `tid`, placed in a team, begins a wait that gave its allocation
    /// back: its device is its teammates' meanwhile (Poli-C §2.3, the
    /// threads of a block share its CPUs). Where a teammate would move onto
    /// it had `tid` ended ([`place::rebalance`]: a device two threads more
    /// loaded), the placement is let go and the move made; `tid` is placed
    /// again when it retakes ([`Blocks::unblock_current`]). Where nothing
    /// would move, the placement stays, and the wait costs no system call.
    pub(super) fn lend_placement(&self, st: &mut State, tid: Tid) {
        let placed: Vec<(KindId, usize)> = match st.threads.get(&tid) {
            Some(t) if t.in_team() => t.placed.iter().map(|(&k, &d)| (k, d)).collect(),
            _ => return,
        };
        for (k, d) in placed {
            place::set((&mut st.threads, &mut st.placed_on), tid, k, None);
            if place::rebalance(&st.threads, &st.placed_on, k, d).is_some() {
                self.rebalance(st, k, d);
                if let Some(t) = st.threads.get_mut(&tid) {
                    t.lent = true;
                    // Its affinity is still the device it let go, which
                    // what it had applied no longer says: forgotten, so
                    // that retaking applies again, whether its team is
                    // still there (a device again) or ended while it
                    // waited (its whole allocation).
                    t.applied.remove(&k);
                }
            } else {
                place::set((&mut st.threads, &mut st.placed_on), tid, k, Some(d));
            }
        }
    }

    /// A placed thread left device `freed` of kind `k`: moves a teammate
    /// there if the spread is uneven now ([`place::rebalance`]). A move the
    /// OS refuses is not made (the counts stay true).
    fn rebalance(&self, st: &mut State, k: KindId, freed: usize) {
        let Some((mover, _)) = place::rebalance(&st.threads, &st.placed_on, k, freed) else {
            return;
        };
        if self.apply_os {
            let Some(ops) = st.kinds[k].ops.clone() else {
                return;
            };
            let Some(held) = st.threads.get(&mover).and_then(|t| t.applied.get(&k)) else {
                return;
            };
            let mut one = vec![Some(0.0); held.len()];
            one[freed] = held[freed];
            if ops.restrict_other(mover, &one).is_err() {
                return; // it ended meanwhile, or the kind cannot move others
            }
        }
        place::set((&mut st.threads, &mut st.placed_on), mover, k, Some(freed));
    }
}

/// A thread `parent` spawned has ended (or was never created): one team
/// member fewer. The parent widens back to its whole allocation the next
/// time it applies it ([`Blocks::unblock_current`] after a join does).
fn team_left(st: &mut State, parent: Tid) {
    if let Some(p) = st.threads.get_mut(&parent) {
        p.children = p.children.saturating_sub(1);
    }
}

/// Stand-ins for children not started yet have ids with the top bit set
/// (kernel thread ids never do).
const PENDING_CHILD: Tid = 1 << 63;
static NEXT_PENDING: AtomicU64 = AtomicU64::new(0);

/// Held by a spawned thread while it runs.
#[derive(Debug)]
pub struct ChildGuard<'r> {
    rt: &'r Blocks,
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
    let rt = Blocks::global();
    let ctx = rt.spawn_prepare();
    let h = std::thread::spawn(move || {
        let _g = ctx.map(|c| rt.child_start(c));
        f()
    });
    rt.spawn_done();
    h
}

/// Runs `f` (a blocking call) with the calling thread's allocations given
/// back meanwhile, whatever kind of wait it is: the program's own
/// decision, beside the shim's per-kind rule ([`crate::release_on`]).
pub fn blocking<R>(f: impl FnOnce() -> R) -> R {
    let rt = Blocks::global();
    rt.block_current();
    let r = f();
    rt.unblock_current();
    r
}
