//! Where a pool's grant comes from: a [`GrantSource`]. The pool only
//! reads grants, waits for the next one and reports what it did; it does
//! not know who sizes the grant. A broker's cell (`allot_client::Cell`,
//! with the `cell` feature, on by default) is one source; [`ManualGrants`]
//! is another, set by the program itself (tests, a program that divides
//! its own CPUs, a scheduler of its own); [`Allowed`] is the CPUs the
//! process may use, fixed (the default source without the `cell`
//! feature).
//!
//! # Contract of a source
//!
//! - Generations only grow within an epoch `(cell, instance)`; a new
//!   epoch may start them again (the monitor follows either: see
//!   `crate::monitor`).
//! - [`GrantSource::wait_change`] returns when the generation differs
//!   from the one the caller saw, or when its timeout passes, with the
//!   grant then; it may return early (the monitor looks again).
//! - A source whose grant never changes says so ([`GrantSource::follows`]
//!   is false): the pool then starts no monitor thread.

use allot_proto::{Grant, PoolStatsWire};
use std::fmt;
use std::sync::{Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A pool's grant, and where its progress goes.
pub trait GrantSource: Send + Sync + fmt::Debug + 'static {
    /// The grant now.
    fn grant(&self) -> Grant;

    /// The grant's generation now (cheaper than [`GrantSource::grant`]
    /// where the source can tell it alone).
    fn generation(&self) -> u64 {
        self.grant().generation
    }

    /// Waits until the generation is not `seen`, or `timeout` passes
    /// (`None`: no limit); the grant then.
    fn wait_change(&self, seen: u64, timeout: Option<Duration>) -> Grant;

    /// Whether the grant may change (else the pool runs no monitor).
    fn follows(&self) -> bool {
        true
    }

    /// What the pool did since it started: workers busy now, CPUs it could
    /// use now, tasks completed, and its per-worker statistics summed.
    /// Sent every report period; a source that sizes nothing ignores it.
    fn report(&self, _busy: u32, _wanted: u32, _completed: u64, _stats: PoolStatsWire) {}
}

/// A broker's cell: its grant page, and its reports to the broker (errors
/// ignored: no broker, nobody to tell). A standalone cell never changes.
#[cfg(feature = "cell")]
impl GrantSource for allot_client::Cell {
    fn grant(&self) -> Grant {
        allot_client::Cell::grant(self)
    }

    fn generation(&self) -> u64 {
        allot_client::Cell::generation(self)
    }

    fn wait_change(&self, seen: u64, timeout: Option<Duration>) -> Grant {
        allot_client::Cell::wait_change(self, seen, timeout)
    }

    fn follows(&self) -> bool {
        self.mode() != allot_client::Mode::Standalone
    }

    fn report(&self, busy: u32, wanted: u32, completed: u64, stats: PoolStatsWire) {
        if allot_client::Cell::report(self, busy, wanted, completed).is_ok() {
            let _ = self.report_pool_stats(stats);
        }
    }
}

/// A grant the program sets itself ([`ManualGrants::set`]); the pool
/// follows each one as it would a broker's.
#[derive(Debug, Default)]
pub struct ManualGrants {
    grant: Mutex<Grant>,
    changed: Condvar,
}

impl ManualGrants {
    /// Starts with `grant`, as generation 1 (its own is ignored; a pool
    /// takes generation 0 for "no grant yet").
    pub fn new(grant: Grant) -> ManualGrants {
        ManualGrants {
            grant: Mutex::new(Grant {
                generation: 1,
                ..grant
            }),
            changed: Condvar::new(),
        }
    }

    /// Publishes `grant` with the next generation (its own is ignored);
    /// returns that generation.
    pub fn set(&self, grant: Grant) -> u64 {
        let mut g = self.grant.lock().unwrap_or_else(PoisonError::into_inner);
        let generation = g.generation + 1;
        *g = Grant {
            generation,
            ..grant
        };
        self.changed.notify_all();
        generation
    }
}

impl GrantSource for ManualGrants {
    fn grant(&self) -> Grant {
        *self.grant.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn wait_change(&self, seen: u64, timeout: Option<Duration>) -> Grant {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mut g = self.grant.lock().unwrap_or_else(PoisonError::into_inner);
        while g.generation == seen {
            g = match deadline {
                None => self.changed.wait(g).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.changed
                        .wait_timeout(g, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        }
        *g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_topo::CpuSet;
    use std::sync::Arc;

    #[test]
    fn a_manual_grant_wakes_its_waiter_with_the_next_generation() {
        let src = Arc::new(ManualGrants::new(Grant {
            cpus: CpuSet::first_n(1),
            threads: 1,
            ..Grant::default()
        }));
        let seen = src.generation();
        let waiter = {
            let s = src.clone();
            std::thread::spawn(move || s.wait_change(seen, None))
        };
        let generation = src.set(Grant {
            cpus: CpuSet::first_n(2),
            threads: 2,
            generation: 99, // ignored
            ..Grant::default()
        });
        assert_eq!(generation, seen + 1);
        let g = waiter.join().unwrap();
        assert_eq!((g.generation, g.threads), (seen + 1, 2));
        // Nothing new: the wait ends at its timeout with the same grant.
        let g = src.wait_change(g.generation, Some(Duration::from_millis(5)));
        assert_eq!(g.generation, seen + 1);
    }
}

/// The CPUs this process may use when the pool starts, as a grant that
/// never changes: a pool without a broker.
#[derive(Debug)]
pub struct Allowed(Grant);

impl Allowed {
    /// The process's allowed CPUs now ([`Grant::allowed`]).
    pub fn now() -> Allowed {
        Allowed(Grant::allowed())
    }
}

impl GrantSource for Allowed {
    fn grant(&self) -> Grant {
        self.0
    }

    fn wait_change(&self, _seen: u64, timeout: Option<Duration>) -> Grant {
        // Never changes: wait out the timeout (a monitor does not run for
        // a source that does not follow, so this is only a fallback).
        if let Some(t) = timeout {
            std::thread::sleep(t);
        }
        self.0
    }

    fn follows(&self) -> bool {
        false
    }
}
