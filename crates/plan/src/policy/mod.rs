//! The policy layer: how many CPUs each cell is entitled to.
//!
//! A global policy is a pure function of the capacity and the cells' specs
//! that returns an [`Entitlements`]: per cell a real-valued share, an integer
//! entitlement, and whether the cell is *stacked* (it shares a pool of CPUs
//! with the other stacked cells because there are more cells than CPUs for
//! them). Demand and lending are applied afterwards by [`crate::lend`], and
//! concrete CPUs are chosen by [`crate::mapping`]; a policy never sees CPU
//! numbers.
//!
//! Policies are named in [`GlobalPolicy`], which the configuration and the
//! CLI parse; each lives in its own file.

mod fair;
pub(crate) mod goals;
mod priority;

use allot_spec::CellSpec;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a policy decides for one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entitlement {
    /// Real-valued share of the capacity (for reports and for sizing the
    /// stacked pool).
    pub share: f64,
    /// Whole CPUs the cell is entitled to (0 when stacked).
    pub cpus: u32,
    /// The cell shares the stacked pool instead of holding whole CPUs.
    pub stacked: bool,
}

/// A policy's decision for every cell, in input order.
#[derive(Debug, Clone, PartialEq)]
pub struct Entitlements {
    /// Per cell, parallel to the input.
    pub cells: Vec<Entitlement>,
    /// CPUs set aside for the stacked cells (0 when none is stacked).
    pub pool: u32,
}

/// The input a policy sees for one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PolicyCell {
    /// What the cell asked for.
    pub spec: CellSpec,
    /// Whole CPUs the cell was entitled to in the previous plan (ties go to
    /// the previous holder, so equal cells do not swap CPUs back and forth).
    pub previous: u32,
    /// What its reports say of its performance (the goals policy reads it).
    pub perf: crate::tracking::PerfHint,
}

/// The broker's rule for dividing CPUs among cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GlobalPolicy {
    /// Weighted max-min fair share within each cell's min and max (the
    /// default). See `policy/fair.rs`.
    #[default]
    FairShare,
    /// Strict priority by weight: cells with a larger weight are filled to
    /// their maximum before smaller weights get more than their minimum.
    /// See `policy/priority.rs`.
    Priority,
    /// Each cell's goal met with the fewest CPUs, the rest where it buys
    /// the most work (measured speed-up curves). See `policy/goals.rs`.
    Goals,
}

impl GlobalPolicy {
    /// Every policy, for `--help` texts and tests.
    pub const ALL: [GlobalPolicy; 3] = [
        GlobalPolicy::FairShare,
        GlobalPolicy::Priority,
        GlobalPolicy::Goals,
    ];

    /// Runs the policy over `capacity` CPUs, of which processes outside
    /// every cell are using about `unmanaged` (only the goals policy reads
    /// it: no goal is promised CPUs that other work is using).
    pub fn entitle(self, capacity: u32, cells: &[PolicyCell], unmanaged: u32) -> Entitlements {
        match self {
            GlobalPolicy::FairShare => fair::entitle(capacity, cells),
            GlobalPolicy::Priority => priority::entitle(capacity, cells),
            GlobalPolicy::Goals => goals::entitle(capacity, cells, unmanaged),
        }
    }
}

impl fmt::Display for GlobalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            GlobalPolicy::FairShare => "fair-share",
            GlobalPolicy::Priority => "priority",
            GlobalPolicy::Goals => "goals",
        })
    }
}

impl FromStr for GlobalPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "fair-share" | "fair" => Ok(GlobalPolicy::FairShare),
            "priority" => Ok(GlobalPolicy::Priority),
            "goals" => Ok(GlobalPolicy::Goals),
            other => Err(format!(
                "unknown policy {other:?}: expected fair-share, priority or goals"
            )),
        }
    }
}

/// Splits cells into whole-CPU holders and stacked ones, given real shares,
/// then gives the whole-CPU holders integer CPUs with `fill`. Shared by the
/// policies: they differ only in how shares and integers are computed.
///
/// A cell is stacked when it is best effort (no minimum, not exclusive) and
/// its share is below one CPU. The stacked pool is the stacked shares rounded
/// up (at least one CPU). If the whole-CPU holders' lower bounds do not fit
/// beside the pool, the best-effort holder with the smallest share is moved to
/// the pool until they do; if the guarantees alone leave less than the
/// pool, the pool shrinks to what they leave (possibly nothing: the stacked
/// cells are paused).
pub(crate) fn split_stacked(
    capacity: u32,
    cells: &[PolicyCell],
    shares: &[f64],
    fill: impl Fn(u32, &[usize]) -> Vec<u32>,
) -> Entitlements {
    const EPS: f64 = 1e-9;
    let mut stacked: Vec<bool> = cells
        .iter()
        .zip(shares)
        .map(|(c, &s)| !c.spec.is_guaranteed() && s < 1.0 - EPS)
        .collect();
    loop {
        let stacked_share: f64 = shares
            .iter()
            .zip(&stacked)
            .filter(|(_, s)| **s)
            .map(|(x, _)| *x)
            .sum();
        let any_stacked = stacked.iter().any(|&s| s);
        let pool = if any_stacked {
            ((stacked_share - EPS).ceil() as u32).max(1)
        } else {
            0
        };
        let whole: Vec<usize> = (0..cells.len()).filter(|&i| !stacked[i]).collect();
        let lo_sum: u32 = whole
            .iter()
            .map(|&i| cells[i].spec.guaranteed().max(1))
            .sum();
        if lo_sum + pool > capacity {
            let demote = whole
                .iter()
                .copied()
                .filter(|&i| !cells[i].spec.is_guaranteed())
                .min_by(|&a, &b| shares[a].total_cmp(&shares[b]).then(b.cmp(&a)));
            if let Some(i) = demote {
                stacked[i] = true;
                continue;
            }
        }
        // Guarantees first: the pool gets what they leave, and none when
        // they take every CPU (the stacked cells are then paused:
        // `PlanConfig::pause_best_effort`; without it admission keeps a
        // CPU free for them).
        let pool = pool.min(capacity.saturating_sub(lo_sum));
        let given = fill(capacity.saturating_sub(pool), &whole);
        let mut out: Vec<Entitlement> = cells
            .iter()
            .zip(shares)
            .map(|(_, &share)| Entitlement {
                share,
                cpus: 0,
                stacked: true,
            })
            .collect();
        for (k, &i) in whole.iter().enumerate() {
            out[i].stacked = false;
            out[i].cpus = given[k];
        }
        for (i, e) in out.iter_mut().enumerate() {
            e.stacked = stacked[i];
        }
        return Entitlements { cells: out, pool };
    }
}
