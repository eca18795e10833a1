//! The same assertions on the real OS and on the fake: what the layers above
//! rely on when they are tested with `FakeOs`.

mod common;

use allot_enforce::os::{FakeOs, Os, RealOs, process_tree};
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
}
