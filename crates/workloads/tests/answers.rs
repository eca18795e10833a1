//! Every variant of every kernel gives the same answer: the OpenMP program
//! with 1 and 2 threads and the allot build on pools of 1 and 2 workers;
//! and the answer changes with the scale (it is not a constant).

use allot_client::Cell;
use allot_proto::dirs::TrustedDir;
use allot_runtime::Pool;
use allot_topo::CpuSet;
use allot_workloads::{Kernel, KernelLib, install_omp_binary, run_allot, run_omp};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// Small enough that all kernels, all variants, take a few seconds.
const SCALE: f64 = 0.02;
const OTHER_SCALE: f64 = 0.04;

/// One build cache for all tests of this file (a private temporary
/// directory, removed when the test process exits normally).
fn cache() -> &'static TrustedDir {
    static CACHE: OnceLock<(tempfile::TempDir, TrustedDir)> = OnceLock::new();
    let (_dir, trusted) = CACHE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temp dir");
        let trusted = TrustedDir::create(dir.path(), 0o700).expect("private");
        (dir, trusted)
    });
    trusted
}

/// The OpenMP program, built once for all tests of this file.
fn omp_binary() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| install_omp_binary(cache()).expect("build the OpenMP program"))
        .clone()
}

/// The kernels for allot's runtime, built and loaded once.
fn kernels() -> &'static KernelLib {
    static LIB: OnceLock<KernelLib> = OnceLock::new();
    LIB.get_or_init(|| KernelLib::load(cache()).expect("build and load the kernels"))
}

/// A pool of `n` workers on CPUs 0..n (a manual cell: no broker involved).
fn pool(n: usize) -> Pool {
    let (cell, _writer) = Cell::manual(CpuSet::first_n(n)).expect("manual cell");
    Pool::builder()
        .cell(cell)
        .name(format!("wl-test-{n}"))
        .build()
        .expect("pool")
}

fn omp(kernel: Kernel, scale: f64, threads: u32) -> u64 {
    let o = run_omp(
        kernel,
        scale,
        &omp_binary(),
        [("OMP_NUM_THREADS", threads.to_string())],
    )
    .unwrap_or_else(|e| panic!("{kernel} omp {threads}: {e}"));
    assert_eq!(o.workers, threads as usize, "{kernel}: omp_get_max_threads");
    assert!(o.regions > 0 && o.seconds > 0.0);
    o.answer
}

fn allot(kernel: Kernel, scale: f64, workers: usize) -> u64 {
    let p = pool(workers);
    let o = run_allot(kernels(), kernel, scale, &p);
    assert_eq!(o.workers, workers, "{kernel}: pool workers");
    assert!(o.regions > 0 && o.seconds > 0.0);
    o.answer
}

fn same_answer_everywhere(kernel: Kernel) {
    let reference = omp(kernel, SCALE, 1);
    assert_eq!(omp(kernel, SCALE, 2), reference, "{kernel}: omp 2 threads");
    assert_eq!(
        allot(kernel, SCALE, 1),
        reference,
        "{kernel}: allot 1 worker"
    );
    assert_eq!(
        allot(kernel, SCALE, 2),
        reference,
        "{kernel}: allot 2 workers"
    );
    let other = omp(kernel, OTHER_SCALE, 2);
    assert_ne!(
        other, reference,
        "{kernel}: answer does not depend on the work"
    );
    assert_eq!(
        allot(kernel, OTHER_SCALE, 2),
        other,
        "{kernel}: allot at {OTHER_SCALE}"
    );
}

#[test]
fn pricing() {
    same_answer_everywhere(Kernel::Pricing);
}

#[test]
fn stencil() {
    same_answer_everywhere(Kernel::Stencil);
}

#[test]
fn pipeline() {
    same_answer_everywhere(Kernel::Pipeline);
}

#[test]
fn anneal() {
    same_answer_everywhere(Kernel::Anneal);
}

#[test]
fn cluster() {
    same_answer_everywhere(Kernel::Cluster);
}

#[test]
fn answers_differ_between_kernels() {
    let mut seen: Vec<u64> = Kernel::ALL.iter().map(|&k| omp(k, SCALE, 2)).collect();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), Kernel::ALL.len());
}

/// Threads that install the program into one fresh directory and run it at
/// once, while the others fork children, all succeed (installs never leave
/// a partial file; `run_omp` waits out a transient `ETXTBSY`).
#[test]
fn concurrent_installs_and_runs() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = TrustedDir::create(scratch.path(), 0o700).expect("private");
    let answers: Vec<u64> = std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let bin = install_omp_binary(&dir).expect("install");
                    run_omp(Kernel::Stencil, 0.001, &bin, [("OMP_NUM_THREADS", "1")])
                        .expect("run")
                        .answer
                })
            })
            .collect();
        runs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(answers.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn the_program_rejects_bad_arguments() {
    let bin = omp_binary();
    for args in [
        &["nosuchkernel"][..],
        &[],
        &["stencil", "0"],
        &["stencil", "-1"],
        &["stencil", "abc"],
        &["stencil", "nan"],
        &["stencil", "1e9"],
        &["stencil", "1", "extra"],
    ] {
        let out = Command::new(&bin).args(args).output().expect("run");
        assert!(!out.status.success(), "{args:?} accepted");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("usage") || err.contains("bad scale"),
            "{args:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{args:?} printed a result");
    }
    let out = Command::new(&bin)
        .arg("nosuchkernel")
        .output()
        .expect("run");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown kernel 'nosuchkernel'"), "{err}");
}

#[test]
#[should_panic(expected = "outside (0, 1000]")]
fn run_allot_rejects_a_bad_scale() {
    let p = pool(1);
    run_allot(kernels(), Kernel::Pricing, 0.0, &p);
}
