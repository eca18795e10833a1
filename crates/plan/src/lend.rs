//! Work conservation: lending CPUs nobody can use now.
//!
//! Entitlements are what cells *may* hold; demand is what they *can use*
//! now (measured by the broker, or reported by the cell's runtime). A
//! non-exclusive cell that cannot use all of its entitlement keeps only what
//! it uses (at least one CPU) and the rest is lent to cells that can use
//! more, together with CPUs nobody is entitled to. What no other cell
//! claims stays with its owner: a cell shrunk to its measured use could
//! never show that it can use more (a runtime sized to one CPU reports one
//! CPU's worth of demand), so shrinking it for nobody would only ratchet it
//! down. Lent CPUs are marked in the borrower's grant and are taken back in
//! the next plan after their owner's demand rises, which is one monitor
//! tick.
//!
//! Exclusive cells never lend (they asked for isolation), and the stacked
//! pool borrows as one claimant on behalf of the stacked cells, so that a
//! crowd of best-effort cells spreads out when CPUs fall idle.

use crate::policy::Entitlements;
use crate::share::{Claim, waterfill_int};
use allot_spec::CellSpec;

/// Per-cell result of lending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Use {
    /// CPUs of its entitlement the cell keeps.
    pub own: u32,
    /// CPUs beyond its entitlement it borrows.
    pub borrow: u32,
}

/// Lending for all cells, parallel to the input, plus the pool's borrowing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lending {
    /// Each cell's use, in the order of the input.
    pub cells: Vec<Use>,
    /// CPUs the stacked pool borrows beyond its base size.
    pub pool_borrow: u32,
}

/// Applies demand to entitlements. `demand[i]` is `None` when unknown (the
/// cell is assumed to use everything it may), otherwise the number of CPUs
/// it can use now. With `enabled == false` every cell keeps its whole
/// entitlement and nothing is lent.
pub fn lend(
    capacity: u32,
    specs: &[CellSpec],
    demand: &[Option<u32>],
    ent: &Entitlements,
    enabled: bool,
) -> Lending {
    let want = |i: usize| -> u32 {
        let max = specs[i].max_within(capacity);
        demand[i].map_or(max, |d| d.clamp(1, max.max(1)))
    };
    let cells: Vec<Use> = ent
        .cells
        .iter()
        .enumerate()
        .map(|(i, e)| {
            let own = if e.stacked {
                0
            } else if !enabled || specs[i].exclusive {
                e.cpus
            } else {
                e.cpus.min(want(i))
            };
            Use { own, borrow: 0 }
        })
        .collect();
    let mut out = Lending {
        cells,
        pool_borrow: 0,
    };
    if !enabled {
        return out;
    }
    let used: u32 = out.cells.iter().map(|u| u.own).sum::<u32>() + ent.pool;
    let spare = capacity.saturating_sub(used);
    if spare == 0 {
        return out;
    }

    // Claimants: whole-CPU cells that want more than their entitlement, then
    // the pool (index `len`).
    let mut who = Vec::new();
    let mut claims = Vec::new();
    for (i, e) in ent.cells.iter().enumerate() {
        if !e.stacked && want(i) > e.cpus {
            who.push(i);
            claims.push(Claim {
                lo: 0,
                hi: want(i) - e.cpus,
                w: specs[i].weight.max(1),
                tie: 0,
            });
        }
    }
    let stacked: Vec<usize> = (0..ent.cells.len())
        .filter(|&i| ent.cells[i].stacked)
        .collect();
    if !stacked.is_empty() {
        let pool_want: u32 = stacked
            .iter()
            .map(|&i| want(i))
            .sum::<u32>()
            .min(stacked.len() as u32);
        if pool_want > ent.pool {
            who.push(usize::MAX);
            claims.push(Claim {
                lo: 0,
                hi: pool_want - ent.pool,
                w: stacked.iter().map(|&i| specs[i].weight.max(1)).sum(),
                tie: 0,
            });
        }
    }
    let mut left = spare;
    for (k, got) in waterfill_int(spare, &claims).into_iter().enumerate() {
        left -= got;
        match who[k] {
            usize::MAX => out.pool_borrow = got,
            i => out.cells[i].borrow = got,
        }
    }
    // Unclaimed CPUs go back to the owners that gave them up.
    for (u, e) in out.cells.iter_mut().zip(&ent.cells) {
        if left == 0 {
            break;
        }
        if !e.stacked && u.own < e.cpus {
            let back = (e.cpus - u.own).min(left);
            u.own += back;
            left -= back;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::Entitlement;

    fn ent(cpus: &[u32]) -> Entitlements {
        Entitlements {
            cells: cpus
                .iter()
                .map(|&c| Entitlement {
                    share: c as f64,
                    cpus: c,
                    stacked: false,
                })
                .collect(),
            pool: 0,
        }
    }

    #[test]
    fn idle_cell_lends_to_busy_one() {
        let specs = [CellSpec::default(), CellSpec::default()];
        let l = lend(2, &specs, &[Some(1), None], &ent(&[1, 1]), true);
        assert_eq!(l.cells[0], Use { own: 1, borrow: 0 });
        assert_eq!(l.cells[1], Use { own: 1, borrow: 0 });
        // With four CPUs split 2+2, the idle one keeps one and lends one.
        let l = lend(4, &specs, &[Some(1), None], &ent(&[2, 2]), true);
        assert_eq!(l.cells[0], Use { own: 1, borrow: 0 });
        assert_eq!(l.cells[1], Use { own: 2, borrow: 1 });
    }

    #[test]
    fn nothing_is_taken_for_nobody() {
        // Alone, a cell using one of its two CPUs keeps both: a runtime
        // shrunk to one CPU could never report more.
        let specs = [CellSpec::default()];
        let l = lend(2, &specs, &[Some(1)], &ent(&[2]), true);
        assert_eq!(l.cells[0], Use { own: 2, borrow: 0 });
        // Its neighbour can use one more CPU, not two: the owner lends one
        // of its three spare CPUs and keeps the other two.
        let specs = [
            CellSpec::default(),
            CellSpec {
                max: 3,
                ..Default::default()
            },
        ];
        let l = lend(6, &specs, &[Some(1), None], &ent(&[4, 2]), true);
        assert_eq!(l.cells[1], Use { own: 2, borrow: 1 });
        assert_eq!(l.cells[0], Use { own: 3, borrow: 0 });
    }

    #[test]
    fn exclusive_cells_never_lend() {
        let specs = [
            CellSpec {
                exclusive: true,
                ..Default::default()
            },
            CellSpec::default(),
        ];
        let l = lend(4, &specs, &[Some(1), None], &ent(&[2, 2]), true);
        assert_eq!(l.cells[0], Use { own: 2, borrow: 0 });
        assert_eq!(l.cells[1].borrow, 0);
    }

    #[test]
    fn disabled_lending_keeps_entitlements() {
        let specs = [CellSpec::default(), CellSpec::default()];
        let l = lend(4, &specs, &[Some(1), None], &ent(&[2, 2]), false);
        assert_eq!(l.cells[0].own, 2);
        assert_eq!(l.cells[1].borrow, 0);
    }

    #[test]
    fn borrowing_respects_max() {
        let specs = [
            CellSpec::default(),
            CellSpec {
                max: 3,
                ..Default::default()
            },
        ];
        let l = lend(8, &specs, &[Some(1), None], &ent(&[4, 3]), true);
        assert_eq!(l.cells[1].borrow, 0);
    }

    #[test]
    fn stacked_pool_borrows_idle_cpus() {
        let specs = [
            CellSpec {
                min: 2,
                ..Default::default()
            },
            CellSpec::default(),
            CellSpec::default(),
            CellSpec::default(),
        ];
        let e = Entitlements {
            cells: vec![
                Entitlement {
                    share: 2.0,
                    cpus: 2,
                    stacked: false,
                },
                Entitlement {
                    share: 0.6,
                    cpus: 0,
                    stacked: true,
                },
                Entitlement {
                    share: 0.6,
                    cpus: 0,
                    stacked: true,
                },
                Entitlement {
                    share: 0.6,
                    cpus: 0,
                    stacked: true,
                },
            ],
            pool: 2,
        };
        let l = lend(4, &specs, &[Some(1), None, None, None], &e, true);
        assert_eq!(l.cells[0].own, 1);
        assert_eq!(l.pool_borrow, 1);
    }
}
