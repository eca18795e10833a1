//! The serialisable view printed by `allot topology --json`.
//!
//! Shape (stable; scripts read it):
//!
//! ```json
//! { "name": "...", "summary": "...",
//!   "cpus":  [ { "cpu": 0, "core": 0, "llc": 0, "node": 0, "package": 0 } ],
//!   "cores": [ { "index": 0, "package": 0, "cpus": "0,8" } ],
//!   "llcs":  [ { "index": 0, "level": 3, "size_kib": 8192, "cpus": "0-3,8-11" } ],
//!   "nodes": [ { "index": 0, "id": 0, "cpus": "0-3,8-11", "mem_total_kib": 1, "distances": [10, 20] } ] }
//! ```
//!
//! `core`, `llc` and `node` in a CPU entry are indices into the lists below
//! it; `node` entries also carry the kernel node id.

use crate::machine::{Core, Cpu, Llc, Machine, Node};
use serde::Serialize;

/// Everything `allot topology --json` prints.
#[derive(Debug, Serialize)]
pub struct TopologyReport<'a> {
    /// The machine's label: `this machine` when discovered, else the fixture's name.
    pub name: &'a str,
    /// One-line summary.
    pub summary: String,
    /// Usable CPUs as a cpulist.
    pub usable: String,
    /// One entry per logical CPU.
    pub cpus: Vec<CpuEntry>,
    /// Physical cores, in index order; a CPU entry's `core` indexes this list.
    pub cores: &'a [Core],
    /// Last-level cache domains, in index order; a CPU entry's `llc` indexes this list.
    pub llcs: &'a [Llc],
    /// NUMA nodes, in index order; a CPU entry's `node` indexes this list.
    pub nodes: &'a [Node],
}

/// One logical CPU in the report.
#[derive(Debug, Serialize)]
pub struct CpuEntry {
    /// Kernel CPU number.
    pub cpu: usize,
    /// Index of the CPU's core in the report's `cores`.
    pub core: usize,
    /// Index of the CPU's last-level cache domain in the report's `llcs`.
    pub llc: usize,
    /// Index of the CPU's NUMA node in the report's `nodes` (not the kernel id).
    pub node: usize,
    /// Package (socket) id, as the kernel numbers it.
    pub package: u32,
}

impl From<&Cpu> for CpuEntry {
    fn from(c: &Cpu) -> Self {
        CpuEntry {
            cpu: c.id,
            core: c.core,
            llc: c.llc,
            node: c.node,
            package: c.package,
        }
    }
}

impl<'a> TopologyReport<'a> {
    /// The report for `m`.
    pub fn new(m: &'a Machine) -> Self {
        TopologyReport {
            name: m.name(),
            summary: m.summary(),
            usable: m.usable().to_string(),
            cpus: m.cpus().iter().map(CpuEntry::from).collect(),
            cores: m.cores(),
            llcs: m.llcs(),
            nodes: m.nodes(),
        }
    }

    /// Human-readable text: a summary, then one line per NUMA node and LLC.
    pub fn to_text(&self) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        let _ = writeln!(out, "{}: {}", self.name, self.summary);
        let _ = writeln!(out, "usable CPUs: {}", self.usable);
        for n in self.nodes {
            let _ = writeln!(
                out,
                "node {} (index {}): CPUs {}, {} MiB, distances {:?}",
                n.id,
                n.index,
                if n.cpus.is_empty() {
                    "none".to_string()
                } else {
                    n.cpus.to_string()
                },
                n.mem_total_kib / 1024,
                n.distances
            );
        }
        for l in self.llcs {
            let size = if l.size_kib > 0 {
                format!(", {} KiB", l.size_kib)
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "  LLC {} (L{}{}): CPUs {}",
                l.index, l.level, size, l.cpus
            );
        }
        let smt = self.cores.iter().map(|c| c.cpus.len()).max().unwrap_or(1);
        let _ = writeln!(
            out,
            "{} cores, up to {} hardware threads each",
            self.cores.len(),
            smt
        );
        out
    }
}
