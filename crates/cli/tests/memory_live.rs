//! Memory capacity per cell, live: `allot run --memory-min/--memory-max`
//! against a broker with the cgroup v1 backend, whose memory groups nest
//! below the memory group this test runs in (other software uses that
//! hierarchy: nothing is created above it, nothing else is touched).
//! Every program is bounded by `timeout`; the broker's groups are removed
//! on drop, also when the test fails.

mod common;

use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

fn memory_here() -> bool {
    prerequisite(
        v1_cpuset_writable() && allot_testkit::broker::memory_dir("x").is_some(),
        "writable cgroup v1 cpuset and memory hierarchies (root)",
    )
}

#[test]
fn sizes_and_limits_are_checked_before_anything_starts() {
    let run = |args: &[&str]| {
        Command::new(ALLOT)
            .arg("run")
            .args(args)
            .args(["--", "true"])
            .env("ALLOT_SOCKET", "/nonexistent/allot.sock")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--memory-max", "2X"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"2X\" is not a size"), "{err}");
    let out = run(&["--mem-bandwidth", "150"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("150 % is not a percentage"), "{err}");
    let out = run(&["--memory-min", "8G", "--memory-max", "2G"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("the memory guarantee 8G is above the limit 2G"),
        "{err}"
    );
}

#[test]
fn a_cell_at_its_memory_limit_pays_alone() {
    if !memory_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let groups = allot_testkit::broker::memory_dir(&d.cgroup).unwrap();
    // A program holding 32M under a 64M limit.
    let mut holder = allot_run(
        &d,
        &[
            "--name",
            "holder",
            "--memory-max",
            "64M",
            "--",
            "timeout",
            "30",
            "python3",
            "-c",
            "import time; b = b'x' * (32 << 20); time.sleep(30)",
        ],
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let holding = |d: &Daemon| {
        d.status()
            .cells
            .into_iter()
            .find(|c| c.name == "holder" && c.memory.is_some_and(|m| m.current >= 32 << 20))
    };
    assert!(
        eventually(Duration::from_secs(10), || holding(&d).is_some()),
        "{:?}\n{}",
        d.status().cells,
        d.log()
    );
    let cell = holding(&d).unwrap();
    assert_eq!(cell.memory.unwrap().limit, 64 << 20);
    assert_eq!(cell.spec.memory_max, 64 << 20);
    // Its memory group lies below ours, with the limit in the kernel and
    // its processes in it.
    let dir = groups.join(format!("cell-{}", cell.id));
    let limit = std::fs::read_to_string(dir.join("memory.limit_in_bytes")).unwrap();
    assert_eq!(limit.trim(), (64u64 << 20).to_string());
    let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
    for pid in &cell.pids {
        assert!(
            procs.split_whitespace().any(|p| p == pid.to_string()),
            "{procs}"
        );
    }

    // A program wanting 256M under 64M: the kernel kills it inside its
    // cell; the broker says so; the holder beside it runs on.
    let out = run_out(allot_run(
        &d,
        &[
            "--name",
            "hog",
            "--memory-max",
            "64M",
            "--",
            "timeout",
            "30",
            "python3",
            "-c",
            "b = b'x' * (256 << 20)",
        ],
    ));
    assert!(!out.status.success(), "the hog was not stopped");
    assert!(
        eventually(Duration::from_secs(5), || d
            .log()
            .contains("of its processes: out of memory at its limit of 64M")),
        "{}",
        d.log()
    );
    assert!(holder.try_wait().unwrap().is_none(), "the neighbour died");
    assert!(holding(&d).is_some());
    // `allot run` passes SIGTERM on to its program.
    stop(&mut holder);
    assert!(
        eventually(Duration::from_secs(10), || d.status().cells.is_empty()),
        "{:?}\n{}",
        d.status().cells,
        d.log()
    );
}

#[test]
fn a_guarantee_beyond_the_machine_is_refused_and_nothing_starts() {
    if !memory_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &["--memory-reserve", "1G"]);
    let st = d.status();
    let mm = st.machine.memory.expect("memory control");
    assert_eq!(mm.reserve, 1 << 30);
    let too_much = format!("{}", mm.capacity);
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let out = run_out(allot_run(
        &d,
        &[
            "--memory-min",
            &too_much,
            "--",
            "touch",
            ran.to_str().unwrap(),
        ],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("can never be admitted"), "{err}");
    assert!(err.contains("more than the"), "{err}");
    assert!(!ran.exists(), "the program ran");
    // Cache ways on a machine without resctrl: refused, saying so.
    if !std::path::Path::new("/sys/fs/resctrl/schemata").exists() {
        let out = run_out(allot_run(&d, &["--cache-ways", "2", "--", "true"]));
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no resctrl at /sys/fs/resctrl"), "{err}");
    }
}

/// Stops `allot run` `c` with SIGTERM, which it passes on to its program.
fn stop(c: &mut std::process::Child) {
    if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
        let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    }
    let _ = c.wait();
}

#[test]
fn a_short_isolation_run_keeps_the_servers_data_and_the_hog_pays() {
    if !memory_here() {
        return;
    }
    let _turn = machine_turn();
    let text = succeeds_within(
        &[
            "bench",
            "isolation",
            "--ways",
            "memory",
            "--runs",
            "1",
            "--seconds",
            "2",
            // A smaller experiment than the benchmark's own, in the same
            // proportions: the hog still asks for more than its limit
            // and than the group leaves beside the data set.
            "--data",
            "256M",
            "--limit",
            "1536M",
            "--hog",
            "1280M",
            "--hog-limit",
            "512M",
        ],
        Duration::from_secs(120),
    );
    // What the partition decided: the hog met its own limit, and the
    // server's data set stayed in memory.
    assert!(text.contains("hog killed (out of memory)"), "{text}");
    assert!(text.contains(" 0 MiB read again from the disk"), "{text}");
    // The experiment's memory group is gone.
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let group = own
        .lines()
        .find_map(|l| l.split(':').nth(2).filter(|_| l.contains(":memory:")))
        .unwrap();
    let dir = std::path::Path::new("/sys/fs/cgroup/memory").join(group.trim_start_matches('/'));
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("allot-isolation-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn cache_ways_where_nothing_can_keep_them_are_refused_and_nothing_starts() {
    // The dry-run backend touches nothing, resctrl included: refused with
    // the reason on every machine.
    let d = Daemon::start("dry-run", &[]);
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    let out = run_out(allot_run(
        &d,
        &["--cache-ways", "2", "--", "touch", ran.to_str().unwrap()],
    ));
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("partitions no cache or bandwidth"), "{err}");
    assert!(!ran.exists(), "the program ran");
}

#[test]
fn a_program_killed_at_its_memory_limit_is_told_so() {
    if !memory_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    // 256M of data under a 64M limit (swap aside, the kernel kills it).
    let out = run_out(allot_run(
        &d,
        &[
            "--memory-max",
            "64M",
            "--",
            "timeout",
            "60",
            "python3",
            "-c",
            "b = [bytearray(1 << 20) for _ in range(256)]",
        ],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    use std::os::unix::process::ExitStatusExt;
    if out.status.signal() != Some(9) && out.status.code() != Some(137) {
        // This machine swapped instead, or the limit did not apply.
        assert!(!err.contains("out of memory"), "{err}");
        eprintln!("not killed ({:?}): {err}", out.status);
        return;
    }
    assert!(
        err.contains("killed: out of memory at its 64M limit"),
        "{:?}: {err}",
        out.status
    );
    // A SIGKILL from elsewhere is not called a memory kill.
    let out = run_out(allot_run(
        &d,
        &["--memory-max", "64M", "--", "sh", "-c", "kill -9 $$"],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.signal(), Some(9));
    assert!(!err.contains("out of memory"), "{err}");
}
