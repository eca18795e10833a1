//! Cost of reading a grant, against the system call a program would use
//! today to learn its CPUs (`sched_getaffinity`); and of reporting a
//! heartbeat or a latency on the report page, against a system call.
//!
//! Run: `cargo bench -p allot-proto --bench page`.

use allot_proto::{Grant, PageMap};
use allot_topo::CpuSet;
use std::sync::OnceLock;

fn main() {
    divan::main();
}

fn page() -> &'static PageMap {
    static P: OnceLock<PageMap> = OnceLock::new();
    P.get_or_init(|| {
        let p = PageMap::create(1, 1).unwrap();
        p.page().publish(&Grant {
            generation: 7,
            threads: 2,
            cpus: CpuSet::first_n(2),
            ..Default::default()
        });
        p
    })
}

/// A full consistent read of the grant (seqlock, 37 loads).
#[divan::bench]
fn grant_page_read() -> Grant {
    divan::black_box(page().page()).read()
}

/// The generation alone (one load): "did anything change?".
#[divan::bench]
fn grant_page_generation() -> u64 {
    divan::black_box(page().page()).generation()
}

/// Baseline: what a runtime calls today to size itself.
#[divan::bench]
fn baseline_sched_getaffinity() -> bool {
    rustix::thread::sched_getaffinity(None)
        .map(|s| s.is_set(0))
        .unwrap_or(false)
}

/// A heartbeat: one atomic add on the report page.
#[divan::bench]
fn report_heartbeat() {
    divan::black_box(page()).reports().unwrap().heartbeat(1);
}

/// A request latency: three atomic adds on the report page.
#[divan::bench]
fn report_latency() {
    divan::black_box(page())
        .reports()
        .unwrap()
        .record_latency(std::time::Duration::from_micros(divan::black_box(1234)));
}

/// Baseline for reporting: the cheapest system call there is, which a
/// report over a socket or a pipe would cost at least.
#[divan::bench]
fn baseline_getppid() -> rustix::process::Pid {
    rustix::process::getppid().unwrap_or(rustix::process::Pid::INIT)
}
