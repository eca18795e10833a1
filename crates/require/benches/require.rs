//! Cost of entering and leaving an uncontended `require` scope.
//!
//! - in-process: a device request on a runtime with no broker (the root
//!   covers it), OS effects off (the affinity call is measured separately:
//!   it is what a CPU allocation costs on top);
//! - through the broker: the same with a ledger link, so each enter asks
//!   the broker for the root's shortfall and each exit gives it back; and
//!   a `fair_cores()` request alone after a quiet spell, which also waits
//!   for company (gathered at the broker);
//! - a `memory` request with the OS effects on: binding, and with
//!   `ALLOT_MEMORY_CAP` set the process's cap too.
//!
//! Run: `cargo bench -p allot-require --bench require`. The broker rows need
//! `ALLOT_BENCH_SOCKET` pointing at a running broker, for example
//!
//! ```text
//! allot daemon --socket /tmp/bench.sock --backend affinity --idle-exit 5 &
//! ALLOT_BENCH_SOCKET=/tmp/bench.sock cargo bench -p allot-require --bench require
//! ```

use allot_require::{Blocks, Need};
use std::sync::OnceLock;

fn main() {
    divan::main();
}

fn local() -> &'static Blocks {
    static R: OnceLock<&'static Blocks> = OnceLock::new();
    R.get_or_init(|| Blocks::new(allot_topo::discover_live().unwrap(), false).into_static())
}

/// Enter + leave `require(cpu(0, 0.5))`, in-process.
#[divan::bench]
fn enter_leave_in_process(b: divan::Bencher) {
    let rt = local();
    let reqs = vec![Need::device("cpu", 0, 0.5)];
    b.bench_local(|| {
        let s = rt.enter(reqs.clone()).unwrap();
        drop(s);
    });
}

/// Enter + leave `require(memory(node0, 64 MiB))` with the OS effects on:
/// the thread's memory binding, and where `ALLOT_MEMORY_CAP` names a memory
/// cgroup also the process's cap (its group joined on entry, left and
/// removed on exit).
#[divan::bench]
fn enter_leave_memory_applied(b: divan::Bencher) {
    static R: OnceLock<&'static Blocks> = OnceLock::new();
    let rt =
        R.get_or_init(|| Blocks::new(allot_topo::discover_live().unwrap(), true).into_static());
    let reqs = vec![Need::device("memory", "node0", (64u64 << 20) as f64)];
    b.bench_local(|| {
        let s = rt.enter(reqs.clone()).unwrap();
        drop(s);
    });
}

/// Enter + leave prepared `require(cpu(0, 0.5))` (names resolved once, as
/// the C macro's per-site cache does), in-process.
#[divan::bench]
fn enter_leave_prepared_in_process(b: divan::Bencher) {
    let rt = local();
    let p = rt.prepare(vec![Need::device("cpu", 0, 0.5)]).unwrap();
    b.bench_local(|| {
        let s = rt.enter_prepared(&p).unwrap();
        drop(s);
    });
}

/// Enter + leave `require(cores(1))` (a policy over every device).
#[divan::bench]
fn enter_leave_policy_in_process(b: divan::Bencher) {
    let rt = local();
    let reqs = vec![Need::policy(allot_require::policy::cores(1))];
    b.bench_local(|| {
        let s = rt.enter(reqs.clone()).unwrap();
        drop(s);
    });
}

/// Enter + leave through the broker's ledger.
#[divan::bench]
fn enter_leave_through_broker(b: divan::Bencher) {
    let Ok(socket) = std::env::var("ALLOT_BENCH_SOCKET") else {
        return;
    };
    let rt = linked(&socket);
    let reqs = vec![Need::device("cpu", 0, 0.5)];
    b.bench_local(|| {
        let s = rt.enter(reqs.clone()).unwrap();
        drop(s);
    });
}

/// Enter + leave `require(fair_cores())` through the broker's ledger, each
/// alone after a quiet spell (15 ms without one: over ten of the default
/// 1 ms gathering window): what a lone request pays for waiting for
/// company (an eighth of the window, gathered by the broker with every
/// process's) and for its CPUs. The quiet spell is not timed.
#[divan::bench(sample_size = 1, sample_count = 60)]
fn enter_leave_fair_cores_alone_through_broker(b: divan::Bencher) {
    let Ok(socket) = std::env::var("ALLOT_BENCH_SOCKET") else {
        return;
    };
    let rt = linked(&socket);
    let reqs = vec![Need::policy(allot_require::policy::fair_cores())];
    b.with_inputs(|| std::thread::sleep(std::time::Duration::from_millis(15)))
        .bench_local_values(|()| {
            let s = rt.enter(reqs.clone()).unwrap();
            drop(s);
        });
}

/// The runtime linked to the broker at `socket` (one per bench process).
fn linked(socket: &str) -> &'static Blocks {
    static R: OnceLock<&'static Blocks> = OnceLock::new();
    let rt = R.get_or_init(|| {
        Blocks::with_broker(
            allot_topo::discover_live().unwrap(),
            false,
            Some(socket.as_ref()),
        )
        .into_static()
    });
    assert!(rt.coordinated(), "no broker at {socket}");
    rt
}

/// Baseline: the affinity system call a CPU allocation adds.
#[divan::bench]
fn baseline_sched_setaffinity(b: divan::Bencher) {
    let cur = rustix::thread::sched_getaffinity(None).unwrap();
    b.bench_local(|| rustix::thread::sched_setaffinity(None, &cur).unwrap());
}
