//! Admission control: whether a new cell's guarantee can be given without
//! breaking the guarantees already given.
//!
//! The rule: the guaranteed CPUs of all admitted cells never exceed the
//! capacity (usable CPUs minus the reserve). Best-effort cells (no minimum,
//! not exclusive) share whatever the guarantees leave, and how they are
//! admitted depends on whether they can be paused
//! ([`PlanConfig::pause_best_effort`](crate::PlanConfig::pause_best_effort),
//! the broker's backend can freeze a cell):
//!
//! - **paused when need be** (the default with cgroups): a best-effort cell
//!   is always admitted and counts against no guarantee; while guarantees
//!   take every CPU it holds none (an empty grant: the broker freezes it)
//!   and it runs again when one frees. Best effort is never refused and
//!   never delays a guarantee.
//! - **never paused** (a backend without a freezer): one CPU stays with the
//!   best-effort cells while there are any (counted like a guarantee), and
//!   a best-effort cell is admitted only while at least one CPU is not
//!   guaranteed to anyone.
//!
//! Time cells ([`crate::time`]) hold no whole CPU but promises on some: a
//! time cell is admitted when the time placement finds room for it beside
//! the admitted ones (kept where they are), the region it then needs
//! leaves at least one CPU to space cells, and the space guarantees still
//! fit what the region leaves. A space cell is admitted against the
//! capacity minus the current region.
//!
//! Memory and classes of service are admitted beside CPUs
//! ([`memory`], [`class`]); [`admit_cell`] is the one decision on a cell.
//!
//! A request that no state of the machine could satisfy is [`Admission::Never`];
//! one that the current guarantees block is [`Admission::NotNow`], and the
//! broker either refuses it or queues it if the cell asked to wait. Both carry
//! a reason that names the limit.
//!
//! # Passing cells that wait
//!
//! A cell that waits is admitted the moment enough admitted cells have
//! left. A newcomer that fits now may go ahead of it only if it cannot
//! delay it: whichever admitted cells leave first, whenever the waiting
//! cell would have fitted without the newcomer, it still fits with it
//! ([`delays`]). Anything else would let a stream of small requests starve
//! a large one. The check is exact, not a heuristic: the admitted cells
//! that may remain form every subset, and a bitset of their reachable
//! guarantee sums answers it in `O(cells × capacity / 64)`.

mod resources;
pub use resources::{Room, ask_of, class, join, memory};

use crate::plan::Plan;
use crate::time::{self, TimeCell};
use allot_spec::{CellId, CellSpec, Placement, ValidSpec};
use allot_topo::{CpuSet, Machine};

/// The verdict on a new cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admit now: with it, every guarantee and the time region still fit the capacity.
    Admit,
    /// Blocked by current guarantees; may succeed later.
    NotNow(String),
    /// Can never succeed on this machine and configuration.
    Never(String),
}

/// An admitted cell, as admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted<'a> {
    /// The admitted cell's id, named in the reason text of a refusal.
    pub id: CellId,
    /// Its name, for the reason text.
    pub name: &'a str,
    /// What it asked for.
    pub spec: &'a CellSpec,
}

/// Where time cells may go, for admission.
#[derive(Debug, Clone, Copy)]
pub struct TimeRoom<'a> {
    /// CPUs open to time cells, in the order placement takes them.
    pub candidates: &'a [usize],
    /// Most time promised on one CPU, in parts per million.
    pub limit: u32,
    /// The plan in force: where admitted time cells sit.
    pub current: &'a Plan,
}

impl TimeRoom<'_> {
    /// The time region `admitted` (plus `new`) needs, or why `new` has no
    /// room.
    fn region(&self, admitted: &[Admitted<'_>], new: Option<&CellSpec>) -> Result<u32, String> {
        let mut cells: Vec<TimeCell> = admitted
            .iter()
            .filter(|a| a.spec.time.is_time())
            .map(|a| TimeCell {
                id: a.id,
                contract: a.spec.time,
                cpus: a.spec.time_cpus(),
                previous: self.current.placed_for(a.id, &a.spec.time),
                previous_phase: self.current.phase_for(a.id, &a.spec.time),
            })
            .collect();
        if let Some(n) = new {
            cells.push(TimeCell {
                id: CellId(u64::MAX),
                contract: n.time,
                cpus: n.time_cpus(),
                previous: CpuSet::new(),
                previous_phase: None,
            });
        }
        match time::place(self.candidates, self.limit, &cells) {
            Ok(p) => Ok(p.region().len() as u32),
            Err(e) => Err(e.0),
        }
    }
}

/// Decides on `new` given the cells already admitted.
pub fn admit(
    machine: &Machine,
    reserve: u32,
    time: &TimeRoom<'_>,
    admitted: &[Admitted<'_>],
    new: &ValidSpec,
    pause: bool,
) -> Admission {
    let usable = machine.num_cpus() as u32;
    let capacity = usable.saturating_sub(reserve);
    if new.is_message() {
        // Admitted like the best-effort cell it is while active; while
        // idle it holds nothing.
        let region = time.region(admitted, None).unwrap_or(0);
        return admit_space(
            machine,
            reserve,
            capacity,
            region,
            admitted,
            &new.as_active_message(),
            pause,
        );
    }
    if new.time.is_time() {
        return admit_time(capacity, time, admitted, new, pause);
    }
    let region = time.region(admitted, None).unwrap_or(0);
    admit_space(machine, reserve, capacity, region, admitted, new, pause)
}

/// Decides on `new` beside the cells already admitted, for every
/// resource: its CPUs ([`admit`]), its memory guarantee and its class of
/// service ([`memory`], [`class`]), the verdicts joined ([`join`]). The one place
/// a cell is admitted; the broker keeps only its own limits, the queue
/// and whether its journal can record the cell.
pub fn admit_cell(
    machine: &Machine,
    reserve: u32,
    time: &TimeRoom<'_>,
    room: &Room<'_>,
    admitted: &[Admitted<'_>],
    new: &ValidSpec,
    pause: bool,
) -> Admission {
    let cpus = admit(machine, reserve, time, admitted, new, pause);
    if matches!(cpus, Admission::Never(_)) {
        return cpus;
    }
    let guaranteed = admitted.iter().map(|a| a.spec.memory.min).sum();
    let classes = admitted.iter().map(|a| resources::ask_of(a.id.0, a.spec));
    // (A newcomer's id is not known yet: one no cell has. Whether asks
    // fit does not depend on the ids.)
    let own = resources::ask_of(u64::MAX, new);
    join([
        cpus,
        memory(room, guaranteed, &new.memory),
        class(room, classes, own),
    ])
}

/// Space guarantees held by `admitted`, and whether one CPU stays with the
/// best-effort cells: one is among them or `new`, and they cannot be
/// paused.
fn space_need(admitted: &[Admitted<'_>], new: &CellSpec, pause: bool) -> (u32, bool) {
    let held = admitted.iter().map(|a| a.spec.guaranteed()).sum();
    let best_effort = !pause
        && (admitted.iter().any(|a| is_best_effort(a.spec))
            || (!new.time.is_time() && !new.is_guaranteed()));
    (held, best_effort)
}

fn is_best_effort(s: &CellSpec) -> bool {
    (!s.time.is_time() && !s.is_guaranteed()) || s.is_message()
}

fn admit_time(
    capacity: u32,
    time: &TimeRoom<'_>,
    admitted: &[Admitted<'_>],
    new: &CellSpec,
    pause: bool,
) -> Admission {
    let pct = |ppm: u32| f64::from(ppm) / 10_000.0;
    if new.time.ppm() > time.limit {
        return Admission::Never(format!(
            "promises {:.1} % of each CPU but at most {:.1} % of any CPU can be promised here \
             (the rest is the system's reserve, time_reserve in the broker's config)",
            pct(new.time.ppm()),
            pct(time.limit)
        ));
    }
    if new.min + 1 > capacity {
        return Admission::Never(format!(
            "covers {} CPUs but at most {} of the {capacity} CPUs available to cells can carry \
             time promises (one stays for space cells)",
            new.min,
            capacity.saturating_sub(1)
        ));
    }
    let region = match time.region(admitted, Some(new)) {
        Ok(r) => r,
        Err(why) => {
            return Admission::NotNow(format!("{why}; {RETRY}"));
        }
    };
    let (held, best_effort) = space_need(admitted, new, pause);
    let space = capacity.saturating_sub(region);
    if region < capacity && held + u32::from(best_effort) <= space {
        return Admission::Admit;
    }
    Admission::NotNow(format!(
        "time cells would then need {region} CPUs, leaving {space} of {capacity} to space cells, \
         but their guarantees hold {held}{}; {RETRY}",
        if best_effort {
            " and one stays with the best-effort cells"
        } else {
            ""
        }
    ))
}

/// The advice that ends a refusal for now: what a request that did not
/// ask to wait can do.
pub const RETRY: &str = "retry later or pass --wait to queue";

/// A refusal's reason as a request already waiting in the queue is told
/// it: without the advice to retry or to wait ([`RETRY`]).
pub fn waiting_reason(reason: &str) -> String {
    reason.replace(&format!("; {RETRY}"), "")
}

/// `n` of `what`, with its plural: "1 guaranteed CPU", "2 guaranteed CPUs".
fn cpus(n: u32, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn admit_space(
    machine: &Machine,
    reserve: u32,
    capacity: u32,
    region: u32,
    admitted: &[Admitted<'_>],
    new: &CellSpec,
    pause: bool,
) -> Admission {
    let usable = machine.num_cpus() as u32;
    let want = new.guaranteed();
    if want > capacity {
        return Admission::Never(format!(
            "asks for at least {} but only {capacity} are available to cells on this machine \
             ({usable} usable, {reserve} reserved for other processes)",
            cpus(want, "CPU")
        ));
    }
    let (domain, largest) = match new.placement {
        Placement::Any => ("", u32::MAX),
        Placement::Llc => ("last-level-cache domain", machine.largest_llc() as u32),
        Placement::Numa => ("NUMA node", machine.largest_node() as u32),
    };
    if want > largest {
        return Admission::Never(format!(
            "asks for at least {want} CPUs within one {domain} but the largest has {largest}; \
             lower --min or use --place any"
        ));
    }
    let (held, best_effort) = space_need(admitted, new, pause);
    let needed = held + want + u32::from(best_effort);
    if needed + region <= capacity {
        return Admission::Admit;
    }
    let timed = if region > 0 {
        format!("; time cells' promises take {region} more")
    } else {
        String::new()
    };
    let holders: Vec<String> = admitted
        .iter()
        .filter(|a| a.spec.is_guaranteed())
        .map(|a| format!("{} ({})", a.name, a.spec.guaranteed()))
        .collect();
    let holders = if holders.is_empty() {
        "none".to_string()
    } else {
        holders.join(", ")
    };
    Admission::NotNow(if new.is_guaranteed() {
        format!(
            "asks for {} but only {} of {capacity} are unguaranteed now (guarantees held by: \
             {holders}{}{timed}); {RETRY}",
            cpus(want, "guaranteed CPU"),
            capacity.saturating_sub(
                region
                    + held
                    + u32::from(best_effort && admitted.iter().any(|a| is_best_effort(a.spec)))
            ),
            if best_effort && admitted.iter().any(|a| is_best_effort(a.spec)) {
                "; one CPU stays with the best-effort cells"
            } else {
                ""
            },
        )
    } else {
        format!(
            "all {capacity} CPUs are guaranteed to other cells (guarantees held by: \
             {holders}{timed}); a best-effort cell needs one unguaranteed CPU; {RETRY}"
        )
    })
}

/// Whether admitting `new` now could delay `waiting`, a cell that waits for
/// guarantees the `admitted` cells hold: true when some set of admitted
/// cells could leave such that `waiting` would then fit without `new` but
/// not with it (`new` being still there).
///
/// With `h` the guarantees that remain, `w` and `n` the waiting and new
/// cells' guarantees and `b` one CPU when best-effort cells remain, the
/// waiting cell fits when `h + w + b ≤ capacity`. The worst remaining set
/// is the one with the largest `h` that still lets it fit; the admitted
/// best-effort cells either all leave (`b` from the waiting and new cells
/// only) or some stay (`b = 1`); with best-effort cells that can be
/// paused, `b` is 0, so a best-effort newcomer never delays anyone. When
/// time cells are involved (waiting, new or admitted) the answer is a
/// conservative yes, except for a best-effort newcomer that can be paused.
pub fn delays(
    machine: &Machine,
    reserve: u32,
    admitted: &[Admitted<'_>],
    waiting: &CellSpec,
    new: &CellSpec,
    pause: bool,
) -> bool {
    if pause && is_best_effort(new) {
        return false;
    }
    let any_be = !pause && admitted.iter().any(|a| is_best_effort(a.spec));
    // Time cells move the space capacity as they come and go; with any of
    // them involved, passing is not worth the risk of starving the waiter.
    if waiting.time.is_time()
        || new.time.is_time()
        || admitted.iter().any(|a| a.spec.time.is_time())
    {
        return true;
    }
    let capacity = (machine.num_cpus() as u32).saturating_sub(reserve);
    let w = waiting.guaranteed();
    let n = new.guaranteed();
    let w_be = u32::from(!pause && !waiting.is_guaranteed());
    let with_new_be = w_be.max(u32::from(!pause && !new.is_guaranteed()));
    let sums = SubsetSums::of(admitted.iter().map(|a| a.spec.guaranteed()), capacity);
    // Admitted best-effort cells all gone.
    if w + w_be <= capacity {
        let h = sums.largest_at_most(capacity - w - w_be);
        if h + n + w + with_new_be > capacity {
            return true;
        }
    }
    // Some admitted best-effort cell stays.
    if any_be && w < capacity {
        let h = sums.largest_at_most(capacity - w - 1);
        if h + n + w + 1 > capacity {
            return true;
        }
    }
    false
}

/// The sums of every subset of a list of guarantees, up to a capacity.
struct SubsetSums {
    bits: Vec<u64>,
}

impl SubsetSums {
    fn of(values: impl Iterator<Item = u32>, capacity: u32) -> SubsetSums {
        let len = capacity as usize + 1;
        let mut bits = vec![0u64; len.div_ceil(64)];
        bits[0] = 1; // the empty set
        for v in values.filter(|&v| v > 0 && v <= capacity) {
            // bits |= bits << v, truncated to the capacity.
            let (words, shift) = (v as usize / 64, v as usize % 64);
            for i in (0..bits.len()).rev() {
                let mut moved = 0;
                if i >= words {
                    moved = bits[i - words] << shift;
                    if shift > 0 && i > words {
                        moved |= bits[i - words - 1] >> (64 - shift);
                    }
                }
                bits[i] |= moved;
            }
        }
        if !len.is_multiple_of(64) {
            let last = bits.len() - 1;
            bits[last] &= (1u64 << (len % 64)) - 1;
        }
        SubsetSums { bits }
    }

    /// The largest reachable sum not above `limit` (0 is always reachable).
    fn largest_at_most(&self, limit: u32) -> u32 {
        let mut s = limit.min((self.bits.len() * 64 - 1) as u32);
        loop {
            if self.bits[s as usize / 64] >> (s % 64) & 1 == 1 {
                return s;
            }
            s -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_spec::PPM;

    /// [`super::admit`] of a spec the test knows is valid.
    fn admit(
        m: &Machine,
        reserve: u32,
        time: &TimeRoom<'_>,
        adm: &[Admitted<'_>],
        new: &CellSpec,
        pause: bool,
    ) -> Admission {
        let new = new.check().expect("the tests' specs are valid");
        super::admit(m, reserve, time, adm, &new, pause)
    }

    /// No time cells and no CPU open to them.
    fn no_time() -> TimeRoom<'static> {
        TimeRoom {
            candidates: &[],
            limit: PPM,
            current: Box::leak(Box::default()),
        }
    }

    fn spec(min: u32, exclusive: bool) -> CellSpec {
        CellSpec {
            min,
            exclusive,
            ..Default::default()
        }
    }

    #[test]
    fn best_effort_cells_always_fit_when_a_cpu_is_unguaranteed() {
        let m = Machine::uniform(2);
        let be = spec(0, false);
        let others = [be; 10];
        let adm: Vec<Admitted> = others
            .iter()
            .map(|s| Admitted {
                id: CellId(0),
                name: "x",
                spec: s,
            })
            .collect();
        assert_eq!(admit(&m, 0, &no_time(), &adm, &be, false), Admission::Admit);
    }

    #[test]
    fn guarantees_add_up() {
        let m = Machine::uniform(2);
        let a = spec(1, true);
        let adm = [Admitted {
            id: CellId(0),
            name: "a",
            spec: &a,
        }];
        assert_eq!(
            admit(&m, 0, &no_time(), &adm, &spec(1, true), false),
            Admission::Admit
        );
        let b = spec(1, true);
        let adm = [
            Admitted {
                id: CellId(0),
                name: "a",
                spec: &a,
            },
            Admitted {
                id: CellId(0),
                name: "b",
                spec: &b,
            },
        ];
        match admit(&m, 0, &no_time(), &adm, &spec(1, false), false) {
            Admission::NotNow(r) => assert!(r.contains("a (1), b (1)"), "{r}"),
            other => panic!("{other:?}"),
        }
        // A best-effort cell now would leave no CPU for it.
        match admit(&m, 0, &no_time(), &adm, &spec(0, false), false) {
            Admission::NotNow(r) => assert!(r.contains("all 2 CPUs are guaranteed"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exclusive_cannot_take_the_last_cpu_from_best_effort_cells() {
        let m = Machine::uniform(2);
        let be = spec(0, false);
        let adm = [Admitted {
            id: CellId(0),
            name: "be",
            spec: &be,
        }];
        assert_eq!(
            admit(&m, 0, &no_time(), &adm, &spec(1, true), false),
            Admission::Admit
        );
        assert!(matches!(
            admit(&m, 0, &no_time(), &adm, &spec(2, true), false),
            Admission::NotNow(_)
        ));
    }

    #[test]
    fn impossible_requests_name_the_limit() {
        let m = Machine::uniform(2);
        match admit(&m, 0, &no_time(), &[], &spec(4, false), false) {
            Admission::Never(r) => {
                assert!(r.contains("at least 4 CPUs") && r.contains("only 2"), "{r}")
            }
            other => panic!("{other:?}"),
        }
        match admit(&m, 1, &no_time(), &[], &spec(2, false), false) {
            Admission::Never(r) => assert!(r.contains("1 reserved"), "{r}"),
            other => panic!("{other:?}"),
        }
        let bad = CellSpec {
            weight: 0,
            ..Default::default()
        };
        // An invalid spec never reaches admission: it has no `ValidSpec`.
        assert!(bad.check().is_err());
    }

    fn adm(specs: &[CellSpec]) -> Vec<Admitted<'_>> {
        specs
            .iter()
            .map(|s| Admitted {
                id: CellId(0),
                name: "x",
                spec: s,
            })
            .collect()
    }

    #[test]
    fn a_small_request_may_pass_a_large_one_it_cannot_delay() {
        let m = Machine::uniform(4);
        let held = [spec(2, true)];
        // Three CPUs wait for the cell holding two: one more fits beside
        // them once it leaves.
        assert!(!delays(
            &m,
            0,
            &adm(&held),
            &spec(3, true),
            &spec(1, true),
            false
        ));
        // Two more would not.
        assert!(delays(
            &m,
            0,
            &adm(&held),
            &spec(3, true),
            &spec(2, true),
            false
        ));
    }

    #[test]
    fn best_effort_newcomers_pass_unless_they_would_keep_the_last_cpu() {
        let m = Machine::uniform(2);
        // The whole machine waits: a best-effort cell staying would keep a
        // CPU from it.
        let held = [spec(0, false)];
        assert!(delays(
            &m,
            0,
            &adm(&held),
            &spec(2, true),
            &spec(0, false),
            false
        ));
        // One CPU waits behind an exclusive cell and best-effort cells: if
        // the best-effort cells left, it would fit, unless another stays.
        let held = [spec(1, true), spec(0, false)];
        assert!(delays(
            &m,
            0,
            &adm(&held),
            &spec(1, true),
            &spec(0, false),
            false
        ));
        // A best-effort cell waiting is never delayed by another.
        let held = [spec(1, true), spec(1, true)];
        assert!(!delays(
            &m,
            0,
            &adm(&held),
            &spec(0, false),
            &spec(0, false),
            false
        ));
        // Four CPUs, three held, two wait: once the three leave, the two
        // fit beside a best-effort cell, so it may go ahead.
        let m = Machine::uniform(4);
        let held = [spec(3, true)];
        assert!(!delays(
            &m,
            0,
            &adm(&held),
            &spec(2, true),
            &spec(0, false),
            false
        ));
    }

    #[test]
    fn subset_sums_match_brute_force() {
        let vals = [3u32, 5, 7, 64, 65, 1];
        let s = SubsetSums::of(vals.iter().copied(), 200);
        for limit in 0..=200u32 {
            let mut best = 0;
            for mask in 0u32..(1 << vals.len()) {
                let sum: u32 = (0..vals.len())
                    .filter(|i| mask >> i & 1 == 1)
                    .map(|i| vals[i])
                    .sum();
                if sum <= limit {
                    best = best.max(sum);
                }
            }
            assert_eq!(s.largest_at_most(limit), best, "limit {limit}");
        }
    }

    #[test]
    fn placement_limits() {
        let m = allot_topo::fixture("opteron6276-4s").unwrap();
        let s = CellSpec {
            min: 12,
            placement: Placement::Numa,
            ..Default::default()
        };
        match admit(&m, 0, &no_time(), &[], &s, false) {
            Admission::Never(r) => assert!(r.contains("NUMA node but the largest has 8"), "{r}"),
            other => panic!("{other:?}"),
        }
        let s = CellSpec {
            min: 8,
            placement: Placement::Llc,
            ..Default::default()
        };
        assert_eq!(admit(&m, 0, &no_time(), &[], &s, false), Admission::Admit);
    }

    /// Best-effort cells that can be paused: always admitted, never
    /// counted against a guarantee, never delaying one.
    #[test]
    fn best_effort_cells_that_can_be_paused_are_never_refused_and_never_delay() {
        let m = Machine::uniform(2);
        let all = [spec(2, true)];
        // Every CPU is guaranteed: refused without a freezer, admitted
        // (to be paused) with one.
        assert!(matches!(
            admit(&m, 0, &no_time(), &adm(&all), &spec(0, false), false),
            Admission::NotNow(_)
        ));
        assert_eq!(
            admit(&m, 0, &no_time(), &adm(&all), &spec(0, false), true),
            Admission::Admit
        );
        // A guarantee may take the last CPU from best-effort cells.
        let be = [spec(0, false), spec(0, false)];
        assert_eq!(
            admit(&m, 0, &no_time(), &adm(&be), &spec(2, true), true),
            Admission::Admit
        );
        assert!(matches!(
            admit(&m, 0, &no_time(), &adm(&be), &spec(2, true), false),
            Admission::NotNow(_)
        ));
        // ... and its refusal, when guarantees block it, names no CPU kept
        // for best-effort cells.
        let held = [spec(1, true), spec(0, false)];
        match admit(&m, 0, &no_time(), &adm(&held), &spec(2, true), true) {
            Admission::NotNow(r) => assert!(!r.contains("best-effort"), "{r}"),
            other => panic!("{other:?}"),
        }
        // A best-effort newcomer never delays a waiting guarantee, whatever
        // is admitted (time cells included).
        let timed = CellSpec {
            min: 1,
            time: allot_spec::TimeContract::Fraction {
                ppm: 500_000,
                slice_us: 0,
            },
            ..CellSpec::default()
        };
        for held in [vec![spec(0, false)], vec![spec(1, true)], vec![timed]] {
            assert!(!delays(
                &m,
                0,
                &adm(&held),
                &spec(2, true),
                &spec(0, false),
                true
            ));
            assert!(delays(
                &m,
                0,
                &adm(&held),
                &spec(2, true),
                &spec(0, false),
                false
            ));
        }
    }
}
