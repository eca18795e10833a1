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
//! 1. picks the CPUs to use ([`wanted_cpus`], in `crate::vp` with the
//!    other pure mappings): all granted CPUs (lent ones
//!    included: they are ours until revoked, and a revocation is handled
//!    like any other change), capped by the grant's `threads` and by the
//!    pool's slot count, owned CPUs before lent ones; a stacked cell
//!    (one sharing the stacked pool with others) starts at the grant's
//!    `home` position, so that the cells sharing the pool pin their
//!    workers to different CPUs instead of all to the pool's first;
//! 2. maps CPUs to worker slots with the pool's [`VpPolicy`]
//!    (by default the pure function [`assign`], which moves as few workers
//!    as possible);
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

use crate::controller::worker_main;
use crate::registry::{GrantStamp, Registry, supersedes};
use crate::source::GrantSource;
use crate::vp::{SlotView, assign, valid, wanted_cpus};
use allot_proto::Grant;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Longest a monitor waits before looking at the stop flag.
pub(crate) const MONITOR_SLICE: Duration = Duration::from_millis(50);

fn decode(v: usize) -> Option<usize> {
    v.checked_sub(1)
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
            idle: reg.info.roster.is_idle(i),
        })
        .collect();
    // A policy that panics is treated as one that answered nonsense.
    let mut targets = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        reg.vp.assign(&views, &want)
    }))
    .unwrap_or_default();
    if !valid(&targets, views.len(), &want) {
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
pub(crate) fn report(reg: &Registry, source: &dyn GrantSource) {
    let (busy, wanted, done) = demand(reg);
    source.report(busy, wanted, done, pool_stats(reg));
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
        let is_busy = !reg.info.roster.is_idle(i);
        busy += is_busy as usize;
        wanted += (is_busy || queued) as usize;
    }
    wanted += reg.policy.queued(None);
    (busy as u32, wanted.min(reg.slots.len()) as u32, done)
}

/// The monitor thread's body.
pub(crate) fn monitor_main(
    reg: Arc<Registry>,
    source: Arc<dyn GrantSource>,
    mut seen: u64,
    period: Duration,
) {
    let mut next_report = Instant::now() + period;
    while !reg.terminate.load(Ordering::SeqCst) {
        let slice = next_report
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), MONITOR_SLICE);
        let g = source.wait_change(seen, Some(slice));
        // Also without a new generation: a new epoch may reuse the number.
        apply(&reg, &g);
        seen = g.generation;
        if Instant::now() >= next_report {
            report(&reg, &*source);
            next_report = Instant::now() + period;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
