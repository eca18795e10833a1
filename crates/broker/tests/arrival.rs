//! Newcomers admitted in one turn of the event loop join together: one
//! plan and one CPU-set write each, instead of every arrival rewriting
//! every earlier newcomer's CPUs.

mod common;

use allot_enforce::dryrun::Call;
use allot_plan::CellSpec;
use allot_proto::msg::Reply;
use common::*;

/// CPU-set writes (`apply`) per cell, and the joins (`attach`: cell, pid).
type Writes = (Vec<(u64, usize)>, Vec<(u64, u32)>);

/// How many CPU-set writes and which joins the backend was asked for.
fn writes(w: &World) -> Writes {
    let calls = w.dry.calls();
    let mut applies: Vec<(u64, usize)> = Vec::new();
    let mut attaches = Vec::new();
    for c in calls {
        match c {
            Call::Apply(id, _) => match applies.iter_mut().find(|(i, _)| *i == id) {
                Some((_, n)) => *n += 1,
                None => applies.push((id, 1)),
            },
            Call::Attach(id, pid) => attaches.push((id, pid)),
            _ => {}
        }
    }
    (applies, attaches)
}

fn newcomers(w: &mut World, n: u32) -> Vec<Vec<allot_broker::core::Effect>> {
    (0..n)
        .map(|i| {
            let pid = 100 + i;
            proc_of(w, pid, 0);
            register(
                w,
                ROOT,
                &format!("p{i}"),
                CellSpec::default(),
                vec![pid],
                false,
            )
        })
        .collect()
}

#[test]
fn a_burst_of_registrations_is_planned_once_and_each_cell_written_once() {
    let mut w = world(8);
    w.core.batch_arrivals(true);
    let before = newcomers(&mut w, 4);
    assert!(
        before.iter().all(|e| e.is_empty()),
        "no reply and no join before the turn ends: {before:?}"
    );
    let (_, attaches) = writes(&w);
    assert!(
        attaches.is_empty(),
        "nobody joined before the grants were written"
    );

    let effects = w.core.settle();
    let (applies, attaches) = writes(&w);
    assert_eq!(
        applies.iter().map(|(_, n)| *n).collect::<Vec<_>>(),
        [1, 1, 1, 1],
        "one CPU-set write per newcomer: {applies:?}"
    );
    assert_eq!(attaches.len(), 4);
    // Every newcomer starts with its share of the burst, not the machine.
    let mut registered = 0;
    for e in effects {
        if let allot_broker::core::Effect::Reply {
            reply: Reply::Registered { .. },
            fds,
            ..
        } = e
        {
            let page = allot_proto::PageMap::open(fds.into_iter().next().unwrap()).unwrap();
            assert_eq!(grant(&page).cpus.len(), 2);
            assert_eq!(grant(&page).threads, 2);
            registered += 1;
        }
    }
    assert_eq!(registered, 4);
    // Nothing left to settle.
    assert!(w.core.settle().is_empty());
}

#[test]
fn one_by_one_each_arrival_rewrites_the_earlier_ones() {
    // What the event loop avoids: the same four registrations answered
    // one by one (as a core driven directly is).
    let mut w = world(16);
    let each = newcomers(&mut w, 8);
    assert!(
        each.iter()
            .all(|e| matches!(reply(e), Reply::Registered { .. }))
    );
    let (applies, _) = writes(&w);
    let total: usize = applies.iter().map(|(_, n)| *n).sum();
    assert!(
        total > 8,
        "each arrival moved the earlier cells: {applies:?}"
    );
}

#[test]
fn a_newcomer_whose_process_died_before_the_turn_ended_is_refused() {
    let mut w = world(4);
    w.core.batch_arrivals(true);
    proc_of(&w, 200, 0);
    assert!(register(&mut w, ROOT, "gone", CellSpec::default(), vec![200], false).is_empty());
    w.os.exit(200);
    let effects = w.core.settle();
    assert!(
        message(&effects).contains("exited before they could join"),
        "{}",
        message(&effects)
    );
    assert!(w.core.status(ROOT).cells.is_empty());
}
