//! What the state machine asks its journal to record, read from the
//! effects it returns (no journal is written here unless a test appends
//! the records itself), and how admission follows the journal's health.

mod common;

use allot_broker::core::Effect;
use allot_broker::journal::Record;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::CellSpec;
use common::*;
use std::time::{Duration, Instant};

fn register_raw(w: &mut World, name: &str, spec: CellSpec, pid: u32, wait: bool) -> Vec<Effect> {
    w.core.handle(
        7,
        ROOT,
        Request::Register {
            name: name.into(),
            spec,
            wait,
            members: vec![pid],
            joins_itself: false,
        },
        None,
    )
}

fn records(effects: &[Effect]) -> Vec<&Record> {
    effects
        .iter()
        .flat_map(|e| match e {
            Effect::Journal(recs) => recs.iter().collect(),
            _ => vec![],
        })
        .collect()
}

#[test]
fn an_admission_asks_first_for_the_cell_and_its_member_to_be_recorded() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let effects = register_raw(&mut w, "a", CellSpec::default(), 100, false);
    // Records come first, in one effect, before the reply.
    assert!(matches!(effects[0], Effect::Journal(_)), "{effects:?}");
    assert_eq!(
        effects
            .iter()
            .filter(|e| matches!(e, Effect::Journal(_)))
            .count(),
        1
    );
    let recs = records(&effects);
    let cell = recs
        .iter()
        .position(|r| matches!(r, Record::Cell { name, .. } if name == "a"))
        .expect("the cell is recorded");
    let member = recs
        .iter()
        .position(|r| matches!(r, Record::Member { member, .. } if member.pid == 100))
        .expect("its process is recorded");
    let next = recs
        .iter()
        .position(|r| matches!(r, Record::NextId { .. }))
        .expect("the id given out is recorded");
    assert!(next < cell && cell < member, "{recs:?}");
    assert!(
        recs.iter().any(|r| matches!(r, Record::Grant { .. })),
        "its first grant is recorded: {recs:?}"
    );
    assert!(matches!(reply(&effects), Reply::Registered { .. }));
}

#[test]
fn a_refused_cell_is_not_recorded() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let effects = register_raw(&mut w, "big", exclusive(3), 100, false);
    assert_eq!(code(&effects), Some(ErrorCode::Never), "{effects:?}");
    assert!(records(&effects).is_empty(), "{effects:?}");
}

#[test]
fn no_cell_is_admitted_while_the_journal_is_behind_and_the_queue_moves_when_it_catches_up() {
    let mut w = world(2);
    for pid in [100, 200, 300] {
        proc_of(&w, pid, 0);
    }
    let (_, _, _pa) = page(register(&mut w, ROOT, "a", exclusive(2), vec![100], false));
    // A cell that waits is queued while the journal holds everything...
    let effects = w.handle(
        8,
        ROOT,
        Request::Register {
            name: "c".into(),
            spec: exclusive(1),
            wait: true,
            members: vec![300],
            joins_itself: false,
        },
        None,
    );
    let Reply::Queued { cell: c, .. } = reply(&effects).clone() else {
        panic!("{effects:?}")
    };

    w.core
        .journaled(&[], Duration::ZERO, Some("No space left on device".into()));
    assert_eq!(w.core.journal_problem(), Some("No space left on device"));
    // A new cell is refused now, with what to do, and nothing is asked to
    // be recorded.
    let effects = register_raw(&mut w, "b", CellSpec::default(), 200, false);
    assert_eq!(code(&effects), Some(ErrorCode::Internal), "{effects:?}");
    let why = message(&effects);
    assert!(
        why.contains("journal") && why.contains("free space"),
        "{why}"
    );
    assert!(records(&effects).is_empty(), "{effects:?}");

    // ...and the queued one stays queued, even with room, while the
    // journal is behind.
    // (Straight to the core: the harness would append the records to its
    // journal, which has room, and say so.)
    w.os.exit(100);
    w.core.exited(100);
    let effects = w.core.tick(Instant::now());
    let admitted = |effects: &[Effect]| {
        effects.iter().any(|e| {
            matches!(e, Effect::Reply { reply: Reply::Registered { cell, .. }, .. } if *cell == c)
        })
    };
    assert!(!admitted(&effects), "{effects:?}");
    assert_eq!(w.core.status(ROOT).queue.len(), 1);

    // Caught up: the next tick admits it, recorded before its answer.
    w.core.journaled(&[], Duration::ZERO, None);
    let effects = w.core.tick(Instant::now());
    assert!(matches!(effects[0], Effect::Journal(_)), "{effects:?}");
    assert!(
        records(&effects)
            .iter()
            .any(|r| matches!(r, Record::Cell { id, .. } if *id == c)),
        "{effects:?}"
    );
    assert!(admitted(&effects), "{effects:?}");
}

#[test]
fn records_made_by_a_step_reach_the_journal() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    let (a, _, _pa) = page(register(
        &mut w,
        ROOT,
        "a",
        CellSpec::default(),
        vec![100],
        false,
    ));
    // The harness appended what the step asked for, as the event loop does.
    assert!(
        w.records
            .iter()
            .any(|r| matches!(r, Record::Cell { id, .. } if *id == a))
    );
    assert!(w.journal.state().cells.contains_key(&a));
    // The cell's timeline shows the append, after the cgroup was made.
    let st = w.core.status(ROOT);
    let steps: Vec<&str> = st.cells[0]
        .timeline
        .as_ref()
        .expect("a timeline")
        .steps
        .iter()
        .map(|s| s.step.as_str())
        .collect();
    let at = |name| steps.iter().position(|s| *s == name);
    assert!(
        at("cgroup").is_some() && at("journal") > at("cgroup"),
        "{steps:?}"
    );
    w.os.exit(100);
    w.exited(100);
    assert!(
        w.records
            .iter()
            .any(|r| matches!(r, Record::End { id } if *id == a))
    );
    assert!(!w.journal.state().cells.contains_key(&a));
}

#[test]
fn a_newcomer_whose_record_could_not_be_written_is_ended_and_refused() {
    let mut w = world(2);
    w.core.batch_arrivals(true);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    // As under the event loop: admitted, its answer waits for the turn's end.
    let effects = register_raw(&mut w, "lost", CellSpec::default(), 100, false);
    let [Effect::Journal(recs)] = &effects[..] else {
        panic!("only records before the turn ends: {effects:?}")
    };
    let id = recs
        .iter()
        .find_map(|r| match r {
            Record::Cell { id, .. } => Some(*id),
            _ => None,
        })
        .expect("the cell's record");
    // The loop's append failed.
    let effects = w
        .core
        .journaled(recs, Duration::ZERO, Some("No space left on device".into()));
    assert_eq!(code(&effects), Some(ErrorCode::Internal), "{effects:?}");
    let why = message(&effects);
    assert!(
        why.contains("journal") && why.contains("free space"),
        "{why}"
    );
    // Ended, recorded so (the rewrite that catches up drops it), and
    // nothing left to join at the turn's end.
    assert!(
        records(&effects)
            .iter()
            .any(|r| matches!(r, Record::End { id: e } if *e == id)),
        "{effects:?}"
    );
    assert!(w.core.status(ROOT).cells.is_empty());
    assert!(w.core.settle().is_empty());
    assert!(
        w.dry
            .calls()
            .iter()
            .any(|c| matches!(c, allot_enforce::Call::Remove(c) if *c == id)),
        "{:?}",
        w.dry.calls()
    );

    // Once it is written again, the next one is admitted and answered at
    // the turn's end, its timeline showing the append.
    let effects = register_raw(&mut w, "kept", CellSpec::default(), 200, false);
    assert_eq!(code(&effects), Some(ErrorCode::Internal), "still behind");
    w.core.journaled(&[], Duration::ZERO, None);
    let effects = register_raw(&mut w, "kept", CellSpec::default(), 200, false);
    let [Effect::Journal(recs)] = &effects[..] else {
        panic!("{effects:?}")
    };
    assert!(w.core.journaled(recs, Duration::ZERO, None).is_empty());
    let effects = w.core.settle();
    assert!(
        matches!(reply(&effects), Reply::Registered { .. }),
        "{effects:?}"
    );
}
