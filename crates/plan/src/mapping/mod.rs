//! The mapping layer: from CPU counts to CPU sets.
//!
//! Input: per cell its entitlement count, how much of it the cell keeps, how
//! much it borrows, whether it is stacked; the stacked pool's size; the
//! previous plan. Output: a [`Plan`]. No I/O; the same input always gives the
//! same plan.
//!
//! Steps, in order (each only takes CPUs nobody took in an earlier step):
//!
//! 1. **Reserve**: kept from the previous plan when its size is unchanged,
//!    else whole cores from CPU 0 up.
//! 2. **Keep**: each whole-CPU cell keeps the CPUs its processes hold
//!    through `require` (its *held* CPUs, invariant 8) and its previous
//!    entitlement (minus CPUs now reserved), trimmed to its new count by
//!    dropping outliers, never a held one. This is what makes successive
//!    plans move as few CPUs as possible: a cell loses CPUs only when its
//!    count shrinks.
//! 3. **Pool keep**: the stacked pool keeps its previous CPUs that are free.
//! 4. **Grow**: cells that need more CPUs take the nearest free ones, the most
//!    constrained first (NUMA placement, then LLC, then any; larger first).
//!    A constrained cell whose kept CPUs straddle domains, or whose domain
//!    lacks room, moves into the domain that can hold it (placement wins over
//!    stability) unless that would drop a held CPU; when no domain can,
//!    placement is best effort.
//! 5. **Pool grow** to its base size.
//! 6. **Own**: inside its entitlement each cell keeps the CPUs it uses,
//!    its held ones first, then those of its previous grant; the rest is
//!    lendable, together with every CPU nobody is entitled to.
//! 7. **Lend**: borrowers (and the pool) take the nearest lendable CPUs,
//!    previous borrowings first.
//!
//! Stacked cells all run on the pool (the kernel time-shares it, weighted by
//! cell weight); each is advised a thread count proportional to its weight.

mod place;

pub use place::Topo;

use crate::plan::{Allotment, Plan};
use allot_spec::{CellId, Placement};
use allot_topo::CpuSet;
use std::collections::BTreeMap;

/// What the mapping needs to know about one cell.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MapCell {
    /// The cell's id; the mapping's grants are keyed by it.
    pub id: CellId,
    /// Where its CPUs should lie.
    pub placement: Placement,
    /// Its weight (for stacked thread counts).
    pub weight: u32,
    /// Whole CPUs it is entitled to (0 if stacked).
    pub entitled: u32,
    /// How many of those it keeps.
    pub own: u32,
    /// How many it borrows beyond them.
    pub borrow: u32,
    /// It shares the stacked pool.
    pub stacked: bool,
    /// Real-valued fair share (reported).
    pub share: f64,
    /// CPUs its processes hold exclusively through `require`: kept in its
    /// entitlement and in what it owns. The caller makes `entitled` and
    /// `own` at least as large.
    pub held: CpuSet,
}

/// Pool sizes from the policy and lending steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolSize {
    /// CPUs set aside for stacked cells.
    pub base: u32,
    /// CPUs the pool borrows.
    pub borrow: u32,
}

fn constraint_rank(p: Placement) -> u8 {
    match p {
        Placement::Numa => 0,
        Placement::Llc => 1,
        Placement::Any => 2,
    }
}

/// The reserve (step 1): the previous plan's when its size is unchanged,
/// else whole cores from CPU 0 up.
pub fn reserve_set(topo: &Topo<'_>, reserve: u32, prev: &Plan) -> CpuSet {
    let usable = *topo.machine.usable();
    if prev.reserve.len() == reserve as usize && prev.reserve.is_subset(&usable) {
        prev.reserve
    } else {
        topo.pick_reserve(reserve as usize)
    }
}

/// Builds the plan. `reserve` is the number of CPUs kept for processes
/// outside any cell; `time` is the time region ([`crate::time`]), which
/// space cells are planned around: no CPU of it is handed out here.
pub fn map(
    topo: &Topo<'_>,
    reserve: u32,
    time: CpuSet,
    cells: &[MapCell],
    pool: PoolSize,
    prev: &Plan,
) -> Plan {
    let (mut plan, grants) = map_grants(topo, reserve, time, cells, pool, prev);
    plan.cells = cells.iter().map(|c| c.id).zip(grants).collect();
    plan
}

/// [`map`], with the plan's `cells` left empty and the grants given in the
/// order of `cells`, made as they are taken: a caller that adjusts and
/// keys them itself moves each grant once.
///
/// Cost: the steps before assembly touch only whole-CPU cells, each by
/// its position (cell ids are distinct), and find their previous grants
/// in one walk over the previous plan ([`Plan::grants_of`]). A stacked
/// cell costs one grant, made when it is taken.
pub(crate) fn map_grants<'c>(
    topo: &Topo<'_>,
    reserve: u32,
    time: CpuSet,
    cells: &'c [MapCell],
    pool: PoolSize,
    prev: &Plan,
) -> (Plan, impl Iterator<Item = Allotment> + 'c) {
    let usable = *topo.machine.usable();
    let reserved = reserve_set(topo, reserve, prev);
    let capacity = usable.difference(&reserved).len() as u32;
    let mut free = usable.difference(&reserved).difference(&time);
    let whole: Vec<&MapCell> = cells.iter().filter(|c| !c.stacked).collect();
    let before: Vec<Option<&Allotment>> = prev.grants_of(whole.iter().map(|c| c.id));
    // The steps of the module's list; `ent`, `own` and `borrowed` are
    // parallel to `whole`.
    let mut ent = keep(topo, &whole, &before, &mut free);
    // 3. Pool keep.
    let mut pool_set = topo.shrink(prev.pool.intersection(&free), pool.base as usize);
    free = free.difference(&pool_set);
    grow(topo, &whole, &mut ent, &mut free);
    // 5. Pool grow.
    if pool_set.len() < pool.base as usize {
        pool_set = topo.grow(
            pool_set,
            pool.base as usize - pool_set.len(),
            &free,
            Placement::Any,
        );
        free = free.difference(&pool_set);
    }
    let (own, mut lendable) = own(topo, &whole, &ent, &before, free);
    let borrowed = lend(topo, &whole, &before, &own, &mut lendable);
    let pool_lent = lend_to_pool(topo, pool, prev, pool_set, &lendable);
    let pool_all = pool_set.union(&pool_lent);
    let grants = assemble(cells, ent, own, borrowed, pool_all, pool_lent);
    let plan = Plan {
        capacity,
        reserve: reserved,
        pool: pool_all,
        time,
        time_limit: 0, // the planner's to fill
        contracts: BTreeMap::new(),
        phases: BTreeMap::new(), // the planner's to fill
        cells: BTreeMap::new(),  // the caller's to fill
    };
    (plan, grants)
}

/// Step 2, keep: each whole-CPU cell's held CPUs (whatever comes first),
/// then its previous entitlement trimmed to its count. Takes what it
/// returns from `free`.
fn keep(
    topo: &Topo<'_>,
    whole: &[&MapCell],
    before: &[Option<&Allotment>],
    free: &mut CpuSet,
) -> Vec<CpuSet> {
    let all_held = whole
        .iter()
        .fold(CpuSet::new(), |acc, c| acc.union(&c.held))
        .intersection(free);
    *free = free.difference(&all_held);
    let mut ent = Vec::with_capacity(whole.len());
    for (c, b) in whole.iter().zip(before) {
        let before = b.map(|g| g.entitled).unwrap_or_default();
        let held = c.held.intersection(&all_held);
        let rest = (c.entitled as usize).saturating_sub(held.len());
        let kept = topo
            .shrink(before.intersection(free).difference(&held), rest)
            .union(&held);
        *free = free.difference(&kept);
        ent.push(kept);
    }
    ent
}

/// Step 4, grow: each cell to its count, the most constrained and largest
/// first, into the domain that can hold it when one can.
fn grow(topo: &Topo<'_>, whole: &[&MapCell], ent: &mut [CpuSet], free: &mut CpuSet) {
    let mut order: Vec<usize> = (0..whole.len()).collect();
    order.sort_by_key(|&k| {
        let c = whole[k];
        (
            constraint_rank(c.placement),
            std::cmp::Reverse(c.entitled),
            c.id,
        )
    });
    for k in order {
        let c = whole[k];
        let mut set = ent[k];
        let need = c.entitled as usize;
        if let Some(home) = topo
            .home_domain(&set, free, need, c.placement)
            .filter(|home| c.held.is_subset(home))
        {
            let outside = set.difference(&home);
            *free = free.union(&outside);
            set = set.intersection(&home);
            set = topo.grow(
                set,
                need - set.len(),
                &free.intersection(&home),
                c.placement,
            );
        }
        if set.len() < need {
            set = topo.grow(set, need - set.len(), free, c.placement);
        }
        *free = free.difference(&set);
        ent[k] = set;
    }
}

/// Step 6, own: what each cell keeps of its entitlement (held CPUs first,
/// then its previous grant's); returns those and what is lendable: the
/// rest of every entitlement, and `free`.
fn own(
    topo: &Topo<'_>,
    whole: &[&MapCell],
    ent: &[CpuSet],
    before: &[Option<&Allotment>],
    free: CpuSet,
) -> (Vec<CpuSet>, CpuSet) {
    let mut own = Vec::with_capacity(whole.len());
    let mut lendable = free;
    for ((c, e), b) in whole.iter().zip(ent).zip(before) {
        let before = b.map(|g| g.cpus.intersection(e)).unwrap_or_default();
        let held = c.held.intersection(e);
        let rest = (c.own as usize).saturating_sub(held.len());
        let mut mine = topo.shrink(before.difference(&held), rest).union(&held);
        if mine.len() < c.own as usize {
            mine = topo.grow(mine, c.own as usize - mine.len(), e, c.placement);
        }
        lendable = lendable.union(&e.difference(&mine));
        own.push(mine);
    }
    (own, lendable)
}

/// Step 7, lend to cells: previous borrowings first, then the nearest.
/// Takes what it lends from `lendable`.
fn lend(
    topo: &Topo<'_>,
    whole: &[&MapCell],
    before: &[Option<&Allotment>],
    own: &[CpuSet],
    lendable: &mut CpuSet,
) -> Vec<CpuSet> {
    let borrowers: Vec<usize> = (0..whole.len()).filter(|&k| whole[k].borrow > 0).collect();
    let mut borrowed: Vec<CpuSet> = vec![CpuSet::new(); whole.len()];
    for &k in &borrowers {
        let before = before[k]
            .map(|g| g.lent.intersection(lendable))
            .unwrap_or_default();
        let keep = topo.shrink(before, whole[k].borrow as usize);
        *lendable = lendable.difference(&keep);
        borrowed[k] = keep;
    }
    for &k in &borrowers {
        let (mine, have) = (own[k], borrowed[k]);
        let grown = topo.grow(
            mine.union(&have),
            whole[k].borrow as usize - have.len(),
            lendable,
            whole[k].placement,
        );
        let got = grown.difference(&mine);
        *lendable = lendable.difference(&got);
        borrowed[k] = got;
    }
    borrowed
}

/// Step 7, lend to the stacked pool: its previous borrowings first.
fn lend_to_pool(
    topo: &Topo<'_>,
    pool: PoolSize,
    prev: &Plan,
    pool_set: CpuSet,
    lendable: &CpuSet,
) -> CpuSet {
    if pool.borrow == 0 {
        return CpuSet::new();
    }
    let before = prev.pool.intersection(lendable);
    let kept = topo.shrink(before, pool.borrow as usize);
    let grown = topo.grow(
        pool_set.union(&kept),
        pool.borrow as usize - kept.len(),
        lendable,
        Placement::Any,
    );
    grown.difference(&pool_set)
}

/// The grants, in the order of `cells` (whole-CPU cells in the order of
/// `ent`, `own` and `borrowed`), made as they are taken. Stacked cells run
/// on the whole pool, each advised threads in proportion to its weight,
/// their homes spread over it.
fn assemble<'c>(
    cells: &'c [MapCell],
    ent: Vec<CpuSet>,
    own: Vec<CpuSet>,
    borrowed: Vec<CpuSet>,
    pool_all: CpuSet,
    pool_lent: CpuSet,
) -> impl Iterator<Item = Allotment> + 'c {
    let stacked_weight: u64 = cells
        .iter()
        .filter(|c| c.stacked)
        .map(|c| c.weight.max(1) as u64)
        .sum();
    let pool_len = pool_all.len() as u64;
    let mut home = 0u32;
    let mut k = 0;
    cells.iter().map(move |c| {
        if c.stacked {
            let portion = pool_len * c.weight.max(1) as u64 / stacked_weight.max(1);
            let threads = portion.max(1) as u32;
            let g = Allotment {
                cpus: pool_all,
                lent: pool_lent,
                entitled: CpuSet::new(),
                threads,
                stacked: true,
                home: home % pool_len.max(1) as u32,
                share: c.share,
                held: c.held,
            };
            home = home.wrapping_add(threads);
            g
        } else {
            let (lent, entitled) = (borrowed[k], ent[k]);
            let cpus = own[k].union(&lent);
            k += 1;
            Allotment {
                cpus,
                lent,
                entitled,
                threads: cpus.len().max(1) as u32,
                stacked: false,
                home: 0,
                share: c.share,
                held: c.held,
            }
        }
    })
}
