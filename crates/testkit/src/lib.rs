//! allot's test kit: what the live tests of several crates share.
//!
//! Everything here cleans up after itself on drop, also when the test
//! panics: processes a test started are killed and reaped ([`Proc`]),
//! cgroup directories it made are emptied into their hierarchy's root and
//! removed ([`CgroupDirs`]), a broker of the test's own is stopped
//! ([`broker::BrokerProcess`]; the lab's experiments use it too). Nothing
//! here touches a process or cgroup the test did not create. A child's
//! output is read as it comes ([`Stream`]), so a test waits for a line
//! with a bound instead of sleeping.
//!
//! # Prerequisites
//!
//! A live test that needs something the machine may lack (root, a cgroup
//! v1 controller, a second CPU, a compiler) asks [`prerequisite`] first.
//! On a developer's machine a missing prerequisite skips the test with a
//! note; where every test must run (`ALLOT_STRICT_TESTS=1`, which the CI
//! entry point sets) it fails the test, so a gap cannot pass silently.

#![allow(missing_debug_implementations)]

pub mod broker;
mod cgroup;
pub mod loopdev;
mod proc;
mod stream;
pub mod user;

pub use cgroup::{CgroupDirs, move_to_root, unique, v1_cpuset_writable};
pub use proc::{
    PYTHON, Proc, forking, output_within, sleeper, spinner, thread_classes, thread_masks, threaded,
};
pub use stream::{PATIENCE, Stream};

use std::time::{Duration, Instant};

/// The variable that makes missing prerequisites fail instead of skip.
pub const STRICT_VAR: &str = "ALLOT_STRICT_TESTS";

/// Whether every test must run here (`ALLOT_STRICT_TESTS=1`).
pub fn strict() -> bool {
    std::env::var_os(STRICT_VAR).is_some_and(|v| v == "1")
}

/// Checks a test's prerequisite. Returns `true` when it holds. When it does
/// not: panics under [`strict`], else prints `skipped: <what>` and returns
/// `false` (the caller returns early).
#[track_caller]
pub fn prerequisite(holds: bool, what: &str) -> bool {
    if holds {
        return true;
    }
    if strict() {
        panic!(
            "prerequisite missing on a machine that must run every test ({STRICT_VAR}=1): {what}"
        );
    }
    eprintln!("skipped: {what}");
    false
}

/// Whether this process runs as root.
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// CPUs this process may run on.
pub fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Waits until `f` holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    f()
}
