//! The monitor: follows the cell's grant and reports progress (the ARS
//! resource controller, "dynamic run-time parallelism").
//!
//! One small thread per pool (`<name>-monitor`, not pinned) blocks in
//! `Cell::wait_change` — a futex wait on the grant page — so it costs
//! nothing while the grant is stable and reacts within microseconds when
//! it changes. A dedicated thread was chosen over piggy-backing on idle
//! workers because a fully busy pool must still shrink at once, and busy
//! workers should not poll the page.
//!
//! On every new grant it:
//!
//! 1. picks the CPUs to use ([`wanted_cpus`]): all granted CPUs (lent ones
//!    included: they are ours until revoked, and a revocation is handled
//!    like any other change), capped by the grant's `threads` and by the
//!    pool's slot count, owned CPUs before lent ones; a stacked cell
//!    (one sharing the stacked pool with others) starts at the grant's
//!    `home` position, so that the cells sharing the pool pin their
//!    workers to different CPUs instead of all to the pool's first;
//! 2. maps CPUs to worker slots with the pure function [`assign`], which
//!    moves as few workers as possible;
//! 3. stores each changed slot's `target` and wakes that worker (or starts
//!    its thread the first time the slot gets a CPU). The workers do the
//!    rest themselves, between tasks (see `crate::controller`).
//!
//! Every `report_period` (default 100 ms) it calls `Cell::report(busy,
//! wanted, completed)`: `busy` = active workers running a task, `wanted` =
//! busy workers plus workers with queued work plus the backlog (global
//! queue, queues left by retired workers; a simple demand signal, capped at
//! the slot count), `completed` = tasks run so far; then the pool's
//! per-worker statistics summed (`Cell::report_pool_stats`, shown by
//! `allot status`). Errors are ignored (no broker = nothing to tell).
//!
//! A grant is new ([`supersedes`]) when its generation is newer than the
//! one applied last, or when it comes from another *epoch*: a different
//! `(cell, instance)`. Generations only grow within an epoch; when the
//! client library registers the cell again with a broker that lost its
//! journal, the grant moves to a new page whose cell id and broker
//! instance differ and whose generations restart at 1, and a new broker
//! instance may write the same cell id with generations of its own. The
//! monitor looks at the grant after every wait, also when the generation
//! did not change (a new epoch may reuse the old number), so it follows a
//! new epoch within one `MONITOR_SLICE` at worst.
//!
//! The monitor never blocks the pool: it waits in slices of at most
//! `MONITOR_SLICE` so it notices `Pool` being dropped, and is detached at
//! drop (it exits within one slice).

use crate::controller::{Registry, worker_main};
use allot_client::{Cell, Grant};
use allot_topo::CpuSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest a monitor waits before looking at the stop flag.
pub(crate) const MONITOR_SLICE: Duration = Duration::from_millis(50);

/// The CPUs a pool with `slots` slots should use under `g`; empty keeps
/// the current workers (a grant without CPUs is ignored).
pub fn wanted_cpus(g: &Grant, slots: usize) -> CpuSet {
    let mut n = g.cpus.len().min(slots);
    if g.threads > 0 {
        n = n.min(g.threads as usize);
    }
    let owned = g.cpus.difference(&g.lent);
    let start = if g.stacked() { g.home as usize } else { 0 };
    let mut out = take_from(&owned, start, n);
    let more = n - out.len();
    out = out.union(&g.lent.intersection(&g.cpus).take_first(more));
    out
}

/// `n` CPUs of `set` (all of them if it has fewer) in CPU order, starting
/// with its `start`-th (modulo its size) and wrapping around.
fn take_from(set: &CpuSet, start: usize, n: usize) -> CpuSet {
    let len = set.len();
    if n >= len || start.is_multiple_of(len) {
        return set.take_first(n);
    }
    let mut out = CpuSet::new();
    for cpu in set.iter().chain(set.iter()).skip(start % len).take(n) {
        out.insert(cpu);
    }
    out
}

/// What [`assign`] knows about a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SlotView {
    /// CPU assigned now.
    pub target: Option<usize>,
    /// CPU the worker still serves (may differ while it moves).
    pub current: Option<usize>,
    /// Whether the slot's thread exists.
    pub started: bool,
    /// Whether its worker is idle (looking for work, no task running);
    /// meaningless for a slot without a CPU.
    pub idle: bool,
}

/// Maps the CPUs in `want` to slots, moving as few workers as possible.
///
/// Returns one target per slot. Guarantees: targets are distinct, all in
/// `want`, and `min(want.len(), slots)` of them are set. Preference order
/// for each CPU: the slot already assigned it; the slot still running on
/// it; a slot whose CPU was revoked (re-pinned: cheaper than retiring one
/// worker and waking another), busy workers before idle ones; a started
/// dormant slot; any slot.
///
/// Busy workers keep or move, idle ones retire: a busy worker follows a
/// move at its next wait (its stack comes along), but it can retire only
/// when its task is done — until then it holds the revoked CPU and the pool
/// is not resized — while an idle worker retires, or moves, at once.
pub fn assign(slots: &[SlotView], want: &CpuSet) -> Vec<Option<usize>> {
    let mut out: Vec<Option<usize>> = vec![None; slots.len()];
    let mut taken = CpuSet::new();
    // 1. keep
    for (i, s) in slots.iter().enumerate() {
        if let Some(c) = s.target
            && want.contains(c)
            && !taken.contains(c)
        {
            out[i] = Some(c);
            taken.insert(c);
        }
    }
    // 2. give a CPU back to the worker still running there
    for (i, s) in slots.iter().enumerate() {
        if out[i].is_none()
            && let Some(c) = s.current
            && want.contains(c)
            && !taken.contains(c)
        {
            out[i] = Some(c);
            taken.insert(c);
        }
    }
    let mut free = want
        .difference(&taken)
        .iter()
        .collect::<Vec<_>>()
        .into_iter();
    // 3. re-pin workers whose CPU was revoked, busy ones first, 4. started
    // dormant slots, 5. the rest
    let revoked = |busy: bool| {
        (0..slots.len()).filter(move |&i| {
            (slots[i].target.is_some() || slots[i].current.is_some()) && slots[i].idle != busy
        })
    };
    let order = revoked(true)
        .chain(revoked(false))
        .chain((0..slots.len()).filter(|&i| {
            slots[i].target.is_none() && slots[i].current.is_none() && slots[i].started
        }))
        .chain((0..slots.len()).filter(|&i| {
            !slots[i].started && slots[i].target.is_none() && slots[i].current.is_none()
        }));
    for i in order {
        if out[i].is_some() {
            continue;
        }
        match free.next() {
            Some(c) => out[i] = Some(c),
            None => break,
        }
    }
    out
}

fn decode(v: usize) -> Option<usize> {
    v.checked_sub(1)
}

/// Which grant the pool applied: its epoch `(cell, instance)` and its
/// generation within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GrantStamp {
    pub(crate) cell: u64,
    pub(crate) instance: u64,
    pub(crate) generation: u64,
}

impl GrantStamp {
    pub(crate) fn of(g: &Grant) -> GrantStamp {
        GrantStamp {
            cell: g.cell,
            instance: g.instance,
            generation: g.generation,
        }
    }

    fn same_epoch(&self, other: &GrantStamp) -> bool {
        (self.cell, self.instance) == (other.cell, other.instance)
    }
}

/// Whether grant `g` is to be applied after the grant `last` (none yet):
/// it is the first, comes from another epoch (cell id or broker instance
/// differs: generations restarted), or has a newer generation.
pub(crate) fn supersedes(last: Option<GrantStamp>, g: &Grant) -> bool {
    let new = GrantStamp::of(g);
    match last {
        None => true,
        Some(last) => !last.same_epoch(&new) || new.generation > last.generation,
    }
}

/// Applies grant `g` to the pool if it supersedes the one applied last:
/// new targets, wake-ups, thread starts.
pub(crate) fn apply(reg: &Arc<Registry>, g: &Grant) {
    let mut plan = reg.plan.lock().unwrap_or_else(|p| p.into_inner());
    if reg.terminate.load(Ordering::SeqCst) || !supersedes(plan.applied, g) {
        return;
    }
    let stamp = GrantStamp::of(g);
    if !plan.applied.is_some_and(|a| a.same_epoch(&stamp)) {
        plan.settled = 0;
    }
    plan.applied = Some(stamp);
    reg.windows.set(g.window);
    let want = wanted_cpus(g, reg.slots.len());
    if want.is_empty() {
        return;
    }
    let views: Vec<SlotView> = (0..reg.slots.len())
        .map(|i| SlotView {
            target: decode(reg.slot(i).target.load(Ordering::SeqCst)),
            current: decode(reg.slot(i).current.load(Ordering::SeqCst)),
            started: plan.handles[i].is_some(),
            idle: reg.slot(i).idle.load(Ordering::Relaxed),
        })
        .collect();
    // A policy that panics is treated as one that answered nonsense.
    let mut targets = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reg.vp.assign(&views, &want)
    }))
    .unwrap_or_default();
    if !crate::vp::valid(&targets, views.len(), &want) {
        reg.vp_errors.fetch_add(1, Ordering::Relaxed);
        targets = assign(&views, &want);
    }
    for (i, t) in targets.into_iter().enumerate() {
        let enc = t.map_or(0, |c| c + 1);
        if reg.slot(i).target.load(Ordering::SeqCst) == enc {
            continue;
        }
        reg.slot(i).target.store(enc, Ordering::SeqCst);
        if enc != 0 && plan.handles[i].is_none() {
            let r = reg.clone();
            let mut b = std::thread::Builder::new().name(format!("{}-{i}", reg.name));
            if let Some(s) = reg.stack_size {
                b = b.stack_size(s);
            }
            match b.spawn(move || worker_main(r, i)) {
                Ok(h) => plan.handles[i] = Some(h),
                Err(_) => reg.slot(i).target.store(0, Ordering::SeqCst),
            }
        } else {
            reg.sleep.notify_worker(i);
        }
    }
}

/// Sends one progress report and the pool's statistics; errors are
/// ignored.
pub(crate) fn report(reg: &Registry, cell: &Cell) {
    let (busy, wanted, done) = demand(reg);
    if cell.report(busy, wanted, done).is_ok() {
        let _ = cell.report_pool_stats(pool_stats(reg));
    }
}

/// The pool's per-worker statistics summed, as the broker keeps them.
pub(crate) fn pool_stats(reg: &Registry) -> allot_proto::PoolStatsWire {
    let all: Vec<crate::WorkerStats> = reg
        .stats
        .iter()
        .enumerate()
        .map(|(i, c)| c.snapshot(i, None))
        .collect();
    let workers = u32::try_from(reg.info.roster.count()).unwrap_or(u32::MAX);
    crate::WorkerStats::total(&all).to_wire(workers)
}

/// `(busy, wanted, completed)` as the module docs define them.
pub(crate) fn demand(reg: &Registry) -> (u32, u32, u64) {
    let mut busy = 0usize;
    let mut wanted = 0usize;
    let mut done = 0u64;
    for (i, s) in reg.slots.iter().enumerate() {
        done += reg.stats[i].run.load(Ordering::Relaxed);
        let queued = reg.policy.queued(Some(i)) > 0;
        if s.current.load(Ordering::Relaxed) == 0 {
            // A retired worker's queue is stolen from: backlog.
            wanted += queued as usize;
            continue;
        }
        let is_busy = !s.idle.load(Ordering::Relaxed);
        busy += is_busy as usize;
        wanted += (is_busy || queued) as usize;
    }
    wanted += reg.policy.queued(None);
    (busy as u32, wanted.min(reg.slots.len()) as u32, done)
}

/// The monitor thread's body.
pub(crate) fn monitor_main(reg: Arc<Registry>, cell: Cell, mut seen: u64, period: Duration) {
    let mut next_report = Instant::now() + period;
    while !reg.terminate.load(Ordering::SeqCst) {
        let slice = next_report
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), MONITOR_SLICE);
        let g = cell.wait_change(seen, Some(slice));
        // Also without a new generation: a new epoch may reuse the number.
        apply(&reg, &g);
        seen = g.generation;
        if Instant::now() >= next_report {
            report(&reg, &cell);
            next_report = Instant::now() + period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(cpus: &[usize]) -> CpuSet {
        cpus.iter().copied().collect()
    }

    #[test]
    fn keeps_moves_and_retires() {
        let slots = [
            SlotView {
                target: Some(0),
                current: Some(0),
                started: true,
                idle: false,
            },
            SlotView {
                target: Some(1),
                current: Some(1),
                started: true,
                idle: false,
            },
            SlotView::default(),
        ];
        assert_eq!(assign(&slots, &set(&[1])), vec![None, Some(1), None]);
        assert_eq!(assign(&slots, &set(&[1, 2])), vec![Some(2), Some(1), None]);
        assert_eq!(
            assign(&slots, &set(&[0, 1, 2])),
            vec![Some(0), Some(1), Some(2)]
        );
    }

    #[test]
    fn cpu_goes_back_to_worker_still_there() {
        let slots = [
            SlotView {
                target: None,
                current: Some(0),
                started: true,
                idle: false,
            },
            SlotView {
                target: None,
                current: None,
                started: true,
                idle: false,
            },
        ];
        assert_eq!(assign(&slots, &set(&[0])), vec![Some(0), None]);
    }

    #[test]
    fn busy_workers_move_idle_ones_retire() {
        let on = |cpu, idle| SlotView {
            target: Some(cpu),
            current: Some(cpu),
            started: true,
            idle,
        };
        // Both CPUs revoked, one new CPU: the busy worker gets it,
        // whichever slot it is in.
        assert_eq!(
            assign(&[on(0, true), on(1, false)], &set(&[2])),
            vec![None, Some(2)]
        );
        assert_eq!(
            assign(&[on(0, false), on(1, true)], &set(&[2])),
            vec![Some(2), None]
        );
        // A kept CPU stays with its worker, idle or not.
        assert_eq!(
            assign(&[on(0, true), on(1, false)], &set(&[0])),
            vec![Some(0), None]
        );
    }

    fn grant(cell: u64, instance: u64, generation: u64) -> Grant {
        Grant {
            cell,
            instance,
            generation,
            ..Grant::default()
        }
    }

    #[test]
    fn newer_generations_and_new_epochs_supersede() {
        let last = Some(GrantStamp::of(&grant(7, 3, 40)));
        assert!(supersedes(None, &grant(7, 3, 1)), "the first grant");
        assert!(supersedes(last, &grant(7, 3, 41)));
        assert!(!supersedes(last, &grant(7, 3, 40)), "seen already");
        assert!(!supersedes(last, &grant(7, 3, 12)), "stale, same epoch");
        // The client re-registered with a broker that lost its journal: a
        // new page, new cell id and instance, generations from 1.
        assert!(supersedes(last, &grant(9, 4, 1)));
        // A new broker instance writing the same cell id, with its own
        // (lower or equal) generations.
        assert!(supersedes(last, &grant(7, 4, 2)));
        assert!(supersedes(last, &grant(7, 4, 40)));
        // A rejoined broker keeps the cell id and continues generations.
        assert!(supersedes(last, &grant(7, 4, 41)));
        // Another cell id under the same instance.
        assert!(supersedes(last, &grant(8, 3, 5)));
    }

    #[test]
    fn wanted_prefers_owned_and_caps() {
        let g = Grant {
            cpus: set(&[0, 1, 2, 3]),
            lent: set(&[0]),
            threads: 2,
            ..Grant::default()
        };
        assert_eq!(wanted_cpus(&g, 8), set(&[1, 2]));
        let g = Grant {
            cpus: set(&[0, 1]),
            lent: set(&[1]),
            threads: 0,
            ..Grant::default()
        };
        assert_eq!(wanted_cpus(&g, 8), set(&[0, 1]));
        assert_eq!(wanted_cpus(&g, 1), set(&[0]));
    }

    /// Four stacked cells of one thread each on a two-CPU pool pin their
    /// workers two per CPU; a cell with two threads wraps around.
    #[test]
    fn stacked_cells_spread_from_their_home() {
        let stacked = |home, threads| Grant {
            cpus: set(&[4, 5]),
            threads,
            flags: allot_client::FLAG_STACKED,
            home,
            ..Grant::default()
        };
        let picks: Vec<CpuSet> = (0..4).map(|h| wanted_cpus(&stacked(h % 2, 1), 8)).collect();
        assert_eq!(picks, [set(&[4]), set(&[5]), set(&[4]), set(&[5])]);
        assert_eq!(wanted_cpus(&stacked(1, 2), 8), set(&[4, 5]));
        let three = Grant {
            cpus: set(&[0, 1, 2]),
            ..stacked(2, 2)
        };
        assert_eq!(wanted_cpus(&three, 8), set(&[2, 0]));
        // A cell that is not stacked ignores `home`.
        let own = Grant {
            flags: 0,
            ..stacked(1, 1)
        };
        assert_eq!(wanted_cpus(&own, 8), set(&[4]));
    }

    proptest! {
        #[test]
        fn assign_invariants(
            raw in proptest::collection::vec((proptest::option::of(0usize..8), proptest::option::of(0usize..8), any::<bool>(), any::<bool>()), 1..8),
            want in proptest::collection::btree_set(0usize..8, 0..8),
        ) {
            // Make current targets distinct, as the pool keeps them.
            let mut seen = CpuSet::new();
            let slots: Vec<SlotView> = raw.iter().map(|&(t, c, s, idle)| {
                let t = t.filter(|&t| seen.insert(t));
                SlotView { target: t, current: c, started: s || t.is_some(), idle }
            }).collect();
            let want: CpuSet = want.into_iter().collect();
            let out = assign(&slots, &want);
            let got: Vec<usize> = out.iter().flatten().copied().collect();
            let distinct: CpuSet = got.iter().copied().collect();
            prop_assert_eq!(distinct.len(), got.len());
            prop_assert!(distinct.is_subset(&want));
            prop_assert_eq!(got.len(), want.len().min(slots.len()));
            for (s, o) in slots.iter().zip(&out) {
                if let Some(t) = s.target && want.contains(t) {
                    prop_assert_eq!(*o, Some(t));
                }
            }
            // Among workers that lost their CPU, an idle one gets a new CPU
            // only if no busy one has to retire.
            let kept = |s: &SlotView| [s.target, s.current].iter().flatten().any(|&c| want.contains(c));
            let moving = |idle: bool| slots.iter().zip(&out).filter(move |(s, _)| {
                (s.target.is_some() || s.current.is_some()) && !kept(s) && s.idle == idle
            });
            if moving(true).any(|(_, o)| o.is_some()) {
                prop_assert!(moving(false).all(|(_, o)| o.is_some()));
            }
        }
    }
}
