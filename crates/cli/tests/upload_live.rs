//! `allot bench upload`, a short run: it attaches a loop device of its own
//! to a file in a directory this test gives it, writes to it plain and in
//! `require(io(dev, 1000))` blocks, prints its table, and leaves no loop
//! device, file or blkio group behind. The figures are the benchmark's
//! (docs/benchmarks.md); here only that it runs and cleans up.

mod common;

use common::*;
use std::process::Command;

#[test]
fn the_upload_benchmark_runs_and_removes_what_it_made() {
    let root = rustix::process::geteuid().is_root();
    if !prerequisite(
        root && allot_testkit::loopdev::losetup_available(),
        "root and losetup (a loop device)",
    ) {
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let out = Command::new(ALLOT)
        .args([
            "bench",
            "upload",
            "--clients",
            "1,2",
            "--mib",
            "4",
            "--repeats",
            "1",
        ])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("| 1 |")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("| 2 |")), "{stdout}");
    // Nothing left: the backing file, its loop device, the blkio group.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    let attached = Command::new("losetup").arg("-a").output().unwrap();
    assert!(
        !String::from_utf8_lossy(&attached.stdout).contains(&dir.path().display().to_string()),
        "a loop device is still attached to the benchmark's file"
    );
    let groups = std::fs::read_dir("/sys/fs/cgroup/blkio")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_string_lossy()
                        .starts_with("allot-bench-upload-")
                })
                .count()
        })
        .unwrap_or(0);
    assert_eq!(groups, 0, "a blkio group of the benchmark is left");
}
