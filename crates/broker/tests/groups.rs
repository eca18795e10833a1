//! Launcher groups (`IncludeGroup`): who may give a cell a launcher's
//! cgroup, what the backend is asked, and that a restarted broker asks
//! again for the groups it journaled.

mod common;

use allot_enforce::Call;
use allot_enforce::os::FakeOs;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::CellSpec;
use allot_topo::CpuSet;
use common::*;
use std::path::PathBuf;

const GROUP: &str = "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user";

fn include(w: &mut World, peer: allot_broker::peer::Peer, cell: u64, token: u64) -> Reply {
    let effects = w.handle(
        7,
        peer,
        Request::IncludeGroup {
            cell,
            token,
            dir: GROUP.into(),
        },
        None,
    );
    reply(&effects).clone()
}

fn included(calls: &[Call], id: u64) -> usize {
    calls
        .iter()
        .filter(|c| **c == Call::IncludeGroup(id, PathBuf::from(GROUP)))
        .count()
}

fn error_code(r: &Reply) -> Option<ErrorCode> {
    match r {
        Reply::Error { code, .. } => Some(*code),
        _ => None,
    }
}

/// Root's cell for process 100, as the Slurm plugin registers a job's:
/// its id, token and page.
fn job_cell(w: &mut World) -> (u64, u64, allot_proto::PageMap) {
    page(register(
        w,
        ROOT,
        "slurm-42",
        CellSpec::default(),
        vec![100],
        false,
    ))
}

#[test]
fn only_root_with_the_cells_token_may_include_a_launchers_cgroup() {
    let mut w = world(4);
    proc_of(&w, 100, 0);
    let (id, token, _p) = job_cell(&mut w);
    assert_eq!(
        error_code(&include(&mut w, ALICE, id, token)),
        Some(ErrorCode::PermissionDenied),
        "a user may not have the broker write a cgroup it did not make"
    );
    assert_eq!(
        error_code(&include(&mut w, ROOT, id, token ^ 1)),
        Some(ErrorCode::PermissionDenied),
        "root needs the cell's token too"
    );
    assert_eq!(
        error_code(&include(&mut w, ROOT, id + 100, token)),
        Some(ErrorCode::UnknownCell)
    );
    assert_eq!(
        included(&w.dry.calls(), id),
        0,
        "nothing was asked of the backend"
    );
    assert_eq!(include(&mut w, ROOT, id, token), Reply::Ok);
    assert_eq!(included(&w.dry.calls(), id), 1);
    let timeline = format!("{:?}", w.core.status(ROOT).cells[0]);
    assert!(timeline.contains(GROUP), "the status shows it: {timeline}");
}

#[test]
fn a_restarted_broker_includes_the_journaled_groups_again() {
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    os.spawn(1, 0, 1, &CpuSet::first_n(4));
    os.set_uid(1, 0);
    os.spawn(100, 0, 1, &CpuSet::first_n(4));
    let dry = allot_enforce::DryRun::new();
    let (mut w, _) = world_with_backend(4, dir, os.clone(), dry.clone());
    let (id, token, _p) = job_cell(&mut w);
    assert_eq!(include(&mut w, ROOT, id, token), Reply::Ok);
    // Twice is once in the journal.
    assert_eq!(include(&mut w, ROOT, id, token), Reply::Ok);
    let World { core, _dir, .. } = w;
    drop(core);
    let before = included(&dry.calls(), id);
    let (w2, _) = world_with_backend(4, _dir, os, dry.clone());
    assert_eq!(
        included(&dry.calls(), id),
        before + 1,
        "the restarted broker asked the backend for the group once"
    );
    assert_eq!(w2.core.status(ROOT).cells.len(), 1);
}

/// A paused cell (guarantees take every CPU) that includes a launcher's
/// group takes its gate again and closes it, so the group's tasks stop
/// with the cell; they go on with it when it resumes.
#[test]
fn a_group_included_while_its_cell_is_paused_is_paused_too() {
    use allot_enforce::gate::GateCall;
    let mut w = world(2);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let _big = page(register(
        &mut w,
        ROOT,
        "big",
        exclusive(2),
        vec![200],
        false,
    ));
    let (id, token, _p) = job_cell(&mut w);
    assert_eq!(w.dry.gate_calls(), [GateCall::Close(id)], "paused at once");
    assert_eq!(include(&mut w, ROOT, id, token), Reply::Ok);
    assert_eq!(
        w.dry.gate_calls(),
        [GateCall::Close(id), GateCall::Close(id)],
        "the new gate, over the group too, is closed"
    );
    w.os.exit(200);
    let _ = w.exited(200);
    assert_eq!(w.dry.gate_calls().last(), Some(&GateCall::Open(id)));
}
