//! Best effort is never refused: while guarantees take every CPU, a
//! best-effort cell is admitted paused (frozen, holding no CPU), and it
//! runs again when a CPU frees. Without a freezer, the broker keeps a CPU
//! for best-effort cells and refuses them while none is left.
//! State-machine level (fake processes, dry-run backend).

mod common;

use allot_enforce::DryRun;
use allot_enforce::gate::GateCall;
use allot_proto::msg::{ErrorCode, Reply};
use allot_spec::CellSpec;
use common::*;

#[test]
fn a_best_effort_cell_is_paused_while_guarantees_take_every_cpu_and_resumes() {
    let mut w = world(2);
    for pid in [100, 200, 300] {
        proc_of(&w, pid, 0);
    }
    let (_big, _, _pb) = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![100],
        false,
    ));
    // Admitted at once, with no CPU: paused.
    let e = register(&mut w, ROOT, "make", CellSpec::default(), vec![200], false);
    assert!(
        matches!(reply(&e), Reply::Registered { .. }),
        "{}",
        message(&e)
    );
    let (make, _, pm) = page(e);
    assert!(grant(&pm).cpus.is_empty(), "{}", grant(&pm).cpus);
    assert_eq!(w.dry.gate_calls(), [GateCall::Close(make)]);
    let st = w.core.status(ROOT);
    let shown = st.cells.iter().find(|c| c.id == make).unwrap();
    let paused = shown.paused.as_ref().expect("shown paused");
    assert!(paused.reason.contains("guaranteed"), "{paused:?}");
    // Its process joined (frozen), and its cgroup runs on CPUs it may use.
    assert!(shown.pids.contains(&200));
    // The guarantee is whole: nothing of "make" shares its CPUs.
    let big = st.cells.iter().find(|c| c.name == "big").unwrap();
    assert_eq!(big.cpus, "0-1");
    // A guarantee asked for now is not delayed by the paused cell: it is
    // queued behind "big" alone, and so is a second best-effort cell
    // admitted (paused too).
    let e = register(&mut w, ROOT, "one", exclusive(1), vec![300], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{}", message(&e));
    // "big" ends: "one" gets its CPU, "make" the other, and is thawed.
    w.os.exit(100);
    let _ = w.exited(100);
    let g = grant(&pm);
    assert_eq!(g.cpus.len(), 1, "{}", g.cpus);
    assert_eq!(
        w.dry.gate_calls(),
        [GateCall::Close(make), GateCall::Open(make)]
    );
    let st = w.core.status(ROOT);
    assert!(
        st.cells.iter().all(|c| c.paused.is_none()),
        "{:?}",
        st.cells
    );
    assert_eq!(st.cells.len(), 2, "make and one");
}

#[test]
fn a_guarantee_takes_the_last_cpu_from_best_effort_cells_which_pause() {
    let mut w = world(2);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let (make, _, pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![100],
        false,
    ));
    assert_eq!(grant(&pm).cpus.len(), 2);
    // The whole machine, guaranteed: admitted, and "make" pauses.
    let e = register(&mut w, ROOT, "big", exclusive(2), vec![200], false);
    assert!(
        matches!(reply(&e), Reply::Registered { .. }),
        "{}",
        message(&e)
    );
    assert!(grant(&pm).cpus.is_empty());
    assert_eq!(w.dry.gate_calls(), [GateCall::Close(make)]);
    // Its cgroup was never written empty.
    assert!(
        w.dry.calls().iter().all(|c| !matches!(
            c,
            allot_enforce::dryrun::Call::Apply(id, a) if *id == make && a.cpus.is_empty()
        )),
        "{:?}",
        w.dry.calls()
    );
    // Ended while paused: nothing is thawed by the broker (the backend's
    // removal does), and the pause is forgotten.
    w.os.exit(100);
    let _ = w.exited(100);
    assert_eq!(w.dry.gate_calls(), [GateCall::Close(make)]);
    assert!(w.core.status(ROOT).cells.iter().all(|c| c.paused.is_none()));
}

#[test]
fn a_paused_cell_is_frozen_before_a_guarantee_grows_into_its_cpus() {
    use allot_enforce::dryrun::Call;
    let mut w = world(2);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let (make, _, _pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let before = w.dry.calls().len();
    let (big, _, _) = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![200],
        false,
    ));
    let calls = w.dry.calls()[before..].to_vec();
    let frozen = calls
        .iter()
        .position(|c| *c == Call::Gate(GateCall::Close(make)))
        .unwrap_or_else(|| panic!("make was not frozen: {calls:?}"));
    let grown = calls
        .iter()
        .position(|c| matches!(c, Call::Apply(id, a) if *id == big && !a.cpus.is_empty()))
        .unwrap_or_else(|| panic!("big got no CPUs: {calls:?}"));
    assert!(
        frozen < grown,
        "big was given make's CPUs before make was frozen: {calls:?}"
    );
}

#[test]
fn a_freeze_that_left_threads_running_is_sent_again_until_they_stop() {
    let mut w = world(2);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let (make, _, _pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![100],
        false,
    ));
    // Some thread of "make" keeps running whatever is asked.
    w.dry.set_gate_stopped(Some(false));
    let _ = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![200],
        false,
    ));
    let closes = |w: &World| {
        w.dry
            .gate_calls()
            .iter()
            .filter(|g| **g == GateCall::Close(make))
            .count()
    };
    // The reconcile waited (bounded) and sent it again meanwhile.
    let after_register = closes(&w);
    assert!(after_register >= 2, "{:?}", w.dry.gate_calls());
    // Every tick sends it again while threads run ...
    w.tick(std::time::Instant::now());
    assert_eq!(closes(&w), after_register + 1, "{:?}", w.dry.gate_calls());
    // ... and not once they all stopped.
    w.dry.set_gate_stopped(Some(true));
    w.tick(std::time::Instant::now());
    assert_eq!(closes(&w), after_register + 1, "{:?}", w.dry.gate_calls());
}

#[test]
fn without_a_freezer_one_cpu_stays_with_best_effort_cells() {
    let dir = tempfile::tempdir().unwrap();
    let (mut w, _) = world_with_backend(2, dir, Default::default(), DryRun::new().without_gates());
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let _ = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![100],
        false,
    ));
    let e = register(&mut w, ROOT, "make", CellSpec::default(), vec![200], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("best-effort cell needs one unguaranteed CPU"));
}

#[test]
fn a_broker_that_exits_thaws_its_paused_cells() {
    let mut w = world(2);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let _ = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![100],
        false,
    ));
    let (make, _, _pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![200],
        false,
    ));
    w.shutdown();
    assert_eq!(
        w.dry.gate_calls(),
        [GateCall::Close(make), GateCall::Open(make)]
    );
}

/// With isolation on, an exclusive cell is made a kernel partition over
/// its grant (`Enforcer::set_partition`), a shared one is not, and a
/// partition is asked again when the cell's CPUs change.
#[test]
fn isolation_makes_exclusive_cells_partitions_over_their_grants() {
    use allot_enforce::Call;
    let root = tempfile::tempdir().unwrap();
    let mut w = world_configured(4, |c| {
        c.isolate = true;
        // A fixture tree, not this machine's /proc and /sys.
        c.isolate_root = root.path().to_path_buf();
    });
    proc_of(&w, 100, 0);
    proc_of(&w, 101, 0);
    let exclusive = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    let (ex, _, p) = page(register(&mut w, ROOT, "ex", exclusive, vec![100], false));
    let _shared = page(register(
        &mut w,
        ROOT,
        "shared",
        CellSpec::default(),
        vec![101],
        false,
    ));
    let partitions = |w: &World| -> Vec<(u64, Option<allot_topo::CpuSet>)> {
        w.dry
            .calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Partition(id, cpus) => Some((id, cpus)),
                _ => None,
            })
            .collect()
    };
    // Alone, it held every CPU; beside the shared cell, its two: each
    // grant made it a partition again, the last over what it holds now.
    let made = partitions(&w);
    assert!(made.iter().all(|(id, _)| *id == ex), "{made:?}");
    assert_eq!(made.last(), Some(&(ex, Some(grant(&p).cpus))), "{made:?}");
    assert!(
        made.windows(2).all(|m| m[0] != m[1]),
        "no repeats: {made:?}"
    );
    // Nothing changes: nothing is asked again.
    let n = made.len();
    let _ = w.tick(std::time::Instant::now());
    assert_eq!(partitions(&w).len(), n);
}

/// Partitions need no `isolate` (they change only allot's own cgroups):
/// by default an exclusive cell is made one with the mover off, and
/// `partitions = false` makes none.
#[test]
fn exclusive_cells_are_partitions_by_default_and_not_when_turned_off() {
    use allot_enforce::Call;
    let exclusive = CellSpec {
        min: 2,
        exclusive: true,
        ..Default::default()
    };
    // Partitions asked for, and whether the cell was made where a
    // partition can be (`create_exclusive`: beside allot's directory
    // before 6.7).
    let asked = |partitions: bool| -> (usize, bool) {
        let mut w = world_configured(4, |c| {
            assert!(!c.isolate, "the mover is off by default");
            c.partitions = partitions;
        });
        proc_of(&w, 100, 0);
        let (ex, _, _p) = page(register(&mut w, ROOT, "ex", exclusive, vec![100], false));
        let calls = w.dry.calls();
        let made_apart = calls.contains(&Call::CreateExclusive(ex));
        assert_ne!(made_apart, calls.contains(&Call::Create(ex)), "{calls:?}");
        let n = calls
            .iter()
            .filter(|c| matches!(c, Call::Partition(_, Some(_))))
            .count();
        (n, made_apart)
    };
    let (n, apart) = asked(true);
    assert!(n >= 1 && apart, "the default makes a partition");
    assert_eq!(asked(false), (0, false), "partitions = false makes none");
}

/// Never silent: an exclusive cell's status says whether the kernel made
/// it a partition, and when it could not (a kernel before 6.7, here as
/// the backend says it), why; a shared cell says nothing; with
/// `partitions = false` the configuration is the reason.
#[test]
fn status_says_whether_an_exclusive_cell_is_a_partition_and_why_not() {
    use allot_enforce::os::FakeOs;
    let why = "this kernel has no cpuset.cpus.exclusive (before 6.7)";
    let partition_of = |dry: DryRun, partitions: bool| {
        let os = FakeOs::new();
        for pid in [1, 100, 101] {
            os.spawn(pid, 0, 1, &allot_topo::CpuSet::first_n(4));
        }
        os.set_uid(1, 0);
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = allot_broker::Config::new(dir.path().join("s.sock"));
        cfg.partitions = partitions;
        let (mut w, _) = world_from(4, dir, os, dry, cfg);
        let (ex, _, _p) = page(register(&mut w, ROOT, "ex", exclusive(2), vec![100], false));
        let (shared, _, _q) = page(register(
            &mut w,
            ROOT,
            "shared",
            CellSpec::default(),
            vec![101],
            false,
        ));
        let st = w.core.status(ROOT);
        let of = |id: u64| {
            st.cells
                .iter()
                .find(|c| c.id == id)
                .unwrap()
                .partition
                .clone()
        };
        assert_eq!(of(shared), None, "a shared cell is no partition's business");
        of(ex).expect("an exclusive cell says")
    };
    let made = partition_of(DryRun::new(), true);
    assert!(made.isolated && made.why_not.is_empty(), "{made:?}");
    let refused = partition_of(DryRun::new().without_partitions(why), true);
    assert!(!refused.isolated, "{refused:?}");
    assert_eq!(refused.why_not, why);
    let off = partition_of(DryRun::new(), false);
    assert!(
        !off.isolated && off.why_not.contains("partitions = false"),
        "{off:?}"
    );
}

/// A broker killed while a best-effort cell is paused: the next one adopts
/// the cell still frozen and keeps it paused (its journaled grant had no
/// CPU), so it never runs on the exclusive cell's CPUs in between; a cell
/// that was not paused is thawed (a broker killed mid-window left it
/// frozen).
#[test]
fn a_restarted_broker_keeps_a_paused_cell_frozen_and_thaws_the_others() {
    use allot_enforce::os::FakeOs;
    use allot_topo::CpuSet;
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    for pid in [1, 100, 200] {
        os.spawn(pid, 0, 1, &CpuSet::first_n(2));
    }
    os.set_uid(1, 0);
    let dry = DryRun::new();
    let (mut w, _) = world_with_backend(2, dir, os.clone(), dry.clone());
    let (big, _, _pb) = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![100],
        false,
    ));
    let (make, _, _pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![200],
        false,
    ));
    assert_eq!(dry.gate_calls(), [GateCall::Close(make)]);
    // Killed: nothing of its own clean-up runs.
    let World { core, _dir, .. } = w;
    std::mem::forget(core);
    let before = dry.gate_calls().len();
    let (w2, _) = world_with_backend(2, _dir, os, dry.clone());
    let after: Vec<GateCall> = dry.gate_calls()[before..].to_vec();
    assert!(
        !after.contains(&GateCall::Open(make)),
        "the paused cell was never thawed: {after:?}"
    );
    assert!(
        after.contains(&GateCall::Open(big)),
        "the other was: {after:?}"
    );
    let st = w2.core.status(ROOT);
    let shown = st.cells.iter().find(|c| c.id == make).unwrap();
    assert!(shown.paused.is_some(), "still shown paused: {shown:?}");
}

/// The chaos soak's breach (issue: "paused best-effort cells run, thawed,
/// on an exclusive cell's CPU"): a best-effort cell is paused to make room
/// for an exclusive one, and its freeze does not take at once (the gate
/// reads "still freezing", as a v1 freezer with a runnable thread does).
/// Before the exclusive cell is given its CPU, the paused cell's cpuset
/// leaves it for a CPU no exclusive cell holds; on the next plan a paused
/// cell still freezing is moved off again if it overlaps. On earlier code
/// the paused cell kept the exclusive CPU while it ran on.
#[test]
fn a_paused_cell_still_freezing_leaves_the_exclusive_cells_cpus_first() {
    use allot_enforce::{Applied, Call};
    use allot_topo::CpuSet;
    let mut w = world(2);
    proc_of(&w, 100, 0);
    proc_of(&w, 101, 0);
    proc_of(&w, 102, 0);
    w.dry.set_gate_stopped(Some(false));
    let guaranteed = CellSpec {
        min: 1,
        ..Default::default()
    };
    let (held, _, _ph) = page(register(&mut w, ROOT, "held", guaranteed, vec![100], false));
    let (make, _, pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![101],
        false,
    ));
    let ran_on = grant(&pm).cpus;
    assert!(!ran_on.is_empty(), "best effort runs beside one guarantee");
    let start = w.dry.calls().len();
    let (ex, _, pe) = page(register(&mut w, ROOT, "ex", exclusive(1), vec![102], false));
    let ex_cpus = grant(&pe).cpus;
    assert_eq!(ex_cpus.len(), 1);
    let calls = w.dry.calls()[start..].to_vec();
    let applied = |id: u64| -> Vec<(usize, CpuSet)> {
        calls
            .iter()
            .enumerate()
            .filter_map(|(i, c)| match c {
                Call::Apply(cid, Applied { cpus, .. }) if *cid == id => Some((i, *cpus)),
                _ => None,
            })
            .collect()
    };
    let ex_given = applied(ex)
        .into_iter()
        .find(|(_, c)| c.intersects(&ex_cpus))
        .map(|(i, _)| i)
        .expect("the exclusive cell is given its CPU");
    let frozen = calls
        .iter()
        .position(|c| *c == Call::Gate(GateCall::Close(make)))
        .expect("the best-effort cell is paused");
    let moved: Vec<(usize, CpuSet)> = applied(make);
    let (at, to) = *moved.last().expect("the paused cell's cpuset is written");
    assert!(
        at < ex_given && at < frozen,
        "moved ({at}) before the freeze ({frozen}) and before the exclusive cell grew ({ex_given}): {calls:?}"
    );
    assert!(
        !to.intersects(&ex_cpus),
        "moved to {to}, off {ex_cpus}: {calls:?}"
    );
    let st = w.core.status(ROOT);
    assert!(st.cells.iter().any(|c| c.id == make && c.paused.is_some()));
    assert!(st.cells.iter().any(|c| c.id == held));
}

/// The same on a later plan: a cell paused while two guarantees took both
/// CPUs, still freezing, is off the CPU an exclusive cell is given when
/// one guarantee ends (its cpuset, as last written, never overlaps the
/// exclusive cell's while the gate says it has not stopped).
#[test]
fn a_cell_paused_earlier_and_still_freezing_is_off_a_new_exclusive_cells_cpu() {
    use allot_enforce::{Applied, Call};
    let mut w = world(2);
    for pid in [100, 101, 102, 103] {
        proc_of(&w, pid, 0);
    }
    w.dry.set_gate_stopped(Some(false));
    let one = CellSpec {
        min: 1,
        ..Default::default()
    };
    let (make, _, _pm) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![101],
        false,
    ));
    let _a = page(register(&mut w, ROOT, "a", one, vec![100], false));
    let _b = page(register(&mut w, ROOT, "b", one, vec![102], false));
    let st = w.core.status(ROOT);
    assert!(st.cells.iter().any(|c| c.id == make && c.paused.is_some()));
    let e = register(&mut w, ROOT, "ex", exclusive(1), vec![103], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{}", message(&e));
    w.os.exit(102);
    let _ = w.exited(102);
    let st = w.core.status(ROOT);
    let ex = st.cells.iter().find(|c| c.name == "ex").expect("admitted");
    let ex_cpus = allot_topo::CpuSet::parse_list(&ex.cpus).unwrap();
    assert_eq!(ex_cpus.len(), 1, "{st:?}");
    assert!(st.cells.iter().any(|c| c.id == make && c.paused.is_some()));
    let last = w
        .dry
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Apply(id, Applied { cpus, .. }) if id == make => Some(cpus),
            _ => None,
        })
        .next_back()
        .expect("written");
    assert!(
        !last.intersects(&ex_cpus),
        "the paused cell, still freezing, is confined to {last}, the exclusive cell holds {ex_cpus}"
    );
}

/// The order a paused newcomer's calls reach the backend: its cgroup is
/// made, then frozen, and only then does its process join — so nothing of
/// it runs, not for an instant, on the CPUs its (unavoidably non-empty)
/// cpuset names, which an exclusive cell holds. Checked as the event loop
/// drives it (arrivals joined at the end of the turn) and as a direct
/// caller does.
#[test]
fn a_paused_newcomer_is_frozen_before_its_process_joins() {
    use allot_enforce::dryrun::Call;
    for batched in [false, true] {
        let mut w = world(2);
        w.core.batch_arrivals(batched);
        for pid in [100, 200] {
            proc_of(&w, pid, 0);
        }
        let mut e = register(&mut w, ROOT, "big", exclusive(2), vec![100], false);
        if batched {
            e.extend(w.core.settle());
        }
        let _big = page(e);
        let mut e = register(&mut w, ROOT, "make", CellSpec::default(), vec![200], false);
        if batched {
            e.extend(w.core.settle());
        }
        let (make, _, pm) = page(e);
        assert!(grant(&pm).cpus.is_empty());
        let calls = w.dry.calls();
        let at = |want: &dyn Fn(&Call) -> bool| {
            calls
                .iter()
                .position(want)
                .unwrap_or_else(|| panic!("batched {batched}: not in {calls:?}"))
        };
        let made = at(&|c| matches!(c, Call::Create(id) if *id == make));
        let frozen = at(&|c| matches!(c, Call::Gate(GateCall::Close(id)) if *id == make));
        let joined = at(&|c| matches!(c, Call::Attach(id, 200) if *id == make));
        assert!(
            made < frozen && frozen < joined,
            "batched {batched}: made {made}, frozen {frozen}, joined {joined}: {calls:?}"
        );
    }
}
