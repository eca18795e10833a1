//! Teams that fit what work outside every cell leaves them (Application
//! Resource Schedulers' system poller, applied per CPU).
//!
//! Processes outside every cell are not confined (unless the operator
//! keeps them to the reserve): the kernel runs them on any CPU, a cell's
//! too. A program whose team has one thread per CPU of its cell then has a
//! thread that the kernel shares with outside work, and every barrier
//! waits for it. Such a cell runs better with a team that leaves the
//! outside work its CPUs: the kernel's balancer puts the outside work on
//! the CPU the team left free, and no barrier waits for a thread the
//! kernel gave to someone else.
//!
//! The broker measures, every tick, for each group of CPUs that one or
//! more cells run on alone (a pinned cell's grant; the stacked pool):
//!
//! - `outside`: the CPU time work outside every cell used there (the
//!   CPUs' busy time less the cells' own), in CPUs' worth;
//! - `waiting`: the time the cells' threads there were runnable but not
//!   running, in CPUs' worth.
//!
//! A [`Contention`] per group turns those into the CPUs outside work
//! holds there, with hysteresis:
//!
//! - a CPU counts once outside work used at least [`COUNTS_FROM`] of it;
//! - the count rises only after [`RISE_AFTER`] readings in a row in which
//!   the team waited for outside work (`min(outside, waiting)`), by the
//!   least those readings showed (the broker starts reading the waiting
//!   at the first tick that sees outside work, so from a quiet machine
//!   that is three ticks, 300 ms at the default tick): a shorter burst
//!   resizes no team, and work outside that takes only idle CPUs (a
//!   program's serial phase, a `nice`d background job the team would
//!   preempt) resizes none either;
//! - it falls at the first reading that shows less outside work than it
//!   counts: when outside work stops, teams grow back at the next tick;
//! - a group whose CPUs change starts from what outside work held of its
//!   new CPUs in the groups they came from ([`seed`]): a cell that grows
//!   onto the CPU a neighbour shared with a busy process leaves that CPU
//!   to it at once, rather than after three readings with a team whose
//!   barriers wait.
//!
//! [`teams`] then lowers the team (the grant's `threads`) of each
//! best-effort cell by what outside work holds of its CPUs (the stacked
//! cells' teams together by what it holds of the pool), never below one
//! thread; guaranteed, exclusive and time cells keep theirs (their CPUs
//! are promised; partitions keep outside work off). Only the team
//! moves: the cell's CPUs, and so what it may use should the outside work
//! stop between ticks, stay as planned.

use crate::plan::{Allotment, Plan};
use allot_spec::{CellId, CellSpec};
use allot_topo::CpuSet;
use std::collections::BTreeMap;

/// A CPU counts as outside work's once it used this much of it in a
/// reading (so that a CPU shared half and half with one of the team's
/// threads counts, and the broker's own and the kernel's housekeeping,
/// a few hundredths, do not; a reading over many CPUs may be off by a
/// few tenths, which is why a count rises only where the team waited).
pub const COUNTS_FROM: f64 = 0.4;

/// Readings in a row in which the team waited for outside work before
/// the count rises. The broker reads the waiting only where it sees
/// outside work, so the first tick that sees it starts the reading: on a
/// quiet machine a team shrinks three ticks (300 ms at the default tick)
/// after outside work began to take one of its CPUs.
pub const RISE_AFTER: u32 = 2;

/// One tick's reading of a group of CPUs.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Reading {
    /// CPUs' worth used there by work outside every cell.
    pub outside: f64,
    /// CPUs' worth the cells' threads there waited to run (`None`: not
    /// read, as when no outside work was seen).
    pub waiting: Option<f64>,
}

/// Whole CPUs a CPUs' worth `x` counts as ([`COUNTS_FROM`]).
fn counted(x: f64) -> u32 {
    if x.is_finite() && x > 0.0 {
        // (The epsilon makes exactly `COUNTS_FROM` count, whatever the
        // rounding of the sum.)
        (x + 1.0 - COUNTS_FROM + 1e-9).floor() as u32
    } else {
        0
    }
}

/// The CPUs outside work holds in one group of CPUs, with hysteresis
/// (see the module docs).
///
/// Invariants: `held` never exceeds the group's CPUs as last given, and
/// rises only after [`RISE_AFTER`] readings in a row that each showed the
/// team waiting for outside work; the team gives up at most all its CPUs
/// but one ([`Contention::taken`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Contention {
    held: u32,
    streak: u32,
    least: u32,
}

impl Contention {
    /// A group of CPUs taken over from others, where outside work was
    /// counted as holding `held` of them ([`seed`]): it holds them from
    /// the start, and the next reading that shows less lowers it.
    pub fn seeded(held: u32) -> Contention {
        Contention {
            held,
            ..Default::default()
        }
    }

    /// The CPUs outside work holds in the group, as counted: also where
    /// its team cannot shrink for them (a one-CPU group), so that a group
    /// that takes these CPUs over knows at once ([`seed`]).
    pub fn held(&self) -> u32 {
        self.held
    }

    /// The CPUs the team of a group of `cpus` CPUs leaves to outside
    /// work: what it holds, but never the team's last CPU.
    pub fn taken(&self, cpus: u32) -> u32 {
        self.held.min(cpus.saturating_sub(1))
    }

    /// Takes one reading of a group of `cpus` CPUs; returns the CPUs
    /// outside work holds there.
    pub fn observe(&mut self, r: Reading, cpus: u32) -> u32 {
        let before = self.held;
        self.held = self.held.min(counted(r.outside)).min(cpus);
        let short = r.waiting.map_or(0, |w| counted(w.min(r.outside)));
        if self.held < before || self.held >= cpus {
            self.streak = 0;
        } else if short >= 1 {
            self.least = if self.streak == 0 {
                short
            } else {
                self.least.min(short)
            };
            self.streak += 1;
            if self.streak >= RISE_AFTER {
                // Never above what this reading counts: a team that waits
                // on (its program ignores its size) must not make the
                // count climb past the outside work there and fall back.
                self.held = (self.held + self.least).min(counted(r.outside)).min(cpus);
                self.streak = 0;
            }
        } else {
            self.streak = 0;
        }
        self.held
    }
}

/// What outside work holds of `cpus` when they were read as other groups
/// (`before`: each group's CPUs and what outside work held there): each
/// group's count in proportion to the part of its CPUs among `cpus`,
/// rounded down, at most `cpus`' count. A cell that grows onto a CPU a
/// neighbour shared with outside work then leaves it that CPU at once.
pub fn seed<'a>(cpus: &CpuSet, before: impl IntoIterator<Item = (&'a CpuSet, u32)>) -> u32 {
    let mut sum = 0u64;
    for (g, held) in before {
        let n = g.len() as u64;
        if n == 0 || held == 0 {
            continue;
        }
        let common = g.intersection(cpus).len() as u64;
        sum += u64::from(held) * common / n;
    }
    sum.min(cpus.len() as u64) as u32
}

/// Lowers the teams of `plan`'s best-effort cells (`specs`, by cell) by
/// the CPUs outside work holds of theirs: a whole-CPU cell's by
/// `taken[id]`; the stacked cells' together by `pool` (what outside work
/// holds of the pool), the largest teams first, until they fit what is
/// left of the pool, and then their starting places on it (`home`) are
/// laid out again. Never below one thread; other cells are left as they
/// are.
pub fn teams(
    plan: &mut Plan,
    specs: &BTreeMap<CellId, CellSpec>,
    taken: &BTreeMap<CellId, u32>,
    pool: u32,
) {
    let shrinks = |id: &CellId, g: &Allotment| {
        specs
            .get(id)
            .is_some_and(|s| !s.is_guaranteed() && !s.time.is_time() && !g.cpus.is_empty())
    };
    for (id, g) in plan.cells.iter_mut() {
        if !g.stacked && shrinks(id, g) {
            let k = taken.get(id).copied().unwrap_or(0);
            g.threads = g.threads.saturating_sub(k).max(1);
        }
    }
    let pool_len = plan.pool.len() as u32;
    if pool == 0 || pool_len == 0 {
        return;
    }
    let mut stacked: Vec<&mut Allotment> = plan
        .cells
        .iter_mut()
        .filter(|(id, g)| g.stacked && shrinks(id, g))
        .map(|(_, g)| g)
        .collect();
    let fit = pool_len.saturating_sub(pool);
    let mut total: u32 = stacked.iter().map(|g| g.threads).sum();
    while total > fit {
        let Some(g) = stacked
            .iter_mut()
            .filter(|g| g.threads > 1)
            .max_by_key(|g| g.threads)
        else {
            break;
        };
        g.threads -= 1;
        total -= 1;
    }
    let mut home = 0u32;
    for g in plan.cells.values_mut().filter(|g| g.stacked) {
        g.home = home % pool_len;
        home = home.wrapping_add(g.threads);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_topo::CpuSet;

    fn read(outside: f64, waiting: f64) -> Reading {
        Reading {
            outside,
            waiting: Some(waiting),
        }
    }

    /// A reading whose waiting was not read.
    fn unread(outside: f64) -> Reading {
        Reading {
            outside,
            waiting: None,
        }
    }

    #[test]
    fn a_cpu_counts_from_four_tenths() {
        assert_eq!(counted(0.0), 0);
        assert_eq!(counted(0.05), 0);
        assert_eq!(counted(0.39), 0);
        assert_eq!(counted(0.4), 1);
        assert_eq!(counted(1.0), 1);
        assert_eq!(counted(1.39), 1);
        assert_eq!(counted(1.5), 2);
        assert_eq!(counted(f64::NAN), 0);
        assert_eq!(counted(-1.0), 0);
    }

    #[test]
    fn a_team_waiting_for_outside_work_loses_a_cpu_after_two_readings() {
        let mut c = Contention::default();
        // One busy process shares a CPU of the cell's four with a thread
        // of its team: half of that CPU each.
        assert_eq!(c.observe(read(0.5, 0.5), 4), 0);
        assert_eq!(c.observe(read(0.5, 0.5), 4), 1);
        assert_eq!(c.taken(4), 1);
        // The team of three leaves it a CPU: it uses all of it and the
        // team no longer waits. The count holds.
        for _ in 0..10 {
            assert_eq!(c.observe(read(1.0, 0.0), 4), 1);
        }
        // It stops: the team grows back at the next reading.
        assert_eq!(c.observe(read(0.0, 0.0), 4), 0);
        assert_eq!(c.taken(4), 0);
    }

    #[test]
    fn a_burst_of_one_reading_resizes_nothing() {
        let mut c = Contention::default();
        for _ in 0..5 {
            assert_eq!(c.observe(read(1.0, 0.8), 8), 0);
            assert_eq!(c.observe(read(0.0, 0.0), 8), 0);
        }
        // Nor waiting that was not read.
        for _ in 0..5 {
            assert_eq!(c.observe(unread(1.0), 8), 0);
            assert_eq!(c.observe(read(1.0, 0.8), 8), 0);
        }
    }

    #[test]
    fn outside_work_on_idle_cpus_or_that_the_team_preempts_resizes_nothing() {
        let mut c = Contention::default();
        // A serial phase: the team runs one thread, outside work takes
        // the three idle CPUs, nobody waits.
        for _ in 0..10 {
            assert_eq!(c.observe(read(3.0, 0.0), 4), 0);
        }
        // A niced job beside a full team: it gets a few hundredths.
        for _ in 0..10 {
            assert_eq!(c.observe(read(0.05, 0.05), 4), 0);
        }
        // Waiting without outside work is the cell's own crowding.
        for _ in 0..10 {
            assert_eq!(c.observe(read(0.0, 2.0), 4), 0);
        }
        // Not read at all.
        for _ in 0..10 {
            assert_eq!(c.observe(unread(2.0), 4), 0);
        }
    }

    #[test]
    fn more_outside_work_takes_more_and_never_the_last_cpu() {
        let mut c = Contention::default();
        for _ in 0..2 {
            c.observe(read(1.0, 1.0), 16);
        }
        assert_eq!(c.taken(16), 1);
        // A second process still shares a CPU with the team.
        for _ in 0..2 {
            c.observe(read(1.5, 0.5), 16);
        }
        assert_eq!(c.taken(16), 2);
        // Far more than the cell has: its team keeps one thread, and the
        // count stops at its CPUs.
        for _ in 0..12 {
            c.observe(read(20.0, 20.0), 4);
        }
        assert_eq!((c.held(), c.taken(4)), (4, 3));
        // Part of it stops: down at once to what is still there.
        assert_eq!(c.observe(read(1.0, 0.0), 4), 1);
    }

    #[test]
    fn a_team_that_waits_on_does_not_make_the_count_climb_past_the_work() {
        // The program ignores its size: after the team shrinks its
        // threads still wait for the busy process's half CPU.
        let mut c = Contention::default();
        for _ in 0..20 {
            c.observe(read(0.5, 0.5), 4);
            assert!(c.held() <= 1, "{c:?}");
        }
        assert_eq!(c.taken(4), 1);
    }

    #[test]
    fn stacked_teams_of_one_stay_and_larger_ones_shrink_only_as_far_as_needed() {
        let mut plan = Plan {
            pool: CpuSet::parse_list("0-3").unwrap(),
            ..Default::default()
        };
        for id in 1..=6 {
            plan.cells.insert(CellId(id), grant("0-3", 1, true));
        }
        let specs: BTreeMap<CellId, CellSpec> = (1..=6)
            .map(|id| (CellId(id), CellSpec::default()))
            .collect();
        teams(&mut plan, &specs, &BTreeMap::new(), 2);
        assert!(plan.cells.values().all(|g| g.threads == 1));
        // Two cells of two threads on a pool of four, one CPU taken:
        // one thread in all is given up.
        let mut plan = Plan {
            pool: CpuSet::parse_list("0-3").unwrap(),
            ..Default::default()
        };
        plan.cells.insert(CellId(1), grant("0-3", 2, true));
        plan.cells.insert(CellId(2), grant("0-3", 2, true));
        let specs: BTreeMap<CellId, CellSpec> = (1..=2)
            .map(|id| (CellId(id), CellSpec::default()))
            .collect();
        teams(&mut plan, &specs, &BTreeMap::new(), 1);
        let threads: Vec<u32> = plan.cells.values().map(|g| g.threads).collect();
        assert_eq!(threads.iter().sum::<u32>(), 3, "{threads:?}");
    }

    #[test]
    fn a_one_cpu_group_counts_what_it_cannot_leave_and_a_grown_group_inherits_it() {
        let mut c = Contention::default();
        for _ in 0..2 {
            c.observe(read(0.5, 0.5), 1);
        }
        assert_eq!((c.held(), c.taken(1)), (1, 0), "no team below one thread");
        // Its neighbour, on CPU 0 alone, takes CPU 1 over: it starts with
        // CPU 1 counted as outside work's.
        let one = CpuSet::parse_list("1").unwrap();
        let zero = CpuSet::parse_list("0").unwrap();
        let both = CpuSet::parse_list("0-1").unwrap();
        let held = seed(&both, [(&one, c.held()), (&zero, 0)]);
        assert_eq!(held, 1);
        let grown = Contention::seeded(held);
        assert_eq!(grown.taken(2), 1);
        // Half of a two-CPU group's count does not make a whole CPU.
        assert_eq!(seed(&zero, [(&both, 1)]), 0);
        assert_eq!(seed(&zero, [(&both, 2)]), 1);
        // Never more than the CPUs.
        assert_eq!(seed(&one, [(&one, 1), (&both, 2)]), 1);
    }

    fn grant(cpus: &str, threads: u32, stacked: bool) -> Allotment {
        Allotment::of(cpus, threads, stacked, 1.0)
    }

    #[test]
    fn teams_shrink_for_best_effort_cells_only() {
        let mut plan = Plan {
            pool: CpuSet::parse_list("8-15").unwrap(),
            ..Default::default()
        };
        plan.cells.insert(CellId(1), grant("0-3", 4, false));
        plan.cells.insert(CellId(2), grant("4-7", 4, false));
        plan.cells.insert(CellId(3), grant("8-15", 4, true));
        plan.cells.insert(CellId(4), grant("8-15", 2, true));
        let mut specs = BTreeMap::new();
        specs.insert(CellId(1), CellSpec::default());
        specs.insert(
            CellId(2),
            CellSpec {
                min: 2,
                ..Default::default()
            },
        );
        specs.insert(CellId(3), CellSpec::default());
        specs.insert(CellId(4), CellSpec::default());
        let taken = BTreeMap::from([(CellId(1), 1), (CellId(2), 2)]);
        teams(&mut plan, &specs, &taken, 4);
        let threads: Vec<u32> = plan.cells.values().map(|g| g.threads).collect();
        // The best-effort cell loses one; the guaranteed one keeps its
        // four; the stacked ones fit the pool's 4 CPUs left, the larger
        // team losing first; their places are laid out again.
        assert_eq!(threads, vec![3, 4, 2, 2]);
        let homes: Vec<u32> = plan.cells.values().map(|g| g.home).collect();
        assert_eq!(&homes[2..], &[0, 2]);
        // Never below one.
        let taken = BTreeMap::from([(CellId(1), 9)]);
        teams(&mut plan, &specs, &taken, 8);
        assert_eq!(plan.cells[&CellId(1)].threads, 1);
        assert!(plan.cells.values().all(|g| g.threads >= 1));
    }
}
