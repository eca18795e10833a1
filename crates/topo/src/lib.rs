//! allot's machine model.
//!
//! [`Machine`] describes the CPUs allot may hand out: which logical CPUs share
//! a core (SMT siblings), a last-level cache and a NUMA node, how far apart the
//! nodes are and how much memory each has. It is discovered from sysfs
//! ([`discover_live`], [`discover`]) and intersected with the CPUs the process
//! may use, so a broker started under `taskset` or inside a cpuset manages
//! only what it was given.
//!
//! Fixture machines (sysfs trees of real machines, each packed into one
//! file `crates/topo/fixtures/<name>.sysfs`) are loaded with [`fixture`];
//! the planner's tests and benchmarks run on them.
//!
//! [`resctrl`] holds what the machine offers to partition its cache and
//! memory bandwidth.

mod cpuset;
mod machine;
mod report;
pub mod resctrl;
mod sysfs;

pub use cpuset::{CPUSET_WORDS, CpuListError, CpuSet, Iter, MAX_CPUS};
pub use machine::{Core, Cpu, Llc, Machine, MachineError, Node, RawCpu, RawNode};
pub use report::TopologyReport;
pub use sysfs::{DiscoverError, PACKED_MAGIC, allowed_cpus, discover, discover_live};

use std::path::PathBuf;

/// Names of the fixture machines shipped in `crates/topo/fixtures/`, from 2
/// to 1024 CPUs ([`MAX_CPUS`]); `crates/topo/fixtures/README.md` describes
/// each. The largest comes last, so tests that must spend less time on it
/// can find it there ([`LARGEST_FIXTURE`]).
pub const FIXTURES: [&str; 6] = [
    "vm2",
    "opteron6276-4s",
    "xeonphi7250",
    "xeon-x5550-2s",
    "xeon16-1llc",
    "synth-8s-1024",
];

/// The fixture with the most CPUs (1024, allot's limit): the last of
/// [`FIXTURES`].
pub const LARGEST_FIXTURE: &str = FIXTURES[FIXTURES.len() - 1];

/// The packed sysfs tree of the fixture machine `name`
/// (`crates/topo/fixtures/<name>.sysfs`), which [`discover`] reads as it
/// reads a directory.
pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(format!("{name}.sysfs"))
}

/// Loads the fixture machine `name` (see [`FIXTURES`]).
pub fn fixture(name: &str) -> Result<Machine, DiscoverError> {
    discover(&fixture_path(name), name, None)
}
