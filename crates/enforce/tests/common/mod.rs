//! Helpers of the enforcement tests; processes, cgroup clean-up and
//! prerequisites come from `allot-testkit`.
#![allow(dead_code, unused_imports)]

pub use allot_testkit::{
    CgroupDirs, Proc, eventually, forking, sleeper, thread_masks, threaded, unique,
};

/// Whether we may write the v1 cpuset hierarchy where this machine mounts it.
pub fn v1_writable() -> bool {
    let m = allot_enforce::detect::Mounts::read();
    match m.v1() {
        Some(v1) => allot_testkit::is_root() && v1.cpuset.join("cpuset.cpus").exists(),
        None => false,
    }
}
