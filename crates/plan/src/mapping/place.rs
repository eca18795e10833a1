//! Topology-aware set operations: grow a CPU set by the nearest free CPUs,
//! shrink it by its outliers, choose where a new set starts.
//!
//! "Near" follows the machine's hierarchy: SMT sibling, then same LLC, then
//! same NUMA node, then the nearest other node by NUMA distance. Within a
//! level, whole free cores are taken before single threads when at least a
//! core's worth is still needed, and single threads are taken from cores
//! that are already partly used, so whole cores stay whole. Every choice
//! breaks ties by the lowest CPU number, which makes the mapping
//! deterministic.

use allot_spec::Placement;
use allot_topo::{CpuSet, Machine};

/// Per-CPU domain masks, built once per machine.
#[derive(Debug, Clone)]
pub struct Topo<'m> {
    pub(crate) machine: &'m Machine,
    core: Vec<CpuSet>,
    llc: Vec<CpuSet>,
    node: Vec<CpuSet>,
    node_idx: Vec<usize>,
}

/// The cores, LLC domains and nodes a set of CPUs touches: the union of
/// the domains of its CPUs.
#[derive(Debug, Clone, Copy, Default)]
struct Near {
    cores: CpuSet,
    llcs: CpuSet,
    nodes: CpuSet,
}

impl Near {
    /// Adds the domains of `cpu`.
    fn add(&mut self, topo: &Topo<'_>, cpu: usize) {
        if !self.cores.contains(cpu) {
            self.cores = self.cores.union(&topo.core[cpu]);
        }
        if !self.llcs.contains(cpu) {
            self.llcs = self.llcs.union(&topo.llc[cpu]);
        }
        if !self.nodes.contains(cpu) {
            self.nodes = self.nodes.union(&topo.node[cpu]);
        }
    }
}

impl<'m> Topo<'m> {
    /// Precomputes the masks for `machine`.
    pub fn new(machine: &'m Machine) -> Self {
        let max = machine.usable().last().map_or(0, |c| c + 1);
        let mut core = vec![CpuSet::new(); max];
        let mut llc = vec![CpuSet::new(); max];
        let mut node = vec![CpuSet::new(); max];
        let mut node_idx = vec![0; max];
        for c in machine.cpus() {
            core[c.id] = machine.cores()[c.core].cpus;
            llc[c.id] = machine.llcs()[c.llc].cpus;
            node[c.id] = machine.nodes()[c.node].cpus;
            node_idx[c.id] = c.node;
        }
        Topo {
            machine,
            core,
            llc,
            node,
            node_idx,
        }
    }

    /// Picks the next CPUs to take from `cands` (all of them free):
    /// 1. a whole free core, if `need` covers it (keeps siblings together);
    /// 2. else one thread of a core that is already partly used;
    /// 3. else the lowest free CPU.
    fn best_group(&self, cands: &CpuSet, need: usize) -> CpuSet {
        let single = |c: usize| std::iter::once(c).collect::<CpuSet>();
        if let Some(core) = cands
            .iter()
            .map(|c| self.core[c])
            .find(|core| core.len() <= need && core.is_subset(cands))
        {
            return core;
        }
        if let Some(c) = cands.iter().find(|&c| !self.core[c].is_subset(cands)) {
            return single(c);
        }
        cands.first().map(single).unwrap_or_default()
    }

    /// The free CPUs nearest to `set`, which touches the domains `near`,
    /// as a group to add (see `best_group`).
    fn nearest(&self, set: &CpuSet, near: &Near, avail: &CpuSet, need: usize) -> CpuSet {
        let siblings = near.cores.intersection(avail);
        if let Some(c) = siblings.first() {
            return std::iter::once(c).collect();
        }
        for domains in [&near.llcs, &near.nodes] {
            let cands = domains.intersection(avail);
            if !cands.is_empty() {
                return self.best_group(&cands, need);
            }
        }
        // Another node: the nearest by distance from the set's first CPU.
        let home = self.node_idx[set.first().unwrap_or(0)];
        let dist = &self.machine.nodes()[home].distances;
        let mut order: Vec<usize> = (0..self.machine.nodes().len()).collect();
        order.sort_by_key(|&n| (dist[n], n));
        for n in order {
            let cands = self.machine.nodes()[n].cpus.intersection(avail);
            if !cands.is_empty() {
                return self.best_group(&cands, need);
            }
        }
        CpuSet::new()
    }

    /// The domain a new set of `need` CPUs should start in: the fullest LLC
    /// that still fits it (best fit keeps big holes for big cells), else the
    /// fullest node that fits, else the node with the most free CPUs. With
    /// `Placement::Numa` nodes are tried before LLCs.
    pub fn seed_domain(&self, avail: &CpuSet, need: usize, placement: Placement) -> CpuSet {
        let m = self.machine;
        let best_fit = |domains: &mut dyn Iterator<Item = CpuSet>| {
            domains
                .map(|d| d.intersection(avail))
                .filter(|f| f.len() >= need)
                .min_by_key(|f| (f.len(), f.first()))
        };
        let llc = || best_fit(&mut m.llcs().iter().map(|l| l.cpus));
        let node = || best_fit(&mut m.nodes().iter().map(|n| n.cpus));
        let found = match placement {
            Placement::Numa => node().map(|n| {
                // Start in the best-fitting LLC inside that node.
                let inner = m
                    .llcs()
                    .iter()
                    .map(|l| l.cpus.intersection(&n))
                    .filter(|f| f.len() >= need)
                    .min_by_key(|f| (f.len(), f.first()));
                inner.unwrap_or(n)
            }),
            _ => llc().or_else(node),
        };
        found.unwrap_or_else(|| {
            m.nodes()
                .iter()
                .map(|n| n.cpus.intersection(avail))
                .max_by_key(|f| (f.len(), std::cmp::Reverse(f.first())))
                .unwrap_or_default()
        })
    }

    /// Adds `need` CPUs from `avail` to `set`, nearest first. Returns the new
    /// set (shorter than asked if `avail` runs out).
    ///
    /// Cost: each step takes a group, whose domains are added to those the
    /// set touches (`Near`) instead of gathering them anew from every CPU
    /// of the set, so growing by k CPUs costs k steps, not k × |set| (a
    /// cell arriving on 1024 CPUs takes hundreds).
    pub fn grow(&self, set: CpuSet, need: usize, avail: &CpuSet, placement: Placement) -> CpuSet {
        let mut set = set;
        let mut avail = avail.difference(&set);
        let mut need = need;
        let mut near = Near::default();
        for c in set.iter() {
            near.add(self, c);
        }
        while need > 0 && !avail.is_empty() {
            let group = if set.is_empty() {
                let dom = self.seed_domain(&avail, need, placement);
                self.best_group(&dom.intersection(&avail), need)
            } else {
                self.nearest(&set, &near, &avail, need)
            };
            if group.is_empty() {
                break;
            }
            for c in group.iter().take(need) {
                set.insert(c);
                avail.remove(c);
                near.add(self, c);
                need -= 1;
            }
        }
        set
    }

    /// Removes CPUs from `set` until `keep` remain, dropping first the CPUs
    /// whose node, then LLC, then core hold the fewest of the set's CPUs
    /// (ties: highest CPU number first).
    pub fn shrink(&self, set: CpuSet, keep: usize) -> CpuSet {
        if set.len() <= keep {
            return set;
        }
        let mut scored: Vec<((usize, usize, usize), usize)> = set
            .iter()
            .map(|c| {
                let score = (
                    self.node[c].intersection(&set).len(),
                    self.llc[c].intersection(&set).len(),
                    self.core[c].intersection(&set).len(),
                );
                (score, c)
            })
            .collect();
        // Keep the best-scored (largest groups), lowest numbers first.
        scored.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        scored.iter().take(keep).map(|&(_, c)| c).collect()
    }

    /// The domain (LLC or node, by `placement`) that should hold a set of
    /// `need` CPUs that currently holds `held`, given the free CPUs `avail`:
    /// the domain holding most of `held` if it has room, else the best-fitting
    /// domain with room. `None` for `Placement::Any`, when `need` exceeds every
    /// domain, or when no domain has room (fragmentation: placement becomes
    /// best effort).
    pub fn home_domain(
        &self,
        held: &CpuSet,
        avail: &CpuSet,
        need: usize,
        placement: Placement,
    ) -> Option<CpuSet> {
        let domains: &mut dyn Iterator<Item = CpuSet> = match placement {
            Placement::Any => return None,
            Placement::Llc => &mut self.machine.llcs().iter().map(|l| l.cpus),
            Placement::Numa => &mut self.machine.nodes().iter().map(|n| n.cpus),
        };
        // One pass, no allocation (this runs for every constrained cell of
        // every plan): among the domains with room, the one holding most
        // of `held`, then the tightest fit, then the lowest first CPU
        // (later domains win ties, as `max_by_key` has it).
        let open = avail.union(held);
        let mut best = None;
        for d in domains {
            let room = d.intersection(&open).len();
            if room < need {
                continue;
            }
            let key = (
                d.intersection(held).len(),
                std::cmp::Reverse(room),
                std::cmp::Reverse(d.first()),
            );
            if best.as_ref().is_none_or(|(k, _)| key >= *k) {
                best = Some((key, d));
            }
        }
        best.map(|(_, d)| d)
    }

    /// `n` CPUs for the reserve: whole cores from the lowest CPU number up.
    pub fn pick_reserve(&self, n: usize) -> CpuSet {
        let mut out = CpuSet::new();
        for core in self.machine.cores() {
            for c in core.cpus.iter() {
                if out.len() == n {
                    return out;
                }
                out.insert(c);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Machine {
        allot_topo::fixture(name).expect("fixture loads")
    }

    #[test]
    fn grow_fills_one_llc_before_the_next() {
        let m = fixture("opteron6276-4s");
        let t = Topo::new(&m);
        let set = t.grow(CpuSet::new(), 8, m.usable(), Placement::Any);
        assert_eq!(set.len(), 8);
        assert_eq!(
            m.llcs().iter().filter(|l| l.cpus.intersects(&set)).count(),
            1,
            "{set}"
        );
        // Growing a set on node 0 by 8 more goes to the same package's other node.
        let more = t.grow(set, 8, m.usable(), Placement::Any);
        let nodes: Vec<u32> = m
            .nodes()
            .iter()
            .filter(|n| n.cpus.intersects(&more))
            .map(|n| n.id)
            .collect();
        assert_eq!(nodes.len(), 2);
        let d = &m.nodes()[0].distances;
        assert_eq!(
            d[nodes[1] as usize], 16,
            "second node should be the same-package one"
        );
    }

    #[test]
    fn whole_cores_first_on_smt() {
        let m = fixture("xeon-x5550-2s");
        let t = Topo::new(&m);
        let set = t.grow(CpuSet::new(), 4, m.usable(), Placement::Any);
        // Two whole cores: each chosen core has both siblings.
        for c in set.iter() {
            assert!(
                m.cores()[m.cpu(c).unwrap().core].cpus.is_subset(&set),
                "{set}"
            );
        }
    }

    #[test]
    fn single_threads_come_from_partly_used_cores() {
        let m = fixture("xeon-x5550-2s");
        let t = Topo::new(&m);
        // CPU 0 is taken; one more CPU should be 8 (its sibling), not a fresh core.
        let mut avail = *m.usable();
        avail.remove(0);
        let one = t.grow(CpuSet::new(), 1, &avail, Placement::Any);
        assert_eq!(one.to_string(), "8");
    }

    #[test]
    fn shrink_drops_outliers() {
        let m = fixture("opteron6276-4s");
        let t = Topo::new(&m);
        let set = CpuSet::parse_list("0-7,40").unwrap();
        assert_eq!(t.shrink(set, 8).to_string(), "0-7");
    }

    #[test]
    fn numa_home_domain_prefers_where_the_set_is() {
        let m = fixture("opteron6276-4s");
        let t = Topo::new(&m);
        let held = CpuSet::parse_list("8-10").unwrap();
        let home = t
            .home_domain(&held, m.usable(), 6, Placement::Numa)
            .unwrap();
        assert_eq!(home.to_string(), "8-15");
        assert!(
            t.home_domain(&held, m.usable(), 9, Placement::Numa)
                .is_none()
        );
    }

    #[test]
    fn reserve_takes_whole_cores_from_cpu0() {
        let m = fixture("xeon-x5550-2s");
        assert_eq!(Topo::new(&m).pick_reserve(2).to_string(), "0,8");
    }
}
