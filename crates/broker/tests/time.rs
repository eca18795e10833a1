//! Time contracts through the broker's state machine (fake processes,
//! dry-run backend): admission over time, the region best-effort cells
//! share, clear refusals, the journal across a restart.

mod common;

use allot_enforce::os::FakeOs;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::{CellSpec, TimeContract};
use allot_topo::CpuSet;
use common::*;

fn triggered(cpus: u32, period_us: u32, budget_us: u32) -> CellSpec {
    CellSpec {
        min: cpus,
        time: TimeContract::Triggered {
            period_us,
            budget_us,
        },
        ..Default::default()
    }
}

fn fraction(cpus: u32, f: f64) -> CellSpec {
    CellSpec {
        min: cpus,
        time: TimeContract::Fraction {
            ppm: (f * 1e6) as u32,
            slice_us: 0,
        },
        ..Default::default()
    }
}

fn refusal(e: &[allot_broker::core::Effect]) -> (ErrorCode, String) {
    match reply(e) {
        Reply::Error { code, message, .. } => (*code, message.clone()),
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn a_time_cell_shares_its_cpu_with_best_effort_cells_and_shows_its_contract() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let (be, _, pbe) = page(register(
        &mut w,
        ROOT,
        "make",
        CellSpec::default(),
        vec![100],
        false,
    ));
    let (tt, _, ptt) = page(register(
        &mut w,
        ROOT,
        "loop",
        triggered(1, 10_000, 3_000),
        vec![200],
        false,
    ));
    let (g_be, g_tt) = (grant(&pbe), grant(&ptt));
    assert_eq!(g_tt.cpus.len(), 1);
    // The best-effort cell runs everywhere: its own CPU and the time
    // region, which it gets as lent.
    assert_eq!(g_be.cpus.to_string(), "0-1");
    assert!(g_tt.cpus.is_subset(&g_be.lent), "{g_be:?}");
    let st = w.core.status(ROOT);
    assert_eq!(st.machine.time, g_tt.cpus.to_string());
    // The default reserve, as written in the configuration (no float
    // residue in the JSON).
    assert_eq!(st.machine.time_reserve, 0.05);
    let c = st.cells.iter().find(|c| c.id == tt).unwrap();
    assert_eq!(c.spec.contract, "time-triggered");
    assert_eq!(
        c.spec.time,
        allot_proto::status::TimeStatus::TimeTriggered {
            period_us: 10_000,
            budget_us: 3_000
        }
    );
    let c = st.cells.iter().find(|c| c.id == be).unwrap();
    assert_eq!(c.spec.contract, "best-effort");
}

#[test]
fn admission_over_time_refuses_overcommit_queues_and_admits_when_room_appears() {
    let mut w = world(4);
    for pid in [100, 200, 300, 400] {
        proc_of(&w, pid, 0);
    }
    // 0.6 and 0.3 share one CPU; 0.5 more does not fit there.
    let (a, _, _) = page(register(
        &mut w,
        ROOT,
        "a",
        fraction(3, 0.6),
        vec![100],
        false,
    ));
    let _b = page(register(
        &mut w,
        ROOT,
        "b",
        fraction(1, 0.3),
        vec![200],
        false,
    ));
    let (code, msg) = refusal(&register(
        &mut w,
        ROOT,
        "c",
        fraction(3, 0.5),
        vec![300],
        false,
    ));
    assert_eq!(code, ErrorCode::Refused, "{msg}");
    assert!(msg.contains("have room"), "{msg}");
    assert!(msg.contains("--wait"), "{msg}");
    // Queued with --wait, admitted when `a` leaves.
    let e = register(&mut w, ROOT, "c", fraction(3, 0.5), vec![300], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{:?}", reply(&e));
    w.os.exit(100);
    let effects = w.exited(100);
    let (c, _, pc) = page(effects);
    assert_ne!(c, a);
    assert_eq!(grant(&pc).cpus.len(), 3);
    let specs = w.core.status(ROOT);
    assert!(specs.queue.is_empty());
}

#[test]
fn contracts_this_machine_can_never_keep_are_refused_as_never() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    // The whole of a CPU: more than the default 95 % anyone may promise.
    let (code, msg) = refusal(&register(
        &mut w,
        ROOT,
        "all",
        fraction(1, 1.0),
        vec![100],
        false,
    ));
    assert_eq!(code, ErrorCode::Never);
    assert!(msg.contains("time_reserve"), "{msg}");
    // Two CPUs of time on a two-CPU machine leave none for space cells.
    let (code, msg) = refusal(&register(
        &mut w,
        ROOT,
        "wide",
        triggered(2, 10_000, 1_000),
        vec![100],
        false,
    ));
    assert_eq!(code, ErrorCode::Never);
    assert!(msg.contains("one stays for space cells"), "{msg}");
    // A malformed contract is invalid before anything is planned.
    let (code, msg) = refusal(&register(
        &mut w,
        ROOT,
        "bad",
        triggered(1, 10_000, 20_000),
        vec![100],
        false,
    ));
    assert_eq!(code, ErrorCode::Invalid, "{msg}");
    assert!(msg.contains("longer than the period"), "{msg}");
    assert!(w.core.status(ROOT).cells.is_empty());
}

#[test]
fn a_guaranteed_cell_is_refused_the_cpus_time_cells_hold() {
    let mut w = world(2);
    proc_of(&w, 100, 0);
    proc_of(&w, 200, 0);
    let _t = page(register(
        &mut w,
        ROOT,
        "loop",
        fraction(1, 0.25),
        vec![100],
        false,
    ));
    let (code, msg) = refusal(&register(
        &mut w,
        ROOT,
        "pinned",
        CellSpec {
            min: 2,
            ..Default::default()
        },
        vec![200],
        false,
    ));
    assert_eq!(code, ErrorCode::Refused);
    assert!(msg.contains("time cells' promises take 1"), "{msg}");
}

#[test]
fn time_cells_keep_their_contract_and_cpus_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    os.spawn(100, 0, 1, &CpuSet::first_n(4));
    let (mut w, _) = world_with(4, dir, os.clone());
    let (id, _, p) = page(register(
        &mut w,
        ROOT,
        "loop",
        triggered(2, 10_000, 3_000),
        vec![100],
        false,
    ));
    let before = grant(&p).cpus;
    let World { core, _dir, .. } = w;
    drop(core);
    let (w2, _) = world_with(4, _dir, os.clone());
    let st = w2.core.status(ROOT);
    let c = st.cells.iter().find(|c| c.id == id).unwrap();
    assert_eq!(c.spec.contract, "time-triggered");
    assert_eq!(CpuSet::parse_list(&c.cpus).unwrap(), before);
    assert_eq!(st.machine.time, before.to_string());
}

#[test]
fn a_changed_contract_reaches_the_kernel_even_when_the_cpus_stay() {
    let mut w = world(4);
    proc_of(&w, 100, 0);
    let (id, _, p) = page(register(
        &mut w,
        ROOT,
        "loop",
        fraction(1, 0.25),
        vec![100],
        false,
    ));
    let cpus = grant(&p).cpus;
    // A fraction runs in windows (a gang): 0.25 in 2 ms slices is 4 ms of
    // every 16 ms.
    let win = grant(&p).window;
    assert_eq!((win.period_us, win.budget_us), (16_000, 4_000));
    let e = w.handle(
        7,
        ROOT,
        Request::UpdateSpec {
            cell: id,
            spec: fraction(1, 0.5),
        },
        None,
    );
    assert!(matches!(reply(&e), Reply::Ok), "{:?}", reply(&e));
    assert_eq!(grant(&p).cpus, cpus, "the cell keeps its CPU");
    let win = grant(&p).window;
    assert_eq!((win.period_us, win.budget_us), (16_000, 8_000));
    assert_eq!(
        last_applied(&w, id).bandwidth,
        None,
        "the windows cap it, not CFS"
    );
}

#[test]
fn triggered_cells_share_a_cpu_with_windows_a_gap_apart() {
    use allot_enforce::GateCall;
    // Two CPUs: one may carry time promises.
    let mut w = world(2);
    proc_of(&w, 200, 0);
    proc_of(&w, 201, 0);
    let (a, pa) = loop_cell(&mut w);
    let (b, _, pb) = page(register(
        &mut w,
        ROOT,
        "second",
        triggered(1, 20_000, 4_000),
        vec![201],
        false,
    ));
    let (ga, gb) = (grant(&pa), grant(&pb));
    assert_eq!(ga.cpus, gb.cpus, "both on the one time CPU");
    // Cell b's windows start a gap after cell a's end, on the same epoch.
    let gap = u64::from(allot_plan::time::WINDOW_GAP_US) * 1000;
    assert_eq!(gb.window.origin_ns - ga.window.origin_ns, 3_000_000 + gap);
    // A third cannot fit between them: it would need the other CPU, which
    // stays for space cells; refused with the reason.
    proc_of(&w, 202, 0);
    let e = register(
        &mut w,
        ROOT,
        "third",
        triggered(1, 10_000, 4_000),
        vec![202],
        false,
    );
    match reply(&e) {
        Reply::Error { message, .. } => {
            assert!(message.contains("would then need 2 CPUs"), "{message}")
        }
        r => panic!("admitted: {r:?}"),
    }
    // The driver opens and closes both gates.
    assert!(
        allot_testkit::eventually(std::time::Duration::from_secs(5), || {
            let calls = w.dry.gate_calls();
            [a, b].iter().all(|&id| {
                calls.iter().filter(|c| **c == GateCall::Open(id)).count() >= 3
                    && calls.iter().filter(|c| **c == GateCall::Close(id)).count() >= 3
            })
        }),
        "{:?}",
        w.dry.gate_calls()
    );
}

/// Process 200 of root as cell "loop": 3 ms every 10 ms on one CPU.
/// Returns the cell and its page.
fn loop_cell(w: &mut World) -> (u64, allot_proto::PageMap) {
    let (id, _, p) = page(register(
        w,
        ROOT,
        "loop",
        triggered(1, 10_000, 3_000),
        vec![200],
        false,
    ));
    (id, p)
}

/// The last `apply` the backend saw for cell `id`.
fn last_applied(w: &World, id: u64) -> allot_enforce::Applied {
    w.dry
        .calls()
        .into_iter()
        .rev()
        .find_map(|c| match c {
            allot_enforce::Call::Apply(i, a) if i == id => Some(a),
            _ => None,
        })
        .expect("the cell was applied")
}

#[test]
fn a_time_triggered_cell_gets_windows_its_page_shows_and_its_gate_follows() {
    use allot_enforce::GateCall;
    let mut w = world(2);
    proc_of(&w, 200, 0);
    let before = allot_proto::window::monotonic_ns();
    let (id, p) = loop_cell(&mut w);
    // The page carries the schedule the broker follows: on the broker's
    // epoch (taken when it started), the first cell at phase 0.
    let win = grant(&p).window;
    assert_eq!((win.period_us, win.budget_us), (10_000, 3_000));
    assert!(
        win.origin_ns <= before && before - win.origin_ns < 60_000_000_000,
        "windows on the broker's epoch: origin {} admitted at {before}",
        win.origin_ns
    );
    // The freezer caps it: the largest weight and no CFS bandwidth.
    let a = last_applied(&w, id);
    assert_eq!(
        a.weight,
        allot_enforce::Enforcer::max_weight(&allot_enforce::DryRun::new()),
        "the backend's largest"
    );
    assert_eq!(a.bandwidth, None);
    // The driver thread opens and closes its gate.
    assert!(
        allot_testkit::eventually(std::time::Duration::from_secs(5), || {
            let calls = w.dry.gate_calls();
            calls.iter().filter(|c| **c == GateCall::Open(id)).count() >= 3
                && calls.iter().filter(|c| **c == GateCall::Close(id)).count() >= 3
        }),
        "{:?}",
        w.dry.gate_calls()
    );
    let st = w.core.status(ROOT);
    let d = st
        .cells
        .iter()
        .find(|c| c.id == id)
        .and_then(|c| c.delivery.clone())
        .expect("a windowed cell reports its delivery");
    assert_eq!(d.budget_us, 3_000);
    // Ending the cell opens its gate last: allot never leaves it frozen.
    w.handle(9, ROOT, Request::Release { cell: id }, None);
    let calls = w.dry.gate_calls();
    assert_eq!(calls.last(), Some(&GateCall::Open(id)), "{calls:?}");
}

#[test]
fn without_a_freezer_a_time_triggered_cell_falls_back_to_cfs_bandwidth() {
    let dir = tempfile::tempdir().unwrap();
    let os = FakeOs::new();
    os.spawn(1, 0, 1, &CpuSet::first_n(2));
    os.spawn(200, 0, 1, &CpuSet::first_n(2));
    let (mut w, _) = world_with_backend(2, dir, os, allot_enforce::DryRun::new().without_gates());
    let (id, p) = loop_cell(&mut w);
    assert!(!grant(&p).window.is_set(), "no windows, none shown");
    assert_eq!(
        last_applied(&w, id).bandwidth,
        Some(allot_enforce::Bandwidth {
            quota_us: 3_000,
            period_us: 10_000
        })
    );
    let st = w.core.status(ROOT);
    assert!(st.cells.iter().all(|c| c.delivery.is_none()));
}

#[test]
fn a_contract_change_stops_the_windows_opens_the_gate_and_tells_the_page() {
    use allot_enforce::GateCall;
    let mut w = world(2);
    proc_of(&w, 200, 0);
    let (id, p) = loop_cell(&mut w);
    assert!(grant(&p).window.is_set());
    let e = w.handle(
        7,
        ROOT,
        Request::UpdateSpec {
            cell: id,
            spec: fraction(1, 0.25),
        },
        None,
    );
    assert!(matches!(reply(&e), Reply::Ok), "{:?}", reply(&e));
    let win = grant(&p).window;
    assert_eq!(
        (win.period_us, win.budget_us),
        (16_000, 4_000),
        "the page shows the fraction's windows"
    );
    assert!(
        w.dry.gate_calls().contains(&GateCall::Open(id)),
        "the old schedule's gate was let go open"
    );
    assert_eq!(last_applied(&w, id).bandwidth, None);
    // And back: windows again, with a new schedule on the page.
    let e = w.handle(
        8,
        ROOT,
        Request::UpdateSpec {
            cell: id,
            spec: triggered(1, 20_000, 5_000),
        },
        None,
    );
    assert!(matches!(reply(&e), Reply::Ok), "{:?}", reply(&e));
    let win = grant(&p).window;
    assert_eq!((win.period_us, win.budget_us), (20_000, 5_000));
    assert_eq!(last_applied(&w, id).bandwidth, None);
}

#[test]
fn a_broker_that_stops_opens_every_gate() {
    use allot_enforce::GateCall;
    let mut w = world(2);
    proc_of(&w, 200, 0);
    let (id, _p) = loop_cell(&mut w);
    w.shutdown();
    assert_eq!(w.dry.gate_calls().last(), Some(&GateCall::Open(id)));
}

/// A message-triggered cell: admitted active, idle (out of the plan,
/// frozen, its doorbell armed and handed to the server) after its idle
/// time without messages, active again (thawed, planned) when a message
/// arrives — through the doorbell or, failing that, the next tick.
#[test]
fn a_message_triggered_cell_sleeps_without_messages_and_wakes_on_one() {
    use allot_broker::core::Effect;
    use allot_channel::Full;
    use allot_enforce::gate::GateCall;
    use allot_proto::msg::Request;
    use std::time::{Duration, Instant};
    let mut w = world(4);
    proc_of(&w, 100, 0);
    let e = register(
        &mut w,
        ROOT,
        "msg",
        CellSpec {
            min: 2,
            time: TimeContract::Message { idle_ms: 100 },
            ..Default::default()
        },
        vec![100],
        false,
    );
    let (id, _, page) = page(e);
    assert!(
        !grant(&page).cpus.is_empty(),
        "admitted active: {:?}",
        grant(&page)
    );
    // Its process opens the receiving end of a channel; another sends.
    let rx_peer = peer(100, 0);
    let open = |w: &mut World, session, peer, send| {
        let e = w.handle(
            session,
            peer,
            Request::ChannelOpen {
                name: "jobs".into(),
                send,
                slots: 0,
                message_max: 0,
            },
            None,
        );
        match e.into_iter().next() {
            Some(Effect::Reply { fds, .. }) if fds.len() == 3 => {
                let [m, d, s]: [rustix::fd::OwnedFd; 3] = fds.try_into().unwrap();
                allot_channel::Channel::open(m, d, s).unwrap()
            }
            other => panic!("{other:?}"),
        }
    };
    let _rx = open(&mut w, 20, rx_peer, false);
    let tx = open(&mut w, 21, ROOT, true).managed_sender();
    // Quiet for its idle time: idle, frozen, a doorbell to watch.
    let t0 = Instant::now();
    w.tick(t0);
    let e = w.tick(t0 + Duration::from_millis(150));
    let bell = e
        .iter()
        .find_map(|e| match e {
            Effect::WatchDoorbell { cell, fds } if *cell == id => Some(fds),
            _ => None,
        })
        .expect("a doorbell to watch");
    assert_eq!(bell.len(), 1);
    assert!(w.dry.gate_calls().contains(&GateCall::Close(id)));
    assert!(
        !w.core.plan().cells.contains_key(&allot_spec::CellId(id)),
        "idle: it holds nothing"
    );
    // A message rings the doorbell the server polls.
    tx.send(b"work", Full::Fail).unwrap();
    let mut fds = [rustix::event::PollFd::new(
        &bell[0],
        rustix::event::PollFlags::IN,
    )];
    assert_eq!(
        rustix::event::poll(
            &mut fds,
            Some(&rustix::time::Timespec {
                tv_sec: 1,
                tv_nsec: 0
            })
        )
        .unwrap(),
        1,
        "the doorbell rang"
    );
    let e = w.doorbell(id);
    assert!(
        e.iter()
            .any(|e| matches!(e, Effect::ForgetDoorbell(c) if *c == id))
    );
    assert_eq!(w.dry.gate_calls().last(), Some(&GateCall::Open(id)));
    assert!(
        w.core.plan().cells.contains_key(&allot_spec::CellId(id)),
        "planned again"
    );
    // A second ring while active changes nothing.
    assert!(w.doorbell(id).is_empty());
    // The message is read; quiet again, idle again; a message that the
    // server's poll missed is seen by the next tick.
    let mut rx = _rx.managed_receiver();
    rx.try_recv(&mut Vec::new()).unwrap();
    let t1 = Instant::now();
    w.tick(t1);
    w.tick(t1 + Duration::from_millis(150));
    assert!(!w.core.plan().cells.contains_key(&allot_spec::CellId(id)));
    tx.send(b"more", Full::Fail).unwrap();
    w.tick(t1 + Duration::from_millis(200));
    assert!(w.core.plan().cells.contains_key(&allot_spec::CellId(id)));
}

/// On a backend that cannot suspend a cell, a message-triggered cell stays
/// active when idle: left out of the plan it would still run, on CPUs the
/// plan gives to others.
#[test]
fn without_a_freezer_a_message_triggered_cell_stays_active() {
    use std::time::{Duration, Instant};
    let os = allot_enforce::os::FakeOs::new();
    for (pid, uid) in [(1, 0), (100, 0)] {
        os.spawn(pid, 0, 1, &allot_topo::CpuSet::first_n(4));
        os.set_uid(pid, uid);
    }
    let (mut w, _) = world_with_backend(
        4,
        tempfile::tempdir().unwrap(),
        os,
        allot_enforce::DryRun::new().without_gates(),
    );
    let e = register(
        &mut w,
        ROOT,
        "msg",
        CellSpec {
            min: 1,
            time: TimeContract::Message { idle_ms: 10 },
            ..Default::default()
        },
        vec![100],
        false,
    );
    let (id, _, _page) = page(e);
    let peer = peer(100, 0);
    let e = w.handle(
        20,
        peer,
        allot_proto::msg::Request::ChannelOpen {
            name: "q".into(),
            send: false,
            slots: 0,
            message_max: 0,
        },
        None,
    );
    assert!(matches!(
        e.first(),
        Some(allot_broker::core::Effect::Reply { fds, .. }) if fds.len() == 3
    ));
    let t0 = Instant::now();
    w.tick(t0);
    let e = w.tick(t0 + Duration::from_millis(100));
    assert!(
        !e.iter()
            .any(|e| matches!(e, allot_broker::core::Effect::WatchDoorbell { .. }))
    );
    assert!(w.core.plan().cells.contains_key(&allot_spec::CellId(id)));
}
