//! Environment variables: allot's contract with the programs it starts and
//! with the C side. Every name is defined here once; the C copies (in
//! `crates/capi/shim/grant_page.h`) are checked against these by
//! `crates/capi/tests/c_layout.rs`.

/// The broker's socket (clients; default: [`crate::default_socket_path`]).
pub const SOCKET: &str = "ALLOT_SOCKET";
/// The `allot` binary to run, for the programs that run it as a separate
/// program (`allot-lab`, which `allot demo` and `allot bench` hand over
/// to with this set; the Python tests).
pub const BIN: &str = "ALLOT_BIN";
/// The cell id, for processes `allot run` starts.
pub const CELL: &str = "ALLOT_CELL";
/// The number of an inherited descriptor (not close-on-exec) of the cell's
/// grant page, for processes `allot run` starts; the OpenMP shim and the
/// client library map it.
pub const GRANT_FD: &str = "ALLOT_GRANT_FD";
/// The channels `allot run --channel` opened for the program, as
/// `NAME:send|recv:MEMORY,DATA,SPACE` entries (inherited descriptor
/// numbers) separated by `;`; read with `allot_client::inherited`.
pub const CHANNELS: &str = "ALLOT_CHANNELS";
/// An inherited descriptor of the memory file in which the processes of
/// one `allot run` divide their cell's threads among the permits of
/// oneTBB and Intel OpenMP (allot's `libtcm.so.1`, `crates/capi/TCM.md`).
pub const TCM_FD: &str = "ALLOT_TCM_FD";
/// `1`: the OpenMP shim (and allot's `libtcm.so.1`) say on stderr what
/// they do.
pub const SHIM_DEBUG: &str = "ALLOT_SHIM_DEBUG";
/// The waits during which a thread inside a `require` block gives its
/// allocation back: `paper` (default: every wait but I/O), `all`, `none`,
/// or `sync`, `sleep` and `io` joined by commas.
pub const RELEASE_ON: &str = "ALLOT_RELEASE_ON";
/// How long requests of the policies that divide among concurrent
/// arrivals (`fair_cores`, `fair_numa`) wait for the others of their
/// batch: `0` (off), `500us`, `2ms`; default 1 ms.
pub const GATHER_WINDOW: &str = "ALLOT_GATHER_WINDOW";
/// The CPUs `allot run` could use before its cell confined it (a CPU
/// list, `0-15`): the most the program's cell may ever be granted. The
/// OpenMP shim tells libgomp these when it counts its CPUs at start, so a
/// program started on a small grant is not throttled for the whole run
/// once its grant grows (`crates/capi/SHIM.md`, "CPUs counted at start").
pub const LAUNCH_CPUS: &str = "ALLOT_LAUNCH_CPUS";
/// A cgroup v1 `cpu` directory (or v2 threaded subtree) under which
/// `require` throttles fractional CPUs by quota.
pub const THROTTLE_CGROUP: &str = "ALLOT_THROTTLE_CGROUP";
/// A cgroup v1 `blkio` directory under which `require`'s `io` kind gives
/// each thread the weight it holds (per-weight groups, BFQ); without it
/// the kind sets I/O priorities.
pub const IO_CGROUP: &str = "ALLOT_IO_CGROUP";
/// A memory cgroup directory (v1, or v2 with `memory` in its
/// `cgroup.subtree_control`) under which `require`'s `memory` kind also
/// caps: while a process's blocks hold memory, the process runs in a group
/// of its own there limited to what they hold. Without it memory is bound
/// to the nodes held, not capped.
pub const MEMORY_CAP: &str = "ALLOT_MEMORY_CAP";
/// Log level of every allot component: `error`, `warn`, `info`, `debug`
/// (see [`crate::log`]).
pub const LOG: &str = "ALLOT_LOG";
/// The backend a broker that `allot run` starts uses (`--backend`).
pub const BACKEND: &str = "ALLOT_BACKEND";
/// The cgroup name a broker that `allot run` starts uses (`--cgroup-name`).
pub const CGROUP_NAME: &str = "ALLOT_CGROUP_NAME";
/// The thread policy of allot's runtime pools built with the defaults, in
/// `allot_runtime::PolicySpec`'s string form (`local-lifo`, `local-fifo`,
/// `global-fifo`, `global-lifo`, aliases `lifo` and `fifo`, with options
/// such as `local-fifo:levels=2,victims=round-robin`; the Rust builder's
/// `policy` and the C ABI's defaults follow it).
pub const POOL_POLICY: &str = "ALLOT_POOL_POLICY";
/// `1`: the workers of allot's runtime pools built with the defaults poll
/// for work and never park (a partition: `allot run --partition`).
pub const POOL_POLL: &str = "ALLOT_POOL_POLL";
/// The virtual-processor policy of allot's runtime pools built with the
/// defaults (`move-fewest`, `in-order`).
pub const POOL_VP: &str = "ALLOT_POOL_VP";
