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
//! [`admit`] decides whether a new cell's guarantee fits beside the others.
//! [`Plan::check`] verifies the plan invariants listed in [`plan`].

pub mod admission;
pub mod lend;
pub mod mapping;
pub mod plan;
pub mod policy;
pub mod share;
pub mod spec;

pub use admission::{Admission, Admitted, admit, delays};
pub use mapping::{MapCell, PoolSize, Topo};
pub use plan::{Grant, Plan, Violation};
pub use policy::{GlobalPolicy, PolicyCell};
pub use spec::{CellId, CellSpec, MAX_WEIGHT, Placement, SpecError};

use allot_topo::Machine;

/// Broker-wide planning settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PlanConfig {
    /// CPUs kept for processes outside any cell.
    pub reserve: u32,
    /// How CPUs are divided.
    pub policy: GlobalPolicy,
    /// Whether idle entitlements are lent (work conservation). On by default
    /// in the broker; off only for experiments.
    pub lend: bool,
}

/// One cell as the planner sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellInput {
    /// The cell.
    pub id: CellId,
    /// What it asked for.
    pub spec: CellSpec,
    /// CPUs it can use now (`None`: unknown, assume all it may have).
    pub demand: Option<u32>,
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

    /// Admission for `new` beside `admitted`.
    pub fn admit(&self, admitted: &[Admitted<'_>], new: &CellSpec) -> Admission {
        admit(self.topo.machine, self.config.reserve, admitted, new)
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
        )
    }

    /// The plan for `cells`, as close to `prev` as the new counts allow.
    pub fn plan(&self, cells: &[CellInput], prev: &Plan) -> Plan {
        let capacity = self.capacity();
        let policy_cells: Vec<PolicyCell> = cells
            .iter()
            .map(|c| PolicyCell {
                spec: c.spec,
                previous: prev.cells.get(&c.id).map_or(0, |g| g.entitled.len() as u32),
            })
            .collect();
        let ent = self.config.policy.entitle(capacity, &policy_cells);
        let specs: Vec<CellSpec> = cells.iter().map(|c| c.spec).collect();
        let demand: Vec<Option<u32>> = cells.iter().map(|c| c.demand).collect();
        let lending = lend::lend(capacity, &specs, &demand, &ent, self.config.lend);
        let map_cells: Vec<MapCell> = cells
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
            })
            .collect();
        let pool = PoolSize {
            base: ent.pool,
            borrow: lending.pool_borrow,
        };
        mapping::map(&self.topo, self.config.reserve, &map_cells, pool, prev)
    }
}
