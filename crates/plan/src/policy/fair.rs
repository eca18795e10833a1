//! Weighted max-min fair share (the default global policy).
//!
//! Every cell receives its minimum; the rest of the capacity is divided in
//! proportion to weight, no cell above its maximum, surplus of capped cells
//! flowing to the others. Cells whose fair share is below one CPU and that
//! asked for no guarantee are stacked: they share a pool sized to their
//! total share, time-shared by the kernel's scheduler weighted by cell
//! weight (no slice, no gang: Tessellation's time-fraction cells are time
//! contracts, `crate::time`). The others get whole CPUs by
//! the integer version of the same division.

use super::{Entitlements, PolicyCell, split_stacked};
use crate::share::{Claim, waterfill_int, waterfill_real};

pub(super) fn entitle(capacity: u32, cells: &[PolicyCell]) -> Entitlements {
    let claims: Vec<Claim> = cells
        .iter()
        .map(|c| Claim {
            lo: c.spec.guaranteed(),
            hi: c.spec.max_within(capacity).max(c.spec.guaranteed()),
            w: c.spec.weight.max(1),
            tie: c.previous,
        })
        .collect();
    let shares = waterfill_real(capacity as f64, &claims);
    split_stacked(capacity, cells, &shares, |total, whole| {
        let whole_claims: Vec<Claim> = whole
            .iter()
            .map(|&i| Claim {
                lo: claims[i].lo.max(1),
                hi: claims[i].hi.max(1),
                ..claims[i]
            })
            .collect();
        waterfill_int(total, &whole_claims)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::CellSpec;

    fn cell(min: u32, max: u32, weight: u32) -> PolicyCell {
        PolicyCell {
            spec: CellSpec {
                min,
                max,
                weight,
                ..Default::default()
            },
            previous: 0,
            perf: Default::default(),
        }
    }

    #[test]
    fn two_cells_split_two_cpus() {
        let e = entitle(2, &[cell(0, 0, 1), cell(0, 0, 1)]);
        assert_eq!(e.pool, 0);
        assert_eq!(
            e.cells.iter().map(|c| c.cpus).collect::<Vec<_>>(),
            vec![1, 1]
        );
    }

    #[test]
    fn more_cells_than_cpus_are_stacked() {
        let e = entitle(
            2,
            &[cell(0, 0, 1), cell(0, 0, 1), cell(0, 0, 1), cell(0, 0, 1)],
        );
        assert_eq!(e.pool, 2);
        assert!(e.cells.iter().all(|c| c.stacked && c.cpus == 0));
        assert!((e.cells[0].share - 0.5).abs() < 1e-9);
    }

    #[test]
    fn guaranteed_cells_keep_their_minimum_beside_the_pool() {
        // One guaranteed cell with weight 100 and 20 best-effort ones on 8 CPUs.
        let mut cells = vec![cell(1, 0, 100)];
        cells.extend((0..20).map(|_| cell(0, 0, 1)));
        let e = entitle(8, &cells);
        assert!(!e.cells[0].stacked);
        assert!(e.cells[0].cpus >= 6, "{:?}", e.cells[0]);
        assert!(e.cells[1..].iter().all(|c| c.stacked));
        assert_eq!(e.cells[0].cpus + e.pool, 8);
    }

    #[test]
    fn single_cell_gets_everything_up_to_max() {
        assert_eq!(entitle(8, &[cell(0, 0, 1)]).cells[0].cpus, 8);
        assert_eq!(entitle(8, &[cell(0, 3, 1)]).cells[0].cpus, 3);
    }
}
