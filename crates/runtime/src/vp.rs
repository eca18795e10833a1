//! The virtual-processor policy: which worker slot serves which granted CPU
//! after the grant changes (Sting's virtual processor policy manager; the
//! thread policy in `policy/` decides which *task* runs, this decides
//! which *worker* runs where).
//!
//! The monitor calls [`VpPolicy::assign`] once per new grant with a view of
//! every slot and the CPUs the pool wants ([`wanted_cpus`]),
//! and checks the answer before using it ([`valid`]): a policy that returns
//! a malformed assignment (or panics) is not trusted for that grant — the default
//! policy's answer is used instead and [`Pool::vp_policy_errors`](crate::Pool::vp_policy_errors)
//! counts it — so a custom policy can cost placement quality but never a
//! CPU or a task.
//!
//! # Contract of an assignment
//!
//! One entry per slot; the set entries are distinct, all in `want`, and
//! there are exactly `min(want.len(), slots.len())` of them.
//!
//! Shipped: [`MoveFewest`] (the default: keep workers where they are, move
//! as few as possible) and [`InOrder`] (slot `i` serves the `i`-th wanted
//! CPU: a fixed worker-to-CPU order, for programs that index data by worker,
//! at the price of moving more workers when the grant changes).

use allot_proto::Grant;
use allot_topo::CpuSet;
use std::fmt::Debug;

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

/// Decides which slot serves which CPU (see the module docs for the
/// contract every answer must keep).
pub trait VpPolicy: Send + Sync + Debug {
    /// One target CPU (or none) per slot, for the CPUs in `want`.
    fn assign(&self, slots: &[SlotView], want: &CpuSet) -> Vec<Option<usize>>;

    /// A short name, for diagnostics.
    fn name(&self) -> &str;
}

impl<P: VpPolicy + ?Sized> VpPolicy for Box<P> {
    fn assign(&self, slots: &[SlotView], want: &CpuSet) -> Vec<Option<usize>> {
        (**self).assign(slots, want)
    }

    fn name(&self) -> &str {
        (**self).name()
    }
}

/// The default: keep every worker that can stay, give a CPU back to the
/// worker still running on it, re-pin workers whose CPU was revoked (busy
/// ones first), then wake dormant slots ([`assign`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct MoveFewest;

impl VpPolicy for MoveFewest {
    fn assign(&self, slots: &[SlotView], want: &CpuSet) -> Vec<Option<usize>> {
        assign(slots, want)
    }

    fn name(&self) -> &str {
        "move-fewest"
    }
}

/// Slot `i` serves the `i`-th CPU of `want` in CPU order; slots beyond
/// `want` have none.
#[derive(Debug, Clone, Copy, Default)]
pub struct InOrder;

impl VpPolicy for InOrder {
    fn assign(&self, slots: &[SlotView], want: &CpuSet) -> Vec<Option<usize>> {
        let mut cpus = want.iter();
        slots.iter().map(|_| cpus.next()).collect()
    }

    fn name(&self) -> &str {
        "in-order"
    }
}

/// The shipped policies' names, as [`by_name`] takes them.
pub const NAMES: [&str; 2] = ["move-fewest", "in-order"];

/// A shipped policy by its name (`move-fewest`, `in-order`; case and
/// surrounding blanks ignored).
pub fn by_name(name: &str) -> Result<Box<dyn VpPolicy>, String> {
    match name.trim().to_ascii_lowercase().as_str() {
        "move-fewest" => Ok(Box::new(MoveFewest)),
        "in-order" => Ok(Box::new(InOrder)),
        other => Err(format!(
            "unknown virtual-processor policy {other:?}; known: {}",
            NAMES.join(", ")
        )),
    }
}

/// Whether `out` is a valid assignment of `want` to `slots` slots (the
/// contract in the module docs).
pub fn valid(out: &[Option<usize>], slots: usize, want: &CpuSet) -> bool {
    if out.len() != slots {
        return false;
    }
    let mut seen = CpuSet::new();
    for &c in out.iter().flatten() {
        if !want.contains(c) || seen.contains(c) {
            return false;
        }
        seen.insert(c);
    }
    seen.len() == want.len().min(slots)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(c: &[usize]) -> CpuSet {
        c.iter().copied().collect()
    }

    #[test]
    fn in_order_maps_slots_to_cpus_in_order() {
        let slots = vec![SlotView::default(); 3];
        assert_eq!(
            InOrder.assign(&slots, &set(&[5, 2])),
            vec![Some(2), Some(5), None]
        );
        assert_eq!(InOrder.assign(&slots[..1], &set(&[5, 2])), vec![Some(2)]);
    }

    #[test]
    fn policies_by_name() {
        for n in NAMES {
            assert_eq!(by_name(n).unwrap().name(), n);
        }
        assert_eq!(by_name(" In-Order ").unwrap().name(), "in-order");
        let e = by_name("round-robin").unwrap_err();
        assert!(e.contains("move-fewest, in-order"), "{e}");
    }

    #[test]
    fn malformed_assignments_are_invalid() {
        let want = set(&[0, 1]);
        assert!(valid(&[Some(0), Some(1)], 2, &want));
        assert!(!valid(&[Some(0)], 2, &want), "one entry short");
        assert!(!valid(&[Some(0), Some(0)], 2, &want), "a CPU twice");
        assert!(!valid(&[Some(0), Some(7)], 2, &want), "a CPU not wanted");
        assert!(!valid(&[Some(0), None], 2, &want), "a wanted CPU unserved");
        assert!(valid(&[Some(1), None, None], 3, &set(&[1])));
    }

    proptest! {
        /// Both shipped policies keep the contract for any slots and grant.
        #[test]
        fn shipped_policies_keep_the_contract(
            raw in proptest::collection::vec((0usize..10, 0usize..10, any::<bool>(), any::<bool>()), 1..12),
            want in proptest::collection::btree_set(0usize..10, 1..10),
        ) {
            let want: CpuSet = want.into_iter().collect();
            let slots: Vec<SlotView> = raw.iter().map(|&(t, c, started, idle)| SlotView {
                target: (t < 8).then_some(t),
                current: (c < 8).then_some(c),
                started,
                idle,
            }).collect();
            for p in [&MoveFewest as &dyn VpPolicy, &InOrder] {
                let out = p.assign(&slots, &want);
                prop_assert!(valid(&out, slots.len(), &want), "{}: {out:?}", p.name());
            }
        }
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
            flags: allot_proto::FLAG_STACKED,
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
