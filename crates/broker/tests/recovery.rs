//! What the broker promises across changes and restarts: grants never
//! overlap while CPUs move, cells a lost journal forgot are recovered and
//! their ids never reused, ended cells' backend state is removed even when
//! the kernel is busy for a moment. State-machine level.

mod common;

use allot_broker::core::Effect;
use allot_enforce::Call;
use allot_enforce::os::FakeOs;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::CellSpec;
use allot_topo::CpuSet;
use common::*;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Replays the backend's calls and fails at the first moment two cells
/// were confined to overlapping CPUs.
fn assert_never_overlapping(calls: &[Call]) {
    let mut applied: BTreeMap<u64, CpuSet> = BTreeMap::new();
    for (i, c) in calls.iter().enumerate() {
        match c {
            Call::Apply(id, a) => {
                applied.insert(*id, a.cpus);
                for (other, cpus) in &applied {
                    assert!(
                        other == id || !cpus.intersects(&a.cpus),
                        "call {i}: cell {id} given {} while cell {other} still has {cpus}\n{calls:#?}",
                        a.cpus
                    );
                }
            }
            Call::Remove(id) => {
                applied.remove(id);
            }
            _ => {}
        }
    }
}

#[test]
fn cells_shrink_before_others_grow() {
    let mut w = world(8);
    let ids: Vec<u64> = (0..3)
        .map(|i| {
            proc_of(&w, 100 + i, 0);
            page(register(
                &mut w,
                ROOT,
                "c",
                CellSpec::default(),
                vec![100 + i],
                false,
            ))
            .0
        })
        .collect();
    // CPUs move back and forth between the cells as their demands change.
    let mut x: u64 = 12345;
    for _ in 0..300 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let cell = ids[(x >> 33) as usize % ids.len()];
        let wanted = 1 + (x >> 40) as u32 % 8;
        w.handle(
            7,
            ROOT,
            Request::Report {
                cell,
                busy: wanted,
                wanted,
                progress: 0,
            },
            None,
        );
    }
    let calls = w.dry.calls();
    let applies = calls
        .iter()
        .filter(|c| matches!(c, Call::Apply(..)))
        .count();
    assert!(applies > 100, "the scenario moves CPUs ({applies} applies)");
    assert_never_overlapping(&calls);
}

#[test]
fn the_overlap_check_catches_a_grow_before_a_shrink() {
    use allot_enforce::Applied;
    let a = |cpus: &str| Applied {
        cpus: CpuSet::parse_list(cpus).unwrap(),
        weight: 1,
        bandwidth: None,
    };
    let bad = [
        Call::Apply(1, a("0-3")),
        Call::Apply(2, a("4-7")),
        Call::Apply(2, a("3-7")),
    ];
    assert!(std::panic::catch_unwind(|| assert_never_overlapping(&bad)).is_err());
    let good = [
        Call::Apply(1, a("0-3")),
        Call::Apply(2, a("4-7")),
        Call::Apply(1, a("0-2")),
        Call::Apply(2, a("3-7")),
    ];
    assert_never_overlapping(&good);
}

#[test]
fn a_cell_the_journal_lost_is_recovered_and_its_id_never_reused() {
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    os.spawn(500, 0, 1, &CpuSet::first_n(4));
    os.set_uid(500, 1000);
    os.spawn(600, 0, 1, &CpuSet::first_n(4));
    let dry = allot_enforce::DryRun::new();
    // cell-5 holds a process, cell-6 is empty; the journal knows neither
    // (it was on a full disk, or deleted).
    dry.plant(5, &[500]);
    dry.plant(6, &[]);
    let (mut w, effects) = world_with_backend(4, dir, os.clone(), dry.clone());
    assert!(effects.iter().any(|e| matches!(e, Effect::Watch(500))));
    let st = w.core.status(ROOT);
    assert_eq!(st.cells.len(), 1);
    assert_eq!(st.cells[0].id, 5);
    assert_eq!(st.cells[0].name, "recovered-5");
    assert_eq!(st.cells[0].uid, 1000, "owned by its process's user");
    assert_eq!(dry.held(), vec![5], "the empty one was removed");
    // A new cell gets an id above both.
    let (id, _, _p) = page(register(
        &mut w,
        ROOT,
        "new",
        CellSpec::default(),
        vec![600],
        false,
    ));
    assert_eq!(id, 7);
    // Its process rejoins with the secret it had: the first member to come
    // back claims the cell; others cannot.
    let e = w.handle(9, BOB, Request::Rejoin { cell: 5, token: 99 }, None);
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::PermissionDenied,
            ..
        }
    ));
    let member = peer(500, 1000);
    let e = w.handle(9, member, Request::Rejoin { cell: 5, token: 77 }, None);
    assert!(
        matches!(
            reply(&e),
            Reply::Registered {
                cell: 5,
                token: 77,
                ..
            }
        ),
        "{:?}",
        reply(&e)
    );
    let e = w.handle(9, ALICE, Request::Rejoin { cell: 5, token: 78 }, None);
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::PermissionDenied,
            ..
        }
    ));
}

#[test]
fn a_busy_cgroup_is_removed_on_a_later_tick() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let (id, _, _p) = page(register(
        &mut w,
        ROOT,
        "short",
        CellSpec::default(),
        vec![100],
        false,
    ));
    // The kernel refuses the removal twice (its last task is still exiting).
    w.dry.fail_removals(2);
    w.os.exit(100);
    w.exited(100);
    assert_eq!(w.core.pending_removals(), vec![id]);
    assert!(w.dry.held().contains(&id));
    let t = Instant::now();
    w.tick(t + Duration::from_millis(100));
    assert_eq!(w.core.pending_removals(), vec![id], "refused again");
    w.tick(t + Duration::from_millis(200));
    assert!(w.core.pending_removals().is_empty());
    assert!(!w.dry.held().contains(&id), "removed");
}

#[test]
fn a_removal_the_kernel_keeps_refusing_is_given_up_after_a_while() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let (id, _, _p) = page(register(
        &mut w,
        ROOT,
        "stuck",
        CellSpec::default(),
        vec![100],
        false,
    ));
    w.dry.fail_removals(u32::MAX);
    w.os.exit(100);
    w.exited(100);
    let t = Instant::now();
    w.tick(t + Duration::from_secs(1));
    assert_eq!(w.core.pending_removals(), vec![id]);
    w.tick(t + allot_broker::core::REMOVE_RETRY_FOR + Duration::from_secs(1));
    assert!(w.core.pending_removals().is_empty(), "not retried forever");
}

#[test]
fn generations_keep_growing_across_a_restart_when_only_shares_changed() {
    // Stacked cells' shares change with every newcomer; the journal does
    // not record those, so it holds an older generation than the pages.
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    for pid in 100..106 {
        os.spawn(pid, 0, 1, &CpuSet::first_n(2));
    }
    let (mut w, _) = world_with(2, dir, os.clone());
    let (a, token, pa) = page(register(
        &mut w,
        ROOT,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    for pid in 101..106 {
        let _ = page(register(
            &mut w,
            ROOT,
            "b",
            CellSpec::default(),
            vec![pid],
            false,
        ));
    }
    let seen = grant(&pa).generation;
    assert!(seen >= 3, "a's share changed with each newcomer ({seen})");
    let World { core, _dir, .. } = w;
    drop(core);
    let (mut w2, _) = world_with(2, _dir, os);
    let dup = rustix::io::fcntl_dupfd_cloexec(pa.fd(), 0).unwrap();
    let e = w2.handle(8, ROOT, Request::Rejoin { cell: a, token }, Some(dup));
    match reply(&e) {
        Reply::Registered { generation, .. } => {
            assert!(*generation > seen, "{generation} after {seen}")
        }
        other => panic!("{other:?}"),
    }
    assert!(grant(&pa).generation > seen, "the page never goes back");
}

/// A broker killed between a cpuset write and its journal line leaves the
/// kernel ahead of the journal. The next broker plans from what the kernel
/// confines each cell to, so it rewrites a cell whose grant only the
/// journal thinks unchanged, and never grows another cell into CPUs that
/// cell still holds.
#[test]
fn a_restarted_broker_plans_from_the_kernels_cpusets_not_a_stale_journal() {
    use allot_enforce::{Applied, Enforcer};
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    os.spawn(100, 0, 1, &CpuSet::first_n(4));
    let dry = allot_enforce::DryRun::new();
    let (mut w, _) = world_with_backend(4, dir, os.clone(), dry.clone());
    let exclusive = CellSpec {
        min: 1,
        max: 1,
        exclusive: true,
        ..Default::default()
    };
    let (id, _, p) = page(register(&mut w, ROOT, "x", exclusive, vec![100], false));
    let journaled = grant(&p).cpus;
    // The kernel moved on without the journal (the broker died in between).
    let other = CpuSet::first_n(4)
        .difference(&journaled)
        .iter()
        .next()
        .unwrap();
    let ahead = CpuSet::parse_list(&other.to_string()).unwrap();
    let mut kernel = dry.clone();
    kernel
        .apply(
            id,
            &Applied {
                cpus: ahead,
                weight: 1,
                bandwidth: None,
            },
        )
        .unwrap();
    let World { core, _dir, .. } = w;
    drop(core);
    let (w2, _) = world_with_backend(4, _dir, os, dry.clone());
    // The new broker wrote the cell's cpuset again (or kept the kernel's),
    // so what it plans and what the kernel enforces agree.
    let st = w2.core.status(ROOT);
    let planned = CpuSet::parse_list(&st.cells[0].cpus).unwrap();
    let last = dry
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            allot_enforce::Call::Apply(i, a) if i == id => Some(a.cpus),
            _ => None,
        })
        .unwrap();
    assert_eq!(last, planned, "the kernel holds what the broker believes");
}
