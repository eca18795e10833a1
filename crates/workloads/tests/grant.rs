//! The allot build under grant changes: a kernel whose pool's grant keeps
//! changing (including revoking the CPU of the worker running the kernel)
//! finishes with the same answer.

use allot_client::Cell;
use allot_runtime::Pool;
use allot_topo::CpuSet;
use allot_workloads::{Kernel, KernelLib, run_allot};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

fn set(cpus: &[usize]) -> CpuSet {
    let mut s = CpuSet::new();
    for &c in cpus {
        s.insert(c);
    }
    s
}

#[test]
fn answers_survive_grant_churn() {
    if !allot_testkit::prerequisite(allot_testkit::cpus() >= 2, "needs 2 CPUs") {
        return;
    }
    let scratch = tempfile::tempdir().expect("temp dir");
    let cache = allot_proto::dirs::TrustedDir::create(scratch.path(), 0o700).expect("private");
    let kernels = KernelLib::load(&cache).expect("build and load the kernels");
    for kernel in [Kernel::Stencil, Kernel::Cluster] {
        let reference = {
            let (cell, _w) = Cell::manual(set(&[0])).unwrap();
            let pool = Pool::builder().cell(cell).build().unwrap();
            run_allot(&kernels, kernel, 0.03, &pool).answer
        };
        let (cell, mut writer) = Cell::manual(set(&[0, 1])).unwrap();
        let pool = Pool::builder().cell(cell).build().unwrap();
        let done = AtomicBool::new(false);
        let outcome = std::thread::scope(|s| {
            s.spawn(|| {
                let grants = [set(&[1]), set(&[0, 1]), set(&[0]), set(&[0, 1])];
                let mut i = 0;
                while !done.load(Ordering::Relaxed) {
                    writer.publish(grants[i % grants.len()], CpuSet::new());
                    i += 1;
                    std::thread::sleep(Duration::from_millis(7));
                }
                writer.publish(set(&[1]), CpuSet::new())
            });
            let o = run_allot(&kernels, kernel, 0.03, &pool);
            done.store(true, Ordering::Relaxed);
            o
        });
        assert_eq!(outcome.answer, reference, "{kernel} under grant churn");
        eprintln!(
            "{kernel}: {} regions, {} handed off",
            outcome.regions, outcome.handed_off
        );
        // The pool ends up following the last grant (one CPU).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while pool.workers() != 1 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(pool.workers(), 1);
    }
}
