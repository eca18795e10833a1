//! What the cells weigh in the kernel's CPU scheduler: against each
//! other, and all together against work outside every cell.
//!
//! The kernel time-shares each CPU among what is runnable there, by
//! weight. Inside allot's directory the cells compete with each other;
//! the directory itself competes with whatever sits beside it: processes
//! outside every cell (a browser, an editor, other users' jobs, daemons)
//! and the cgroups of other software. Weights here are in hundredths of
//! what one ordinary thread weighs ([`THREAD`]): cgroup v2's `cpu.weight`
//! scale, where 100 is the default; a backend converts (cgroup v1's
//! `cpu.shares` is 1024 per thread) and has a largest weight it can write
//! (v2 10 000, a hundred threads; v1 262 144 shares, 256 threads).
//!
//! Two ways of weighing ([`Weighing`], the broker's `weigh` setting):
//!
//! - **threads** (the default): the cells together weigh what their
//!   programs would weigh outside allot. A program sized to the CPUs it
//!   may use (as OpenMP, BLAS and oneTBB size themselves) runs one thread
//!   per CPU, so each cell counts one thread per CPU of its grant, the
//!   stacked pool's CPUs for a stacked cell. Without this, the directory
//!   weighs as one process (the kernel's default), and four programs in
//!   cells beside one busy process outside got one CPU of two between
//!   them, where without allot they would have had all but a fifth.
//!   Inside, each cell weighs the CPUs' worth it is meant to use: a
//!   whole-CPU cell its team (the threads its grant asks it to run), a
//!   stacked cell its share of the pool (which follows its spec weight).
//!   Every CPU the cells run on then carries about one thread's weight of
//!   theirs, whatever the cells' sizes: the kernel spreads a directory's
//!   weight over the CPUs in proportion to what its children weigh on
//!   each, and were cells weighed by spec weight alone, a one-thread
//!   cell's CPU would carry as much of allot's weight as a sixteen-thread
//!   cell's sixteen CPUs together. (Between cells on different CPUs spec
//!   weights decide nothing; on the pool, the shares carry them.)
//! - **group**: allot's directory weighs as one ordinary process and each
//!   cell as its spec weight, as the kernel would have it.
//!
//! A stacked cell's weight is its share rounded to a grid of quarter
//! powers of two ([`on_grid`], within a tenth of it): every newcomer moves
//! every stacked cell's share, and thousands of stacked cells arriving
//! one by one would otherwise have every one's weight rewritten at every
//! arrival; on the grid each is rewritten when their number has grown by
//! about a fifth, and equal cells always weigh alike.
//!
//! Invariants ([`weigh`]): every cell's weight lies in `1..=max`; a time
//! cell weighs `max` (its windows must win its CPUs); the other cells'
//! weights keep their proportions (all scaled by one factor when the
//! largest would pass `max`); the directory's weight lies in
//! `THREAD..=max`, and is [`THREAD`] with no cell.

use crate::plan::Allotment;
use allot_spec::{CellId, CellSpec};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// What one ordinary thread (nice 0) weighs: the unit of every weight
/// here, cgroup v2's default `cpu.weight`.
pub const THREAD: u32 = 100;

/// How the cells weigh against work outside them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Weighing {
    /// As the threads their programs would run outside allot (the
    /// default).
    #[default]
    Threads,
    /// As one process, together.
    Group,
}

impl Weighing {
    /// Both ways, for `--help` texts and tests.
    pub const ALL: [Weighing; 2] = [Weighing::Threads, Weighing::Group];
}

impl fmt::Display for Weighing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Weighing::Threads => "threads",
            Weighing::Group => "group",
        })
    }
}

impl FromStr for Weighing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "threads" => Ok(Weighing::Threads),
            "group" => Ok(Weighing::Group),
            other => Err(format!(
                "unknown weighing {other:?}: expected threads (cells weigh as their \
                 programs' threads would) or group (all cells together as one process)"
            )),
        }
    }
}

/// Every weight of one plan.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Weights {
    /// Each cell's weight among the cells.
    pub cells: BTreeMap<CellId, u32>,
    /// The weight of the directory holding the cells, against what sits
    /// beside it.
    pub together: u32,
}

/// `x` rounded to the nearest quarter power of two (1, 1.19, 1.41, 1.68,
/// 2, …; within a tenth), as a whole number at least 1.
pub fn on_grid(x: f64) -> u64 {
    if !x.is_finite() || x <= 1.0 {
        return 1;
    }
    let step = (x.log2() * 4.0).round() / 4.0;
    (step.exp2().round() as u64).max(1)
}

/// One cell as [`weigh`] sees it.
#[derive(Debug, Clone, Copy)]
pub struct Weighed<'a> {
    /// The cell.
    pub id: CellId,
    /// What it asked for (its weight; whether it is a time cell).
    pub spec: &'a CellSpec,
    /// What it was granted (its CPUs, its team).
    pub grant: &'a Allotment,
}

/// The weights of `cells` weighed `how`, none above `max` (the backend's
/// largest; at least [`THREAD`]).
pub fn weigh(how: Weighing, cells: &[Weighed<'_>], max: u32) -> Weights {
    let max = max.max(THREAD);
    let own = |c: &Weighed<'_>| -> u64 {
        match how {
            Weighing::Threads if c.grant.stacked => on_grid(c.grant.share * f64::from(THREAD)),
            Weighing::Threads => u64::from(c.grant.threads.max(1)) * u64::from(THREAD),
            Weighing::Group => u64::from(c.spec.weight.max(1)) * u64::from(THREAD),
        }
    };
    let largest = cells
        .iter()
        .filter(|c| !c.spec.time.is_time())
        .map(own)
        .max()
        .unwrap_or(0);
    // One factor for all, so the cells keep their proportions.
    let scaled = |raw: u64| -> u32 {
        let w = if largest > u64::from(max) {
            raw * u64::from(max) / largest
        } else {
            raw
        };
        w.clamp(1, u64::from(max)) as u32
    };
    let weights = cells
        .iter()
        .map(|c| {
            let w = if c.spec.time.is_time() {
                max
            } else {
                scaled(own(c))
            };
            (c.id, w)
        })
        .collect();
    let together = match how {
        Weighing::Threads => cells
            .iter()
            .map(|c| u64::from(c.grant.cpus.len() as u32) * u64::from(THREAD))
            .sum::<u64>()
            .clamp(u64::from(THREAD), u64::from(max)) as u32,
        Weighing::Group => THREAD,
    };
    Weights {
        cells: weights,
        together,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::TimeContract;
    use proptest::prelude::*;

    /// A whole-CPU cell's grant, a team of `threads`.
    fn grant(cpus: &str, threads: u32, stacked: bool) -> Allotment {
        Allotment::of(cpus, threads, stacked, f64::from(threads))
    }

    fn shared(cpus: &str, threads: u32, stacked: bool, share: f64) -> Allotment {
        Allotment::of(cpus, threads, stacked, share)
    }

    fn spec(weight: u32) -> CellSpec {
        CellSpec {
            weight,
            ..Default::default()
        }
    }

    fn weighed<'a>(cells: &'a [(CellSpec, Allotment)]) -> Vec<Weighed<'a>> {
        cells
            .iter()
            .enumerate()
            .map(|(i, (spec, grant))| Weighed {
                id: CellId(i as u64 + 1),
                spec,
                grant,
            })
            .collect()
    }

    #[test]
    fn four_stacked_cells_on_two_cpus_weigh_as_eight_threads() {
        // Each program, sized to the pool's two CPUs, would run two
        // threads; allot asks each for one, on half a CPU.
        let cells: Vec<_> = (0..4)
            .map(|_| (spec(1), shared("0-1", 1, true, 0.5)))
            .collect();
        let w = weigh(Weighing::Threads, &weighed(&cells), 10_000);
        assert_eq!(w.together, 800);
        assert!(
            w.cells.values().all(|&x| u64::from(x) == on_grid(50.0)),
            "{w:?}"
        );
        let g = weigh(Weighing::Group, &weighed(&cells), 10_000);
        assert_eq!(g.together, THREAD);
        assert!(g.cells.values().all(|&x| x == 100), "{g:?}");
    }

    #[test]
    fn a_cell_weighs_its_team_or_its_share_of_the_pool() {
        let cells = vec![
            (spec(1), grant("0-3", 4, false)),
            (spec(1), grant("4", 1, false)),
            (spec(3), grant("5-6", 2, false)),
            // On the pool the shares carry the spec weights (1 and 3).
            (spec(1), shared("7", 1, true, 0.25)),
            (spec(3), shared("7", 1, true, 0.75)),
        ];
        let w = weigh(Weighing::Threads, &weighed(&cells), 10_000);
        assert_eq!(
            w.cells.values().copied().collect::<Vec<_>>(),
            vec![400, 100, 200, on_grid(25.0) as u32, on_grid(75.0) as u32]
        );
        assert_eq!(w.together, 900);
        // Group: the spec weight alone.
        let g = weigh(Weighing::Group, &weighed(&cells), 10_000);
        assert_eq!(
            g.cells.values().copied().collect::<Vec<_>>(),
            vec![100, 100, 300, 100, 300]
        );
    }

    #[test]
    fn weights_past_the_backends_largest_keep_their_proportions() {
        // 256 threads and 64 threads on a backend that writes at most a
        // hundred threads' worth.
        let cells = vec![
            (spec(1), grant("0-255", 256, false)),
            (spec(1), grant("256-319", 64, false)),
        ];
        let w = weigh(Weighing::Threads, &weighed(&cells), 10_000);
        assert_eq!(
            w.cells.values().copied().collect::<Vec<_>>(),
            vec![10_000, 2_500]
        );
        assert_eq!(w.together, 10_000, "clamped to the largest");
    }

    #[test]
    fn time_cells_weigh_the_most_and_no_cell_weighs_one_thread() {
        let time = CellSpec {
            min: 1,
            time: TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 2_000,
            },
            ..Default::default()
        };
        let cells = vec![
            (time, grant("1", 1, false)),
            (spec(1), grant("0", 1, false)),
        ];
        let w = weigh(Weighing::Threads, &weighed(&cells), 25_600);
        assert_eq!(w.cells[&CellId(1)], 25_600);
        assert_eq!(w.cells[&CellId(2)], 100);
        assert_eq!(weigh(Weighing::Threads, &[], 10_000).together, THREAD);
    }

    #[test]
    fn the_grid_keeps_within_a_tenth_and_changes_rarely() {
        assert_eq!(on_grid(0.0), 1);
        assert_eq!(on_grid(f64::NAN), 1);
        assert_eq!((on_grid(2.0), on_grid(16.0), on_grid(50.0)), (2, 16, 54));
        for x in [1.5, 3.0, 7.0, 50.0, 100.0, 333.0, 10_000.0] {
            let g = on_grid(x) as f64;
            assert!(
                (g - x).abs() / x <= 0.095 || (g - x).abs() <= 0.5,
                "{x} -> {g}"
            );
        }
        // Shares of 200 hundredths among n = 3..=1000 stacked cells take
        // few distinct values: a cell's weight changes about once each
        // time their number grows by a fifth.
        let mut seen: Vec<u64> = (3..=1000).map(|n| on_grid(200.0 / f64::from(n))).collect();
        seen.dedup();
        assert!(seen.len() <= 30, "{seen:?}");
    }

    proptest! {
        #[test]
        fn weights_stay_in_range_and_in_proportion(
            raw in proptest::collection::vec(
                (1u32..300, 1u32..10_000, any::<bool>(), 0.0f64..4.0),
                1..20,
            ),
            max in 100u32..300_000,
        ) {
            let cells: Vec<(CellSpec, Allotment)> = raw
                .iter()
                .map(|&(threads, weight, stacked, share)| {
                    let cpus = format!("0-{}", threads - 1);
                    (spec(weight), shared(&cpus, threads, stacked, share))
                })
                .collect();
            for how in Weighing::ALL {
                let w = weigh(how, &weighed(&cells), max);
                let max = max.max(THREAD);
                prop_assert!(w.together >= THREAD && w.together <= max);
                // What each cell should weigh, before the kernel's range.
                let meant = |s: &CellSpec, g: &Allotment| -> f64 {
                    match how {
                        Weighing::Threads if g.stacked => on_grid(g.share * 100.0) as f64 / 100.0,
                        Weighing::Threads => f64::from(g.threads),
                        Weighing::Group => f64::from(s.weight),
                    }
                };
                for (i, (s, g)) in cells.iter().enumerate() {
                    let x = w.cells[&CellId(i as u64 + 1)];
                    prop_assert!(x >= 1 && x <= max);
                    // A cell meant to weigh more never weighs less.
                    for (j, (s2, g2)) in cells.iter().enumerate() {
                        if meant(s, g) > meant(s2, g2) + 1e-9 {
                            prop_assert!(x >= w.cells[&CellId(j as u64 + 1)]);
                        }
                    }
                }
            }
        }
    }
}
