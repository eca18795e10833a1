//! The same assertions on the real OS and on the fake: what the layers above
//! rely on when they are tested with `FakeOs`.

mod common;

use allot_enforce::os::{FakeOs, Os, RealOs, SystemCpu, process_tree};
use allot_topo::CpuSet;
use common::*;
use std::path::Path;
use std::time::Duration;

fn contract(
    os: &dyn Os,
    parent: u32,
    child: u32,
    nthreads_at_least: usize,
    all: &CpuSet,
    exe: &Path,
) {
    let threads = os.threads(parent).unwrap();
    assert!(
        threads.contains(&parent),
        "a process's threads include its pid"
    );
    assert!(threads.len() >= nthreads_at_least, "{threads:?}");
    assert!(os.children(parent).contains(&child));
    assert!(os.alive(parent) && os.alive(child));
    assert!(!os.alive(999_999_999));
    assert!(os.threads(999_999_999).is_err());
    assert!(os.start_time(parent).is_some());
    assert!(os.cpu_time_ns(parent).is_some());
    assert!(os.uid(parent).is_some());
    let objects = os.mapped_objects(parent).unwrap();
    assert!(
        objects.iter().any(|o| o == exe),
        "{objects:?} holds {exe:?}"
    );
    assert!(
        objects
            .iter()
            .any(|o| o.file_name().unwrap().to_string_lossy().starts_with("libc")),
        "{objects:?} holds libc"
    );
    assert!(os.mapped_objects(999_999_999).is_err());
    assert_eq!(os.go_release(parent), None, "a shell is not Go");
    let one: CpuSet = all.take_first(1);
    os.set_affinity(threads[0], &one).unwrap();
    assert_eq!(os.affinity(threads[0]).unwrap(), one);
    os.set_affinity(threads[0], all).unwrap();
    assert_eq!(os.affinity(threads[0]).unwrap(), *all);
    assert!(
        os.set_affinity(threads[0], &CpuSet::new()).is_err(),
        "an empty mask is refused"
    );
    let tree = process_tree(os, &[parent]);
    assert_eq!(tree[0], parent);
    assert!(tree.contains(&child));
    assert!(os.run_delay_ns(parent, 64).is_some());
    assert_eq!(os.run_delay_ns(999_999_999, 64), None);
}

/// What the system poller reads: busy time within the total, both growing.
fn system_contract(os: &dyn Os, mut advance: impl FnMut()) {
    let a = os.system_cpu().expect("the machine's CPU counters");
    advance();
    let b = os.system_cpu().unwrap();
    assert!(
        a.busy_ns <= a.total_ns && b.busy_ns <= b.total_ns,
        "{a:?} {b:?}"
    );
    assert!(
        b.total_ns > a.total_ns && b.busy_ns > a.busy_ns,
        "{a:?} then {b:?}"
    );
    assert!(b.running >= 1, "the caller itself runs: {b:?}");
    // Per CPU: each CPU's busy time never goes back, and the CPUs' sum
    // moves with the machine's (the kernel sums the same counters, but
    // rounds each line to its clock ticks apart: a tick per field and
    // line).
    assert!(!b.per_cpu_busy_ns.is_empty());
    assert_eq!(a.per_cpu_busy_ns.len(), b.per_cpu_busy_ns.len());
    for (x, y) in a.per_cpu_busy_ns.iter().zip(&b.per_cpu_busy_ns) {
        assert!(y >= x, "{a:?} then {b:?}");
    }
    let sum = |s: &allot_enforce::os::SystemCpu| s.per_cpu_busy_ns.iter().sum::<u64>();
    let slack = 8 * 10_000_000 * (a.per_cpu_busy_ns.len() as u64 + 1);
    assert!(
        (sum(&b) - sum(&a)).abs_diff(b.busy_ns - a.busy_ns) <= slack,
        "{a:?} then {b:?}"
    );
}

#[test]
fn real_os_meets_the_contract() {
    let all = allot_topo::allowed_cpus().unwrap();
    // A shell with one sleeping child; the shell itself has one thread.
    let p = forking(1);
    let pid = p.pid();
    assert!(eventually(Duration::from_secs(5), || !RealOs
        .children(pid)
        .is_empty()));
    let child = RealOs.children(pid)[0];
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    contract(&RealOs, pid, child, 1, &all, &exe);
    system_contract(&RealOs, || {
        // Spin 50 ms so that busy time grows.
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(50) {
            std::hint::black_box(0);
        }
    });
    // The kernel here keeps pressure stall information (psi=1).
    if std::path::Path::new("/proc/pressure/cpu").exists() {
        assert!(RealOs.system_cpu().unwrap().pressure_some_us.is_some());
    }
    // Two spinners on one CPU wait for each other: their run delay grows.
    let (a, b) = (allot_testkit::spinner(), allot_testkit::spinner());
    for p in [&a, &b] {
        RealOs.set_affinity(p.pid(), &all.take_first(1)).unwrap();
    }
    let before = RealOs.run_delay_ns(a.pid(), 64).unwrap();
    assert!(eventually(Duration::from_secs(5), || RealOs
        .run_delay_ns(a.pid(), 64)
        .unwrap()
        > before + 1_000_000));
    drop((a, b));
    // A threaded process reports all its threads.
    let t = threaded(3, 0, 0);
    assert!(eventually(Duration::from_secs(5), || RealOs
        .threads(t.pid())
        .map(|v| v.len())
        .unwrap_or(0)
        >= 4));
}

#[test]
fn fake_os_meets_the_contract() {
    let all = CpuSet::first_n(4);
    let os = FakeOs::new();
    os.spawn(100, 0, 3, &all);
    os.spawn(200, 100, 1, &all);
    os.set_objects(100, &["/bin/sh", "/lib/x86_64-linux-gnu/libc.so.6"], None);
    contract(&os, 100, 200, 3, &all, Path::new("/bin/sh"));
    os.exit(200);
    assert!(!os.alive(200));
    let mut now = SystemCpu {
        busy_ns: 10,
        per_cpu_busy_ns: vec![4, 6],
        total_ns: 40,
        running: 1,
        pressure_some_us: Some(5),
    };
    os.set_system(now.clone());
    system_contract(&os, || {
        now.busy_ns += 20;
        now.per_cpu_busy_ns[1] += 20;
        now.total_ns += 40;
        os.set_system(now.clone());
    });
    os.wait(100, 7);
    assert_eq!(os.run_delay_ns(100, 64), Some(7));
}
