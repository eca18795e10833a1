//! What clients can make the broker do and keep: the admission queue,
//! per-user counts of cells, places, kinds and watches, names, the
//! ledger's answers. (What one user may do to another: `users.rs`.)
//! State-machine level (fake processes, dry-run backend).

mod common;

use allot_broker::config::Limits;
use allot_broker::core::Effect;
use allot_broker::peer::Peer;
use allot_proto::msg::{DeviceDef, ErrorCode, LedgerItem, Reply, Request};
use allot_spec::CellSpec;
use common::*;

/// A world whose broker has `limits`.
fn limited(cpus: usize, limits: Limits) -> World {
    world_configured(cpus, |c| c.limits = limits)
}

#[test]
fn a_waiting_request_does_not_turn_away_cells_that_cannot_delay_it() {
    let mut w = world(4);
    for pid in 100..110 {
        proc_of(&w, pid, 0);
    }
    // Two of four CPUs held; a request for three waits.
    let _held = page(register(
        &mut w,
        ROOT,
        "held",
        exclusive(2),
        vec![100],
        false,
    ));
    let e = register(&mut w, ROOT, "big", exclusive(3), vec![101], true);
    assert!(matches!(reply(&e), Reply::Queued { position: 1, .. }));
    // A waiting request is told why, not to retry or to pass --wait.
    let Reply::Queued { reason, .. } = reply(&e) else {
        unreachable!()
    };
    assert!(
        reason.contains("guaranteed CPUs") && !reason.contains("--wait"),
        "{reason}"
    );
    // A best-effort cell fits now and beside "big" once "held" leaves:
    // admitted at once (it used to be refused: "cells are already waiting").
    let (_, _, _be) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![102],
        false,
    ));
    // Two more guaranteed CPUs fit now, but once "held" leaves, "big" and
    // they would need five: it would delay "big". (One more would not:
    // best-effort cells, which this backend can pause, keep no CPU from a
    // guarantee.)
    let e = register(&mut w, ROOT, "small", exclusive(2), vec![103], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("could delay cell"), "{}", message(&e));
    // When the holder leaves, the waiting cell gets its CPUs.
    w.os.exit(100);
    let (_, _, big) = page(w.exited(100));
    assert_eq!(grant(&big).cpus.len(), 3);
}

#[test]
fn queued_cells_behind_the_head_are_admitted_when_they_cannot_delay_it() {
    let mut w = world(4);
    for pid in 100..110 {
        proc_of(&w, pid, 0);
    }
    let _a = page(register(&mut w, ROOT, "a", exclusive(2), vec![100], false));
    let _b = page(register(&mut w, ROOT, "b", exclusive(1), vec![101], false));
    // Head: 3 CPUs, once a (2) and b (1) are gone... or just a.
    assert!(matches!(
        reply(&register(
            &mut w,
            ROOT,
            "head",
            exclusive(3),
            vec![102],
            true
        )),
        Reply::Queued { position: 1, .. }
    ));
    // One CPU fits now, but if a left first, b, it and the head would
    // need five: it waits too.
    assert!(matches!(
        reply(&register(
            &mut w,
            ROOT,
            "one",
            exclusive(1),
            vec![103],
            true
        )),
        Reply::Queued { position: 2, .. }
    ));
    assert!(matches!(
        reply(&register(
            &mut w,
            ROOT,
            "two",
            exclusive(2),
            vec![104],
            true
        )),
        Reply::Queued { position: 3, .. }
    ));
    // b leaves: "one" goes ahead of the head (with a gone, head and one fit);
    // "two" would delay the head and stays.
    w.os.exit(101);
    let (_, _, one) = page(w.exited(101));
    assert!(!grant(&one).cpus.is_empty());
    let waiting: Vec<String> = w
        .core
        .status(ROOT)
        .queue
        .iter()
        .map(|q| q.name.clone())
        .collect();
    assert_eq!(waiting, ["head", "two"]);
    // a leaves: the head gets its three CPUs beside "one"; "two" waits.
    w.os.exit(100);
    let (_, _, head) = page(w.exited(100));
    assert_eq!(grant(&head).cpus.len(), 3);
    assert_eq!(w.core.status(ROOT).queue.len(), 1);
}

#[test]
fn members_are_deduplicated_and_bounded() {
    let mut w = limited(
        2,
        Limits {
            members: 3,
            ..Limits::default()
        },
    );
    for pid in 100..105 {
        proc_of(&w, pid, 1000);
    }
    // One pid listed 4096 times is one member.
    let (cell, _, _p) = page(register(
        &mut w,
        ALICE,
        "dup",
        CellSpec::default(),
        vec![100; 4096],
        false,
    ));
    assert_eq!(w.core.status(ALICE).cells[0].pids, vec![100]);
    let e = register(
        &mut w,
        ALICE,
        "many",
        CellSpec::default(),
        vec![101, 102, 103, 104],
        false,
    );
    assert_eq!(code(&e), Some(ErrorCode::Limit));
    assert!(message(&e).contains("limits.members"), "{}", message(&e));
    for pid in [101, 102] {
        let e = w.handle(7, ALICE, Request::AddMember { cell, pid }, None);
        assert!(matches!(reply(&e), Reply::Ok));
    }
    let e = w.handle(7, ALICE, Request::AddMember { cell, pid: 103 }, None);
    assert_eq!(code(&e), Some(ErrorCode::Limit));
}

#[test]
fn a_user_has_a_bounded_number_of_cells_and_places_in_the_queue() {
    let mut w = limited(
        2,
        Limits {
            cells: 2,
            queued: 1,
            ..Limits::default()
        },
    );
    for pid in 100..110 {
        proc_of(&w, pid, 1000);
    }
    proc_of(&w, 200, 1001);
    let _a = page(register(
        &mut w,
        ALICE,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let _b = page(register(
        &mut w,
        ALICE,
        "b",
        CellSpec::default(),
        vec![101],
        false,
    ));
    let e = register(&mut w, ALICE, "c", CellSpec::default(), vec![102], false);
    assert_eq!(code(&e), Some(ErrorCode::Limit));
    assert!(message(&e).contains("limits.cells"), "{}", message(&e));
    // Another user is not affected.
    let _bob = page(register(
        &mut w,
        BOB,
        "bob",
        CellSpec::default(),
        vec![200],
        false,
    ));
    // Root is exempt.
    proc_of(&w, 300, 0);
    let _root = page(register(
        &mut w,
        ROOT,
        "root",
        CellSpec::default(),
        vec![300],
        false,
    ));

    let mut w = limited(
        2,
        Limits {
            queued: 1,
            // (What is judged here is the queue's bound.)
            guaranteed_cpus: 8,
            ..Limits::default()
        },
    );
    for pid in 100..110 {
        proc_of(&w, pid, 1000);
    }
    let _all = page(register(
        &mut w,
        ALICE,
        "all",
        exclusive(2),
        vec![100],
        false,
    ));
    assert!(matches!(
        reply(&register(
            &mut w,
            ALICE,
            "w1",
            exclusive(1),
            vec![101],
            true
        )),
        Reply::Queued { .. }
    ));
    let e = register(&mut w, ALICE, "w2", exclusive(1), vec![102], true);
    assert_eq!(code(&e), Some(ErrorCode::Limit));
    assert!(message(&e).contains("limits.queued"), "{}", message(&e));
}

#[test]
fn names_that_could_forge_output_are_refused() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    for name in ["x\n   7  forged", "\x1b]0;title\x07", &"n".repeat(200)] {
        let e = register(&mut w, ROOT, name, CellSpec::default(), vec![100], false);
        assert_eq!(code(&e), Some(ErrorCode::Invalid), "{name:?}");
        assert!(!message(&e).contains('\n') && !message(&e).contains('\x1b'));
    }
}

#[test]
fn the_ledger_answers_invalid_requests_as_invalid() {
    let mut w = world(2);
    let item = |kind: &str, dev: u32, amount: f64| LedgerItem {
        kind: kind.into(),
        dev,
        amount,
        shared: false,
    };
    for (items, why) in [
        (vec![item("no-such-kind", 0, 1.0)], "unknown kind"),
        (vec![item("cpu", 0, -1.0)], "negative amount"),
        (vec![item("cpu", 99, 1.0)], "no such device"),
    ] {
        let e = w.handle(7, ALICE, Request::kind_try(items), None);
        assert_eq!(code(&e), Some(ErrorCode::Invalid), "{why}: {}", message(&e));
    }
    let e = w.handle(7, ALICE, Request::kind_try(vec![item("cpu", 0, 1.0)]), None);
    assert!(matches!(reply(&e), Reply::Ok));
    let e = w.handle(8, BOB, Request::kind_try(vec![item("cpu", 0, 1.0)]), None);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "taken: try later");
}

#[test]
fn kind_definitions_are_bounded_per_user() {
    let mut w = limited(
        1,
        Limits {
            kinds: 2,
            devices: 8,
            ..Limits::default()
        },
    );
    let define = |w: &mut World, who: Peer, name: &str, n: usize| {
        let devices = (0..n)
            .map(|i| DeviceDef {
                name: i.to_string(),
                min: 0.0,
                max: 1.0,
            })
            .collect();
        w.handle(
            7,
            who,
            Request::KindDefine {
                name: name.into(),
                devices,
            },
            None,
        )
    };
    assert_eq!(
        code(&define(&mut w, ALICE, "wide", 9)),
        Some(ErrorCode::Limit)
    );
    let e = define(&mut w, ALICE, "k1", 8);
    assert!(
        e.iter().any(|e| matches!(e, Effect::Watch(2))),
        "the definer is watched"
    );
    assert!(matches!(reply(&e), Reply::Ok));
    assert!(matches!(reply(&define(&mut w, ALICE, "k2", 1)), Reply::Ok));
    assert_eq!(
        code(&define(&mut w, ALICE, "k3", 1)),
        Some(ErrorCode::Limit)
    );
    assert!(matches!(reply(&define(&mut w, BOB, "k3", 1)), Reply::Ok));
    // The definer dies: its kinds go, and its quota is free again.
    w.os.exit(2);
    w.exited(2);
    let json = kind_listing(&mut w, ROOT, "");
    assert!(
        !json.contains("\"k1\"") && json.contains("\"k3\""),
        "{json}"
    );
}

/// A listing of one kind carries that kind alone: one user's many wide
/// kinds do not make another's listing of the kind it needs any larger.
#[test]
fn a_listing_of_one_kind_is_not_made_larger_by_others_kinds() {
    let mut w = world(1);
    let listing = |w: &mut World, kind: &str| kind_listing(w, BOB, kind);
    let before = listing(&mut w, "cpu").len();
    for k in 0..16 {
        let devices = (0..256)
            .map(|i| DeviceDef {
                name: format!("dev{i}"),
                min: 0.0,
                max: 1.0,
            })
            .collect();
        let e = w.handle(
            7,
            ALICE,
            Request::KindDefine {
                name: format!("wide{k}"),
                devices,
            },
            None,
        );
        assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    }
    let cpu = listing(&mut w, "cpu");
    assert_eq!(cpu.len(), before, "{cpu}");
    assert!(cpu.contains("\"cpu\"") && !cpu.contains("wide"), "{cpu}");
    // Listing everything still shows them; a kind nobody has lists none.
    let all = listing(&mut w, "");
    assert!(
        all.contains("wide15") && all.len() > 16 * 256 * 50,
        "{}",
        all.len()
    );
    assert!(!listing(&mut w, "nothing").contains("\"name\""));
}

#[test]
fn one_watch_per_session() {
    let mut w = world(1);
    for _ in 0..100 {
        let e = w.handle(
            7,
            ALICE,
            Request::KindWatch {
                epoch: 0,
                waiting: 1,
            },
            None,
        );
        assert!(e.is_empty());
    }
    // One change answers the session once, not a hundred times.
    let take = LedgerItem {
        kind: "cpu".into(),
        dev: 0,
        amount: 1.0,
        shared: false,
    };
    w.handle(8, BOB, Request::kind_try(vec![take.clone()]), None);
    let e = w.handle(8, BOB, Request::KindRelease { items: vec![take] }, None);
    let answers = e
        .iter()
        .filter(|e| matches!(e, Effect::Reply { session: 7, .. }))
        .count();
    assert_eq!(answers, 1);
}

#[test]
fn one_way_requests_are_never_answered() {
    let mut w = world(1);
    // A report on a cell that does not exist, and a release of nothing.
    let e = w.handle(
        7,
        ALICE,
        Request::Report {
            cell: 42,
            busy: 1,
            wanted: 1,
            progress: 1,
        },
        None,
    );
    assert!(e.is_empty(), "{e:?}");
    let e = w.handle(
        7,
        ALICE,
        Request::KindRelease {
            items: vec![LedgerItem {
                kind: "nope".into(),
                dev: 3,
                amount: -1.0,
                shared: false,
            }],
        },
        None,
    );
    assert!(
        !e.iter().any(|e| matches!(e, Effect::Reply { .. })),
        "{e:?}"
    );
}
