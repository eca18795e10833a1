//! The machine model: logical CPUs grouped into cores, last-level-cache
//! domains and NUMA nodes.
//!
//! A [`Machine`] is immutable once built. Every domain list is sorted by its
//! lowest CPU, and each CPU refers to its core, LLC and node by index into
//! those lists, so lookups are array reads. Invariants (checked by
//! [`Machine::from_cpus`]):
//!
//! - every usable CPU belongs to exactly one core, one LLC and one node;
//! - a core lies inside one LLC, and an LLC inside one node (when the
//!   hardware reports otherwise, the LLC is split along node boundaries);
//! - node distance rows are indexed by node index, with the node itself at
//!   the smallest distance.

use crate::cpuset::CpuSet;
use serde::Serialize;

/// One logical CPU (a hardware thread).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Cpu {
    /// Kernel CPU number.
    pub id: usize,
    /// Index into [`Machine::cores`].
    pub core: usize,
    /// Index into [`Machine::llcs`].
    pub llc: usize,
    /// Index into [`Machine::nodes`].
    pub node: usize,
    /// Physical package (socket) id as the kernel reports it.
    pub package: u32,
}

/// A physical core: the SMT siblings that share its pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Core {
    /// Position in [`Machine::cores`].
    pub index: usize,
    /// Package (socket) id.
    pub package: u32,
    /// The sibling hardware threads.
    pub cpus: CpuSet,
}

/// A last-level cache domain: CPUs sharing the highest cache level.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Llc {
    /// Position in [`Machine::llcs`].
    pub index: usize,
    /// Cache level (2 or 3 usually; 0 when the machine reports no caches and
    /// the package stands in for the LLC).
    pub level: u8,
    /// Size in KiB (0 if unknown).
    pub size_kib: u64,
    /// CPUs sharing it.
    pub cpus: CpuSet,
}

/// A NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Node {
    /// Position in [`Machine::nodes`].
    pub index: usize,
    /// Kernel node id.
    pub id: u32,
    /// Usable CPUs on the node (may be empty for memory-only nodes).
    pub cpus: CpuSet,
    /// Total memory in KiB.
    pub mem_total_kib: u64,
    /// Distance to each node, indexed by node index (kernel units: 10 = local).
    pub distances: Vec<u32>,
}

/// Raw per-CPU facts, as discovery gathers them, before grouping.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawCpu {
    /// Kernel CPU number.
    pub id: usize,
    /// Package (socket) id from `physical_package_id`; 0 when sysfs does not say.
    pub package: u32,
    /// SMT siblings including itself.
    pub siblings: CpuSet,
    /// CPUs sharing the last-level cache, with its level and size; `None`
    /// when the machine exposes no cache information.
    pub llc: Option<(u8, u64, CpuSet)>,
    /// Kernel id of the NUMA node holding the CPU.
    pub node: u32,
}

/// Raw NUMA node facts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawNode {
    /// Kernel node id.
    pub id: u32,
    /// Total memory in KiB.
    pub mem_total_kib: u64,
    /// Distances to the other raw nodes, in the order of the node list.
    pub distances: Vec<u32>,
}

/// Why a machine description is inconsistent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MachineError {
    /// No usable CPU remained.
    #[error("no usable CPUs (online CPUs intersected with the allowed set is empty)")]
    NoCpus,
    /// A CPU appears twice.
    #[error("CPU {0} described twice")]
    DuplicateCpu(usize),
    /// A CPU names a node that was not described.
    #[error("CPU {cpu} is on NUMA node {node}, which has no description")]
    UnknownNode {
        /// Kernel number of the CPU that names the node.
        cpu: usize,
        /// The node id it names.
        node: u32,
    },
    /// A distance row has the wrong length.
    #[error("NUMA node {node} has {got} distances, expected {want}")]
    BadDistances {
        /// The node id.
        node: u32,
        /// Row length found.
        got: usize,
        /// Row length expected.
        want: usize,
    },
}

/// A machine: its usable CPUs and their cores, LLC domains and NUMA nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    name: String,
    cpus: Vec<Cpu>,
    by_id: Vec<Option<usize>>,
    cores: Vec<Core>,
    llcs: Vec<Llc>,
    nodes: Vec<Node>,
    usable: CpuSet,
}

impl Machine {
    /// Builds a machine from raw facts, keeping only CPUs in `usable`.
    /// `name` is a label for reports ("this machine", a fixture name).
    pub fn from_cpus(
        name: &str,
        raw_cpus: &[RawCpu],
        raw_nodes: &[RawNode],
        usable: &CpuSet,
    ) -> Result<Machine, MachineError> {
        let mut seen = CpuSet::new();
        for c in raw_cpus {
            if !seen.insert(c.id) {
                return Err(MachineError::DuplicateCpu(c.id));
            }
        }
        let mut kept: Vec<&RawCpu> = raw_cpus.iter().filter(|c| usable.contains(c.id)).collect();
        kept.sort_by_key(|c| c.id);
        if kept.is_empty() {
            return Err(MachineError::NoCpus);
        }
        let usable: CpuSet = kept.iter().map(|c| c.id).collect();

        for n in raw_nodes {
            if n.distances.len() != raw_nodes.len() {
                return Err(MachineError::BadDistances {
                    node: n.id,
                    got: n.distances.len(),
                    want: raw_nodes.len(),
                });
            }
        }
        let mut nodes: Vec<Node> = raw_nodes
            .iter()
            .map(|n| Node {
                index: 0,
                id: n.id,
                cpus: CpuSet::new(),
                mem_total_kib: n.mem_total_kib,
                distances: n.distances.clone(),
            })
            .collect();
        for c in &kept {
            let Some(node) = nodes.iter_mut().find(|n| n.id == c.node) else {
                return Err(MachineError::UnknownNode {
                    cpu: c.id,
                    node: c.node,
                });
            };
            node.cpus.insert(c.id);
        }
        // Sort nodes by lowest CPU (memory-only nodes last, by id) and remap
        // the distance rows to the new order.
        let mut order: Vec<usize> = (0..nodes.len()).collect();
        order.sort_by_key(|&i| (nodes[i].cpus.first().unwrap_or(usize::MAX), nodes[i].id));
        let nodes: Vec<Node> = order
            .iter()
            .enumerate()
            .map(|(new, &old)| Node {
                index: new,
                distances: order.iter().map(|&o| nodes[old].distances[o]).collect(),
                ..nodes[old].clone()
            })
            .collect();

        let node_of = |cpu: usize| nodes.iter().position(|n| n.cpus.contains(cpu));

        // Cores: groups of SMT siblings, restricted to usable CPUs.
        let mut cores: Vec<Core> = Vec::new();
        let mut llcs: Vec<Llc> = Vec::new();
        let mut cpus = Vec::with_capacity(kept.len());
        for c in &kept {
            let siblings = c.siblings.intersection(&usable).union(&single(c.id));
            let core = match cores.iter().position(|k| k.cpus.contains(c.id)) {
                Some(i) => i,
                None => {
                    cores.push(Core {
                        index: cores.len(),
                        package: c.package,
                        cpus: siblings,
                    });
                    cores.len() - 1
                }
            };
            let node = node_of(c.id).ok_or(MachineError::UnknownNode {
                cpu: c.id,
                node: c.node,
            })?;
            // The LLC never spans nodes in our model: clip it to the node.
            let (level, size, shared) = match &c.llc {
                Some((level, size, shared)) => (*level, *size, *shared),
                None => (0, 0, package_cpus(&kept, c.package)),
            };
            let shared = shared
                .intersection(&usable)
                .intersection(&nodes[node].cpus)
                .union(&siblings);
            let llc = match llcs.iter().position(|l| l.cpus.contains(c.id)) {
                Some(i) => i,
                None => {
                    llcs.push(Llc {
                        index: llcs.len(),
                        level,
                        size_kib: size,
                        cpus: shared,
                    });
                    llcs.len() - 1
                }
            };
            cpus.push(Cpu {
                id: c.id,
                core,
                llc,
                node,
                package: c.package,
            });
        }
        let max_id = usable.last().unwrap_or(0);
        let mut by_id = vec![None; max_id + 1];
        for (i, c) in cpus.iter().enumerate() {
            by_id[c.id] = Some(i);
        }
        Ok(Machine {
            name: name.to_string(),
            cpus,
            by_id,
            cores,
            llcs,
            nodes,
            usable,
        })
    }

    /// A machine with `n` CPUs, one core each, one LLC and one node: handy
    /// for tests and for the dry-run backend.
    pub fn uniform(n: usize) -> Machine {
        let all = CpuSet::first_n(n);
        let raw: Vec<RawCpu> = (0..n)
            .map(|id| RawCpu {
                id,
                package: 0,
                siblings: single(id),
                llc: Some((3, 0, all)),
                node: 0,
            })
            .collect();
        let nodes = [RawNode {
            id: 0,
            mem_total_kib: 0,
            distances: vec![10],
        }];
        Machine::from_cpus(&format!("uniform-{n}"), &raw, &nodes, &all)
            .expect("a uniform machine is always consistent")
    }

    /// A label for reports.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The usable CPUs (online ∩ allowed).
    pub fn usable(&self) -> &CpuSet {
        &self.usable
    }

    /// Usable CPUs in increasing id order.
    pub fn cpus(&self) -> &[Cpu] {
        &self.cpus
    }

    /// Cores, sorted by lowest CPU.
    pub fn cores(&self) -> &[Core] {
        &self.cores
    }

    /// LLC domains, sorted by lowest CPU.
    pub fn llcs(&self) -> &[Llc] {
        &self.llcs
    }

    /// NUMA nodes, sorted by lowest CPU.
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    /// The CPU with kernel number `id`, if usable.
    pub fn cpu(&self, id: usize) -> Option<&Cpu> {
        self.by_id.get(id).copied().flatten().map(|i| &self.cpus[i])
    }

    /// Number of usable logical CPUs.
    pub fn num_cpus(&self) -> usize {
        self.cpus.len()
    }

    /// The largest number of CPUs in one LLC domain.
    pub fn largest_llc(&self) -> usize {
        self.llcs.iter().map(|l| l.cpus.len()).max().unwrap_or(0)
    }

    /// The largest number of CPUs on one NUMA node.
    pub fn largest_node(&self) -> usize {
        self.nodes.iter().map(|n| n.cpus.len()).max().unwrap_or(0)
    }

    /// How far apart two usable CPUs are, as a small integer that orders
    /// placement choices: 0 same CPU, 1 SMT siblings, 2 same LLC, 3 same node,
    /// then 4 + the NUMA distance above local (so nearer nodes rank first).
    pub fn cpu_distance(&self, a: usize, b: usize) -> u32 {
        let (Some(ca), Some(cb)) = (self.cpu(a), self.cpu(b)) else {
            return u32::MAX;
        };
        if a == b {
            0
        } else if ca.core == cb.core {
            1
        } else if ca.llc == cb.llc {
            2
        } else if ca.node == cb.node {
            3
        } else {
            let d = &self.nodes[ca.node].distances;
            4 + d[cb.node].saturating_sub(d[ca.node])
        }
    }

    /// One line: "16 CPUs, 8 cores, 2 LLC domains, 2 NUMA nodes".
    pub fn summary(&self) -> String {
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        format!(
            "{}, {}, {}, {}",
            plural(self.cpus.len(), "CPU", "CPUs"),
            plural(self.cores.len(), "core", "cores"),
            plural(self.llcs.len(), "LLC domain", "LLC domains"),
            plural(
                self.nodes.iter().filter(|n| !n.cpus.is_empty()).count(),
                "NUMA node",
                "NUMA nodes"
            ),
        )
    }

    /// A copy keeping only the CPUs in `allowed` (for example a process's
    /// affinity mask or an operator's `cpus =` setting).
    pub fn restrict(&self, allowed: &CpuSet) -> Result<Machine, MachineError> {
        let raw: Vec<RawCpu> = self
            .cpus
            .iter()
            .map(|c| RawCpu {
                id: c.id,
                package: c.package,
                siblings: self.cores[c.core].cpus,
                llc: Some((
                    self.llcs[c.llc].level,
                    self.llcs[c.llc].size_kib,
                    self.llcs[c.llc].cpus,
                )),
                node: self.nodes[c.node].id,
            })
            .collect();
        let nodes: Vec<RawNode> = self
            .nodes
            .iter()
            .map(|n| RawNode {
                id: n.id,
                mem_total_kib: n.mem_total_kib,
                distances: n.distances.clone(),
            })
            .collect();
        Machine::from_cpus(&self.name, &raw, &nodes, &self.usable.intersection(allowed))
    }
}

fn single(cpu: usize) -> CpuSet {
    let mut s = CpuSet::new();
    s.insert(cpu);
    s
}

fn package_cpus(cpus: &[&RawCpu], package: u32) -> CpuSet {
    cpus.iter()
        .filter(|c| c.package == package)
        .map(|c| c.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_machine_is_flat() {
        let m = Machine::uniform(4);
        assert_eq!(m.num_cpus(), 4);
        assert_eq!(m.cores().len(), 4);
        assert_eq!(m.llcs().len(), 1);
        assert_eq!(m.nodes().len(), 1);
        assert_eq!(m.cpu_distance(0, 1), 2);
        assert_eq!(m.cpu_distance(2, 2), 0);
        assert_eq!(m.summary(), "4 CPUs, 4 cores, 1 LLC domain, 1 NUMA node");
    }

    #[test]
    fn restrict_drops_cpus_and_empty_domains() {
        let m = Machine::uniform(4);
        let r = m.restrict(&CpuSet::parse_list("1,3").unwrap()).unwrap();
        assert_eq!(r.usable().to_string(), "1,3");
        assert_eq!(r.cores().len(), 2);
        assert_eq!(r.llcs()[0].cpus.to_string(), "1,3");
        assert!(m.restrict(&CpuSet::parse_list("9").unwrap()).is_err());
    }

    #[test]
    fn rejects_inconsistent_input() {
        let cpu = RawCpu {
            id: 0,
            package: 0,
            siblings: single(0),
            llc: None,
            node: 7,
        };
        let nodes = [RawNode {
            id: 0,
            mem_total_kib: 0,
            distances: vec![10],
        }];
        let all = CpuSet::first_n(1);
        assert_eq!(
            Machine::from_cpus("t", std::slice::from_ref(&cpu), &nodes, &all),
            Err(MachineError::UnknownNode { cpu: 0, node: 7 })
        );
        let ok = RawCpu { node: 0, ..cpu };
        assert_eq!(
            Machine::from_cpus("t", &[ok.clone(), ok], &nodes, &all),
            Err(MachineError::DuplicateCpu(0))
        );
    }
}
