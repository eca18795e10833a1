//! The virtual-processor policy decides which worker serves which CPU:
//! `InOrder` keeps slot order, the default moves as few workers as it can,
//! and a policy that answers nonsense is overruled without losing a CPU.

use allot_client::{Cell, GrantWriter};
use allot_runtime::{InOrder, MoveFewest, Pool, SlotView, VpPolicy};
use allot_topo::CpuSet;
use std::time::Duration;

/// Slot → CPU served, once the pool applied `generation`.
fn placement(pool: &Pool, generation: u64) -> Vec<Option<usize>> {
    assert!(
        pool.wait_resized(generation, Duration::from_secs(10)),
        "generation {generation} not applied"
    );
    pool.worker_stats().iter().map(|s| s.cpu).collect()
}

fn pool_on_two(vp: impl VpPolicy + 'static) -> Option<(Pool, GrantWriter, [usize; 2])> {
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    if !allot_testkit::prerequisite(allowed.len() >= 2, "needs 2 CPUs") {
        return None;
    }
    let cpus: Vec<usize> = allowed.iter().take(2).collect();
    let (cell, writer) = Cell::manual(cpus.iter().copied().collect()).expect("manual cell");
    let pool = Pool::builder()
        .cell(cell)
        .max_workers(2)
        .vp_policy(vp)
        .build()
        .expect("pool");
    Some((pool, writer, [cpus[0], cpus[1]]))
}

#[test]
fn in_order_keeps_slot_order_and_move_fewest_keeps_workers_in_place() {
    for (name, expect_after) in [("in-order", 0usize), ("move-fewest", 1usize)] {
        let vp: Box<dyn VpPolicy> = match name {
            "in-order" => Box::new(InOrder),
            _ => Box::new(MoveFewest),
        };
        assert_eq!(vp.name(), name);
        let Some((pool, mut writer, [a, b])) = pool_on_two(vp) else {
            return;
        };
        let g = writer.publish([a, b].into_iter().collect(), CpuSet::new());
        assert_eq!(placement(&pool, g), vec![Some(a), Some(b)], "{name}");
        // Only the second CPU stays: in-order moves slot 0 onto it, the
        // default keeps slot 1 where it is.
        let g = writer.publish(std::iter::once(b).collect(), CpuSet::new());
        let after = placement(&pool, g);
        assert_eq!(after[expect_after], Some(b), "{name}: {after:?}");
        assert_eq!(after[1 - expect_after], None, "{name}: {after:?}");
        assert_eq!(pool.vp_policy_errors(), 0);
        // Work still runs.
        assert_eq!(pool.install(|| pool.join(|| 1, || 2)), (1, 2));
    }
}

/// A policy that answers nothing at all, or panics.
#[derive(Debug)]
struct Broken {
    panics: bool,
}

impl VpPolicy for Broken {
    fn assign(&self, _: &[SlotView], _: &CpuSet) -> Vec<Option<usize>> {
        assert!(!self.panics, "a VP policy that panics");
        Vec::new()
    }

    fn name(&self) -> &str {
        "broken"
    }
}

#[test]
fn a_malformed_assignment_or_a_panic_is_overruled_and_counted() {
    for panics in [false, true] {
        overruled(Broken { panics });
    }
}

fn overruled(vp: Broken) {
    let Some((pool, mut writer, [a, b])) = pool_on_two(vp) else {
        return;
    };
    let g = writer.publish([a, b].into_iter().collect(), CpuSet::new());
    let placed = placement(&pool, g);
    let mut served: Vec<usize> = placed.iter().flatten().copied().collect();
    served.sort();
    assert_eq!(served, vec![a.min(b), a.max(b)], "{placed:?}");
    assert!(pool.vp_policy_errors() >= 1);
    assert_eq!(pool.install(|| pool.join(|| 1, || 2)), (1, 2));
}
