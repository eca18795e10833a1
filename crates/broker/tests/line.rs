//! The ledger's line: requests of different processes that wait for the
//! same devices are served in the order they asked (`ledger/line.rs`).
//! State-machine level: fake processes, dry-run backend.

mod common;

use allot_broker::core::Effect;
use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use common::*;
use std::time::{Duration, Instant};

fn cpu(n: u32) -> Vec<LedgerItem> {
    vec![LedgerItem {
        kind: "cpu".into(),
        dev: n,
        amount: 1.0,
        shared: false,
    }]
}

/// Process `pid` of a user of its own (uid 1000 + pid: the per-user
/// bounds are not what is tested), on connection `pid`, asks for `items`
/// for its waiting request `place` (0: a try), from a thread that holds
/// nothing.
fn ask(w: &mut World, pid: u32, items: Vec<LedgerItem>, place: u64) -> Vec<Effect> {
    ask_as(w, pid, items, place, (false, false))
}

/// [`ask`] from a thread that is `holding` items already or not, for
/// devices a policy chose (`any_device`: others of the kind would do) or
/// not.
fn ask_as(
    w: &mut World,
    pid: u32,
    items: Vec<LedgerItem>,
    place: u64,
    (holding, any_device): (bool, bool),
) -> Vec<Effect> {
    proc_of(w, pid, 1000 + pid);
    w.handle(
        pid as u64,
        peer(pid, 1000 + pid),
        Request::KindAcquire {
            items,
            place,
            holding,
            any_device,
        },
        None,
    )
}

fn release(w: &mut World, pid: u32, items: Vec<LedgerItem>) -> Vec<Effect> {
    w.handle(
        pid as u64,
        peer(pid, 1000 + pid),
        Request::KindRelease { items },
        None,
    )
}

/// Requests in line, as the ledger's listing says.
fn waiting(w: &mut World) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&kind_listing(w, ROOT, "cpu")).unwrap();
    v["in_line"]
        .as_u64()
        .expect("the listing says how many wait in line")
}

fn granted(e: &[Effect]) -> bool {
    matches!(reply(e), Reply::Ok)
}

/// The `InLine` answer: who is ahead, and the CPUs free to it.
fn in_line(e: &[Effect]) -> (u32, Vec<u32>) {
    match reply(e) {
        Reply::InLine { ahead, free } => (
            *ahead,
            free.iter()
                .filter(|f| f.kind == "cpu" && !f.shared)
                .map(|f| f.dev)
                .collect(),
        ),
        other => panic!("not kept in line: {other:?}"),
    }
}

#[test]
fn a_freed_device_goes_to_the_earliest_waiter_whoever_asks_first() {
    let mut w = world(4);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    // b waits for CPU 0 and is told what else is free; c waits behind it.
    assert_eq!(in_line(&ask(&mut w, 102, cpu(0), 1)), (0, vec![1, 2, 3]));
    assert_eq!(in_line(&ask(&mut w, 103, cpu(0), 1)), (1, vec![1, 2, 3]));
    // Asking again keeps a place: b is still first.
    assert_eq!(in_line(&ask(&mut w, 102, cpu(0), 1)), (0, vec![1, 2, 3]));
    // A place reserves its devices against later requests of others, and
    // only those: CPU 1 is nobody's.
    assert!(granted(&ask(&mut w, 104, cpu(1), 0)));
    release(&mut w, 101, cpu(0));
    // CPU 0 is free, but a newcomer's try and c (asking again before b)
    // are refused: b asked first.
    let e = ask(&mut w, 105, cpu(0), 0);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("wait for it first"), "{}", message(&e));
    assert_eq!(in_line(&ask(&mut w, 103, cpu(0), 1)), (1, vec![2, 3]));
    assert!(granted(&ask(&mut w, 102, cpu(0), 1)));
    // b was served and left the line; c is first now.
    assert_eq!(waiting(&mut w), 1);
    release(&mut w, 102, cpu(0));
    assert!(granted(&ask(&mut w, 103, cpu(0), 1)));
    assert_eq!(waiting(&mut w), 0);
}

#[test]
fn a_try_holds_no_place() {
    let mut w = world(2);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    let e = ask(&mut w, 102, cpu(0), 0);
    assert_eq!(code(&e), Some(ErrorCode::Refused));
    release(&mut w, 101, cpu(0));
    // The try that failed is not ahead of anybody.
    assert!(granted(&ask(&mut w, 103, cpu(0), 0)));
}

#[test]
fn a_waiter_that_leaves_or_dies_leaves_the_line_at_once() {
    let mut w = world(4);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    in_line(&ask(&mut w, 102, cpu(0), 7));
    in_line(&ask(&mut w, 103, cpu(0), 7));
    in_line(&ask(&mut w, 104, cpu(0), 7));
    release(&mut w, 101, cpu(0));
    // b gives its place up (met another way, or gave up): its KindLeave
    // lets the next one through, and nobody needs it answered.
    let e = w.handle(102, peer(102, 1102), Request::KindLeave { place: 7 }, None);
    assert!(
        !e.iter()
            .any(|e| matches!(e, Effect::Reply { session: 102, .. }))
    );
    // c's connection ends (its process died): d is first.
    w.session_closed(103);
    assert!(granted(&ask(&mut w, 104, cpu(0), 7)));
    // A process that dies while it waits leaves too when the broker hears
    // of its end (even if its connection outlived it in a child).
    release(&mut w, 104, cpu(0));
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    in_line(&ask(&mut w, 105, cpu(0), 1));
    assert!(
        granted(&ask(&mut w, 106, cpu(1), 0)),
        "holds, so it is watched"
    );
    in_line(&ask(&mut w, 106, cpu(0), 2));
    release(&mut w, 101, cpu(0));
    w.os.exit(105);
    w.exited(105);
    assert!(granted(&ask(&mut w, 106, cpu(0), 2)));
}

#[test]
fn a_waiter_never_holds_back_a_nested_request_of_a_process_it_waits_on() {
    let mut w = world(8);
    // h holds CPU 0; p waits for CPUs 0 and 1 (all or nothing).
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    let both = [cpu(0), cpu(1)].concat();
    assert_eq!(
        in_line(&ask(&mut w, 102, both, 1)),
        (0, vec![1, 2, 3, 4, 5, 6, 7])
    );
    // Another thread of h, holding nothing, waits its turn: h's first
    // thread gives CPU 0 back without it.
    assert_eq!(in_line(&ask(&mut w, 101, cpu(1), 2)).0, 1, "p is ahead");
    w.handle(101, peer(101, 1101), Request::KindLeave { place: 2 }, None);
    // But h's thread that holds CPU 0 needs CPU 1 as well before it can
    // give CPU 0 back: p waits on h, so that thread goes ahead (behind p,
    // neither would ever be met).
    assert!(granted(&ask_as(&mut w, 101, cpu(1), 3, (true, false))));
    // Anyone else still waits behind p for CPU 1.
    release(&mut w, 101, cpu(1));
    let e = ask(&mut w, 103, cpu(1), 0);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
}

#[test]
fn a_process_is_never_held_back_by_its_own_places() {
    let mut w = world(2);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    in_line(&ask(&mut w, 102, cpu(0), 1));
    release(&mut w, 101, cpu(0));
    // Another thread of b asks without a place: its own waiting thread is
    // b's runtime's to order, not the broker's.
    assert!(granted(&ask(&mut w, 102, cpu(0), 0)));
}

#[test]
fn places_per_connection_are_bounded() {
    let mut w = world_configured(2, |c| c.limits.holdings = 2);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    in_line(&ask(&mut w, 102, cpu(0), 1));
    in_line(&ask(&mut w, 102, cpu(0), 2));
    // Asking again under a place it has is no new place.
    in_line(&ask(&mut w, 102, cpu(0), 2));
    let e = ask(&mut w, 102, cpu(0), 3);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{}", message(&e));
}

#[test]
fn a_place_whose_client_stops_asking_leaves_after_the_grace() {
    let mut w = world(2);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    in_line(&ask(&mut w, 102, cpu(0), 1));
    // The ledger changes; b's client never asks again (a well-behaved one
    // does at once: its watcher wakes it).
    release(&mut w, 101, cpu(0));
    let t0 = Instant::now();
    w.tick(t0);
    let e = ask(&mut w, 103, cpu(0), 0);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "b still first");
    // Past the grace (two seconds), b's place is gone.
    w.tick(t0 + Duration::from_secs(3));
    assert_eq!(waiting(&mut w), 0);
    assert!(granted(&ask(&mut w, 103, cpu(0), 0)));
}

/// Parks process `pid`'s watch (on a connection of its own) at the
/// ledger's epoch now, with one thread waiting.
fn watch(w: &mut World, pid: u32) {
    let v: serde_json::Value = serde_json::from_str(&kind_listing(w, ROOT, "cpu")).unwrap();
    let epoch = v["epoch"].as_u64().unwrap();
    let e = w.handle(
        5000 + pid as u64,
        peer(pid, 1000 + pid),
        Request::KindWatch { epoch, waiting: 1 },
        None,
    );
    assert!(e.is_empty(), "parked: {e:?}");
}

/// The places that the watch of process `pid` is told are due, with the
/// CPUs free to each (exclusively), if `effects` answer it.
fn due_free(effects: &[Effect], pid: u32) -> Option<Vec<(u64, Vec<u32>)>> {
    effects.iter().find_map(|e| match e {
        Effect::Reply {
            session,
            reply: Reply::Changed { due, .. },
            ..
        } if *session == 5000 + pid as u64 => Some(
            due.iter()
                .map(|d| {
                    let cpus = d.free.iter().filter(|f| f.kind == "cpu" && !f.shared);
                    (d.place, cpus.map(|f| f.dev).collect())
                })
                .collect(),
        ),
        _ => None,
    })
}

/// The places that the watch of process `pid` is told are due, if
/// `effects` answer it.
fn due_of(effects: &[Effect], pid: u32) -> Option<Vec<u64>> {
    due_free(effects, pid).map(|d| d.into_iter().map(|(place, _)| place).collect())
}

/// The pids whose watches `effects` answer.
fn woken(effects: &[Effect]) -> Vec<u32> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reply {
                session,
                reply: Reply::Changed { .. },
                ..
            } => Some((*session - 5000) as u32),
            _ => None,
        })
        .collect()
}

#[test]
fn a_policy_waits_for_any_cpu_and_a_freed_one_wakes_only_the_first_in_line() {
    let mut w = world(2);
    assert!(granted(&ask(&mut w, 101, cpu(0), 0)));
    assert!(granted(&ask(&mut w, 102, cpu(1), 0)));
    // Two policies wait, each having chosen one CPU (any would do).
    let any = (false, true);
    assert_eq!(in_line(&ask_as(&mut w, 103, cpu(0), 1, any)), (0, vec![]));
    assert_eq!(in_line(&ask_as(&mut w, 104, cpu(1), 1, any)).0, 1);
    watch(&mut w, 103);
    watch(&mut w, 104);
    // CPU 1 comes free: only the first in line is woken, and it is its,
    // though it chose CPU 0.
    assert_eq!(woken(&release(&mut w, 102, cpu(1))), vec![103]);
    let e = ask_as(&mut w, 104, cpu(1), 1, any);
    assert_eq!(in_line(&e), (1, vec![]), "the second does not overtake");
    let e = ask_as(&mut w, 103, cpu(1), 1, any);
    assert!(granted(&e));
    assert_eq!(woken(&e), Vec::<u32>::new(), "nothing free for the second");
    // CPU 0 comes free: the second, now first, is woken.
    assert_eq!(woken(&release(&mut w, 101, cpu(0))), vec![104]);
    assert!(granted(&ask_as(&mut w, 104, cpu(0), 1, any)));
}

#[test]
fn a_wake_up_names_the_places_the_free_cpus_are_for_one_each() {
    let mut w = world(4);
    for (pid, n) in [(101, 0), (102, 1), (103, 2), (104, 3)] {
        assert!(granted(&ask(&mut w, pid, cpu(n), 0)));
    }
    // Three threads of one process wait for any CPU (its places 1, 2 and
    // 3), then one thread of another process.
    let any = (false, true);
    for place in 1..=3 {
        in_line(&ask_as(&mut w, 110, cpu(0), place, any));
    }
    in_line(&ask_as(&mut w, 111, cpu(0), 1, any));
    watch(&mut w, 110);
    watch(&mut w, 111);
    // One CPU comes free: the process first in line is woken, told of its
    // first place alone (its others would be refused); the other process
    // sleeps on.
    let e = release(&mut w, 101, cpu(0));
    assert_eq!(woken(&e), vec![110]);
    assert_eq!(due_of(&e, 110), Some(vec![1]));
    // Two more come free before it asks: a watch parked now is answered at
    // once, with a place for each free CPU, first in line first.
    release(&mut w, 102, cpu(1));
    release(&mut w, 103, cpu(2));
    let e = w.handle(
        5110,
        peer(110, 1110),
        Request::KindWatch {
            epoch: 0,
            waiting: 3,
        },
        None,
    );
    assert_eq!(due_of(&e, 110), Some(vec![1, 2, 3]));
    // Each is told what is free to it: what the places ahead count on
    // (the first free CPU each) is not.
    assert_eq!(
        due_free(&e, 110),
        Some(vec![(1, vec![0, 1, 2]), (2, vec![1, 2]), (3, vec![2])])
    );
    // Its places are served; the fourth CPU is the other process's.
    for place in 1..=3 {
        let n = place as u32 - 1;
        assert!(granted(&ask_as(&mut w, 110, cpu(n), place, any)));
    }
    let e = release(&mut w, 104, cpu(3));
    assert_eq!(woken(&e), vec![111]);
    assert_eq!(due_of(&e, 111), Some(vec![1]));
}
