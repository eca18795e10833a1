//! allot's Thread Composability Manager (`tcm/`, `libtcm.so.1`).
//!
//! - the division rules, in C (`tests/c/tcm_divide.c`);
//! - every entry point as a runtime calls it, against a grant page the
//!   test moves (`tests/c/tcm_api.c`);
//! - real runtimes: a oneTBB program and an Intel OpenMP program (built
//!   against the PyPI wheels `scripts/intel-runtimes.sh` installs) in one
//!   cell and in two cells follow a grant that shrinks and grows, read
//!   from what they run while they run; and a process that dies holding
//!   permits frees them.

mod common;

use allot_capi::tcm;
use common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a phase lasts, how long a change may take to be seen, and the
/// guard before the next change.
const PHASE: Duration = Duration::from_millis(1200);
const SETTLE: Duration = Duration::from_millis(300);
const GUARD: Duration = Duration::from_millis(50);

/// `libtcm.so.1`'s directory, installed once per test process.
fn tcm_dir() -> &'static Path {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let dir = allot_proto::dirs::TrustedDir::create(&work_dir().join("shim"), 0o700).unwrap();
        tcm::install_tcm(&dir, 0o700).unwrap()
    })
}

/// Where `scripts/intel-runtimes.sh` put oneTBB and Intel OpenMP.
fn runtimes() -> Option<PathBuf> {
    let dir = std::env::var_os("ALLOT_INTEL_RUNTIMES")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/intel-runtimes")
        });
    let ok = dir.join("lib/libtbb.so.12").exists() && dir.join("lib/libiomp5.so").exists();
    allot_testkit::prerequisite(
        ok,
        "oneTBB and Intel OpenMP from PyPI (run `bash scripts/intel-runtimes.sh`, or set \
         ALLOT_INTEL_RUNTIMES)",
    )
    .then_some(dir)
}

fn tbb_probe(rt: &Path) -> PathBuf {
    let inc = format!("-I{}", rt.join("include").display());
    let lib = format!("-L{}", rt.join("lib").display());
    let rpath = format!("-Wl,-rpath,{}", rt.join("lib").display());
    compile(
        "g++",
        "tests/c/tcm_tbb.cpp",
        "tcm_tbb",
        &[&inc, &lib, "-l:libtbb.so.12", &rpath],
    )
    .unwrap()
}

fn omp_probe(rt: &Path) -> PathBuf {
    let lib = format!("-L{}", rt.join("lib").display());
    let rpath = format!("-Wl,-rpath,{}", rt.join("lib").display());
    compile(
        "gcc",
        "tests/c/tcm_omp.c",
        "tcm_omp",
        &["-fopenmp", &lib, "-l:libiomp5.so", &rpath],
    )
    .unwrap()
}

fn now_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// Lets the child inherit `fd` (clears close-on-exec between fork and exec).
fn inherit(cmd: &mut Command, fd: BorrowedFd<'_>) {
    let raw = fd.as_raw_fd();
    // SAFETY: fcntl(F_SETFD) is async-signal-safe; `raw` is open in the child.
    unsafe {
        cmd.pre_exec(move || {
            rustix::io::fcntl_setfd(BorrowedFd::borrow_raw(raw), rustix::io::FdFlags::empty())?;
            Ok(())
        });
    }
}

/// A probe running under allot's manager: its `t NS VALUE` samples.
struct Probe {
    child: Child,
    samples: Arc<Mutex<Vec<(i64, i64)>>>,
    name: &'static str,
}

impl Probe {
    fn start(name: &'static str, program: &Path, page: &Page, table: &OwnedFd) -> Probe {
        Probe::start_with(name, program, &[], page, table)
    }

    fn start_with(
        name: &'static str,
        program: &Path,
        args: &[&str],
        page: &Page,
        table: &OwnedFd,
    ) -> Probe {
        let mut cmd = Command::new(program);
        cmd.args(args);
        inherit_page(&mut cmd, page.fd());
        inherit(&mut cmd, table.as_fd_borrowed());
        cmd.env("TCM_ENABLE", "1")
            .env(tcm::ENV_TCM_FD, table.as_raw_fd().to_string())
            .env("LD_LIBRARY_PATH", tcm_dir())
            .env("OMP_NUM_THREADS", "4")
            .env_remove("LD_PRELOAD")
            .env_remove("OMP_DYNAMIC")
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().expect("the probe starts");
        let out = child.stdout.take().unwrap();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let s = samples.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let f: Vec<i64> = line
                    .strip_prefix("t ")
                    .map(|r| {
                        r.split_whitespace()
                            .filter_map(|x| x.parse().ok())
                            .collect()
                    })
                    .unwrap_or_default();
                if f.len() == 2 {
                    s.lock().unwrap().push((f[0], f[1]));
                }
            }
        });
        Probe {
            child,
            samples,
            name,
        }
    }

    fn started(&self) -> bool {
        !self.samples.lock().unwrap().is_empty()
    }

    fn last(&self) -> Option<i64> {
        self.samples.lock().unwrap().last().map(|s| s.1)
    }

    /// Values sampled in `[from, to)`.
    fn between(&self, from: i64, to: i64) -> Vec<i64> {
        let s = self.samples.lock().unwrap();
        s.iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|s| s.1)
            .collect()
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

trait AsFdBorrowed {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_>;
}

impl AsFdBorrowed for OwnedFd {
    fn as_fd_borrowed(&self) -> BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(self)
    }
}

/// Waits (up to 60 s: a busy machine starts runtimes slowly) for every
/// probe's first sample.
fn wait_started(probes: &[&Probe]) {
    assert!(
        allot_testkit::eventually(Duration::from_secs(60), || probes
            .iter()
            .all(|p| p.started())),
        "the probes never reported"
    );
}

/// A phase: from a change of the grant to the next.
struct Phase {
    from: i64,
    to: i64,
}

impl Phase {
    fn window(&self) -> (i64, i64) {
        (
            self.from + SETTLE.as_nanos() as i64,
            self.to - GUARD.as_nanos() as i64,
        )
    }
}

/// Publishes each of `grants` (one threads value per page) for a phase;
/// returns the phases.
fn run_phases(pages: &mut [&mut Page], grants: &[&[u32]]) -> Vec<Phase> {
    let mut phases = Vec::new();
    for g in grants {
        let from = now_ns();
        for (p, t) in pages.iter_mut().zip(g.iter()) {
            p.publish(*t);
        }
        std::thread::sleep(PHASE);
        phases.push(Phase { from, to: now_ns() });
    }
    phases
}

/// OpenMP's teams are a decision read exactly: every region of the phase
/// had `want` threads.
fn check_omp(p: &Probe, phase: &Phase, want: i64, what: &str) {
    let (a, b) = phase.window();
    let seen = p.between(a, b);
    assert!(!seen.is_empty(), "{what}: {} reported nothing", p.name);
    assert!(
        seen.iter().all(|&v| v == want),
        "{what}: {} teams {seen:?}, expected {want}",
        p.name
    );
}

/// OpenMP beside oneTBB in one cell: oneTBB gives its permit back
/// between two parallel loops, and a region that starts in that gap may
/// take the whole grant (a right decision: nobody else asked). So: no
/// team larger than the grant, and most teams of the phase at `want`,
/// OpenMP's share.
fn check_omp_beside(p: &Probe, phase: &Phase, want: i64, grant: i64, what: &str) {
    let (a, b) = phase.window();
    let seen = p.between(a, b);
    assert!(!seen.is_empty(), "{what}: {} reported nothing", p.name);
    let at_share = seen.iter().filter(|&&v| v == want).count();
    assert!(
        seen.iter().all(|&v| v <= grant) && 2 * at_share > seen.len(),
        "{what}: {} teams {seen:?}, expected at most {grant} and mostly {want}",
        p.name
    );
}

/// oneTBB's threads are counted as they run tasks: never more than the
/// permit allows, and that many in some round (every granted worker
/// joins a round of 48 one-millisecond tasks).
fn check_tbb(p: &Probe, phase: &Phase, want: i64, what: &str) {
    let (a, b) = phase.window();
    let seen = p.between(a, b);
    assert!(!seen.is_empty(), "{what}: {} reported nothing", p.name);
    assert!(
        seen.iter().all(|&v| v <= want) && seen.contains(&want),
        "{what}: {} ran rounds on {seen:?} threads, expected at most and once {want}",
        p.name
    );
}

#[test]
fn the_division_rules() {
    let exe = work_dir().join("bin/tcm_divide");
    std::fs::create_dir_all(exe.parent().unwrap()).unwrap();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(dir.join("tests/c/tcm_divide.c"))
        .arg(dir.join("tcm/divide.c"))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8_lossy(&run.stdout);
    assert!(run.status.success() && text.contains("ok"), "{text}");
}

#[test]
fn every_entry_point_as_a_runtime_calls_it() {
    let exe = compile("gcc", "tests/c/tcm_api.c", "tcm_api", &["-ldl"]).unwrap();
    let mut page = Page::new(6);
    let mut cmd = Command::new(&exe);
    cmd.arg(tcm_dir().join("libtcm.so.1"));
    inherit_page(&mut cmd, page.fd());
    cmd.env_remove(tcm::ENV_TCM_FD)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut text = String::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        text.push_str(&line);
        text.push('\n');
        if let Some(n) = line.strip_prefix("publish ") {
            page.publish(n.parse().unwrap());
            writeln!(stdin, "ok").unwrap();
        }
    }
    let status = child.wait().unwrap();
    assert!(status.success() && text.ends_with("ok\n"), "{text}");
}

/// A oneTBB loop with OpenMP teams in its items, as the runtimes call the
/// manager (`tests/c/tcm_nested.c`): the arena lends the threads a round
/// leaves without a team to the teams of the next, keeps its own workers,
/// and lends nothing after a round in which every thread hosted a team.
#[test]
fn an_arena_lends_its_idle_threads_to_the_teams_nested_in_it() {
    let exe = compile(
        "gcc",
        "tests/c/tcm_nested.c",
        "tcm_nested",
        &["-ldl", "-pthread"],
    )
    .unwrap();
    let page = Page::new(16);
    let mut cmd = Command::new(&exe);
    cmd.arg(tcm_dir().join("libtcm.so.1"));
    inherit_page(&mut cmd, page.fd());
    let out = cmd.env_remove(tcm::ENV_TCM_FD).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.ends_with("ok\n"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The real runtimes, oneTBB outside and Intel OpenMP inside, on a grant of
/// 4 and an arena of 4: a loop of 4 items hosts a team on every thread of
/// the arena (each item waits until all are taken), so once the first
/// loop was seen the teams stay at their primary and the arena keeps its
/// workers: nothing is lent, and nothing runs beyond the grant. (The
/// earlier division shared the budget between an arena and its own teams,
/// and ran teams of 2 here half the time. What an arena lends when its loop
/// leaves threads idle is `tcm_nested.c`'s: on 2 CPUs which threads host a
/// smaller loop's items is the scheduler's to say.)
#[test]
fn nested_openmp_teams_in_a_full_tbb_loop_stay_at_their_primary() {
    let Some(rt) = runtimes() else { return };
    let inc = format!("-I{}", rt.join("include").display());
    let lib = format!("-L{}", rt.join("lib").display());
    let rpath = format!("-Wl,-rpath,{}", rt.join("lib").display());
    let exe = compile(
        "g++",
        "tests/c/tcm_tbb_omp.cpp",
        "tcm_tbb_omp",
        &[
            "-fopenmp",
            &inc,
            &lib,
            "-l:libtbb.so.12",
            "-l:libiomp5.so",
            &rpath,
        ],
    )
    .unwrap();
    let page = Page::new(4);
    let table = tcm::permit_table().unwrap();
    let p = Probe::start_with("oneTBB with OpenMP inside", &exe, &["4"], &page, &table);
    let until = Instant::now() + Duration::from_secs(60);
    while p.samples.lock().unwrap().len() < 48 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(20));
    }
    let teams: Vec<i64> = p.samples.lock().unwrap().iter().map(|s| s.1).collect();
    assert!(teams.len() >= 48, "4 items: {teams:?}");
    // The first loop runs before one was seen.
    let late = &teams[8..];
    assert!(
        late.iter().all(|&t| t == 1),
        "a loop of 4 items on an arena of 4: teams of {late:?}, expected 1 (all: {teams:?})"
    );
}

#[test]
fn tbb_and_intel_openmp_in_one_cell_divide_a_grant_that_shrinks_and_grows() {
    let Some(rt) = runtimes() else { return };
    let (tbb, omp) = (tbb_probe(&rt), omp_probe(&rt));
    let mut page = Page::new(4);
    let table = tcm::permit_table().unwrap();
    let a = Probe::start("oneTBB", &tbb, &page, &table);
    let b = Probe::start("OpenMP", &omp, &page, &table);
    wait_started(&[&a, &b]);
    // 4 threads: TBB's caller and OpenMP's primary, then one more each;
    // 2: the two alone; 4 again. oneTBB's share is a bound: OpenMP's
    // permit, active or idle between regions, keeps its own.
    let phases = run_phases(&mut [&mut page], &[&[4], &[2], &[4]]);
    for (phase, (grant, t, o)) in phases.iter().zip([(4, 2, 2), (2, 1, 1), (4, 2, 2)]) {
        let what = format!("grant of {grant} threads");
        check_tbb(&a, phase, t, &what);
        check_omp_beside(&b, phase, o, grant, &what);
    }
}

#[test]
fn tbb_and_intel_openmp_in_two_cells_follow_each_cell_s_grant() {
    let Some(rt) = runtimes() else { return };
    let (tbb, omp) = (tbb_probe(&rt), omp_probe(&rt));
    let (mut pa, mut pb) = (Page::new(3), Page::new(1));
    let (ta, tb) = (tcm::permit_table().unwrap(), tcm::permit_table().unwrap());
    let a = Probe::start("oneTBB", &tbb, &pa, &ta);
    let b = Probe::start("OpenMP", &omp, &pb, &tb);
    wait_started(&[&a, &b]);
    // The broker moves threads from one cell to the other and back.
    let phases = run_phases(&mut [&mut pa, &mut pb], &[&[3, 1], &[1, 3], &[3, 1]]);
    for (phase, (t, o)) in phases.iter().zip([(3, 1), (1, 3), (3, 1)]) {
        let what = format!("cells of {t} and {o} threads");
        check_tbb(&a, phase, t, &what);
        check_omp(&b, phase, o, &what);
    }
}

#[test]
fn a_process_that_dies_holding_permits_frees_them() {
    let Some(rt) = runtimes() else { return };
    let omp = omp_probe(&rt);
    let page = Page::new(4);
    let table = tcm::permit_table().unwrap();
    let mut a = Probe::start("OpenMP A", &omp, &page, &table);
    let b = Probe::start("OpenMP B", &omp, &page, &table);
    wait_started(&[&a, &b]);
    // Two teams of 4 on 4 threads: 2 each.
    assert!(
        allot_testkit::eventually(Duration::from_secs(10), || a.last() == Some(2)
            && b.last() == Some(2)),
        "teams {:?} and {:?}, expected 2 and 2",
        a.last(),
        b.last()
    );
    a.child.kill().unwrap();
    a.child.wait().unwrap();
    let died = Instant::now();
    assert!(
        allot_testkit::eventually(Duration::from_secs(10), || b.last() == Some(4)),
        "B's team stayed {:?} after A died holding 2 threads",
        b.last()
    );
    eprintln!("B took A's threads {:?} after A died", died.elapsed());
}
