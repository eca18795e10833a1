//! Bound OpenMP threads (`OMP_PROC_BIND`, `OMP_PLACES`, `KMP_AFFINITY`)
//! whose cell shrinks or moves: the shim carries a binding the kernel
//! refuses into the grant (`shim/bind.c`) instead of letting the runtime
//! abort, libgomp (bindings in the thread's attributes) and LLVM's libomp
//! (each thread binds itself with the raw system call). Live: the program
//! runs in a v1 cpuset group this test makes, whose CPUs the test changes
//! between the program's steps, with a grant page the test publishes to.

mod common;

use common::*;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

/// The program under test, its input and its output, killed on drop.
struct Bound {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Bound {
    /// Starts `bound`, built by `tc`, inside cgroup `group` (it joins
    /// before exec, so the runtime computes its places from the group's
    /// CPUs), bound by `binding` (environment assignments), with or
    /// without the shim and a page.
    fn start(tc: Toolchain, binding: &[(&str, &str)], group: &Path, page: Option<&Page>) -> Bound {
        Self::start_with(tc, binding, group, page, None)
    }

    /// [`Bound::start`] with `ALLOT_LAUNCH_CPUS` set to `launch`.
    fn start_with(
        tc: Toolchain,
        binding: &[(&str, &str)],
        group: &Path,
        page: Option<&Page>,
        launch: Option<&str>,
    ) -> Bound {
        let prog = compile(
            tc.cc(),
            "tests/omp/bound.c",
            &format!("bound-{}", tc.cc()),
            &["-fopenmp", "-pthread"],
        )
        .unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && exec "$2""#)
            .arg("sh")
            .arg(group)
            .arg(&prog)
            .env_remove("OMP_PROC_BIND")
            .env_remove("OMP_PLACES")
            .env_remove("KMP_AFFINITY")
            .envs(binding.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        match page {
            Some(page) => {
                with_shim(&mut cmd, 4);
                inherit_page(&mut cmd, page.fd());
            }
            None => {
                cmd.env("OMP_NUM_THREADS", "4").env_remove("LD_PRELOAD");
            }
        }
        if let Some(l) = launch {
            cmd.env(allot_proto::env::LAUNCH_CPUS, l);
        }
        let mut child = cmd.spawn().unwrap();
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        let mut b = Bound {
            child,
            input,
            output,
        };
        assert_eq!(b.line().as_deref(), Some("ready"));
        b
    }

    fn line(&mut self) -> Option<String> {
        let mut l = String::new();
        match self.output.read_line(&mut l) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(l.trim_end().to_owned()),
        }
    }

    /// Sends `cmd`; returns the lines printed until the next "ready", or
    /// `Err` with the program's stderr if it ended first.
    fn step(&mut self, cmd: &str) -> Result<Vec<String>, String> {
        writeln!(self.input, "{cmd}").unwrap();
        let mut lines = Vec::new();
        loop {
            match self.line() {
                Some(l) if l == "ready" => return Ok(lines),
                Some(l) => lines.push(l),
                None => {
                    let out =
                        std::mem::replace(&mut self.child, Command::new("true").spawn().unwrap())
                            .wait_with_output()
                            .unwrap();
                    return Err(format!(
                        "{}; stderr: {}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ));
                }
            }
        }
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A v1 cpuset group of this test on CPUs 0-1, removed on drop.
fn group(tag: &str) -> (allot_testkit::CgroupDirs, PathBuf) {
    let root = Path::new("/sys/fs/cgroup/cpuset");
    let dir = root.join(allot_testkit::unique(tag));
    std::fs::create_dir(&dir).unwrap();
    let guard = allot_testkit::CgroupDirs(vec![dir.clone()]);
    let mems = std::fs::read_to_string(root.join("cpuset.mems")).unwrap();
    std::fs::write(dir.join("cpuset.mems"), mems.trim()).unwrap();
    set_cpus(&dir, "0-1");
    (guard, dir)
}

fn set_cpus(dir: &Path, cpus: &str) {
    std::fs::write(dir.join("cpuset.cpus"), cpus).unwrap();
}

/// The CPU list of every "thread T cpus LIST" line, in thread order.
fn masks(lines: &[String]) -> Vec<String> {
    // The team's threads print in whatever order they run: sort by thread.
    let mut by_thread: Vec<(u32, String)> = lines
        .iter()
        .filter_map(|l| {
            let (head, cpus) = l.split_once(" cpus ")?;
            let t = head.strip_prefix("thread ")?.parse().ok()?;
            Some((t, cpus.to_owned()))
        })
        .collect();
    by_thread.sort();
    by_thread.into_iter().map(|(_, c)| c).collect()
}

fn live() -> bool {
    allot_testkit::prerequisite(
        allot_testkit::v1_cpuset_writable(),
        "root and a writable v1 cpuset hierarchy",
    ) && allot_testkit::prerequisite(allot_testkit::cpus() >= 2, "two CPUs")
}

/// The bindings tried: libgomp's places, and LLVM libomp's under both of
/// its spellings.
const GOMP_PLACES: &[(&str, &str)] = &[("OMP_PROC_BIND", "true"), ("OMP_PLACES", "threads")];
const KMP_COMPACT: &[(&str, &str)] = &[("KMP_AFFINITY", "granularity=fine,compact")];

/// Starts a bound program on {0,1} and has it reach the point where it
/// has computed its places: libgomp does at start; libomp at its first
/// parallel region, so it runs one (its thread 1 on CPU 1).
fn started(tc: Toolchain, binding: &[(&str, &str)], dir: &Path, page: Option<&Page>) -> Bound {
    let mut p = Bound::start(tc, binding, dir, page);
    if tc == Toolchain::Clang {
        let lines = p.step("team 2").unwrap();
        assert_eq!(masks(&lines), ["0", "1"], "{lines:?}");
    }
    p
}

/// Without the shim, the runtime dies binding a new thread to a CPU its
/// group no longer has: the failure the shim must prevent, shown here so
/// the test below is known to reach it.
fn aborts_without_the_shim(tc: Toolchain, binding: &[(&str, &str)], says: &str) {
    let (_guard, dir) = group(&format!("bind-plain-{}", tc.cc()));
    let mut p = started(tc, binding, &dir, None);
    set_cpus(&dir, "0");
    let err = p
        .step("team 4")
        .expect_err("the runtime should have refused the team");
    assert!(err.contains(says), "unexpected failure: {err}");
}

#[test]
fn without_the_shim_a_bound_team_outside_the_group_aborts() {
    if !live() {
        return;
    }
    aborts_without_the_shim(Toolchain::Gcc, GOMP_PLACES, "Thread creation failed");
    if clang_available() {
        aborts_without_the_shim(Toolchain::Clang, GOMP_PLACES, "System error #22");
        aborts_without_the_shim(Toolchain::Clang, KMP_COMPACT, "System error #22");
    }
}

/// The group shrinks from {0,1} to {0} before the page says so (the
/// broker writes the cgroup first, then publishes): new threads bound to
/// CPU 1 are carried onto the CPUs they may use. Then the cell moves to
/// {1} and the page says so. A thread binding itself outside the grant is
/// carried in too.
fn stays_inside(tc: Toolchain, binding: &[(&str, &str)]) {
    let (_guard, dir) = group(&format!("bind-shim-{}", tc.cc()));
    let mut page = Page::new(2);
    page.publish_on(4, allot_topo::CpuSet::first_n(2));
    let mut p = started(tc, binding, &dir, Some(&page));

    set_cpus(&dir, "0");
    let lines = p.step("team 4").unwrap();
    assert_eq!(
        masks(&lines),
        ["0", "0", "0", "0"],
        "{tc:?} {binding:?}: {lines:?}"
    );

    set_cpus(&dir, "1");
    page.publish_on(4, allot_topo::CpuSet::parse_list("1").unwrap());
    let lines = p.step("team 4").unwrap();
    assert_eq!(
        masks(&lines),
        ["1", "1", "1", "1"],
        "{tc:?} {binding:?}: {lines:?}"
    );

    let lines = p.step("bind 0").unwrap();
    assert_eq!(lines, ["bind 0 cpus 1"]);

    // Grown back: a binding inside the group is the program's own.
    set_cpus(&dir, "0-1");
    page.publish_on(2, allot_topo::CpuSet::first_n(2));
    let lines = p.step("bind 0").unwrap();
    assert_eq!(lines, ["bind 0 cpus 0"]);
    assert!(p.step("quit").is_err_and(|e| e.contains("exit status: 0")));
}

#[test]
fn bound_threads_stay_inside_a_cell_that_shrinks_and_moves() {
    if !live() {
        return;
    }
    stays_inside(Toolchain::Gcc, GOMP_PLACES);
    if clang_available() {
        stays_inside(Toolchain::Clang, GOMP_PLACES);
        stays_inside(Toolchain::Clang, KMP_COMPACT);
    }
}

/// A binding to a CPU the cell does not have floats over the cell's CPUs
/// (its requested mask is every CPU), so that when the cell grows the
/// thread widens with it, as the kernel does for a binding it accepted
/// and later had to override: it is not left pinned to a CPU of the small
/// cell, beside the threads bound there (a team so pinned shared CPUs for
/// its whole run, with idle CPUs beside it).
#[test]
fn a_binding_outside_a_small_cell_floats_and_widens_when_the_cell_grows() {
    if !live() {
        return;
    }
    let (_guard, dir) = group("bind-widen");
    set_cpus(&dir, "1");
    let mut page = Page::new(1);
    page.publish_on(1, allot_topo::CpuSet::parse_list("1").unwrap());
    let mut p = Bound::start(Toolchain::Gcc, GOMP_PLACES, &dir, Some(&page));
    assert_eq!(p.step("bind 0").unwrap(), ["bind 0 cpus 1"]);

    set_cpus(&dir, "0-1");
    page.publish_on(2, allot_topo::CpuSet::first_n(2));
    assert_eq!(
        p.step("procs").unwrap()[1],
        "mask 0 1",
        "the thread bound to CPU 0 while the cell was {{1}} should float over {{0,1}} now"
    );
    // A binding the kernel accepts is the program's own, and kept.
    assert_eq!(p.step("bind 1").unwrap(), ["bind 0 cpus 1"]);
    set_cpus(&dir, "0");
    set_cpus(&dir, "0-1");
    assert_eq!(p.step("procs").unwrap()[1], "mask 1");
}

/// libgomp counts its CPUs once, at start; a program started on a grant
/// of one CPU would be throttled (barrier waits sleep) for its whole run
/// once the grant grows. Under the shim, libgomp's count is the CPUs the
/// cell may ever have (`ALLOT_LAUNCH_CPUS`); the program's own affinity
/// query still gets the kernel's answer.
#[test]
fn libgomp_counts_the_cells_launch_cpus_and_the_program_its_own() {
    if !live() {
        return;
    }
    let (_guard, dir) = group("bind-procs");
    set_cpus(&dir, "0");
    let page = Page::new(1);
    let mut p = Bound::start_with(Toolchain::Gcc, GOMP_PLACES, &dir, Some(&page), Some("0-1"));
    assert_eq!(p.step("procs").unwrap(), ["procs 2", "mask 0"]);
    drop(p);
    // Without the variable (or outside allot run): the kernel's count.
    let mut p = Bound::start_with(Toolchain::Gcc, GOMP_PLACES, &dir, Some(&page), None);
    assert_eq!(p.step("procs").unwrap(), ["procs 1", "mask 0"]);
}
