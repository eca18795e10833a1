//! `allotd`, the broker: one per machine (or per user in user mode).
//!
//! It owns the machine's CPUs on behalf of every parallel program on it.
//! Programs connect over a seqpacket socket and ask for a share as a *cell*;
//! the broker admits or refuses them ([`allot_plan::Planner::admit`]), divides the
//! CPUs ([`allot_plan::Planner`]), makes the kernel enforce the division
//! ([`allot_enforce`]), tells each cell what it holds through a shared grant
//! page, notices within milliseconds when a cell's processes die (pidfd),
//! and journals enough to be killed and restarted without moving anyone.
//!
//! - [`core`]: the state machine (no I/O besides the enforcer, pages and
//!   journal); returns effects.
//! - [`server`]: the epoll loop driving it.
//! - [`demand`]: how busy each cell is, from usage and reports.
//! - [`series`]: what each cell achieved and the machine's load, as short
//!   time series (performance reports, run-queue waiting, work outside
//!   the cells).
//! - [`journal`]: crash-safe state.
//! - [`ledger`]: what each process holds of each resource kind (`require`).
//! - [`gathering`]: requests of dividing policies from every process that
//!   arrive together, counted together.
//! - [`config`] (with the per-user [`config::Limits`]), [`status`],
//!   [`metrics`] (Prometheus, `allot daemon --metrics`).
//! - [`names`]: which names clients may choose, and how they are printed.
//! - [`peer`]: who is at the other end of a connection.
//! - [`log`]: the broker's log lines (`use crate::log::{info, warn}`).
//! - [`channels`]: named channels between cells, and who may open them.
//! - [`timeline`]: each cell's steps through the broker, timed.
//! - [`realtime`]: which of the broker's threads run at real-time
//!   priority, and when the event loop gives it up.
//! - [`windows`]: the timer thread that opens and closes time-triggered
//!   cells' windows (gang activation through the freezer).

mod cell_runtimes;
pub mod channels;
pub mod config;
pub mod core;
pub mod demand;
pub mod gathering;
pub mod journal;
pub mod ledger;
pub mod log;
pub mod metrics;
pub mod names;
pub mod peer;
pub mod realtime;
pub mod series;
pub mod server;
pub mod status;
pub mod timeline;
pub mod windows;

pub use config::Config;
pub use server::{Broker, StartError, StopHandle};
