//! Time placement: which CPUs carry each time cell's promise.
//!
//! A time cell ([`TimeContract`] other than space) is promised part of the
//! time of `cpus` CPUs. This step chooses those CPUs; the CPUs carrying any
//! promise form the *time region*, which the space layers plan around:
//! guaranteed (pinned) cells never get a region CPU, best-effort cells run
//! on the region as well as on their own share, so the time a promise
//! leaves — or does not use — goes to them.
//!
//! # Invariants (checked by [`TimePlan::check`] and, through it, by
//! [`crate::Plan::check`])
//!
//! 1. Every time cell holds exactly its number of distinct CPUs.
//! 2. On every CPU, the promises sum to at most the limit (one CPU's time
//!    minus the system's reserve, [`crate::PlanConfig::time_reserve_ppm`]).
//! 3. The windows of the cells on one CPU, each at its phase ([`phase`]),
//!    never come within [`WINDOW_GAP_US`] of each other: a time-triggered
//!    cell's budget every period, and a time-fraction cell's slice every
//!    `slice / fraction` ([`Periodic::of`]: its threads run together, in
//!    pieces no shorter than the slice). This is the schedulability test,
//!    and it is exact: a cell meets its promise when nothing else is
//!    promised time inside its windows, and [`Periodic::apart`] decides
//!    that for any two periods. A fraction whose period would pass 10 s
//!    has no windows (CFS bandwidth caps it); a CPU carries either such
//!    cells or windowed ones, never both.
//! 4. Stability: a cell placed in the previous plan keeps its CPUs (and a
//!    triggered cell its phase) while they still satisfy 2 and 3.
//!    Admitting, resizing or ending another cell therefore never moves or
//!    weakens an admitted cell's contract.
//!
//! Message-triggered cells hold nothing until activated and carry no
//! promise here.
//!
//! # Choice
//!
//! Kept placements first (in id order); then new cells, largest promise
//! first, each on the *most* loaded CPUs that still fit it (best fit), so
//! promises pack onto few CPUs and the region stays small; ties and fresh
//! CPUs go in the caller's candidate order. A triggered cell takes the
//! earliest phase (of [`phase::candidates`]) at which enough of those
//! CPUs have room for its windows.

pub mod phase;

use allot_spec::{CellId, TimeContract};
use allot_topo::CpuSet;
pub use phase::{Periodic, WINDOW_GAP_US};
use std::collections::BTreeMap;

/// One time cell as placement sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeCell {
    /// The cell's id, the key of its placement and phase.
    pub id: CellId,
    /// Its contract (not space).
    pub contract: TimeContract,
    /// How many CPUs it covers.
    pub cpus: u32,
    /// Where it was placed before (empty: new).
    pub previous: CpuSet,
    /// A triggered cell's phase before, µs (`None`: new or unknown).
    pub previous_phase: Option<u32>,
}

/// What one CPU carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuLoad {
    /// Sum of the promises, in parts per million.
    pub ppm: u32,
    /// It carries cells that run in windows (time-triggered cells, and
    /// time-fraction cells in slices).
    pub windowed: bool,
    /// It carries time-fraction cells too long-periodic for windows,
    /// capped by CFS bandwidth alone.
    pub unwindowed: bool,
}

/// Whether `c` runs in windows ([`Periodic::of`]).
pub fn windowed(c: &TimeContract) -> bool {
    Periodic::of(c, 0).is_some()
}

impl CpuLoad {
    fn fits(&self, c: &TimeContract, limit: u32) -> bool {
        // Windows are checked apart ([`TimePlan::window_room`]); a cell
        // without them could run inside anyone's.
        let kind_ok = if windowed(c) {
            !self.unwindowed
        } else {
            !self.windowed
        };
        kind_ok && self.ppm + c.ppm() <= limit
    }

    fn add(&mut self, c: &TimeContract) {
        self.ppm += c.ppm();
        if windowed(c) {
            self.windowed = true;
        } else {
            self.unwindowed = true;
        }
    }
}

/// The time layer's decision.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TimePlan {
    /// Each time cell's CPUs.
    pub cells: BTreeMap<CellId, CpuSet>,
    /// Each time-triggered cell's phase, µs after the epoch.
    pub phases: BTreeMap<CellId, u32>,
    /// What each CPU of the region carries.
    pub load: BTreeMap<usize, CpuLoad>,
    /// The windows on each CPU that carries triggered cells.
    pub windows: BTreeMap<usize, Vec<Periodic>>,
}

/// Why a time cell could not be placed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct NoRoom(pub String);

impl TimePlan {
    /// Whether `cpu` can also carry `c` under `limit`.
    fn fits(&self, cpu: usize, c: &TimeContract, limit: u32) -> bool {
        self.load
            .get(&cpu)
            .copied()
            .unwrap_or_default()
            .fits(c, limit)
    }

    /// Whether `w` keeps apart from every window already on `cpu`.
    fn window_room(&self, cpu: usize, w: &Periodic) -> bool {
        self.windows
            .get(&cpu)
            .is_none_or(|ws| ws.iter().all(|o| o.apart(w)))
    }

    /// Records cell `id` with `contract` on `set` (at `phase` when
    /// triggered).
    fn put(&mut self, id: CellId, contract: &TimeContract, set: CpuSet, phase: u32) {
        let w = Periodic::of(contract, phase);
        for cpu in set.iter() {
            self.load.entry(cpu).or_default().add(contract);
            if let Some(w) = w {
                self.windows.entry(cpu).or_default().push(w);
            }
        }
        if let Some(w) = w {
            self.phases.insert(id, w.phase_us);
        }
        self.cells.insert(id, set);
    }

    /// For a triggered cell needing `n` of `fit` (in preference order):
    /// a phase at which `n` of them have room for its windows, and those
    /// CPUs — the most preferred CPUs any candidate phase offers (compared
    /// in order), the earliest such phase; else the most CPUs any phase
    /// offers.
    fn phase_for(
        &self,
        contract: &TimeContract,
        n: usize,
        fit: &[usize],
    ) -> Result<(u32, CpuSet), usize> {
        let Some(period) = Periodic::of(contract, 0) else {
            return Err(0);
        };
        let neighbours: Vec<Periodic> = fit
            .iter()
            .filter_map(|cpu| self.windows.get(cpu))
            .flatten()
            .copied()
            .collect();
        let mut best: Option<(Vec<usize>, u32)> = None;
        let mut most = 0;
        for phase in phase::candidates(period.period_us, &neighbours) {
            let w = Periodic {
                phase_us: phase,
                ..period
            };
            // Positions in `fit` of the CPUs with room, best first.
            let room: Vec<usize> = (0..fit.len())
                .filter(|&i| self.window_room(fit[i], &w))
                .take(n)
                .collect();
            most = most.max(room.len());
            if room.len() == n && best.as_ref().is_none_or(|(b, _)| room < *b) {
                best = Some((room, phase));
            }
        }
        match best {
            Some((room, phase)) => Ok((phase, room.iter().map(|&i| fit[i]).collect())),
            None => Err(most),
        }
    }

    /// The CPUs carrying any promise.
    pub fn region(&self) -> CpuSet {
        let mut s = CpuSet::new();
        for &cpu in self.load.keys() {
            s.insert(cpu);
        }
        s
    }

    /// Verifies invariants 1–3 for `cells` (id, contract, CPUs) against
    /// `limit`, and that the recorded load is theirs.
    pub fn check(&self, cells: &[(CellId, TimeContract, u32)], limit: u32) -> Result<(), String> {
        let load = check_load(cells, &self.cells, &self.phases, limit)?;
        if load != self.load {
            return Err("the recorded per-CPU load does not match the cells".into());
        }
        Ok(())
    }
}

/// Verifies invariants 1–3 for `cells` (id, contract, CPUs) placed on
/// `sets`, triggered cells at `phases`; returns what each CPU carries.
pub fn check_load(
    cells: &[(CellId, TimeContract, u32)],
    sets: &BTreeMap<CellId, CpuSet>,
    phases: &BTreeMap<CellId, u32>,
    limit: u32,
) -> Result<BTreeMap<usize, CpuLoad>, String> {
    let mut load: BTreeMap<usize, CpuLoad> = BTreeMap::new();
    let mut windows: BTreeMap<usize, Vec<(CellId, Periodic)>> = BTreeMap::new();
    for (id, contract, cpus) in cells {
        if matches!(contract, TimeContract::Message { .. }) {
            continue;
        }
        let set = sets
            .get(id)
            .ok_or_else(|| format!("time cell {id} has no CPUs"))?;
        if set.len() != *cpus as usize {
            return Err(format!(
                "time cell {id} holds {} CPUs, its contract covers {cpus}",
                set.len()
            ));
        }
        let w = if windowed(contract) {
            let phase = phases
                .get(id)
                .ok_or_else(|| format!("windowed time cell {id} has no phase"))?;
            Periodic::of(contract, *phase)
        } else {
            None
        };
        for cpu in set.iter() {
            if let Some(w) = w {
                let on = windows.entry(cpu).or_default();
                if let Some((other, o)) = on.iter().find(|(_, o)| !o.apart(&w)) {
                    return Err(format!(
                        "on CPU {cpu} the windows of cell {id} ({}/{} µs at {} µs) come within \
                         {WINDOW_GAP_US} µs of cell {other}'s ({}/{} µs at {} µs)",
                        w.budget_us, w.period_us, w.phase_us, o.budget_us, o.period_us, o.phase_us
                    ));
                }
                on.push((*id, w));
            }
            let l = load.entry(cpu).or_default();
            if !l.fits(contract, limit) {
                return Err(format!(
                    "CPU {cpu} cannot also carry cell {id} ({contract}): it carries {} ppm{} \
                     (limit {limit})",
                    l.ppm,
                    if l.windowed {
                        " and windowed cells"
                    } else {
                        ""
                    }
                ));
            }
            l.add(contract);
        }
    }
    Ok(load)
}

/// Places `cells` on `candidates` (in preference order) so that no CPU
/// carries more than `limit` ppm. Previous placements are kept when they
/// still fit (invariant 4). Fails, naming the first cell that does not
/// fit, when some cell finds no room.
pub fn place(candidates: &[usize], limit: u32, cells: &[TimeCell]) -> Result<TimePlan, NoRoom> {
    let allowed: CpuSet = {
        let mut s = CpuSet::new();
        for &c in candidates {
            s.insert(c);
        }
        s
    };
    let mut plan = TimePlan::default();
    let mut todo: Vec<&TimeCell> = Vec::new();
    let active = cells
        .iter()
        .filter(|c| !matches!(c.contract, TimeContract::Message { .. }));
    // Keep: the same CPUs, and for a triggered cell the same phase (or,
    // when the phase is unknown, the earliest that fits on those CPUs).
    for c in active {
        let keep = c.previous.len() == c.cpus as usize
            && c.previous.is_subset(&allowed)
            && c.previous
                .iter()
                .all(|cpu| plan.fits(cpu, &c.contract, limit));
        let phase = if !keep {
            None
        } else if !windowed(&c.contract) {
            Some(0)
        } else {
            let set: Vec<usize> = c.previous.iter().collect();
            let same = c
                .previous_phase
                .and_then(|p| Periodic::of(&c.contract, p))
                .filter(|w| set.iter().all(|&cpu| plan.window_room(cpu, w)));
            match same {
                Some(w) => Some(w.phase_us),
                None if c.previous_phase.is_none() => plan
                    .phase_for(&c.contract, set.len(), &set)
                    .ok()
                    .map(|(p, _)| p),
                None => None,
            }
        };
        match phase {
            Some(p) => plan.put(c.id, &c.contract, c.previous, p),
            None => todo.push(c),
        }
    }
    // Place, largest promise (ppm × CPUs) first.
    todo.sort_by_key(|c| {
        (
            std::cmp::Reverse(u64::from(c.contract.ppm()) * u64::from(c.cpus)),
            c.id,
        )
    });
    for c in todo {
        let mut fit: Vec<(usize, usize)> = candidates
            .iter()
            .enumerate()
            .filter(|(_, cpu)| plan.fits(**cpu, &c.contract, limit))
            .map(|(rank, &cpu)| (rank, cpu))
            .collect();
        if fit.len() < c.cpus as usize {
            return Err(NoRoom(no_room_reason(
                c,
                &plan,
                fit.len(),
                candidates,
                limit,
            )));
        }
        // Best fit: most loaded first, then candidate order.
        fit.sort_by_key(|&(rank, cpu)| {
            (
                std::cmp::Reverse(plan.load.get(&cpu).map_or(0, |l| l.ppm)),
                rank,
            )
        });
        let order: Vec<usize> = fit.iter().map(|&(_, cpu)| cpu).collect();
        let (phase, set) = if windowed(&c.contract) {
            match plan.phase_for(&c.contract, c.cpus as usize, &order) {
                Ok(found) => found,
                Err(most) => {
                    return Err(NoRoom(no_room_reason(c, &plan, most, candidates, limit)));
                }
            }
        } else {
            (0, order.iter().take(c.cpus as usize).copied().collect())
        };
        plan.put(c.id, &c.contract, set, phase);
    }
    Ok(plan)
}

/// Like [`place`] but never fails: every cell is placed afresh, on the
/// CPUs that fit it first, then on the least loaded regardless of the
/// limit (the checker reports the overload). Only for cells that bypassed
/// admission.
pub fn place_overloaded(candidates: &[usize], limit: u32, cells: &[TimeCell]) -> TimePlan {
    let mut plan = TimePlan::default();
    for c in cells
        .iter()
        .filter(|c| !matches!(c.contract, TimeContract::Message { .. }))
    {
        let mut order: Vec<(bool, u32, usize, usize)> = candidates
            .iter()
            .enumerate()
            .map(|(rank, &cpu)| {
                let l = plan.load.get(&cpu).copied().unwrap_or_default();
                (!l.fits(&c.contract, limit), l.ppm, rank, cpu)
            })
            .collect();
        order.sort_unstable();
        let set: Vec<usize> = order
            .iter()
            .take(c.cpus as usize)
            .map(|&(_, _, _, cpu)| cpu)
            .collect();
        // The earliest phase with room on those CPUs, else 0 (the checker
        // reports the overlap).
        let phase = plan
            .phase_for(&c.contract, set.len(), &set)
            .map_or(0, |(p, _)| p);
        plan.put(c.id, &c.contract, set.iter().copied().collect(), phase);
    }
    plan
}

/// Shortest and longest CFS bandwidth period the kernel accepts, and the
/// smallest quota (µs).
const CFS_PERIOD_MIN: u32 = 1_000;
const CFS_PERIOD_MAX: u32 = 1_000_000;
const CFS_QUOTA_MIN: u64 = 1_000;

/// The CPU-time cap that keeps a time cell to its contract, as CFS
/// bandwidth control sets it: `(quota µs, period µs)` for the whole cell
/// (its `cpus` CPUs together). `None` for space and message-triggered
/// contracts.
///
/// - time-fraction `f`, slice `s`: the period is the shortest in which one
///   CPU's share is a whole slice (`s / f`, and at least 1 ms of quota),
///   so a throttled cell runs again in pieces of at least `s`;
/// - time-triggered: the budget every period (periods above 1 s keep their
///   ratio over 1 s).
///
/// The broker pairs the cap with the largest CPU weight, so that the cell
/// receives its share when best-effort cells contend for the same CPUs.
pub fn bandwidth(contract: &TimeContract, cpus: u32) -> Option<(u64, u32)> {
    let n = u64::from(cpus.max(1));
    match *contract {
        TimeContract::Fraction { ppm, .. } => {
            let ppm = u64::from(ppm.max(1));
            let slice = u64::from(contract.slice_us()).max(CFS_QUOTA_MIN);
            let period = (slice * u64::from(allot_spec::PPM))
                .div_ceil(ppm)
                .clamp(u64::from(CFS_PERIOD_MIN), u64::from(CFS_PERIOD_MAX));
            let per_cpu = (period * ppm / u64::from(allot_spec::PPM)).max(CFS_QUOTA_MIN);
            Some((per_cpu * n, period as u32))
        }
        TimeContract::Triggered {
            period_us,
            budget_us,
        } => {
            let (period, budget) = if period_us > CFS_PERIOD_MAX {
                let scaled =
                    u64::from(budget_us) * u64::from(CFS_PERIOD_MAX) / u64::from(period_us);
                (CFS_PERIOD_MAX, scaled)
            } else {
                (period_us, u64::from(budget_us))
            };
            Some((budget.max(CFS_QUOTA_MIN) * n, period))
        }
        _ => None,
    }
}

/// Why `c` found only `room` of `candidates` able to carry it.
fn no_room_reason(
    c: &TimeCell,
    plan: &TimePlan,
    room: usize,
    candidates: &[usize],
    limit: u32,
) -> String {
    let pct = |ppm: u32| f64::from(ppm) / 10_000.0;
    let busiest: Vec<String> = candidates
        .iter()
        .filter_map(|cpu| plan.load.get(cpu).map(|l| (cpu, l)))
        .take(4)
        .map(|(cpu, l)| {
            format!(
                "CPU {cpu} {:.1} %{}",
                pct(l.ppm),
                if l.windowed { " windowed" } else { "" }
            )
        })
        .collect();
    format!(
        "needs {} CPUs each with {:.1} % of its time free{} but only {} of the {} CPUs open to time \
         cells have room (each may carry {:.1} %; promised now: {})",
        c.cpus,
        pct(c.contract.ppm()),
        if windowed(&c.contract) {
            format!(
                ", and room for its windows between the windows already there \
                 ({WINDOW_GAP_US} µs apart)"
            )
        } else {
            String::new()
        },
        room,
        candidates.len(),
        pct(limit),
        if busiest.is_empty() {
            "nothing".to_string()
        } else {
            busiest.join(", ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMIT: u32 = 950_000;

    fn fr(ppm: u32) -> TimeContract {
        TimeContract::Fraction { ppm, slice_us: 0 }
    }
    fn tt(period_us: u32, budget_us: u32) -> TimeContract {
        TimeContract::Triggered {
            period_us,
            budget_us,
        }
    }
    fn cell(id: u64, contract: TimeContract, cpus: u32) -> TimeCell {
        TimeCell {
            id: CellId(id),
            contract,
            cpus,
            previous: CpuSet::new(),
            previous_phase: None,
        }
    }
    /// `cells` as the next placement sees them after `plan`.
    fn kept(plan: &TimePlan, cells: &[TimeCell]) -> Vec<TimeCell> {
        cells
            .iter()
            .map(|c| TimeCell {
                previous: plan.cells[&c.id],
                previous_phase: plan.phases.get(&c.id).copied(),
                ..*c
            })
            .collect()
    }
    fn list(plan: &TimePlan, id: u64) -> Vec<usize> {
        plan.cells[&CellId(id)].iter().collect()
    }
    fn checked(plan: &TimePlan, cells: &[TimeCell]) {
        let c: Vec<_> = cells.iter().map(|c| (c.id, c.contract, c.cpus)).collect();
        plan.check(&c, LIMIT).unwrap();
    }

    #[test]
    fn a_fractions_window_is_its_share_of_a_harmonic_period() {
        use phase::fraction_windows as w;
        assert_eq!(w(250_000, 2_000), Some((16_000, 4_000)));
        assert_eq!(
            w(50_000, 2_000),
            Some((64_000, 3_200)),
            "2 ms / 0.05 = 40 ms"
        );
        assert_eq!(
            w(450_000, 10_000),
            Some((32_000, 14_400)),
            "slices of 10 ms"
        );
        assert_eq!(w(100, 2_000), None, "a 20 s period: CFS bandwidth instead");
        let windows = Periodic::of(&fr(250_000), 3_000).unwrap();
        assert_eq!(
            (windows.period_us, windows.budget_us, windows.phase_us),
            (16_000, 4_000, 3_000)
        );
    }

    #[test]
    fn fractions_pack_onto_few_cpus() {
        let cells = [
            cell(1, fr(250_000), 1),
            cell(2, fr(400_000), 1),
            cell(3, fr(250_000), 1),
        ];
        let plan = place(&[3, 2, 1], LIMIT, &cells).unwrap();
        checked(&plan, &cells);
        assert_eq!(plan.region().iter().collect::<Vec<_>>(), vec![3]);
        assert_eq!(plan.load[&3].ppm, 900_000);
        // One after the other in each 16 ms: 6.4, then 4 and 4 ms, a gap
        // between each (the checker above proves them apart).
        let at = |id| plan.phases[&CellId(id)];
        assert_eq!(at(2), 0);
        assert_eq!(at(1), 6_400 + WINDOW_GAP_US);
        assert_eq!(at(3), 6_400 + 4_000 + 2 * WINDOW_GAP_US);
    }

    #[test]
    fn triggered_cells_share_cpus_at_phases_that_keep_their_windows_apart() {
        let cells = [
            cell(1, fr(100_000), 1),
            cell(2, tt(10_000, 3_000), 2),
            cell(3, tt(20_000, 1_000), 1),
        ];
        let plan = place(&[3, 2, 1, 0], LIMIT, &cells).unwrap();
        checked(&plan, &cells);
        // The fraction (its 1.6 ms slice every 16 ms) finds no room for
        // its windows beside cell 2's every 10 ms; cell 3 shares
        // cell 2's CPUs (best fit: the most loaded), its window a gap
        // after cell 2's.
        assert_eq!(list(&plan, 2), vec![2, 3]);
        assert_eq!(list(&plan, 1), vec![1]);
        assert_eq!(list(&plan, 3), vec![3]);
        assert_eq!(plan.phases[&CellId(2)], 0);
        assert_eq!(plan.phases[&CellId(3)], 3_000 + WINDOW_GAP_US);
        // Cell 4 goes a gap after cell 3 (4.4 ms), on both CPUs; then
        // 2.2 ms are left between gaps, too little for 2.5 ms windows.
        let mut more = kept(&plan, &cells);
        more.push(cell(4, tt(10_000, 3_000), 2));
        let plan = place(&[3, 2, 1], LIMIT, &more).unwrap();
        checked(&plan, &more);
        assert_eq!(list(&plan, 4), vec![2, 3]);
        assert_eq!(plan.phases[&CellId(4)], 4_400);
        let more = kept(&plan, &more);
        let mut fits = more.clone();
        fits.push(cell(5, tt(10_000, 2_000), 1));
        let plan = place(&[3, 2, 1], LIMIT, &fits).unwrap();
        checked(&plan, &fits);
        assert_eq!(plan.phases[&CellId(5)], 7_600);
        let mut full = more.clone();
        full.push(cell(5, tt(10_000, 2_500), 1));
        let e = place(&[3, 2, 1], LIMIT, &full).unwrap_err();
        assert!(e.0.contains("room for its windows"), "{e}");
        // Coprime periods (µs) never fit on one CPU.
        let other = [cell(1, tt(10_000, 1_000), 1), cell(2, tt(9_999, 1_000), 1)];
        let plan = place(&[1, 0], LIMIT, &other).unwrap();
        checked(&plan, &other);
        assert_ne!(list(&plan, 1), list(&plan, 2));
    }

    #[test]
    fn a_kept_triggered_cell_keeps_its_phase() {
        let first = place(&[1, 0], LIMIT, &[cell(1, tt(10_000, 2_000), 1)]).unwrap();
        let mut c1 = cell(1, tt(10_000, 2_000), 1);
        c1.previous = first.cells[&CellId(1)];
        c1.previous_phase = Some(first.phases[&CellId(1)]);
        let second = place(&[1, 0], LIMIT, &[cell(2, tt(10_000, 5_000), 1), c1]).unwrap();
        assert_eq!(second.phases[&CellId(1)], first.phases[&CellId(1)]);
        assert_eq!(second.cells[&CellId(1)], first.cells[&CellId(1)]);
        assert_eq!(second.phases[&CellId(2)], 2_000 + WINDOW_GAP_US);
        // Restored without a phase: the same CPUs, the earliest phase there.
        let mut c2 = cell(2, tt(10_000, 5_000), 1);
        c2.previous = second.cells[&CellId(2)];
        let third = place(&[1, 0], LIMIT, &[c1, c2]).unwrap();
        assert_eq!(third.cells[&CellId(2)], second.cells[&CellId(2)]);
        assert_eq!(third.phases[&CellId(2)], 2_000 + WINDOW_GAP_US);
    }

    #[test]
    fn the_checker_catches_windows_that_meet() {
        let cells = [cell(1, tt(10_000, 3_000), 1), cell(2, tt(10_000, 3_000), 1)];
        let mut plan = place(&[0], LIMIT, &cells).unwrap();
        checked(&plan, &cells);
        plan.phases.insert(CellId(2), 3_100);
        let c: Vec<_> = cells.iter().map(|c| (c.id, c.contract, c.cpus)).collect();
        let e = plan.check(&c, LIMIT).unwrap_err();
        assert!(e.contains("come within"), "{e}");
    }

    #[test]
    fn an_overcommitting_contract_is_refused_with_the_load() {
        let cells = [cell(1, fr(600_000), 1), cell(2, fr(500_000), 1)];
        let e = place(&[1], LIMIT, &cells).unwrap_err();
        assert!(e.0.contains("CPU 1 60.0 %"), "{e}");
        assert!(e.0.contains("each may carry 95.0 %"), "{e}");
        assert!(place(&[1, 0], LIMIT, &cells).is_ok());
    }

    #[test]
    fn admitted_cells_keep_their_cpus_when_others_come_and_go() {
        let first = place(&[3, 2, 1, 0], LIMIT, &[cell(1, fr(500_000), 2)]).unwrap();
        assert_eq!(list(&first, 1), vec![2, 3]);
        // A newcomer that would have packed differently from scratch does
        // not move cell 1.
        let mut c1 = cell(1, fr(500_000), 2);
        c1.previous = first.cells[&CellId(1)];
        let cells = [c1, cell(2, tt(10_000, 5_000), 1), cell(3, fr(450_000), 2)];
        let second = place(&[3, 2, 1, 0], LIMIT, &cells).unwrap();
        checked(&second, &cells);
        assert_eq!(list(&second, 1), vec![2, 3]);
        // Ending cell 2 moves nobody either.
        let mut c3 = cells[2];
        c3.previous = second.cells[&CellId(3)];
        let third = place(&[3, 2, 1, 0], LIMIT, &[c1, c3]).unwrap();
        assert_eq!(list(&third, 1), vec![2, 3]);
        assert_eq!(third.cells[&CellId(3)], second.cells[&CellId(3)]);
    }

    #[test]
    fn bandwidth_keeps_slices_whole_and_budgets_per_period() {
        // 0.25 in 2 ms slices: 2 ms of every 8 ms, per CPU.
        assert_eq!(bandwidth(&fr(250_000), 1), Some((2_000, 8_000)));
        assert_eq!(bandwidth(&fr(250_000), 2), Some((4_000, 8_000)));
        // A tiny fraction: the period tops out at 1 s.
        assert_eq!(bandwidth(&fr(1_000), 1), Some((1_000, 1_000_000)));
        // The whole CPU: a period of one slice.
        assert_eq!(bandwidth(&fr(1_000_000), 1), Some((2_000, 2_000)));
        assert_eq!(bandwidth(&tt(10_000, 3_000), 2), Some((6_000, 10_000)));
        assert_eq!(
            bandwidth(&tt(4_000_000, 1_000_000), 1),
            Some((250_000, 1_000_000))
        );
        assert_eq!(bandwidth(&TimeContract::Space, 1), None);
        assert_eq!(bandwidth(&TimeContract::Message { idle_ms: 5 }, 1), None);
    }

    #[test]
    fn message_triggered_cells_hold_nothing() {
        let cells = [cell(1, TimeContract::Message { idle_ms: 100 }, 1)];
        let plan = place(&[0], LIMIT, &cells).unwrap();
        assert!(plan.cells.is_empty() && plan.region().is_empty());
        checked(&plan, &cells);
    }

    #[test]
    fn the_checker_catches_an_overloaded_cpu() {
        let cells = [cell(1, fr(600_000), 1), cell(2, fr(500_000), 1)];
        let mut plan = place(&[1, 0], LIMIT, &cells).unwrap();
        plan.cells.insert(CellId(2), plan.cells[&CellId(1)]);
        let c: Vec<_> = cells.iter().map(|c| (c.id, c.contract, c.cpus)).collect();
        assert!(plan.check(&c, LIMIT).is_err());
    }
}
