//! The broker's state machine with a fake process table and the dry-run
//! backend: admission, queueing, permissions, reclaim, restart.

mod common;

use allot_broker::core::Effect;
use allot_enforce::Call;
use allot_enforce::os::{FakeOs, Os};
use allot_proto::Grant;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::CellSpec;
use allot_topo::CpuSet;
use common::*;
use std::time::{Duration, Instant};

#[test]
fn two_cells_split_and_the_survivor_gets_everything() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let (a, _, pa) = page(register(
        &mut w,
        ROOT,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let (_, _, pb) = page(register(
        &mut w,
        ROOT,
        "b",
        CellSpec::default(),
        vec![200],
        false,
    ));
    let (ga, gb) = (grant(&pa), grant(&pb));
    assert_eq!(ga.cpus.len(), 1);
    assert_eq!(gb.cpus.len(), 1);
    assert!(!ga.cpus.intersects(&gb.cpus));
    // The grant reached the backend before the process joined.
    let calls = w.dry.calls();
    let apply = calls
        .iter()
        .position(|c| matches!(c, Call::Apply(id, _) if *id == a))
        .unwrap();
    let attach = calls
        .iter()
        .position(|c| matches!(c, Call::Attach(id, 100) if *id == a))
        .unwrap();
    assert!(apply < attach, "{calls:?}");

    let gen_before = gb.generation;
    w.os.exit(100);
    let effects = w.exited(100);
    assert!(effects.iter().any(|e| matches!(e, Effect::Unwatch(100))));
    let gb = grant(&pb);
    assert_eq!(gb.cpus.to_string(), "0-1");
    assert!(gb.generation > gen_before);
    assert!(grant(&pa).released());
    assert!(w.dry.calls().contains(&Call::Remove(a)));
}

#[test]
fn admission_refuses_queues_and_admits_in_order() {
    let mut w = world(2);
    for pid in [100, 200, 300] {
        proc_of(&w, pid, 0);
    }
    let ex = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    let one = CellSpec {
        min: 1,
        ..Default::default()
    };
    let (_, _, _pa) = page(register(&mut w, ROOT, "big", ex, vec![100], false));
    // Not now, without --wait: refused with a reason naming the holder.
    // (A best-effort cell would be admitted, paused: `tests/pause.rs`.)
    let e = register(&mut w, ROOT, "late", one, vec![200], false);
    match reply(&e) {
        Reply::Error {
            code: ErrorCode::Refused,
            message,
            ..
        } => assert!(message.contains("big (2)"), "{message}"),
        other => panic!("{other:?}"),
    }
    // With --wait: queued, then admitted when the holder leaves.
    let e = register(&mut w, ROOT, "patient", one, vec![300], true);
    assert!(matches!(reply(&e), Reply::Queued { position: 1, .. }));
    w.os.exit(100);
    let effects = w.exited(100);
    let (_, _, p) = page(effects);
    assert_eq!(grant(&p).cpus.to_string(), "0-1");
    // Never: more than the machine.
    let e = register(
        &mut w,
        ROOT,
        "huge",
        CellSpec {
            min: 8,
            ..Default::default()
        },
        vec![200],
        true,
    );
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::Never,
            ..
        }
    ));
}

#[test]
fn a_queued_cell_whose_client_leaves_is_dropped() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let ex = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    let _ = page(register(&mut w, ROOT, "big", ex, vec![100], false));
    let one = CellSpec {
        min: 1,
        ..Default::default()
    };
    let e = register(&mut w, ROOT, "q", one, vec![200], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }));
    w.session_closed(7);
    assert!(w.core.status(ROOT).queue.is_empty());
}

#[test]
fn users_cannot_touch_each_others_cells_or_processes() {
    let mut w = world(2);
    proc_of(&w, 100, 1000);
    proc_of(&w, 200, 1001);
    // Bob may not put Alice's process in a cell.
    let e = register(&mut w, BOB, "steal", CellSpec::default(), vec![100], false);
    assert!(
        matches!(
            reply(&e),
            Reply::Error {
                code: ErrorCode::PermissionDenied,
                ..
            }
        ),
        "{:?}",
        reply(&e)
    );
    let (cell, token, _p) = page(register(
        &mut w,
        ALICE,
        "mine",
        CellSpec::default(),
        vec![100],
        false,
    ));
    for req in [
        Request::Release { cell },
        Request::AddMember { cell, pid: 200 },
        Request::UpdateSpec {
            cell,
            spec: CellSpec::default(),
        },
        Request::Rejoin { cell, token },
    ] {
        let e = w.handle(9, BOB, req.clone(), None);
        assert!(
            matches!(
                reply(&e),
                Reply::Error {
                    code: ErrorCode::PermissionDenied,
                    ..
                }
            ),
            "{req:?}"
        );
    }
    // Root may.
    let e = w.handle(9, ROOT, Request::Release { cell }, None);
    assert!(matches!(reply(&e), Reply::Ok));
    // Bob may not stop a root broker either.
    let e = w.handle(9, BOB, Request::Shutdown, None);
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::PermissionDenied,
            ..
        }
    ));
    assert!(!w.core.stop_requested());
}

#[test]
fn bad_requests_get_clear_errors() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let e = register(
        &mut w,
        ROOT,
        "x",
        CellSpec {
            weight: 0,
            ..Default::default()
        },
        vec![100],
        false,
    );
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::Invalid,
            ..
        }
    ));
    let e = register(
        &mut w,
        ROOT,
        "x",
        CellSpec::default(),
        vec![4_000_000],
        false,
    );
    match reply(&e) {
        Reply::Error {
            code: ErrorCode::Invalid,
            message,
            ..
        } => assert!(message.contains("does not exist")),
        other => panic!("{other:?}"),
    }
    let e = w.handle(7, ROOT, Request::Release { cell: 99 }, None);
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::UnknownCell,
            ..
        }
    ));
    let _ = page(register(
        &mut w,
        ROOT,
        "x",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let e = register(&mut w, ROOT, "y", CellSpec::default(), vec![100], false);
    match reply(&e) {
        Reply::Error { message, .. } => assert!(message.contains("already in cell"), "{message}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn idle_cells_lend_and_get_their_cpus_back() {
    let mut w = world(8);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let (_, _, pa) = page(register(
        &mut w,
        ROOT,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let (b, _, pb) = page(register(
        &mut w,
        ROOT,
        "b",
        CellSpec::default(),
        vec![200],
        false,
    ));
    assert_eq!(grant(&pa).cpus.len(), 4);
    // b reports it can use 8; a reports 1.
    let a_cell = grant(&pa).cell;
    w.handle(
        7,
        ROOT,
        Request::Report {
            cell: a_cell,
            busy: 1,
            wanted: 1,
            progress: 0,
        },
        None,
    );
    w.handle(
        7,
        ROOT,
        Request::Report {
            cell: b,
            busy: 8,
            wanted: 8,
            progress: 0,
        },
        None,
    );
    let (ga, gb) = (grant(&pa), grant(&pb));
    assert_eq!(ga.cpus.len(), 1);
    assert_eq!(gb.cpus.len(), 7);
    assert_eq!(gb.lent.len(), 3, "borrowed CPUs are marked lent");
    // a wants its share again.
    w.handle(
        7,
        ROOT,
        Request::Report {
            cell: a_cell,
            busy: 4,
            wanted: 4,
            progress: 0,
        },
        None,
    );
    assert_eq!(grant(&pa).cpus.len(), 4);
    assert!(grant(&pb).lent.is_empty());
}

#[test]
fn demand_follows_measured_usage() {
    let mut w = world(8);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let (_, _, pa) = page(register(
        &mut w,
        ROOT,
        "idle",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let (_, _, pb) = page(register(
        &mut w,
        ROOT,
        "busy",
        CellSpec::default(),
        vec![200],
        false,
    ));
    // The dry-run backend cannot measure usage: demand stays unknown and
    // nothing is lent, whatever the ticks.
    let t = Instant::now();
    for i in 1..10 {
        w.tick(t + Duration::from_millis(100 * i));
    }
    assert_eq!(grant(&pa).cpus.len(), 4);
    assert_eq!(grant(&pb).cpus.len(), 4);
}

#[test]
fn restart_adopts_live_cells_without_moving_them() {
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    for pid in [100, 200, 300] {
        os.spawn(pid, 0, 1, &CpuSet::first_n(4));
    }
    let path = dir.path().to_path_buf();
    let (mut w, _) = world_with(4, dir, os.clone());
    let (a, token_a, pa) = page(register(
        &mut w,
        ROOT,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let (_, _, pb) = page(register(
        &mut w,
        ROOT,
        "b",
        CellSpec::default(),
        vec![200],
        false,
    ));
    let (_, _, pc) = page(register(
        &mut w,
        ROOT,
        "c",
        CellSpec::default(),
        vec![300],
        false,
    ));
    let before: Vec<Grant> = [&pa, &pb, &pc].iter().map(|p| grant(p)).collect();
    // c dies while the broker is down.
    let World { core, _dir, .. } = w;
    drop(core);
    os.exit(300);

    let (mut w2, effects) = world_with(4, _dir, os.clone());
    assert_eq!(path, w2._dir.path());
    let watched: Vec<u32> = effects
        .iter()
        .filter_map(|e| {
            if let Effect::Watch(p) = e {
                Some(*p)
            } else {
                None
            }
        })
        .collect();
    assert_eq!(watched, vec![100, 200]);
    // a and b keep their CPUs and generations (only c's end may be planned later).
    let status = w2.core.status(ROOT);
    assert_eq!(status.cells.len(), 2);
    for c in &status.cells {
        let id = c.id;
        let old = before.iter().find(|g| g.cell == id).unwrap();
        let cpus = CpuSet::parse_list(&c.cpus).unwrap();
        assert!(
            old.cpus.is_subset(&cpus),
            "cell {id}: {} then {cpus}",
            old.cpus
        );
    }
    // The client hands its page back and keeps reading the same page.
    let dup = rustix::io::fcntl_dupfd_cloexec(pa.fd(), 0).unwrap();
    let e = w2.handle(
        8,
        ROOT,
        Request::Rejoin {
            cell: a,
            token: token_a,
        },
        Some(dup),
    );
    assert!(matches!(reply(&e), Reply::Registered { .. }));
    let g = grant(&pa);
    assert_eq!(g.cell, a);
    assert!(g.generation >= before[0].generation);
    // Wrong token: refused.
    let e = w2.handle(
        8,
        ROOT,
        Request::Rejoin {
            cell: a,
            token: token_a ^ 1,
        },
        None,
    );
    assert!(matches!(
        reply(&e),
        Reply::Error {
            code: ErrorCode::PermissionDenied,
            ..
        }
    ));
    // Reclaim keeps working for adopted members.
    os.exit(100);
    w2.exited(100);
    assert!(grant(&pa).released());
    let _ = os.alive(1);
}
