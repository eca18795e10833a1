//! The same assertions on the kernel's counters and on the fake: a cell's
//! [`ThreadCounts`] over a busy thread and an idle one, the busy one's
//! count kept after it exits, a thread that is gone skipped. The kernel
//! side counts with the software events (every Linux machine has them);
//! whether the hardware ones exist is checked against the PMU's entry in
//! sysfs.

use allot_enforce::counters::{
    Count, Events, FakeCounters, PerfCounters, RealCounters, ThreadCounts,
};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// What each side must show, given a way to run "the busy thread works
/// for a while" and "the busy thread exits".
fn contract(
    c: &dyn PerfCounters,
    busy: u32,
    idle: u32,
    work: &mut dyn FnMut(),
    exit: &mut dyn FnMut(),
) {
    let e = Events::ClockSwitches;
    c.check(e).expect("software events are always there");
    let mut cell = ThreadCounts::default();
    let first = cell.refresh(c, e, &[busy, idle], 8);
    assert_eq!(cell.open(), 2);
    work();
    let after = cell.refresh(c, e, &[busy, idle], 8);
    let busy_ns = after.lead - first.lead;
    assert!(
        busy_ns >= 100_000_000,
        "the busy thread ran at least 100 ms of its 200 ms: {after:?} after {first:?}"
    );
    exit();
    let kept = cell.refresh(c, e, &[idle], 8);
    assert!(
        kept.lead >= after.lead,
        "a gone thread's count is kept: {kept:?} < {after:?}"
    );
    assert_eq!(cell.open(), 1);
    // A thread that does not exist is skipped.
    let mut other = ThreadCounts::default();
    assert_eq!(other.refresh(c, e, &[999_999_999], 8), Count::default());
    assert_eq!(other.open(), 0);
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[test]
fn kernel_counters_follow_the_contract() {
    let tid = || rustix::thread::gettid().as_raw_nonzero().get() as u32;
    let (tx, rx) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<bool>();
    let busy = std::thread::spawn(move || {
        tx.send(tid()).unwrap();
        // Work when told, exit when told.
        while let Ok(work) = go_rx.recv() {
            if !work {
                return;
            }
            spin(Duration::from_millis(200));
            tx.send(0).unwrap();
        }
    });
    let busy_tid = rx.recv().unwrap();
    let idle_tid = tid();
    let mut work = || {
        go.send(true).unwrap();
        rx.recv().unwrap();
    };
    let (go2, busy2) = (go.clone(), std::cell::RefCell::new(Some(busy)));
    let mut exit = || {
        go2.send(false).unwrap();
        busy2.borrow_mut().take().unwrap().join().unwrap();
    };
    contract(&RealCounters, busy_tid, idle_tid, &mut work, &mut exit);
}

#[test]
fn fake_counters_follow_the_contract() {
    let fake = FakeCounters::new();
    fake.set(1, Count { lead: 5, follow: 1 });
    fake.set(2, Count::default());
    let f = fake.clone();
    let mut work = move || {
        f.set(
            1,
            Count {
                lead: 200_000_005,
                follow: 3,
            },
        )
    };
    let f = fake.clone();
    let mut exit = move || f.exit(1);
    contract(&fake, 1, 2, &mut work, &mut exit);
}

/// The hardware events exist exactly when the kernel shows a CPU PMU
/// (`/sys/bus/event_source/devices/cpu`, or `cpu_core` on hybrid parts),
/// and without one the reason names the missing counter.
#[test]
fn hardware_counters_are_there_exactly_when_the_machine_has_a_pmu() {
    let pmu = ["cpu", "cpu_core", "armv8_pmuv3_0"].iter().any(|d| {
        std::path::Path::new("/sys/bus/event_source/devices")
            .join(d)
            .exists()
    });
    let r = RealCounters.check(Events::CyclesInstructions);
    eprintln!("hardware counters: {r:?} (PMU in sysfs: {pmu})");
    match r {
        Ok(()) => assert!(pmu, "counted cycles without a PMU in sysfs"),
        Err(why) if !pmu => assert!(why.contains("cycles"), "{why}"),
        // A PMU but not allowed (perf_event_paranoid, a seccomp filter).
        Err(why) => assert!(
            why.contains("not allowed") || why.contains("cannot"),
            "{why}"
        ),
    }
}
