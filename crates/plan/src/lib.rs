//! allot's pure planning layers.
//!
//! The broker turns events into a [`Plan`] in three steps, each a pure
//! function (no I/O, deterministic, tested on fixture machines):
//!
//! 1. **Policy** ([`policy`]): how many CPUs each cell is entitled to, from
//!    the cells' specs and a [`GlobalPolicy`]; cells that cannot each hold a
//!    whole CPU are stacked on a shared pool.
//! 2. **Lending** ([`lend`]): work conservation; what a cell cannot use now
//!    goes to cells that can, marked as lent.
//! 3. **Mapping** ([`mapping`]): concrete CPU sets, topology-aware and
//!    stable between successive plans.
//!
//! Before them, **time placement** ([`time`]) puts each time cell's promise
//! on CPUs; those CPUs (the time region) leave the space layers' capacity,
//! and afterwards every non-exclusive space cell gets them too, marked
//! lent: what the promises leave or do not use is theirs (work
//! conservation).
//!
//! The `goals` policy reads what each cell's reports say of it
//! ([`tracking`]: a per-cell tracker turns measurements into the CPUs a goal
//! needs and a speed-up curve); `sim` (feature `sim`, on for this crate's
//! own tests and benchmarks only) drives the plan over time with synthetic
//! cells.
//!
//! After them, two steps look outside the cells: [`outside::teams`] lowers
//! best-effort cells' teams where work outside every cell holds some of
//! their CPUs, and [`weight::weigh`] gives every cell, and the cells
//! together, their weight in the kernel's scheduler.
//!
//! [`admission::admit_cell`] (through [`Planner::admit`]) decides whether a
//! new cell fits beside the others, for its CPUs, its memory guarantee and
//! its class of service ([`cache`]: L3 ways and bandwidth ceilings as
//! classes).
//! [`Plan::check`] verifies the plan invariants listed in [`plan`].
//!
//! Cost: a plan is linear in the cells. The mapping's topology work is for
//! whole-CPU cells only (at most one per CPU; a stacked cell costs one
//! grant), growing a set by k CPUs takes k steps, and the previous plan is
//! walked, not searched, for the cells' grants. Most of what is left is
//! moving grants (four 1024-bit CPU sets each) into the plan's map: each is
//! made as it is stored, into a copy of the previous plan's map when few
//! cells came or went. `benches/plan.rs` measures 10 to 10 000 cells on 64
//! to 1024 CPUs and what one arrival changes ([`Plan::changes_to`]).

pub mod admission;
pub mod cache;
pub mod lend;
pub mod mapping;
pub mod outside;
pub mod plan;
pub mod policy;
pub mod share;
#[cfg(feature = "sim")]
pub mod sim;
pub mod time;
pub mod tracking;
pub mod weight;

pub use admission::{Admission, Admitted, Room, admit, delays};
pub use mapping::{MapCell, PoolSize, Topo};
pub use plan::{Allotment, Changes, Plan, Violation};
pub use policy::{GlobalPolicy, PolicyCell};
pub use weight::{Weighing, Weights};

use allot_spec::{CellId, CellSpec, PPM};
use allot_topo::{CpuSet, Machine};
use std::borrow::Cow;

/// Broker-wide planning settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanConfig {
    /// Time of every CPU kept for the system: time cells are promised at
    /// most `PPM − time_reserve_ppm` of any CPU.
    pub time_reserve_ppm: u32,
    /// CPUs kept for processes outside any cell.
    pub reserve: u32,
    /// How CPUs are divided.
    pub policy: GlobalPolicy,
    /// Whether idle entitlements are lent (work conservation). On by default
    /// in the broker; off only for experiments.
    pub lend: bool,
    /// Whether best-effort cells may be paused (the broker's backend can
    /// freeze a cell): then they are always admitted, hold no CPU while
    /// guarantees take every one (an empty grant: paused), and never count
    /// against a guarantee. Without it one CPU stays with the best-effort
    /// cells, and a best-effort cell is refused while guarantees take
    /// every CPU ([`admission`]).
    pub pause_best_effort: bool,
}

/// One cell as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellInput {
    /// The cell's id; the plan's grants are keyed by it.
    pub id: CellId,
    /// What it asked for.
    pub spec: CellSpec,
    /// CPUs it can use now (`None`: unknown, assume all it may have).
    pub demand: Option<u32>,
    /// What its reports say of its performance (the goals policy reads
    /// it; the default says nothing).
    pub perf: tracking::PerfHint,
    /// CPUs its processes hold exclusively through `require` (the one
    /// account): the plan keeps them in its entitlement and in what it
    /// owns, and gives them to no other cell (invariant 8). Ignored for
    /// time cells.
    pub held: CpuSet,
}

/// Plans for one machine; holds the precomputed topology tables.
#[derive(Debug, Clone)]
pub struct Planner<'m> {
    topo: Topo<'m>,
    config: PlanConfig,
}

impl<'m> Planner<'m> {
    /// A planner for `machine`. A reserve of all usable CPUs or more is
    /// clipped so that one CPU remains for cells.
    pub fn new(machine: &'m Machine, config: PlanConfig) -> Self {
        let mut config = config;
        config.reserve = config
            .reserve
            .min(machine.num_cpus().saturating_sub(1) as u32);
        Planner {
            topo: Topo::new(machine),
            config,
        }
    }

    /// The settings in force (after clipping).
    pub fn config(&self) -> &PlanConfig {
        &self.config
    }

    /// CPUs available to cells.
    pub fn capacity(&self) -> u32 {
        self.topo.machine.num_cpus() as u32 - self.config.reserve
    }

    /// Most time promised on one CPU, in parts per million.
    pub fn time_limit(&self) -> u32 {
        PPM.saturating_sub(self.config.time_reserve_ppm)
    }

    /// Admission for `new` beside `admitted`, whose time cells sit where
    /// `current` put them, with `room` for memory and classes of service
    /// ([`admission::admit_cell`]).
    pub fn admit(
        &self,
        admitted: &[Admitted<'_>],
        new: &allot_spec::ValidSpec,
        current: &Plan,
        room: &Room<'_>,
    ) -> Admission {
        let time = self.time_candidates(current);
        admission::admit_cell(
            self.topo.machine,
            self.config.reserve,
            &admission::TimeRoom {
                candidates: &time,
                limit: self.time_limit(),
                current,
            },
            room,
            admitted,
            new,
            self.config.pause_best_effort,
        )
    }

    /// Whether admitting `new` beside `admitted` could delay `waiting`
    /// ([`delays`]).
    pub fn delays(&self, admitted: &[Admitted<'_>], waiting: &CellSpec, new: &CellSpec) -> bool {
        delays(
            self.topo.machine,
            self.config.reserve,
            admitted,
            waiting,
            new,
            self.config.pause_best_effort,
        )
    }

    /// The CPUs open to time cells, in the order they are taken: the
    /// previous region first, then CPUs no space cell was entitled to (the
    /// stacked pool, idle CPUs), then the rest; highest-numbered first within each (the reserve
    /// and new space cells start from CPU 0).
    fn time_candidates(&self, prev: &Plan) -> Vec<usize> {
        let reserved = mapping::reserve_set(&self.topo, self.config.reserve, prev);
        let (mut held, mut entitled) = (CpuSet::new(), CpuSet::new());
        for g in prev.cells.values() {
            held = held.union(&g.held);
            entitled = entitled.union(&g.entitled);
        }
        let open = self
            .topo
            .machine
            .usable()
            .difference(&reserved)
            .difference(&held);
        let entitled = entitled.difference(&prev.time);
        let mut order: Vec<usize> = open.iter().collect();
        order.sort_by_key(|&c| {
            let rank = if prev.time.contains(c) {
                0
            } else if !entitled.contains(c) {
                1
            } else {
                2
            };
            (rank, std::cmp::Reverse(c))
        });
        order
    }

    /// The plan for `cells`, as close to `prev` as the new counts allow.
    pub fn plan(&self, cells: &[CellInput], prev: &Plan) -> Plan {
        self.plan_loaded(cells, prev, 0)
    }

    /// [`Planner::plan`] while processes outside every cell use about
    /// `unmanaged` CPUs (the goals policy does not count on them).
    pub fn plan_loaded(&self, cells: &[CellInput], prev: &Plan, unmanaged: u32) -> Plan {
        // The one account: a cell whose processes hold CPUs through
        // `require` is planned as guaranteed those CPUs and using them
        // (when nothing is held, the cells as given, uncopied).
        let planned: Cow<'_, [CellInput]> = if cells.iter().all(|c| c.held.is_empty()) {
            Cow::Borrowed(cells)
        } else {
            cells
                .iter()
                .map(|c| {
                    let n = c.held.len() as u32;
                    CellInput {
                        spec: c.spec.holding(n),
                        demand: c.demand.map(|d| d.max(n)),
                        ..*c
                    }
                })
                .collect()
        };
        let cells = &planned[..];
        let limit = self.time_limit();
        let (time_cells, space_cells): (Vec<&CellInput>, Vec<&CellInput>) =
            cells.iter().partition(|c| c.spec.time.is_time());
        let timed: Vec<time::TimeCell> = time_cells
            .iter()
            .map(|c| time::TimeCell {
                id: c.id,
                contract: c.spec.time,
                cpus: c.spec.time_cpus(),
                // Kept only under the contract it was placed for.
                previous: prev.placed_for(c.id, &c.spec.time),
                previous_phase: prev.phase_for(c.id, &c.spec.time),
            })
            .collect();
        // (Without time cells there is nothing to place them on.)
        let candidates = if timed.is_empty() {
            Vec::new()
        } else {
            self.time_candidates(prev)
        };
        // Admission only lets in what fits, so this fails only for cells
        // that bypassed it (a journal replayed under a smaller limit); they
        // are placed from scratch, and the checker reports any overload.
        let placed = time::place(&candidates, limit, &timed)
            .unwrap_or_else(|_| time::place_overloaded(&candidates, limit, &timed));
        let region = placed.region();
        let capacity = self.capacity().saturating_sub(region.len() as u32).max(1);

        // The policy's and lending's inputs, in one pass over the cells.
        let before = prev.grants_of(space_cells.iter().map(|c| c.id));
        let n = space_cells.len();
        let (mut policy_cells, mut specs, mut demand) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for (c, g) in space_cells.iter().zip(&before) {
            policy_cells.push(PolicyCell {
                spec: c.spec,
                previous: g.map_or(0, |g| g.entitled.len() as u32),
                perf: c.perf,
            });
            specs.push(c.spec);
            // A probed cell is held at its probe: lending must not top it up.
            demand.push(match c.perf.probe {
                Some(to) => Some(
                    c.demand
                        .map_or(to, |d| d.min(to))
                        .max(c.held.len().max(1) as u32),
                ),
                None => c.demand,
            });
        }
        let ent = self
            .config
            .policy
            .entitle(capacity, &policy_cells, unmanaged);
        let lending = lend::lend(capacity, &specs, &demand, &ent, self.config.lend);
        let map_cells: Vec<MapCell> = space_cells
            .iter()
            .zip(&ent.cells)
            .zip(&lending.cells)
            .map(|((c, e), u)| MapCell {
                id: c.id,
                placement: c.spec.placement,
                weight: c.spec.weight,
                entitled: e.cpus,
                own: u.own,
                borrow: u.borrow,
                stacked: e.stacked,
                share: e.share,
                held: c.held,
            })
            .collect();
        let pool = PoolSize {
            base: ent.pool,
            borrow: lending.pool_borrow,
        };
        let (mut plan, space_grants) = mapping::map_grants(
            &self.topo,
            self.config.reserve,
            region,
            &map_cells,
            pool,
            prev,
        );
        plan.time_limit = limit;
        plan.contracts = time_cells.iter().map(|c| (c.id, c.spec.time)).collect();
        plan.phases = placed.phases.clone();
        let whole = self.capacity();
        let mut space_grants = space_grants.zip(&space_cells).map(|(mut g, c)| {
            widen(&mut g, &c.spec, &region, whole);
            g
        });
        let mut time_grants = time_cells.iter().map(|c| {
            let set = placed.cells.get(&c.id).copied().unwrap_or_default();
            Allotment {
                cpus: set,
                lent: CpuSet::new(),
                entitled: set,
                threads: set.len().max(1) as u32,
                stacked: false,
                home: 0,
                share: f64::from(c.spec.time.ppm()) * set.len() as f64 / f64::from(PPM),
                held: CpuSet::new(),
            }
        });
        // Every cell's grant, made as it is keyed, in the order of `cells`
        // (a plan of 10 000 cells is mostly the cost of moving grants).
        let grants = cells.iter().map(|c| {
            let g = if c.spec.time.is_time() {
                time_grants.next()
            } else {
                space_grants.next()
            };
            (c.id, g.expect("one grant per cell"))
        });
        plan.cells = plan::keyed(&prev.cells, cells.iter().map(|c| c.id), grants);
        plan
    }
}

/// Work conservation over time: a non-exclusive space cell runs on the
/// time region too, as lent CPUs, within its maximum (`capacity` CPUs
/// when it has none).
fn widen(g: &mut Allotment, spec: &CellSpec, region: &CpuSet, capacity: u32) {
    if g.stacked && region.is_empty() {
        return; // (the pool gains nothing)
    }
    let widened = g.cpus.union(region);
    if spec.exclusive || widened.len() > spec.max_within(capacity) as usize {
        return;
    }
    if !g.stacked {
        g.lent = g.lent.union(&region.difference(&g.cpus));
        g.threads = widened.len() as u32;
    }
    g.cpus = widened;
}
