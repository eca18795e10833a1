//! Bound OpenMP threads (`OMP_PROC_BIND`, `OMP_PLACES`) whose cell shrinks
//! or moves: the shim carries a binding the kernel refuses into the grant
//! (`shim/bind.c`) instead of letting libgomp abort. Live: the program
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
    /// Starts `bound` inside cgroup `group` (it joins before exec, so the
    /// runtime computes its places from the group's CPUs), bound to
    /// `OMP_PLACES=threads`, with or without the shim and a page.
    fn start(group: &Path, page: Option<&Page>) -> Bound {
        Self::start_with(group, page, None)
    }

    /// [`Bound::start`] with `ALLOT_LAUNCH_CPUS` set to `launch`.
    fn start_with(group: &Path, page: Option<&Page>, launch: Option<&str>) -> Bound {
        let prog = compile(
            "gcc",
            "tests/omp/bound.c",
            "bound",
            &["-fopenmp", "-pthread"],
        )
        .unwrap();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$1/cgroup.procs" && exec "$2""#)
            .arg("sh")
            .arg(group)
            .arg(&prog)
            .env("OMP_PROC_BIND", "true")
            .env("OMP_PLACES", "threads")
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

/// The CPU list of every "thread T cpus LIST" line.
fn masks(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.split_once(" cpus ").map(|(_, c)| c.to_owned()))
        .collect()
}

fn live() -> bool {
    allot_testkit::prerequisite(
        allot_testkit::v1_cpuset_writable(),
        "root and a writable v1 cpuset hierarchy",
    ) && allot_testkit::prerequisite(allot_testkit::cpus() >= 2, "two CPUs")
}

/// Without the shim, libgomp dies creating a thread bound to a CPU its
/// group no longer has: the failure the shim must prevent, shown here so
/// the test below is known to reach it.
#[test]
fn without_the_shim_a_bound_team_outside_the_group_aborts() {
    if !live() {
        return;
    }
    let (_guard, dir) = group("bind-plain");
    let mut p = Bound::start(&dir, None);
    set_cpus(&dir, "0");
    let err = p
        .step("team 2")
        .expect_err("libgomp should have refused the team");
    assert!(
        err.contains("Thread creation failed"),
        "unexpected failure: {err}"
    );
}

/// The group shrinks from {0,1} to {0} before the page says so (the
/// broker writes the cgroup first, then publishes): the thread bound to
/// CPU 1 is carried onto the creator's CPUs. Then the cell moves to {1}
/// and the page says so: new threads bound to place {0} land on CPU 1.
/// A thread binding itself outside the grant is carried in too.
#[test]
fn bound_threads_stay_inside_a_cell_that_shrinks_and_moves() {
    if !live() {
        return;
    }
    let (_guard, dir) = group("bind-shim");
    let mut page = Page::new(2);
    let mut p = Bound::start(&dir, Some(&page));

    set_cpus(&dir, "0");
    let lines = p.step("team 2").unwrap();
    assert_eq!(masks(&lines), ["0", "0"], "{lines:?}");

    set_cpus(&dir, "1");
    page.publish_on(4, allot_topo::CpuSet::parse_list("1").unwrap());
    let lines = p.step("team 4").unwrap();
    assert_eq!(masks(&lines), ["1", "1", "1", "1"], "{lines:?}");

    let lines = p.step("bind 0").unwrap();
    assert_eq!(lines, ["bind 0 cpus 1"]);

    // Grown back: a binding inside the group is the program's own.
    set_cpus(&dir, "0-1");
    page.publish_on(2, allot_topo::CpuSet::first_n(2));
    let lines = p.step("bind 0").unwrap();
    assert_eq!(lines, ["bind 0 cpus 0"]);
    assert!(p.step("quit").is_err_and(|e| e.contains("exit status: 0")));
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
    let mut p = Bound::start_with(&dir, Some(&page), Some("0-1"));
    assert_eq!(p.step("procs").unwrap(), ["procs 2", "mask 0"]);
    drop(p);
    // Without the variable (or outside allot run): the kernel's count.
    let mut p = Bound::start_with(&dir, Some(&page), None);
    assert_eq!(p.step("procs").unwrap(), ["procs 1", "mask 0"]);
}
