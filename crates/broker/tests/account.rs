//! The one account: `require` holdings and cells decided by one plan
//! (`allot_broker::core::account`). State-machine level: fake processes,
//! dry-run backend, cells' grants read from their pages.

mod common;

use allot_proto::PageMap;
use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use allot_spec::{CellSpec, TimeContract};
use allot_topo::CpuSet;
use common::*;
use std::time::{Duration, Instant};

fn cpu(n: u32, shared: bool) -> LedgerItem {
    LedgerItem {
        kind: "cpu".into(),
        dev: n,
        amount: 1.0,
        shared,
    }
}

/// Process `pid` of alice (uid 1000) asks for `items`.
fn acquire(w: &mut World, pid: u32, items: Vec<LedgerItem>) -> Vec<allot_broker::core::Effect> {
    let peer = peer(pid, 1000);
    w.handle(20, peer, Request::kind_try(items), None)
}

fn release(w: &mut World, pid: u32, items: Vec<LedgerItem>) {
    let peer = peer(pid, 1000);
    let e = w.handle(20, peer, Request::KindRelease { items }, None);
    assert!(
        e.iter().all(|e| !matches!(
            e,
            allot_broker::core::Effect::Reply {
                reply: Reply::Error { .. },
                ..
            }
        )),
        "{e:?}"
    );
}

/// Alice's cell `name` with member `pid` (spawned here).
fn cell(w: &mut World, name: &str, spec: CellSpec, pid: u32) -> PageMap {
    proc_of(w, pid, 1000);
    page(register(w, ALICE, name, spec, vec![pid], false)).2
}

fn cpus(p: &PageMap) -> CpuSet {
    grant(p).cpus
}

fn set(list: &str) -> CpuSet {
    CpuSet::parse_list(list).unwrap()
}

#[test]
fn a_cpu_held_outside_every_cell_leaves_every_cell_until_given_back() {
    let mut w = world(4);
    let a = cell(&mut w, "a", CellSpec::default(), 10);
    assert_eq!(cpus(&a), set("0-3"));
    proc_of(&w, 50, 1000); // outside every cell
    let e = acquire(&mut w, 50, vec![cpu(2, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(cpus(&a), set("0-1,3"), "the cell moved off the held CPU");
    let st = w.core.status(ROOT);
    assert_eq!(st.machine.held_outside, "2");
    // A shared hold is a limit, not a guarantee: nothing moves.
    proc_of(&w, 51, 1000);
    let e = acquire(&mut w, 51, vec![cpu(1, true)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(cpus(&a), set("0-1,3"));
    // Given back and taken again at once (a block in a loop), the cell
    // is not moved back and forth.
    let generation = grant(&a).generation;
    release(&mut w, 50, vec![cpu(2, false)]);
    let e = acquire(&mut w, 50, vec![cpu(2, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(grant(&a).generation, generation);
    release(&mut w, 50, vec![cpu(2, false)]);
    assert_eq!(cpus(&a), set("0-1,3"), "given back, it lingers a while");
    w.tick(Instant::now() + Duration::from_millis(200));
    assert_eq!(cpus(&a), set("0-3"), "then the cell has it again");
    assert_eq!(w.core.status(ROOT).machine.held_outside, "");
}

#[test]
fn a_cpu_held_in_a_cell_stays_its_own_when_others_arrive() {
    let mut w = world(4);
    let a = cell(&mut w, "a", CellSpec::default(), 10);
    let b = cell(&mut w, "b", CellSpec::default(), 11);
    let (ga, gb) = (grant(&a), grant(&b));
    assert_eq!((ga.cpus.len(), gb.cpus.len()), (2, 2));
    // A child of a's member holds one of a's CPUs.
    w.os.spawn(12, 10, 1, &CpuSet::first_n(4));
    w.os.set_uid(12, 1000);
    let entitled = |w: &World, i: usize| set(&w.core.status(ROOT).cells[i].entitled);
    let mine = entitled(&w, 0).first().unwrap() as u32;
    let theirs = entitled(&w, 1).first().unwrap() as u32;
    let e = acquire(&mut w, 12, vec![cpu(theirs, false)]);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("outside cell"), "{}", message(&e));
    let e = acquire(&mut w, 12, vec![cpu(mine, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let st = w.core.status(ROOT);
    let held: Vec<(&str, &str)> = st
        .cells
        .iter()
        .map(|c| (c.name.as_str(), c.held.as_str()))
        .collect();
    assert_eq!(held, [("a", mine.to_string().as_str()), ("b", "")]);
    // Three more best-effort cells would stack all five on a shared
    // pool; a keeps the CPU its process holds, and nobody else runs on it.
    let others: Vec<PageMap> = (0..3)
        .map(|i| cell(&mut w, &format!("c{i}"), CellSpec::default(), 20 + i))
        .collect();
    let ga = grant(&a);
    assert!(ga.cpus.contains(mine as usize), "{}", ga.cpus);
    for p in others.iter().chain([&b]) {
        assert!(!cpus(p).contains(mine as usize), "{}", cpus(p));
    }
    // The holder exits: the CPU goes back to the plan.
    w.os.exit(12);
    w.exited(12);
    w.tick(Instant::now() + Duration::from_millis(200));
    assert_eq!(w.core.status(ROOT).cells[0].held, "");
}

#[test]
fn a_guarantee_cannot_take_a_held_cpu_and_a_hold_cannot_break_one() {
    // (One user's guarantees and holds together may take every CPU here,
    // twice over: what is judged is the holds against the guarantees.)
    let mut w = world_configured(2, |c| c.limits.guaranteed_cpus = 4);
    proc_of(&w, 50, 1000);
    let e = acquire(&mut w, 50, vec![cpu(1, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    // Both CPUs exclusively: one is held, so not now.
    proc_of(&w, 10, 1000);
    let full = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    let e = register(&mut w, ALICE, "all", full, vec![10], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    release(&mut w, 50, vec![cpu(1, false)]);
    w.tick(Instant::now() + Duration::from_millis(200));
    let all = page(register(&mut w, ALICE, "all", full, vec![10], false)).2;
    assert_eq!(cpus(&all), set("0-1"));
    // Now a hold outside every cell would break that guarantee: it waits.
    let e = acquire(&mut w, 50, vec![cpu(0, false)]);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("guarantees"), "{}", message(&e));
    assert_eq!(cpus(&all), set("0-1"));
}

#[test]
fn the_reserve_is_left_to_processes_that_asked_for_nothing() {
    let mut w = world_configured(4, |c| c.reserve = 1);
    let reserve = w.core.status(ROOT).machine.reserve;
    let r: u32 = reserve.parse().expect("one CPU");
    proc_of(&w, 50, 1000);
    let e = acquire(&mut w, 50, vec![cpu(r, false)]);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    assert!(message(&e).contains("reserve"), "{}", message(&e));
    let e = acquire(&mut w, 50, vec![cpu(r, true)]);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
}

#[test]
fn a_cpu_shared_in_time_is_never_held_exclusively() {
    let mut w = world(4);
    let spec = CellSpec {
        min: 1,
        time: TimeContract::Fraction {
            ppm: 500_000,
            slice_us: 0,
        },
        ..Default::default()
    };
    let t = cell(&mut w, "t", spec, 10);
    let mine = cpus(&t).first().unwrap() as u32;
    let e = acquire(&mut w, 10, vec![cpu(mine, false)]);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    let e = acquire(&mut w, 10, vec![cpu(mine, true)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
}

#[test]
fn one_cpu_has_one_holder() {
    let mut w = world(4);
    let _a = cell(&mut w, "a", CellSpec::default(), 10);
    let e = acquire(&mut w, 10, vec![cpu(0, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    // Half of it is still free in the ledger, but it is a's: a process
    // outside every cell may not hold the rest exclusively.
    release(&mut w, 10, vec![cpu(0, false)]);
    let half = |shared| LedgerItem {
        amount: 0.5,
        ..cpu(0, shared)
    };
    let e = acquire(&mut w, 10, vec![half(false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    proc_of(&w, 50, 1000);
    let e = acquire(&mut w, 50, vec![half(false)]);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(
        message(&e).contains("held exclusively by process 10"),
        "{}",
        message(&e)
    );
}

/// The ledger's `io` devices, by index (from `KindList`).
fn io_devices(w: &mut World) -> Vec<String> {
    let json = kind_listing(w, ROOT, "");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "io")
        .map(|k| {
            k["devices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|d| d["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn io_weights_held_in_a_cell_become_the_cells() {
    let mut w = world(2);
    let devs = io_devices(&mut w);
    if !allot_testkit::prerequisite(!devs.is_empty(), "a block device") {
        return;
    }
    let _a = cell(&mut w, "a", CellSpec::default(), 10);
    let id = w.core.status(ROOT).cells[0].id;
    let io = |amount: f64| LedgerItem {
        kind: "io".into(),
        dev: 0,
        amount,
        shared: true,
    };
    let last = |w: &World| {
        w.dry.calls().into_iter().rev().find_map(|c| match c {
            allot_enforce::dryrun::Call::IoWeights(cell, weights) => Some((cell, weights)),
            _ => None,
        })
    };
    let e = acquire(&mut w, 10, vec![io(600.0)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let want: allot_enforce::IoWeights = [(devs[0].clone(), 600)].into_iter().collect();
    assert_eq!(last(&w), Some((id, want)));
    // A second process of the cell asks for more: the cell gets the most.
    w.os.spawn(11, 10, 1, &CpuSet::first_n(2));
    w.os.set_uid(11, 1000);
    let e = acquire(&mut w, 11, vec![io(900.0)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(last(&w).unwrap().1[&devs[0]], 900);
    release(&mut w, 11, vec![io(900.0)]);
    assert_eq!(last(&w).unwrap().1[&devs[0]], 600);
    release(&mut w, 10, vec![io(600.0)]);
    assert_eq!(last(&w), Some((id, Default::default())));
    // Outside every cell, nothing is set for any cell.
    let before = w.dry.calls().len();
    proc_of(&w, 50, 1000);
    let e = acquire(&mut w, 50, vec![io(500.0)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(w.dry.calls().len(), before);
}

#[test]
fn the_cells_other_processes_keep_off_a_cpu_one_of_them_holds() {
    let mut w = world(4);
    // Cell a: processes 10 (threads 10 and 11) and 20.
    w.os.spawn(10, 0, 2, &CpuSet::first_n(4));
    w.os.set_uid(10, 1000);
    w.os.spawn(20, 0, 1, &CpuSet::first_n(4));
    w.os.set_uid(20, 1000);
    let spec = CellSpec::default();
    let a = page(register(&mut w, ALICE, "a", spec, vec![10, 20], false)).2;
    assert_eq!(cpus(&a), set("0-3"));
    let mask = |w: &World, tid: u32| {
        use allot_enforce::os::Os;
        w.os.affinity(tid).unwrap()
    };
    // The program pinned thread 11 to CPU 3 itself.
    {
        use allot_enforce::os::Os;
        w.os.set_affinity(11, &set("3")).unwrap();
    }
    let e = acquire(&mut w, 20, vec![cpu(2, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(
        mask(&w, 10),
        set("0-1,3"),
        "the other process keeps off CPU 2"
    );
    assert_eq!(
        mask(&w, 11),
        set("3"),
        "a thread pinned elsewhere is left alone"
    );
    assert_eq!(mask(&w, 20), set("0-3"), "the holder keeps the grant");
    // The holder's block pins its thread; ticks leave it so.
    {
        use allot_enforce::os::Os;
        w.os.set_affinity(20, &set("2")).unwrap();
    }
    w.tick(Instant::now());
    assert_eq!(mask(&w, 20), set("2"));
    assert_eq!(mask(&w, 10), set("0-1,3"));
    // Given back (and past the linger), the other process has it again.
    release(&mut w, 20, vec![cpu(2, false)]);
    w.tick(Instant::now() + Duration::from_millis(200));
    for tid in [10, 11] {
        assert_eq!(mask(&w, tid), set("0-3"), "thread {tid}");
    }
    assert_eq!(
        mask(&w, 20),
        set("2"),
        "the holder's own threads are its own"
    );
}

#[test]
fn behind_a_cpuset_the_kept_off_masks_name_every_cpu_but_the_held_one() {
    // On a cgroup backend the kernel keeps a mask the broker sets through
    // later cpuset changes: a mask of the grant of the moment would stop
    // the threads growing with their cell, so the masks name every CPU
    // (but the held one) and leave the rest to the cpuset.
    let os = allot_enforce::os::FakeOs::new();
    for (pid, uid) in [(1, 0), (2, 1000), (3, 1001)] {
        os.spawn(pid, 0, 1, &CpuSet::first_n(4));
        os.set_uid(pid, uid);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut w = world_with_backend(4, dir, os, allot_enforce::DryRun::new().with_cpusets()).0;
    w.os.spawn(10, 0, 2, &CpuSet::first_n(4));
    w.os.set_uid(10, 1000);
    w.os.spawn(20, 0, 1, &CpuSet::first_n(4));
    w.os.set_uid(20, 1000);
    let a = page(register(
        &mut w,
        ALICE,
        "a",
        CellSpec::default(),
        vec![10, 20],
        false,
    ))
    .2;
    assert_eq!(cpus(&a), set("0-3"));
    let mask = |w: &World, tid: u32| {
        use allot_enforce::os::Os;
        w.os.affinity(tid).unwrap()
    };
    // The program pinned thread 11 to CPUs 2-3 itself: it keeps the rest
    // of its own mask.
    {
        use allot_enforce::os::Os;
        w.os.set_affinity(11, &set("2-3")).unwrap();
    }
    let e = acquire(&mut w, 20, vec![cpu(2, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let every = CpuSet::first_n(allot_topo::MAX_CPUS);
    assert_eq!(mask(&w, 10), every.difference(&set("2")));
    assert_eq!(mask(&w, 11), set("3"));
    release(&mut w, 20, vec![cpu(2, false)]);
    w.tick(Instant::now() + Duration::from_millis(200));
    for tid in [10, 11] {
        assert_eq!(mask(&w, tid), every, "thread {tid}");
    }
}

#[test]
fn a_cell_that_holds_cpus_and_changes_its_spec_is_admitted_at_the_new_one() {
    // Cell a holds CPU 0 (planned with a minimum of 1), then asks for a
    // minimum of 3: beside it an exclusive newcomer of 2 no longer fits 4.
    let mut w = world_configured(4, |c| c.limits.guaranteed_cpus = 8);
    let _a = cell(&mut w, "a", CellSpec::default(), 10);
    let id = w.core.status(ROOT).cells[0].id;
    let e = acquire(&mut w, 10, vec![cpu(0, false)]);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    let three = CellSpec {
        min: 3,
        ..Default::default()
    };
    let e = w.handle(
        7,
        ALICE,
        Request::UpdateSpec {
            cell: id,
            spec: three,
        },
        None,
    );
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    proc_of(&w, 30, 1000);
    let two = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    let e = register(&mut w, ALICE, "b", two, vec![30], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
}
