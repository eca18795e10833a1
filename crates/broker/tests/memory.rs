//! Memory capacity per cell: admission of memory guarantees, the limit
//! in the kernel, refusals that leave a cell as it was, and OOM kills
//! reported. State-machine level (fake processes, dry-run backend with
//! memory control).

mod common;

use allot_broker::Config;
use allot_enforce::DryRun;
use allot_enforce::dryrun::Call;
use allot_enforce::os::FakeOs;
use allot_proto::msg::{ErrorCode, Reply, Request};
use allot_spec::{CellSpec, Memory, MemoryUse};
use allot_topo::CpuSet;
use common::*;

const G: u64 = 1 << 30;
const M: u64 = 1 << 20;

/// A world whose backend has memory control over `capacity` bytes, with
/// a reserve of 1G.
fn world_with_memory(capacity: u64) -> World {
    let os = FakeOs::new();
    os.spawn(1, 0, 1, &CpuSet::first_n(4));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::new(dir.path().join("s.sock"));
    cfg.memory_reserve = Some(G);
    cfg.resctrl_root = dir.path().join("no-resctrl");
    world_from(4, dir, os, DryRun::new().with_memory(capacity), cfg).0
}

fn memory(min: u64, max: u64) -> CellSpec {
    CellSpec {
        memory: Memory { min, max },
        ..CellSpec::default()
    }
}

fn set_memory(w: &mut World, cell: u64, min: u64, max: u64) -> Vec<allot_broker::core::Effect> {
    w.handle(
        7,
        ROOT,
        Request::SetMemory {
            cell,
            memory: Memory { min, max },
        },
        None,
    )
}

fn memory_calls(w: &World, cell: u64) -> Vec<Memory> {
    w.dry
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Memory(id, m) if id == cell => Some(m),
            _ => None,
        })
        .collect()
}

#[test]
fn guarantees_are_admitted_up_to_the_capacity_less_the_reserve() {
    let mut w = world_with_memory(16 * G);
    for pid in [100, 200, 300] {
        proc_of(&w, pid, 0);
    }
    let (a, _, _) = page(register(
        &mut w,
        ROOT,
        "a",
        memory(10 * G, 12 * G),
        vec![100],
        false,
    ));
    assert_eq!(
        memory_calls(&w, a),
        [Memory {
            min: 10 * G,
            max: 12 * G
        }]
    );
    // 5G more would promise 15G of the 15G cells may be guaranteed ... fine;
    // 6G would not fit now.
    let e = register(&mut w, ROOT, "b", memory(6 * G, 0), vec![200], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(
        message(&e).contains("asks for 6G of memory guaranteed but only 5G of 15G"),
        "{}",
        message(&e)
    );
    // More than there will ever be: never.
    let e = register(&mut w, ROOT, "c", memory(20 * G, 0), vec![300], false);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    // A limit alone guarantees nothing: admitted beside.
    let e = register(&mut w, ROOT, "d", memory(0, 64 * G), vec![200], false);
    assert!(
        matches!(reply(&e), Reply::Registered { .. }),
        "{}",
        message(&e)
    );
    let st = w.core.status(ROOT);
    let mm = st.machine.memory.expect("memory control");
    assert_eq!(
        (mm.capacity, mm.reserve, mm.guaranteed),
        (16 * G, G, 10 * G)
    );
    let shown = st.cells.iter().find(|c| c.id == a).unwrap();
    assert_eq!(
        (shown.spec.memory_min, shown.spec.memory_max),
        (10 * G, 12 * G)
    );
}

#[test]
fn a_queued_guarantee_is_admitted_when_memory_frees() {
    let mut w = world_with_memory(16 * G);
    for pid in [100, 200] {
        proc_of(&w, pid, 0);
    }
    let _ = page(register(
        &mut w,
        ROOT,
        "a",
        memory(10 * G, 0),
        vec![100],
        false,
    ));
    let e = register(&mut w, ROOT, "b", memory(8 * G, 0), vec![200], true);
    assert!(matches!(reply(&e), Reply::Queued { .. }), "{}", message(&e));
    w.os.exit(100);
    let e = w.exited(100);
    assert!(
        e.iter().any(|e| matches!(
            e,
            allot_broker::core::Effect::Reply {
                reply: Reply::Registered { .. },
                ..
            }
        )),
        "{e:?}"
    );
}

#[test]
fn memory_without_memory_control_is_refused_with_the_reason() {
    let mut w = world(4);
    proc_of(&w, 100, 0);
    let e = register(&mut w, ROOT, "a", memory(0, 2 * G), vec![100], false);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    assert!(message(&e).contains("no memory control"), "{}", message(&e));
    // Asking for none is fine, and nothing is written.
    let (a, _, _) = page(register(
        &mut w,
        ROOT,
        "b",
        CellSpec::default(),
        vec![100],
        false,
    ));
    assert!(memory_calls(&w, a).is_empty());
}

#[test]
fn a_limit_below_what_the_program_uses_is_refused_before_anything_starts() {
    let mut w = world_with_memory(16 * G);
    proc_of(&w, 100, 0);
    w.os.set_rss(100, 300 * M);
    let e = register(&mut w, ROOT, "a", memory(0, 256 * M), vec![100], false);
    assert_eq!(code(&e), Some(ErrorCode::Invalid), "{}", message(&e));
    assert!(
        message(&e).contains("below what its processes use already (300M resident)"),
        "{}",
        message(&e)
    );
    assert!(w.dry.calls().iter().all(|c| !matches!(c, Call::Create(_))));
}

#[test]
fn a_running_cells_limit_changes_or_is_refused_leaving_it_as_it_was() {
    let mut w = world_with_memory(16 * G);
    proc_of(&w, 100, 0);
    let (a, _, _) = page(register(
        &mut w,
        ROOT,
        "a",
        memory(0, 2 * G),
        vec![100],
        false,
    ));
    w.dry.set_memory_use(
        a,
        MemoryUse {
            current: 600 * M,
            limit: 2 * G,
            ..Default::default()
        },
    );
    w.tick(std::time::Instant::now());
    // Below what it uses now: refused, nothing written, spec unchanged.
    let e = set_memory(&mut w, a, 0, 512 * M);
    assert_eq!(code(&e), Some(ErrorCode::Invalid), "{}", message(&e));
    assert!(
        message(&e).contains("below what the cell uses now (600M)"),
        "{}",
        message(&e)
    );
    assert_eq!(memory_calls(&w, a), [Memory { min: 0, max: 2 * G }]);
    let spec = |w: &World| w.core.status(ROOT).cells[0].spec.memory_max;
    assert_eq!(spec(&w), 2 * G);
    // The kernel refuses (it could not reclaim): refused, the old limit
    // written back.
    w.dry.refuse_next_memory();
    let e = set_memory(&mut w, a, 0, G);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert_eq!(spec(&w), 2 * G);
    assert_eq!(
        memory_calls(&w, a).last(),
        Some(&Memory { min: 0, max: 2 * G })
    );
    // Raised: written, and the rest of the spec kept.
    let e = set_memory(&mut w, a, G, 4 * G);
    assert!(matches!(reply(&e), Reply::Ok), "{}", message(&e));
    assert_eq!(
        memory_calls(&w, a).last(),
        Some(&Memory { min: G, max: 4 * G })
    );
    assert_eq!(spec(&w), 4 * G);
    // A guarantee beyond what is left: refused.
    let e = set_memory(&mut w, a, 20 * G, 0);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
}

#[test]
fn an_oom_kill_in_a_cell_is_reported_once() {
    let mut w = world_with_memory(16 * G);
    proc_of(&w, 100, 0);
    let (a, _, _) = page(register(
        &mut w,
        ROOT,
        "a",
        memory(0, 64 * M),
        vec![100],
        false,
    ));
    let killed = MemoryUse {
        current: 60 * M,
        limit: 64 * M,
        at_limit: 9,
        oom_kills: 1,
        pressure: None,
    };
    w.dry.set_memory_use(a, killed);
    w.tick(std::time::Instant::now());
    w.tick(std::time::Instant::now());
    let st = w.core.status(ROOT);
    let c = &st.cells[0];
    let m = c.memory.expect("memory shown");
    assert_eq!(
        (m.current, m.limit, m.at_limit, m.oom_kills),
        (60 * M, 64 * M, 9, 1)
    );
    let t = c.timeline.clone().unwrap();
    let ooms: Vec<_> = t.steps.iter().filter(|s| s.step == "oom").collect();
    assert_eq!(ooms.len(), 1, "{:?}", t.steps);
    assert!(
        ooms[0].detail.contains("1 killed at its limit of 64M"),
        "{:?}",
        ooms[0]
    );
}

/// A resctrl mount of 12 ways and four classes, with bandwidth
/// allocation, on one cache domain: a fixture.
fn resctrl_fixture(dir: &std::path::Path) -> allot_enforce::resctrl::Resctrl {
    let fs = allot_enforce::resctrl::fixture(dir, &[0]).unwrap();
    allot_enforce::resctrl::Resctrl::open(fs, dir, "allot").unwrap()
}

fn cache(ways: u32, bandwidth: u32) -> CellSpec {
    CellSpec {
        cache: allot_spec::Cache { ways, bandwidth },
        ..CellSpec::default()
    }
}

#[test]
fn cache_ways_without_resctrl_are_refused_with_the_reason() {
    let mut w = world_with_memory(16 * G);
    proc_of(&w, 100, 0);
    let e = register(&mut w, ROOT, "a", cache(4, 0), vec![100], false);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    assert!(
        message(&e).contains("partitions no cache or bandwidth"),
        "{}",
        message(&e)
    );
}

#[test]
fn cache_ways_are_classes_admitted_like_guarantees_and_given_back() {
    let mut w = world_with_memory(16 * G);
    let mount = tempfile::tempdir().unwrap();
    w.core.set_resctrl(resctrl_fixture(mount.path()));
    w.os.spawn(100, 0, 3, &CpuSet::first_n(4)); // threads 100, 101, 102
    for pid in [200, 300] {
        proc_of(&w, pid, 0);
    }
    let (a, _, _) = page(register(&mut w, ROOT, "a", cache(4, 35), vec![100], false));
    let group = mount.path().join(format!("allot-cell-{a}"));
    let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap();
    assert_eq!(read(&group.join("schemata")), "L3:0=f00\nMB:0=40\n");
    assert_eq!(read(&mount.path().join("schemata")), "L3:0=ff\nMB:0=100\n");
    // Every thread of its process joined (the fixture keeps the last).
    assert_eq!(read(&group.join("tasks")), "102");
    let st = w.core.status(ROOT);
    let shown = st.cells.iter().find(|c| c.id == a).unwrap();
    let class = shown.cache.clone().expect("a class");
    assert_eq!((class.mask.as_str(), class.bandwidth), ("f00", 40));
    assert_eq!((shown.spec.cache_ways, shown.spec.mem_bandwidth), (4, 35));
    // 8 more ways do not fit beside a's 4 now (11 may be given) ...
    let e = register(&mut w, ROOT, "b", cache(8, 0), vec![200], false);
    assert_eq!(code(&e), Some(ErrorCode::Refused), "{}", message(&e));
    assert!(message(&e).contains("12 L3 ways"), "{}", message(&e));
    // ... and 12 never do.
    let e = register(&mut w, ROOT, "c", cache(12, 0), vec![300], false);
    assert_eq!(code(&e), Some(ErrorCode::Never), "{}", message(&e));
    // a ends: its class goes, the default group has every way again.
    w.os.exit(100);
    let _ = w.exited(100);
    assert!(!group.exists());
    assert_eq!(read(&mount.path().join("schemata")), "L3:0=fff\nMB:0=100\n");
    let e = register(&mut w, ROOT, "b", cache(8, 0), vec![200], false);
    assert!(
        matches!(reply(&e), Reply::Registered { .. }),
        "{}",
        message(&e)
    );
}
