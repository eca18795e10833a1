//! The `memory` kind's cap (`ALLOT_MEMORY_CAP`) against the live kernel:
//! cgroup v1's `memory` hierarchy where the process has one (this
//! machine), else cgroup v2 (the guest lane's `v2` part).
//!
//! The cap moves a whole process, so each case runs in a process of its
//! own: this test binary started again as `cap_role`. The test makes its
//! own base group (v1: below the memory group it runs in; v2: below the
//! root), moves only the processes it started, and removes everything on
//! the way out, also when an assertion fails. Skipped, with a note, where
//! there is no memory controller or no permission; fails there instead
//! under `ALLOT_STRICT_TESTS=1`.

mod common;

use allot_require::{Blocks, Need};
use common::CgroupBase;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const ROLE: &str = "ALLOT_TEST_MEMCAP_ROLE";
const MIB: u64 = 1 << 20;

/// This process's group in the memory hierarchy at `root`.
fn own_group(root: &Path, v2: bool) -> Option<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let rel = allot_require::memcap::own_group(&text, v2)?;
    Some(root.join(rel.trim_start_matches('/')))
}

/// A base group named for this process and `test` (the tests of this
/// file run at once, each in a base of its own), and whether it is
/// cgroup v2's.
fn make_base(test: &str) -> Option<(CgroupBase, bool)> {
    let tag = format!("allot-test-memcap-{}-{test}", std::process::id());
    let v1_root = Path::new("/sys/fs/cgroup/memory");
    let v2_root = Path::new("/sys/fs/cgroup");
    let (dir, home, v2) = if v1_root.join("memory.limit_in_bytes").exists() {
        let home = own_group(v1_root, false)?;
        (home.join(&tag), home, false)
    } else if std::fs::read_to_string(v2_root.join("cgroup.subtree_control"))
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"))
    {
        (v2_root.join(&tag), own_group(v2_root, true)?, true)
    } else {
        allot_testkit::prerequisite(false, "a memory cgroup controller (v1 or v2)");
        return None;
    };
    let made = std::fs::create_dir(&dir);
    if !allot_testkit::prerequisite(
        made.is_ok(),
        &format!("permission to create {}: {:?}", dir.display(), made.err()),
    ) {
        return None;
    }
    let base = CgroupBase {
        dir,
        home,
        moved: "cgroup.procs",
    };
    if v2 {
        std::fs::write(base.dir.join("cgroup.subtree_control"), "+memory").unwrap();
    }
    Some((base, v2))
}

/// This binary started again as `cap_role`, doing `role`.
fn role(base: Option<&Path>, role: &str) -> std::process::Output {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["cap_role", "--exact", "--nocapture", "--test-threads", "1"])
        .env(ROLE, role)
        .env_remove("ALLOT_SOCKET")
        .stdin(Stdio::null());
    match base {
        Some(b) => c.env("ALLOT_MEMORY_CAP", b),
        None => c.env("ALLOT_MEMORY_CAP", "/nonexistent/allot-memcap"),
    };
    c.output().unwrap()
}

/// `key value` lines a role printed.
fn said(out: &std::process::Output, key: &str) -> String {
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .map(str::to_string)
        .unwrap_or_else(|| {
            panic!(
                "the role said no {key:?}; stdout:\n{text}\nstderr:\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Touches `bytes` of new memory, page by page, and keeps it.
fn touch(bytes: u64) -> Vec<u8> {
    let mut v = vec![0u8; bytes as usize];
    for i in (0..v.len()).step_by(4096) {
        v[i] = 1;
    }
    std::hint::black_box(v)
}

/// Selected by ALLOT_TEST_MEMCAP_ROLE: `fits` enters a block of 64 MiB on
/// node 0, uses 16 MiB and leaves; `over` uses 256 MiB in it; `refused`
/// only asks.
#[test]
fn cap_role() {
    let Ok(what) = std::env::var(ROLE) else {
        return;
    };
    let cgroup = || {
        std::fs::read_to_string("/proc/self/cgroup")
            .unwrap()
            .replace('\n', ";")
    };
    let rt = Blocks::new(allot_topo::discover_live().unwrap(), true).into_static();
    // A line of its own: the harness's "test cap_role ... " has none.
    println!("\nbefore {}", cgroup());
    let scope = match rt.enter(vec![Need::device("memory", "node0", (64 * MIB) as f64)]) {
        Ok(s) => s,
        Err(e) => {
            println!("refused {e}");
            return;
        }
    };
    println!("inside {}", cgroup());
    let base = PathBuf::from(std::env::var("ALLOT_MEMORY_CAP").unwrap());
    let group = base.join(format!("allot-m{}", std::process::id()));
    let limit = ["memory.limit_in_bytes", "memory.max"]
        .iter()
        .find_map(|f| std::fs::read_to_string(group.join(f)).ok())
        .unwrap_or_default();
    println!("limit {}", limit.trim());
    if what == "over" {
        // Past the limit a group with swap swaps instead of refusing: this
        // group may not (v1 and v2 spell it differently).
        for (f, v) in [("memory.swappiness", "0"), ("memory.swap.max", "0")] {
            if group.join(f).exists() {
                std::fs::write(group.join(f), v).unwrap();
            }
        }
    }
    let kept = touch(if what == "over" { 256 * MIB } else { 16 * MIB });
    println!("used {}", kept.len());
    drop(scope);
    println!("after {}", cgroup());
    println!("group_left {}", group.exists());
}

#[test]
fn a_block_holding_memory_caps_its_process_and_leaving_lifts_the_cap() {
    let Some((base, v2)) = make_base("fits") else {
        return;
    };
    let out = role(Some(&base.dir), "fits");
    assert!(out.status.success(), "{out:?}");
    let before = said(&out, "before");
    let inside = said(&out, "inside");
    let rel = base.dir.strip_prefix(if v2 {
        "/sys/fs/cgroup"
    } else {
        "/sys/fs/cgroup/memory"
    });
    let rel = rel.unwrap().display().to_string();
    assert!(
        inside.contains(&format!("/{rel}/allot-m")),
        "inside the block the process is in its group under {rel}: {inside}"
    );
    assert_eq!(
        said(&out, "limit"),
        (64 * MIB).to_string(),
        "the limit is what the block holds"
    );
    assert_eq!(
        said(&out, "used"),
        (16 * MIB).to_string(),
        "use within the cap is untouched"
    );
    assert_eq!(said(&out, "after"), before, "leaving the block goes home");
    assert_eq!(said(&out, "group_left"), "false", "and removes the group");
}

#[test]
fn allocating_past_the_cap_inside_a_block_ends_the_process() {
    let Some((base, _)) = make_base("over") else {
        return;
    };
    let out = role(Some(&base.dir), "over");
    assert_eq!(said(&out, "limit"), (64 * MIB).to_string());
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGKILL),
        "256 MiB in a block of 64 MiB: the kernel kills the process ({out:?})"
    );
    assert!(!String::from_utf8_lossy(&out.stdout).contains("used "));
    // The killed process left its group; the next one to join removes it.
    let inside = said(&out, "inside");
    let name = inside
        .split(['/', ';'])
        .find(|p| p.starts_with("allot-m"))
        .unwrap()
        .to_string();
    assert!(base.dir.join(&name).exists(), "{name} outlives its process");
    let next = role(Some(&base.dir), "fits");
    assert!(next.status.success(), "{next:?}");
    assert!(
        !base.dir.join(&name).exists(),
        "{name} is swept by the next process"
    );
}

#[test]
fn a_cap_directory_that_cannot_be_used_refuses_memory_with_the_reason() {
    let out = role(None, "refused");
    assert!(out.status.success(), "{out:?}");
    let why = said(&out, "refused");
    assert!(
        why.contains("ALLOT_MEMORY_CAP=/nonexistent/allot-memcap is not a directory"),
        "{why}"
    );
}
