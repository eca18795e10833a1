//! What one user may make the broker do to another: a pid reused by
//! another user's process, a connection outliving its process, another
//! user's cells in refusals and in the status, and the per-user limits on
//! guarantees, `require` holds and weights that keep one user from taking
//! every CPU. State-machine level (fake processes, dry-run backend).

mod common;

use allot_broker::core::Effect;
use allot_broker::peer::Peer;
use allot_proto::msg::{DeviceDef, ErrorCode, LedgerItem, Reply, Request};
use allot_spec::CellSpec;
use common::*;

/// A queued cell's member that exits while it waits, its pid reused by
/// another user's (root's) process, does not bring that process into the
/// cell when it is admitted: members are processes, not numbers.
#[test]
fn a_pid_reused_while_its_cell_waits_is_not_captured() {
    let mut w = world_configured(4, |c| c.limits.guaranteed_cpus = 8);
    let user = ALICE;
    proc_of(&w, 100, 1000);
    proc_of(&w, 101, 1000);
    proc_of(&w, 102, 1000);
    let _held = page(register(
        &mut w,
        user,
        "held",
        exclusive(4),
        vec![100],
        false,
    ));
    let e = register(&mut w, user, "trap", exclusive(1), vec![101, 102], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{e:?}");
    // 101 exits; a root process starts later under the same pid.
    w.os.exit(101);
    w.os.spawn(101, 0, 1, &allot_topo::CpuSet::first_n(64));
    w.os.set_uid(101, 0);
    w.os.set_start(101, 1_000_000);
    w.os.exit(100);
    let _ = w.exited(100);
    let st = w.core.status(ROOT);
    let trap = st
        .cells
        .iter()
        .find(|c| c.name == "trap")
        .expect("admitted");
    assert_eq!(trap.pids, vec![102], "only the process that asked");
    assert!(
        st.cells.iter().all(|c| !c.pids.contains(&101)),
        "root's process was captured: {:?}",
        st.cells
    );
}

/// A connection outlives the process that opened it when a child inherits
/// it. Once that process has ended and a root process has started under
/// its pid, the connection acts for nobody: the newcomer is not made a
/// member, a holder or a definer through it, and what the newcomer holds
/// is not given back through it.
#[test]
fn a_connection_whose_process_ended_acts_for_nobody() {
    let mut w = world(4);
    proc_of(&w, 300, 1000);
    let old = peer(300, 1000);
    w.os.exit(300);
    proc_of(&w, 300, 0);
    w.os.set_start(300, 1_000_000);
    let newcomer = Peer {
        pid: 300,
        start: Some(1_000_000),
        uid: 0,
        gid: 0,
        runs: None,
    };
    let cpu = |dev| {
        vec![LedgerItem {
            kind: "cpu".into(),
            dev,
            amount: 1.0,
            shared: false,
        }]
    };
    let e = w.handle(8, newcomer, Request::kind_try(cpu(3)), None);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let ended =
        |e: &[Effect]| code(e) == Some(ErrorCode::Invalid) && message(e).contains("has ended");
    let e = register(&mut w, old, "trap", CellSpec::default(), vec![], false);
    assert!(ended(&e), "{e:?}");
    let e = w.handle(7, old, Request::kind_try(cpu(2)), None);
    assert!(ended(&e), "{e:?}");
    let define = Request::KindDefine {
        name: "gpu".into(),
        devices: vec![DeviceDef {
            name: "0".into(),
            min: 0.0,
            max: 1.0,
        }],
    };
    let e = w.handle(7, old, define, None);
    assert!(ended(&e), "{e:?}");
    assert!(!e.iter().any(|e| matches!(e, Effect::Watch(_))), "{e:?}");
    let open = Request::ChannelOpen {
        name: "c".into(),
        send: true,
        slots: 4,
        message_max: 64,
    };
    assert!(ended(&w.handle(7, old, open, None)));
    // One-way: not answered, and the newcomer keeps what it holds.
    let e = w.handle(7, old, Request::KindRelease { items: cpu(3) }, None);
    assert!(e.is_empty(), "{e:?}");
    let st = w.core.status(ROOT);
    assert_eq!(st.machine.held_outside, "3");
    assert!(st.cells.is_empty(), "{:?}", st.cells);
    // Requests that name their cell or process keep working.
    assert!(matches!(
        reply(&w.handle(7, old, Request::Status, None)),
        Reply::Status { .. }
    ));
}

/// A refusal names the cells holding the guarantees only where its reader
/// may see them: another user's cell stays unnamed (show_other_users is
/// off by default), root sees the name.
#[test]
fn a_refusal_does_not_name_another_users_cells() {
    let mut w = world_configured(4, |c| c.limits.guaranteed_cpus = 8);
    let (a, b) = (ALICE, BOB);
    proc_of(&w, 100, 1000);
    proc_of(&w, 101, 1001);
    proc_of(&w, 102, 0);
    let _held = page(register(
        &mut w,
        a,
        "payroll-2025-secret",
        exclusive(4),
        vec![100],
        false,
    ));
    let e = register(&mut w, b, "mine", exclusive(1), vec![101], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(
        !message(&e).contains("payroll") && message(&e).contains("another user's cell"),
        "{}",
        message(&e)
    );
    let e = register(&mut w, ROOT, "root's", exclusive(1), vec![102], false);
    assert!(
        message(&e).contains("payroll-2025-secret"),
        "{}",
        message(&e)
    );
}

/// One user may not hold (or wait for) every CPU as guarantees: by
/// default all but one of the CPUs for cells, so another user's
/// best-effort program keeps one; root is exempt, and the limit is the
/// configuration's.
#[test]
fn one_user_cannot_take_every_cpu_as_guarantees() {
    let mut w = world(4);
    let user = ALICE;
    for pid in 100..104 {
        proc_of(&w, pid, 1000);
    }
    proc_of(&w, 104, 0);
    let e = register(&mut w, user, "all", exclusive(4), vec![100], false);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(
        message(&e).contains("limits.guaranteed_cpus"),
        "{}",
        message(&e)
    );
    let _three = page(register(
        &mut w,
        user,
        "three",
        exclusive(3),
        vec![101],
        false,
    ));
    // Waiting for more counts too.
    let e = register(&mut w, user, "more", exclusive(1), vec![102], true);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    // A best-effort cell is not a guarantee.
    let _be = page(register(
        &mut w,
        user,
        "be",
        CellSpec::default(),
        vec![103],
        false,
    ));
    // Root is exempt (here it waits for the CPUs the user holds).
    let e = register(&mut w, ROOT, "root", exclusive(4), vec![104], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{e:?}");
    // A weight past limits.weight is refused for a user, not for root.
    let heavy = CellSpec {
        weight: 10_000,
        ..CellSpec::default()
    };
    proc_of(&w, 105, 1000);
    let e = register(&mut w, user, "heavy", heavy, vec![105], false);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(message(&e).contains("limits.weight"), "{}", message(&e));
    proc_of(&w, 106, 0);
    let _root = page(register(&mut w, ROOT, "heavy", heavy, vec![106], false));
    // The configuration may allow all of them.
    let mut w = world_configured(4, |c| c.limits.guaranteed_cpus = 4);
    proc_of(&w, 100, 1000);
    let _all = page(register(
        &mut w,
        user,
        "all",
        exclusive(4),
        vec![100],
        false,
    ));
}

/// CPUs held exclusively through `require` outside every cell count
/// towards the same limit as cells' guarantees, both ways: one user's
/// processes cannot hold every CPU (and pause everyone's best-effort
/// cells), nor add cells past the limit beside their holds. Shared holds
/// are not counted (root's exemption: `one_user_cannot_take_every_cpu_as_guarantees`).
#[test]
fn require_holds_outside_cells_count_as_guarantees() {
    let mut w = world(4);
    for pid in 100..106 {
        proc_of(&w, pid, 1000);
    }
    let cpu = |dev: u32, shared: bool| LedgerItem {
        kind: "cpu".into(),
        dev,
        amount: 1.0,
        shared,
    };
    let acquire = |w: &mut World, p: Peer, items: Vec<LedgerItem>| {
        w.handle(9, p, Request::kind_try(items), None)
    };
    // Two processes of one user hold three of the four CPUs.
    let e = acquire(&mut w, peer(100, 1000), vec![cpu(0, false), cpu(1, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let e = acquire(&mut w, peer(101, 1000), vec![cpu(2, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    // The last one is refused: others keep a CPU.
    let e = acquire(&mut w, peer(102, 1000), vec![cpu(3, false)]);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(
        message(&e).contains("limits.guaranteed_cpus"),
        "{}",
        message(&e)
    );
    // Shared, it is a limit on the holder, not a guarantee.
    let e = acquire(&mut w, peer(102, 1000), vec![cpu(3, true)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    // Nor may the user add a guaranteed cell beside its holds…
    let e = register(&mut w, ALICE, "more", exclusive(1), vec![103], true);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(message(&e).contains("through require"), "{}", message(&e));
    // …but a best-effort one, yes.
    let _be = page(register(
        &mut w,
        ALICE,
        "be",
        CellSpec::default(),
        vec![104],
        false,
    ));
    // Given back, the user's room returns.
    w.os.exit(100);
    let _ = w.exited(100);
    let e = register(&mut w, ALICE, "now", exclusive(1), vec![105], true);
    assert!(
        !matches!(code(&e), Some(ErrorCode::Limit)),
        "{}",
        message(&e)
    );
}

/// A change of request is held to the limits a registration is: a
/// best-effort cell cannot be turned into one of every CPU, nor made to
/// outweigh the user's total; the cell's own old request does not count
/// against its new one.
#[test]
fn changing_a_request_is_held_to_the_same_limits() {
    let mut w = world(4);
    for pid in 100..106 {
        proc_of(&w, pid, 1000);
    }
    let (cell, _, _) = page(register(
        &mut w,
        ALICE,
        "small",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let e = w.handle(
        7,
        ALICE,
        Request::UpdateSpec {
            cell,
            spec: exclusive(4),
        },
        None,
    );
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(
        message(&e).contains("limits.guaranteed_cpus"),
        "{}",
        message(&e)
    );
    // Three of four: within the limit, its old request not counted twice.
    let e = w.handle(
        7,
        ALICE,
        Request::UpdateSpec {
            cell,
            spec: exclusive(3),
        },
        None,
    );
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    // Weights: four cells of the largest weight fill limits.user_weight.
    let heavy = CellSpec {
        weight: 100,
        ..CellSpec::default()
    };
    let e = w.handle(7, ALICE, Request::UpdateSpec { cell, spec: heavy }, None);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    for pid in 101..104 {
        let _ = page(register(&mut w, ALICE, "heavy", heavy, vec![pid], false));
    }
    let e = register(
        &mut w,
        ALICE,
        "one more",
        CellSpec::default(),
        vec![104],
        false,
    );
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
    assert!(
        message(&e).contains("limits.user_weight"),
        "{}",
        message(&e)
    );
    // Changing one of them within its own share is fine; another user is
    // not affected.
    let e = w.handle(7, ALICE, Request::UpdateSpec { cell, spec: heavy }, None);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    proc_of(&w, 106, 1001);
    let _ = page(register(&mut w, BOB, "bob's", heavy, vec![106], false));
}

#[test]
fn other_users_cells_show_their_size_but_not_their_names_or_processes() {
    let mut w = world(2);
    proc_of(&w, 100, 1000);
    proc_of(&w, 200, 1001);
    let _a = page(register(
        &mut w,
        ALICE,
        "alice-secret",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let _b = page(register(
        &mut w,
        BOB,
        "bob's",
        CellSpec::default(),
        vec![200],
        false,
    ));
    let seen_by_bob = w.core.status(BOB);
    let alice = seen_by_bob.cells.iter().find(|c| c.uid == 1000).unwrap();
    assert!(alice.private && alice.name.is_empty() && alice.pids.is_empty());
    assert_eq!(alice.cpus.len(), 1, "its CPUs are shown");
    let bob = seen_by_bob.cells.iter().find(|c| c.uid == 1001).unwrap();
    assert!(!bob.private && bob.name == "bob's" && bob.pids == vec![200]);
    // Root sees everything.
    assert!(w.core.status(ROOT).cells.iter().all(|c| !c.private));
}
