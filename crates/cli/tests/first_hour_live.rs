//! What a new user meets in the first hour: a socket path that names a
//! file of theirs, a second broker beside a running one, a configuration
//! naming CPUs the machine lacks. Nothing of theirs is lost, no two brokers
//! share a cgroup directory, and every refusal says why and what to do.
//! Brokers started here are bounded (`output_within`, idle exit) and their
//! cgroups removed, even on failure.

mod common;

use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(30);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The names of the entries of `dir`.
fn entries(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_socket_path_naming_a_file_is_refused_and_the_file_kept() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(&notes, "important data\n").unwrap();
    // `allot run` refuses (it does not start a broker there, nor run the
    // program unconfined as if no broker could be had).
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .arg("run")
            .arg("--socket")
            .arg(&notes)
            .args(["--", "true"]),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains("is a regular file") && err.contains("will not replace it"),
        "{err}"
    );
    // `allot daemon` too, before it makes anything beside the file.
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--backend", "dry-run", "--socket"])
            .arg(&notes),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("is a regular file"), "{err}");
    assert_eq!(std::fs::read_to_string(&notes).unwrap(), "important data\n");
    assert_eq!(entries(dir.path()), ["notes.txt"], "made beside the file");
    // A directory is no socket either.
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--backend", "dry-run", "--socket"])
            .arg(dir.path()),
        LIMIT,
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("is a directory"));
}

#[test]
fn check_config_refuses_cpus_the_machine_lacks() {
    let dir = tempfile::tempdir().unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--check-config", "--cpus", "0-1023", "--socket"])
            .arg(dir.path().join("s")),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("cpus = 0-1023") && err.contains("are not on"),
        "{err}"
    );
    // The CPUs it has are accepted.
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--check-config", "--cpus", "0", "--socket"])
            .arg(dir.path().join("s")),
        LIMIT,
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("configuration OK"));
}

/// Removes the cgroups of an auto-started broker named `name` when the
/// test ends, however it ends.
struct Leftovers(String);

impl Drop for Leftovers {
    fn drop(&mut self) {
        for _ in 0..100 {
            if allot_testkit::broker::remove_leftovers(&self.0) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn two_brokers_never_share_a_cgroup_directory() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let own = Path::new("/sys/fs/cgroup/cpuset").join(&d.cgroup);
    assert!(own.is_dir());
    // A second broker told to use the first's directory is refused before
    // it touches it.
    let other = tempfile::tempdir().unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--backend", "cgroup1", "--idle-exit", "1"])
            .args(["--cgroup-name", &d.cgroup, "--socket"])
            .arg(other.path().join("sock")),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("another broker manages") && err.contains("--cgroup-name"),
        "{err}"
    );
    // One started on first use for another socket takes a directory named
    // after its own state directory, confines its program there, and
    // removes only that when it leaves.
    let third = tempfile::tempdir().unwrap();
    let name = allot_broker::config::default_cgroup_name(third.path());
    let _clean = Leftovers(name.clone());
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .arg("run")
            .arg("--socket")
            .arg(third.path().join("sock"))
            .args(["--", "cat", "/proc/self/cgroup"])
            .env("ALLOT_BACKEND", "cgroup1"),
        LIMIT,
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let cpuset = stdout
        .lines()
        .find(|l| {
            l.split(':')
                .nth(1)
                .is_some_and(|c| c.split(',').any(|c| c == "cpuset"))
        })
        .unwrap_or_else(|| panic!("no cpuset line: {stdout}"));
    assert!(
        cpuset.contains(&format!("/{name}/cell-")),
        "{cpuset} (expected a cell of {name}): {stderr}"
    );
    // (Looked at without connecting: a client keeps it from idling.)
    assert!(
        allot_testkit::eventually(Duration::from_secs(15), || {
            !third.path().join("sock").exists()
                && !Path::new("/sys/fs/cgroup/cpuset").join(&name).exists()
        }),
        "{name} left: {}",
        std::fs::read_to_string(third.path().join("broker.log")).unwrap_or_default()
    );
    // The first broker's directory is where it was, and its cells work.
    assert!(own.is_dir());
    let out = run_out(allot_run(&d, &["--", "cat", "/proc/self/cgroup"]));
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(stdout.contains(&format!("/{}/cell-", d.cgroup)), "{stdout}");
}

#[test]
fn a_second_socket_in_a_taken_state_directory_is_named_not_waited_for() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let sock2 = d.dir.path().join("sock2");
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args([
                "daemon",
                "--backend",
                "cgroup1",
                "--cgroup-name",
                "allot-never",
            ])
            .arg("--socket")
            .arg(&sock2),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(
        err.contains("already keeps its journal in")
            && err.contains(&d.socket.display().to_string())
            && err.contains("--state-dir"),
        "{err}"
    );
    assert!(!sock2.exists());
    assert!(!Path::new("/sys/fs/cgroup/cpuset/allot-never").exists());
    // Through `allot run`, the reason is in its warning (not only in the
    // broker's log after a wait for a socket that never comes).
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .arg("run")
            .arg("--socket")
            .arg(&sock2)
            .args(["--", "true"])
            .env("ALLOT_BACKEND", "dry-run"),
        LIMIT,
    );
    let err = text(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("already keeps its journal in") && err.contains("unconfined"),
        "{err}"
    );
}

/// The cpuset line of a `/proc/PID/cgroup` text.
fn cpuset_line(text: &str) -> Option<&str> {
    text.lines().find(|l| {
        l.split(':')
            .nth(1)
            .is_some_and(|c| c.split(',').any(|c| c == "cpuset"))
    })
}

#[test]
fn an_allot_run_inside_a_cell_runs_in_it_and_cannot_escape_its_max() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    // The outer cell holds one CPU; the inner allot run (under a shell,
    // as in a job script) prints its program's cgroup and CPUs, then the
    // outer program's own.
    let script = format!(
        "{ALLOT} run -- sh -c 'cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status'; \
         echo ---; cat /proc/self/cgroup; grep Cpus_allowed_list /proc/self/status; \
         {ALLOT} run --max 2 -- true"
    );
    let out = run_out(allot_run(&d, &["--max", "1", "--", "sh", "-c", &script]));
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let (inner, outer) = stdout.split_once("---").expect("both parts");
    let cell = cpuset_line(outer).expect("outer cpuset");
    assert!(cell.contains("/cell-"), "{outer}");
    assert_eq!(
        cpuset_line(inner),
        Some(cell),
        "inner ran elsewhere:\n{stdout}"
    );
    let cpus = |t: &str| {
        t.lines()
            .find(|l| l.starts_with("Cpus_allowed_list"))
            .map(|l| l.to_string())
    };
    assert_eq!(cpus(inner), cpus(outer), "{stdout}");
    assert!(
        !cpus(inner).unwrap_or_default().contains(['-', ',']),
        "one CPU: {stdout}"
    );
    // One cell only, and the options that would shape a cell of its own
    // are named as not applied.
    assert!(
        stderr.contains("inside cell") && stderr.contains("not applied"),
        "{stderr}"
    );
    assert_eq!(
        stderr.matches("inside cell").count(),
        1,
        "a plain nested run says nothing: {stderr}"
    );
}
