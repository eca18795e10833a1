//! The virtual-processor policy: which worker slot serves which granted CPU
//! after the grant changes (Sting's virtual processor policy manager; the
//! thread policy in `policy/` decides which *task* runs, this decides
//! which *worker* runs where).
//!
//! The monitor calls [`VpPolicy::assign`] once per new grant with a view of
//! every slot and the CPUs the pool wants ([`wanted_cpus`](crate::wanted_cpus)),
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

use crate::monitor::{SlotView, assign};
use allot_topo::CpuSet;
use std::fmt::Debug;

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
/// ones first), then wake dormant slots ([`assign`](crate::assign)).
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
}
