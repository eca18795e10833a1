//! Gathering across processes (`crates/broker/src/gathering.rs`), through
//! the engine: arrivals of dividing policies from several processes are
//! answered after the window, one at a time, each with those of its batch
//! still to choose; a grant, a `KindChosen` or a closed connection lets
//! the next choose. State-machine level: fake processes, dry-run backend.

mod common;

use allot_broker::core::Effect;
use allot_proto::msg::{ErrorCode, LedgerItem, Reply, Request};
use common::*;
use std::time::{Duration, Instant};

/// Process `pid` (a user of its own), on connection `pid`, sends `req`.
fn send(w: &mut World, pid: u32, req: Request) -> Vec<Effect> {
    proc_of(w, pid, 1000 + pid);
    w.handle(pid as u64, peer(pid, 1000 + pid), req, None)
}

/// Process `pid` sends arrival `arrival` with a 100 ms window (long
/// enough that a busy machine does not pass a deadline between two steps
/// of a test).
fn arrive(w: &mut World, pid: u32, arrival: u64) -> Vec<Effect> {
    arrive_with(w, pid, arrival, 100_000)
}

fn arrive_with(w: &mut World, pid: u32, arrival: u64, window_us: u32) -> Vec<Effect> {
    send(
        w,
        pid,
        Request::KindGather {
            arrival,
            window_us,
            sent_ns: allot_proto::window::monotonic_ns(),
        },
    )
}

/// The `Gathered` answers among `effects`: (session, arrival, others).
fn answers(effects: &[Effect]) -> Vec<(u64, u64, u32)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Reply {
                session,
                reply: Reply::Gathered { arrival, others },
                ..
            } => Some((*session, *arrival, *others)),
            _ => None,
        })
        .collect()
}

/// The answers due once the engine's next gathering instant has come
/// (the engine reads the clock too: this waits for it).
fn when_due(w: &mut World) -> Vec<(u64, u64, u32)> {
    let due = w.core.next_gathered().expect("an arrival waits");
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
    let e = w.core.gathered(Instant::now());
    answers(&w.record(e))
}

fn cpus(range: std::ops::Range<u32>) -> Vec<LedgerItem> {
    range
        .map(|n| LedgerItem {
            kind: "cpu".into(),
            dev: n,
            amount: 1.0,
            shared: false,
        })
        .collect()
}

#[test]
fn arrivals_of_three_processes_choose_in_turn_after_the_window() {
    let mut w = world(8);
    let before = Instant::now();
    for pid in [11, 12, 13] {
        let e = arrive(&mut w, pid, 1);
        assert!(answers(&e).is_empty(), "answered before the window closed");
    }
    let due = w.core.next_gathered().unwrap();
    assert!(due >= before + Duration::from_millis(100) - Duration::from_micros(50));
    assert_eq!(
        when_due(&mut w),
        vec![(11, 1, 2)],
        "the first, counting two"
    );
    assert!(
        w.core.next_gathered().unwrap() > Instant::now(),
        "the second waits for the first to choose"
    );
    // The first's grant is its choice: the second is answered with it.
    let e = send(&mut w, 11, Request::kind_try(cpus(0..3)));
    assert!(matches!(reply(&e), Reply::Ok));
    assert_eq!(answers(&e), vec![(12, 1, 1)]);
    // The second says it chose (it waits, say); the third is answered.
    let e = send(&mut w, 12, Request::KindChosen { arrival: 1 });
    assert_eq!(answers(&e), vec![(13, 1, 0)]);
    assert_eq!(w.core.next_gathered(), None);
}

#[test]
fn a_closed_connection_leaves_its_batch_and_lets_the_next_choose() {
    let mut w = world(8);
    arrive(&mut w, 21, 5);
    arrive(&mut w, 22, 5);
    arrive(&mut w, 23, 5);
    assert_eq!(when_due(&mut w), vec![(21, 5, 2)]);
    // The second's connection closes before its turn; the first's too.
    w.session_closed(22);
    let e = w.session_closed(21);
    assert_eq!(answers(&e), vec![(23, 5, 0)], "only the third is left");
}

#[test]
fn arrivals_are_numbered_by_the_client_and_bounded_per_connection() {
    let mut w = world(8);
    // A window of a second: none is answered while the test sends.
    let second = 1_000_000;
    assert_eq!(
        code(&arrive_with(&mut w, 31, 0, second)),
        Some(ErrorCode::Invalid)
    );
    assert!(answers(&arrive_with(&mut w, 31, 1, second)).is_empty());
    assert_eq!(
        code(&arrive_with(&mut w, 31, 1, second)),
        Some(ErrorCode::Invalid),
        "arrival 1 already waits"
    );
    let holdings = allot_broker::config::Limits::default().holdings as u64;
    for n in 2..=holdings {
        assert!(answers(&arrive_with(&mut w, 31, n, second)).is_empty());
    }
    let e = arrive_with(&mut w, 31, holdings + 1, second);
    assert_eq!(code(&e), Some(ErrorCode::Limit), "{:?}", reply(&e));
}
