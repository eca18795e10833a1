//! Newcomers admitted in one turn of the event loop join together: one
//! plan and one CPU-set write each, instead of every arrival rewriting
//! every earlier newcomer's CPUs.

mod common;

use allot_enforce::dryrun::Call;
use allot_proto::msg::Reply;
use allot_spec::CellSpec;
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

    let effects = w.settle();
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
    assert!(w.settle().is_empty());
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
    let effects = w.settle();
    assert!(
        message(&effects).contains("exited before they could join"),
        "{}",
        message(&effects)
    );
    assert!(w.core.status(ROOT).cells.is_empty());
}

/// A world whose backend hands out join files (as cgroup v1 does).
fn world_with_join_files(cpus: usize) -> World {
    let os = allot_enforce::os::FakeOs::new();
    for (pid, uid) in [(1, 0), (2, 1000), (3, 1001)] {
        os.spawn(pid, 0, 1, &allot_topo::CpuSet::first_n(cpus));
        os.set_uid(pid, uid);
    }
    let dir = tempfile::tempdir().unwrap();
    world_with_backend(
        cpus,
        dir,
        os,
        allot_enforce::DryRun::new().with_join_files(),
    )
    .0
}

fn register_joining(
    w: &mut World,
    peer: allot_broker::peer::Peer,
) -> Vec<allot_broker::core::Effect> {
    w.handle(
        7,
        peer,
        allot_proto::msg::Request::Register {
            name: "launcher".into(),
            spec: CellSpec::default(),
            wait: false,
            members: vec![],
            joins_itself: true,
        },
        None,
    )
}

/// The descriptors of the `Registered` reply.
fn fds_of(effects: &[allot_broker::core::Effect]) -> usize {
    effects
        .iter()
        .find_map(|e| match e {
            allot_broker::core::Effect::Reply {
                reply: Reply::Registered { .. },
                fds,
                ..
            } => Some(fds.len()),
            _ => None,
        })
        .expect("registered")
}

#[test]
fn a_launcher_the_broker_trusts_moves_itself_in_with_the_join_files() {
    let mut w = world_with_join_files(4);
    let effects = register_joining(&mut w, ROOT);
    assert_eq!(fds_of(&effects), 2, "the page, then the join file");
    let calls = w.dry.calls();
    assert!(calls.contains(&Call::JoinFiles(1)), "{calls:?}");
    assert!(
        !calls.iter().any(|c| matches!(c, Call::Attach(..))),
        "the broker moved nobody: {calls:?}"
    );
    // It is a member all the same: watched, and shown.
    assert_eq!(w.core.status(ROOT).cells[0].pids, [ROOT.pid]);
    let t = w.core.status(ROOT).cells[0].timeline.clone().unwrap();
    assert!(
        t.steps
            .iter()
            .any(|s| s.step == "joined" && s.detail.ends_with("(moves itself in)")),
        "{t:?}"
    );
}

#[test]
fn another_user_is_never_handed_the_brokers_join_files() {
    // The files are opened with the broker's credentials: a user who
    // could not open them gets the broker's move instead.
    if rustix::process::geteuid().as_raw() == ALICE.uid {
        return; // the broker's own user: trusted by design
    }
    let mut w = world_with_join_files(4);
    let effects = register_joining(&mut w, ALICE);
    assert_eq!(fds_of(&effects), 1, "the page only");
    let calls = w.dry.calls();
    assert!(
        !calls.iter().any(|c| matches!(c, Call::JoinFiles(_))),
        "{calls:?}"
    );
    assert!(calls.contains(&Call::Attach(1, ALICE.pid)), "{calls:?}");
}

#[test]
fn without_join_files_the_broker_moves_the_launcher() {
    let mut w = world(4);
    let effects = register_joining(&mut w, ROOT);
    assert_eq!(fds_of(&effects), 1);
    assert!(w.dry.calls().contains(&Call::Attach(1, ROOT.pid)));
}

/// One more best-effort cell among hundreds stacked on a small machine
/// moves every share by less than the page's thousandth of a CPU: no
/// page is republished for that.
#[test]
fn an_arrival_republishes_no_page_that_would_read_the_same() {
    let mut w = world(2);
    for i in 0..300u32 {
        let pid = 1000 + i;
        proc_of(&w, pid, 0);
        let e = register(&mut w, ROOT, "many", CellSpec::default(), vec![pid], false);
        assert!(matches!(reply(&e), Reply::Registered { .. }), "{e:?}");
    }
    let before: std::collections::HashMap<u64, u64> = w
        .core
        .status(ROOT)
        .cells
        .iter()
        .map(|c| (c.id, c.generation))
        .collect();
    proc_of(&w, 5000, 0);
    register(
        &mut w,
        ROOT,
        "one-more",
        CellSpec::default(),
        vec![5000],
        false,
    );
    let moved = w
        .core
        .status(ROOT)
        .cells
        .iter()
        .filter(|c| before.get(&c.id).is_some_and(|g| *g != c.generation))
        .count();
    assert_eq!(moved, 0, "pages republished with nothing new to read");
}

/// A newcomer released in the same turn (its id guessed before the reply)
/// is answered with an error at the end of the turn; the broker carries on.
#[test]
fn a_newcomer_released_before_the_turn_ends_is_answered_not_joined() {
    let mut w = world(4);
    w.core.batch_arrivals(true);
    proc_of(&w, 300, 0);
    assert!(register(&mut w, ROOT, "brief", CellSpec::default(), vec![300], false).is_empty());
    let released = w.handle(
        7,
        ROOT,
        allot_proto::msg::Request::Release { cell: 1 },
        None,
    );
    assert!(matches!(reply(&released), Reply::Ok), "{released:?}");
    let effects = w.settle();
    assert!(
        message(&effects).contains("released before its processes joined"),
        "{}",
        message(&effects)
    );
    assert!(w.core.status(ROOT).cells.is_empty());
    // The next registration goes through.
    proc_of(&w, 301, 0);
    assert!(register(&mut w, ROOT, "next", CellSpec::default(), vec![301], false).is_empty());
    assert!(matches!(reply(&w.settle()), Reply::Registered { .. }));
}
