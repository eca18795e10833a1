//! Poli-C's `require`: a guarantee and a limit for a block of code.

pub mod kind;
pub mod policy;
pub mod runtime;
pub mod throttle;
pub mod tree;

pub use policy::{Constraint, Domain, Outcome, Policy, View};
pub use runtime::{
    Amount, Prepared, Request, RequireError, Runtime, Scope, Timing, What, blocking, spawn,
};
pub use tree::Ownership;
pub mod ledger;
