//! allot's client library.
//!
//! A parallel program uses it to share the machine cooperatively: it
//! registers as a cell (or joins the cell `allot run` put it in), reads its
//! grant in nanoseconds from a shared page, learns of changes at once
//! (futex), and reports its progress. Without a broker it runs standalone on
//! the CPUs it is allowed, unchanged.
//!
//! - [`Cell`]: the handle programs and runtimes use.
//! - [`Client`]: the raw connection (for `allot run` and tools).
//!
//! The library starts no async runtime and installs no global logger; a
//! registered cell owns one small watcher thread that rejoins the broker
//! after a restart.

mod cell;
mod conn;
pub mod inherited;
mod keeper;

pub use allot_channel as channel;
pub use allot_proto::{FLAG_STACKED, Grant, GrantPage, PageMap, Reports};
// What a cell asks for, for applications that use only this crate: the
// `allot-spec` crate's types, under their own names (the crates of this
// tree name them by `allot_spec::`).
pub use allot_spec::{
    Cache, CellSpec, Goal, GoalError, Memory, Placement, SpecError, Term, TermsError, TimeContract,
    TimeTerms, parse_size,
};
pub use cell::{
    Cell, GrantWriter, Mode, Options, Registering, Ticket, Wait, broker_alive, include_group,
    page_from_raw_fd,
};
pub use conn::{ChannelEnd, Client, ClientError, Registration, Welcome};
pub use keeper::ChannelKeeper;
