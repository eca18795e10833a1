//! Poli-C's `require`: a guarantee and a limit for a block of code.
//!
//! A scope asks for resources — whole or fractional CPUs, memory on NUMA
//! nodes, I/O weight, or a count of a *virtual* kind — either per device or
//! through a [`Policy`] that looks at what is available and chooses. While
//! the scope lives, its thread (and the threads spawned inside it) may use
//! exactly that: the amounts are reserved for it and everything else is
//! denied. Leaving the scope (dropping the guard) gives everything back.
//!
//! ```
//! use allot_require::{self as require, Need, policy};
//!
//! // A policy: one whole CPU, exclusive; the block learns which one.
//! let n = require::require(vec![Need::policy(policy::cores(1))], |s| {
//!     assert_eq!(s.outcome().cpus.len(), 1);
//!     s.outcome().ncores
//! })
//! .unwrap();
//! assert_eq!(n, 1);
//!
//! // Per device: half of the first CPU (`"cpu"` device 0).
//! let rt = require::Blocks::global();
//! let scope = rt.enter(vec![Need::device("cpu", 0, 0.5)]).unwrap();
//! drop(scope); // released here
//! ```
//!
//! The pieces, each with its own invariants:
//!
//! - [`tree`]: allocation trees (who holds how much of each device inside
//!   the process), pure data;
//! - [`blocks`]: scopes, waiting, spawning, blocking, and the OS effects
//!   of each thread's allocation;
//! - [`policy`]: the policy view and the shipped policies, including
//!   declarative constraints;
//! - [`kind`]: resource kinds and their OS operations;
//! - [`io`]: the `io` kind: blkio weights per thread, or I/O priorities;
//! - [`memcap`]: the `memory` kind's cap, an option: the process's memory
//!   group limited to what its blocks hold;
//! - [`disk`]: `DiskRate`, a kind of the program's own on a real counter
//!   (`Blocks::register_kind`), and a policy choosing the least busy disk;
//! - [`throttle`]: fractional CPU limits (cgroup quota or monitor thread);
//! - [`ledger`]: coordination with other processes through the broker.
//!
//! `docs/require.md` is the user guide, for Rust and C. The crate stands
//! alone: it needs neither the broker client (`allot-client`) nor allot's
//! work-stealing runtime (`allot-runtime`, which gives a worker's
//! allocation back while it parks, through [`Blocks::block_current`]).

pub mod blocks;
pub mod builtin;
mod cgroupfile;
pub mod disk;
pub mod io;
pub mod kind;
pub mod ledger;
pub mod memcap;
pub mod net;
pub mod policy;
pub mod throttle;
pub mod tree;

pub use blocks::{
    Amount, Block, Blocks, Need, Prepared, RequireError, Timing, Wait, Waits, What, blocking,
    given_back, release_on, spawn,
};
pub use policy::{Constraint, Domain, Outcome, Policy, View};
pub use tree::Ownership;

/// Runs `f` inside a scope of the process's runtime ([`Blocks::global`])
/// holding `reqs`, waiting until they can be met; the scope is left when
/// `f` returns or unwinds.
pub fn require<R>(reqs: Vec<Need>, f: impl FnOnce(&Block<'_>) -> R) -> Result<R, RequireError> {
    let scope = Blocks::global().enter(reqs)?;
    Ok(f(&scope))
}
