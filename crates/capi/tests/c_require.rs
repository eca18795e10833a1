//! `require` blocks from C and C++: installs liballot as `c_abi.rs` does,
//! compiles `tests/c/require.c` (and `require_threads.c`,
//! `require_short.c`, `require.cpp`)
//! against the installed header and library with `-Wall -Wextra -Werror`
//! under AddressSanitizer and UndefinedBehaviorSanitizer, and runs one
//! scenario per process. Scenarios whose threads must share a block (Poli-C
//! Figures 1 and 6(c), a policy waiting in a shared block) run with the
//! preload shim, whose `pthread_create`, `pthread_join` and condition waits
//! call liballot's thread hooks.
//!
//! Every program runs without a broker (`ALLOT_SOCKET` names nothing), so
//! its runtime is standalone and touches only its own threads' affinity;
//! no fractional CPU is requested, so no throttling cgroup or monitor is
//! involved.

mod common;
#[path = "support/liballot.rs"]
mod liballot;

use liballot::{artifacts, run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn work() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_require");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// liballot installed from this build, once per test process.
fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let profile = artifacts()
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_owned();
        let prefix = work().join("prefix").join(profile);
        liballot::install(&prefix);
        prefix
    })
}

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .args(args)
        .arg("allot")
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

const SANITIZE: &[&str] = &[
    "-fsanitize=address,undefined",
    "-fno-omit-frame-pointer",
    "-fno-sanitize-recover=all",
];

/// Compiles `src` (under tests/c) with `cc` and `flags` into `out`, once.
fn build(cc: &str, src: &str, out: &str, flags: &[&str]) -> PathBuf {
    static BUILT: std::sync::Mutex<Vec<(String, PathBuf)>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, p)) = built.iter().find(|(o, _)| o == out) {
        return p.clone();
    }
    let exe = work().join(out);
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(src);
    run(Command::new(cc)
        .args(["-O1", "-g", "-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--cflags", "--libs"]))
        .arg(format!("-Wl,-rpath,{}", prefix().join("lib").display()))
        .arg("-lpthread"));
    built.push((out.to_string(), exe.clone()));
    exe
}

/// `require.c` with sanitizers.
fn require_c() -> PathBuf {
    let mut flags = vec!["-std=c11"];
    flags.extend(SANITIZE);
    build("gcc", "require.c", "require", &flags)
}

/// `require_threads.c` with sanitizers.
fn require_threads_c() -> PathBuf {
    let mut flags = vec!["-std=c11"];
    flags.extend(SANITIZE);
    build("gcc", "require_threads.c", "require_threads", &flags)
}

/// `require_threads.c` with OpenMP (libgomp) and sanitizers.
fn require_threads_omp() -> PathBuf {
    let mut flags = vec!["-std=c11", "-fopenmp"];
    flags.extend(SANITIZE);
    build("gcc", "require_threads.c", "require_threads_omp", &flags)
}

/// `require.c` with OpenMP (libgomp) and sanitizers.
fn require_omp() -> PathBuf {
    let mut flags = vec!["-std=c11", "-fopenmp"];
    flags.extend(SANITIZE);
    build("gcc", "require.c", "require_omp", &flags)
}

/// A program's environment: no broker, no cell, no inherited preload; with
/// `shim`, the preload shim.
fn program(exe: &Path, args: &[&str], shim: bool) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env("ALLOT_SOCKET", work().join("no-broker.sock"))
        .env_remove("ALLOT_CELL")
        .env_remove("ALLOT_GRANT_FD")
        .env_remove("ALLOT_THROTTLE_CGROUP")
        .env_remove("OMP_NUM_THREADS")
        .env_remove("LD_PRELOAD")
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1");
    // The shim comes before the sanitizer runtime in the link order; ASan
    // only warns about that (its interceptors still chain to libc).
    let asan = "detect_leaks=1:abort_on_error=0:halt_on_error=1:verify_asan_link_order=0";
    cmd.env("ASAN_OPTIONS", asan);
    if shim {
        cmd.env("LD_PRELOAD", common::shim());
    }
    cmd
}

fn ncpus() -> usize {
    allot_topo::allowed_cpus().unwrap().len()
}

#[track_caller]
fn passes(exe: &Path, args: &[&str], shim: bool) -> String {
    let out = common::output_within(
        &mut program(exe, args, shim),
        std::time::Duration::from_secs(120),
    );
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !stderr.contains("Sanitizer") && !stderr.contains("runtime error"),
        "{args:?}: {}\n{stdout}{stderr}",
        out.status
    );
    assert!(stdout.contains(&format!("ok {}", args[0])), "{stdout}");
    stdout
}

/// Poli-C Figure 1 scaled to this machine: a block granting k CPUs, 3k
/// threads created in it each asking for one core: never more threads in
/// the block than k, each alone on its CPU (affinity and sched_getcpu),
/// every thread runs, and the parent's CPUs come back when it leaves.
#[test]
fn figure_1_threads_never_exceed_the_granted_cpus() {
    let exe = require_c();
    for k in 1..=ncpus().min(2) {
        let out = passes(&exe, &["fig1", &k.to_string()], true);
        assert!(out.contains(&format!("on {k} CPUs")), "{out}");
    }
}

/// Poli-C Figure 6(c): an unmodified libgomp team inside
/// `require(BeforeSpawn cores(n)) { require(AfterSpawn Private cores(1),
/// ForChild cores(1)) { #pragma omp parallel } }`, the thread running it
/// created inside `require(min_cores(1))`: in every region each team
/// thread's affinity is a single CPU, all distinct.
#[test]
fn figure_6c_an_openmp_team_gets_one_cpu_per_thread() {
    if !allot_testkit::prerequisite(ncpus() >= 2, "needs 2 CPUs") {
        return;
    }
    let out = passes(&require_omp(), &["fig6c"], true);
    assert_eq!(
        out.lines().filter(|l| l.contains("1 CPU(s)")).count(),
        3 * ncpus(),
        "{out}"
    );
}

/// Poli-C's ForDescendants, behaviourally: a block asking, for every
/// descendant, one CPU and no other; its child, grandchild and
/// great-grandchild (real pthreads, through the preload shim) each run on
/// that CPU alone, while the block's own thread keeps every CPU.
#[test]
fn for_descendants_reaches_the_grandchildren() {
    if !allot_testkit::prerequisite(ncpus() >= 2, "needs 2 CPUs") {
        return;
    }
    let out = passes(&require_threads_c(), &["descendants"], true);
    for generation in 1..=3 {
        assert!(
            out.contains(&format!("generation {generation}: 1 CPU(s)")),
            "{out}"
        );
    }
}

/// Release on block beyond joins and condition waits: a block of one CPU
/// whose thread waits — in `sem_wait`, a pipe `read`, an `accept`, a raw
/// futex wait — for a thread it created that needs a core of the block
/// (the `read` and `accept` rounds choose to release on I/O first).
/// Without the shim's wrappers the wait keeps the CPU and neither thread
/// ever runs (the program's alarm fails it).
#[test]
fn waits_give_the_cpu_back_to_the_threads_they_wait_for() {
    let out = passes(&require_threads_c(), &["block_waits"], true);
    for way in ["sem_wait", "read", "accept", "futex"] {
        assert!(out.contains(&format!("{way} gave the CPU back")), "{out}");
    }
}

/// Which waits give a block's allocation back (Poli-C §2.7, §3.4): by
/// default every wait but I/O. A `nanosleep` and a contended
/// `pthread_mutex_lock` give the block's one CPU to the thread that needs
/// it (without that the wait never ends and the program's alarm fails
/// it); a pipe `read` keeps it, exclusivity included, and the thread's
/// count of give-backs (`allot_given_back`) says so either way.
#[test]
fn sleeps_and_locks_give_back_and_io_keeps_by_default() {
    let out = passes(&require_threads_c(), &["wait_kinds"], true);
    for line in [
        "nanosleep gave the CPU back",
        "a contended mutex gave the CPU back",
        "a pipe read kept the CPU",
    ] {
        assert!(out.contains(line), "{out}");
    }
}

/// libgomp's idle team threads, created inside a block, wait in futex
/// calls the shim cannot see; leaving the block ends them, so they give
/// its CPUs back and another block for every CPU gets in (it waits for
/// good otherwise, and the program's alarm fails it).
#[test]
fn an_idle_openmp_team_gives_its_block_back() {
    if !allot_testkit::prerequisite(ncpus() >= 2, "needs 2 CPUs") {
        return;
    }
    let out = passes(&require_threads_omp(), &["omp_idle"], true);
    assert!(out.contains("the idle team gave the CPUs back"), "{out}");
    assert!(
        out.contains(&format!("a new team of {} ran", ncpus())),
        "{out}"
    );
}

/// A kind registered from C (`allot_kind_register`, Poli-C's
/// `register_resource`): bad definitions refused, a C policy sees the rate
/// its probe measures (`allot_dev_rate`), and a per-device request reaches
/// its `restrict_thread` with the holdings.
#[test]
fn a_kind_registered_from_c_is_measured_and_restricted() {
    let out = passes(&require_c(), &["user_kind"], false);
    assert!(out.contains("restrict saw a=1 b=nan"), "{out}");
}

#[test]
fn recoverable_errors_are_status_codes_with_a_message() {
    passes(&require_c(), &["errors"], false);
}

/// Programming errors abort, naming the file and line of the require.
#[test]
fn programming_errors_abort_naming_the_line() {
    let exe = require_c();
    for (mode, says) in [
        ("abort_unknown", "unknown resource kind \"gpu\""),
        (
            "abort_nested_larger",
            "a nested require may not ask for more than its enclosing one",
        ),
        ("abort_double_exit", "already left (left twice)"),
        (
            "abort_other_thread",
            "must be left by the thread that entered it",
        ),
        ("abort_out_of_order", "leave the innermost block first"),
        ("abort_in_policy", "a require inside a policy function"),
    ] {
        let out = common::output_within(
            &mut program(&exe, &[mode], false),
            std::time::Duration::from_secs(60),
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{mode}: {}\n{stdout}{stderr}",
            out.status
        );
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix("line "))
            .unwrap_or_else(|| panic!("{mode}: no line announced: {stdout}"));
        let site = format!("require.c:{line}: allot_require: ");
        assert!(
            stderr.contains(&site) && stderr.contains(says),
            "{mode}: expected {site:?} and {says:?} in:\n{stderr}"
        );
    }
}

/// Falling through, break, continue, return, goto (also out of two nested
/// blocks) all release: the thread's affinity comes back and a thread
/// outside every block sees the virtual kind free again.
#[test]
fn every_way_out_of_a_block_releases_it() {
    if !allot_testkit::prerequisite(ncpus() >= 2, "needs 2 CPUs") {
        return;
    }
    passes(&require_c(), &["exits"], false);
}

/// A C policy using the device iteration macro and the view functions; a
/// named one that fails, waits, and is run again when the parent leaves;
/// ownership passed to the policy; a share of an enclosing allocation.
#[test]
fn c_policies_iterate_devices_and_run_again_when_availability_changes() {
    let out = passes(&require_c(), &["policy"], true);
    assert!(out.contains("policy ran"), "{out}");
}

/// A virtual kind counts: at most 2 holders of a device of maximum 2;
/// redefinition with other devices refused; the join policies and a
/// declarative constraint work over it and the machine.
#[test]
fn virtual_kinds_count_and_join_policies_use_them() {
    passes(&require_c(), &["virtual"], false);
}

/// Poli-C's spelling with ALLOT_SHORT_NAMES, compiled `-pedantic` by gcc
/// and clang.
#[test]
fn short_names_compile_pedantic_and_run() {
    let mut flags = vec!["-std=c11", "-pedantic"];
    flags.extend(SANITIZE);
    let exe = build("gcc", "require_short.c", "require_short", &flags);
    let out = run(&mut program(&exe, &[], false));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok short"));
    let exe = build(
        "clang",
        "require_short.c",
        "require_short_clang",
        &["-std=c11", "-pedantic"],
    );
    let out = run(&mut program(&exe, &[], false));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok short"));
}

/// allot::require_scope (RAII: left at the end of scope, on return and on
/// an exception) and the macros in C++.
#[test]
fn cplusplus_raii_scopes() {
    let mut flags = vec!["-std=c++17", "-pedantic"];
    flags.extend(SANITIZE);
    let exe = build("g++", "require.cpp", "require_cpp", &flags);
    let out = run(&mut program(&exe, &[], false));
    assert!(String::from_utf8_lossy(&out.stdout).contains("ok c++"));
}

/// liballot loaded late, by a plugin the program opens with dlopen (the
/// program itself does not link it): the shim finds liballot's require
/// hooks at the plugin's first thread, so the threads created in the
/// plugin's block each get their own CPU. Without the shim they share the
/// parent's CPUs, and the same check fails.
#[test]
fn liballot_loaded_late_by_a_plugin_is_seen() {
    if !allot_testkit::prerequisite(ncpus() >= 2, "needs two CPUs") {
        return;
    }
    let plugin = build(
        "gcc",
        "late_plugin.c",
        "late_plugin.so",
        &["-std=c11", "-shared", "-fPIC"],
    );
    // --as-needed: the host names no liballot symbol, so it does not link it.
    let host = build(
        "gcc",
        "late_host.c",
        "late_host",
        &["-std=c11", "-Wl,--as-needed"],
    );
    let run = |shim: bool| {
        common::output_within(
            &mut program(&host, &[plugin.to_str().unwrap()], shim),
            std::time::Duration::from_secs(60),
        )
    };
    let with = run(true);
    let text = String::from_utf8_lossy(&with.stdout);
    assert!(
        with.status.success() && text.contains("ok late"),
        "{}: {text}{}",
        with.status,
        String::from_utf8_lossy(&with.stderr)
    );
    let without = run(false);
    assert!(
        !without.status.success(),
        "without the shim the threads share the parent's CPUs: {}",
        String::from_utf8_lossy(&without.stdout)
    );
}
