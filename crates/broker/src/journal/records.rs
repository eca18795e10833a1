//! The journal's records and the state they fold into: its format, apart
//! from the file that holds it (`super`). Pure: no I/O.
//!
//! The records own their types ([`SpecRec`], [`GrantRec`], [`TimeRec`]):
//! the journal's format does not change when the spec vocabulary
//! (`allot_spec`) or the planner's grant does, and older journals (fields
//! absent) still replay. Each record converts to and from the type it
//! stores, here, beside it (round-trip tests below).

use allot_plan::Allotment;
use allot_spec::{CellSpec, Goal, Placement, TimeContract};
use allot_topo::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Version of the journal format this broker writes and understands.
/// History: 1 — no header; 2 — header, [`SpecRec`], recovered cells;
/// 3 — [`SpecRec::time`] (absent in older journals: a space cell);
/// 4 — [`SpecRec::goal`] (absent in older journals: no goal);
/// 5 — [`SpecRec::memory`] and [`SpecRec::cache`] (absent in older
/// journals: none); 6 — [`Record::Group`].
pub const JOURNAL_VERSION: u32 = 6;

/// A process belonging to a cell, with its start time to detect pid reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRec {
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start: u64,
}

/// What a cell asked for, as journaled: the fields of
/// `allot_spec::CellSpec`, in a format of the journal's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpecRec {
    /// Guaranteed CPUs.
    pub min: u32,
    /// Most CPUs (0: the machine).
    pub max: u32,
    pub weight: u32,
    pub exclusive: bool,
    /// `any`, `llc` or `numa`.
    pub placement: PlacementRec,
    /// The time contract.
    #[serde(default)]
    pub time: TimeRec,
    #[serde(default)]
    pub goal: GoalRec,
    /// The memory guarantee and limit, bytes (absent: none).
    #[serde(default, skip_serializing_if = "MemoryRec::is_none")]
    pub memory: MemoryRec,
    /// L3 ways and the bandwidth ceiling (absent: none).
    #[serde(default, skip_serializing_if = "CacheRec::is_none")]
    pub cache: CacheRec,
}

/// L3 ways and a memory bandwidth ceiling, as journaled (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct CacheRec {
    /// L3 ways of the cell's own.
    #[serde(default)]
    pub ways: u32,
    /// Bandwidth ceiling, percent.
    #[serde(default)]
    pub bandwidth: u32,
}

impl CacheRec {
    fn is_none(&self) -> bool {
        self.ways == 0 && self.bandwidth == 0
    }
}

/// A memory guarantee (`min`) and limit (`max`), as journaled (bytes,
/// 0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct MemoryRec {
    #[serde(default)]
    pub min: u64,
    #[serde(default)]
    pub max: u64,
}

impl MemoryRec {
    fn is_none(&self) -> bool {
        self.min == 0 && self.max == 0
    }
}

/// A goal, as journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum GoalRec {
    /// No goal (every cell of a journal before version 4).
    #[default]
    None,
    /// Units of work per second, in thousandths.
    Rate {
        /// Thousandths per second.
        milli_per_s: u64,
    },
    /// Latency bound, µs.
    P99 {
        /// µs.
        us: u32,
    },
}

/// A time contract, as journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TimeRec {
    /// Space (every cell of a version 1 or 2 journal).
    #[default]
    Space,
    /// A fraction of each CPU.
    Fraction {
        /// Parts per million.
        ppm: u32,
        /// Shortest piece, µs (0: the default).
        slice_us: u32,
    },
    /// A budget every period.
    Triggered {
        /// Period, µs.
        period_us: u32,
        /// Budget, µs.
        budget_us: u32,
    },
    /// Activated by messages.
    Message {
        /// Idle time, ms.
        idle_ms: u32,
    },
}

/// Placement, as journaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PlacementRec {
    Any,
    /// One last-level cache.
    Llc,
    /// One NUMA node.
    Numa,
}

/// What a cell holds, as journaled: the fields of `allot_plan::Allotment`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantRec {
    pub generation: u64,
    pub cpus: CpuSet,
    pub lent: CpuSet,
    pub entitled: CpuSet,
    pub threads: u32,
    pub stacked: bool,
    /// Position in the stacked pool (absent in older journals).
    #[serde(default)]
    pub home: u32,
    pub share: f64,
    /// Demand estimate at the time.
    pub demand: Option<u32>,
}

/// One journal line. In the records about one cell, `id` is the cell's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    /// The first line: the format's version.
    Header {
        /// [`JOURNAL_VERSION`] of the writer.
        version: u32,
    },
    /// A cell was admitted.
    Cell {
        id: u64,
        name: String,
        uid: u32,
        spec: SpecRec,
        /// Rejoin secret; 0 for a cell recovered from its cgroup, whose
        /// first member to rejoin sets it.
        token: u64,
    },
    /// A process joined a cell.
    Member { id: u64, member: MemberRec },
    /// A process left a cell.
    Gone { id: u64, pid: u32 },
    /// A cell's spec changed.
    Spec { id: u64, spec: SpecRec },
    /// A recovered cell was claimed by a member: its rejoin secret.
    Token { id: u64, token: u64 },
    /// A cell includes a launcher's cgroup (`core::groups`).
    Group {
        id: u64,
        /// The cgroup's directory.
        dir: String,
    },
    /// A cell's grant changed.
    Grant { id: u64, grant: GrantRec },
    /// The pool or reserve changed.
    Shared { pool: CpuSet, reserve: CpuSet },
    /// A cell ended.
    End { id: u64 },
    /// Next cell id to allocate (written before each allocation and in
    /// snapshots).
    NextId { next: u64 },
}

/// A cell rebuilt from the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRec {
    pub name: String,
    pub uid: u32,
    pub spec: SpecRec,
    /// Rejoin secret (0: recovered, not yet claimed).
    pub token: u64,
    pub members: Vec<MemberRec>,
    pub grant: Option<GrantRec>,
    /// Launcher cgroups it includes.
    pub groups: Vec<String>,
}

/// The state replay rebuilds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replayed {
    pub cells: BTreeMap<u64, CellRec>,
    pub pool: CpuSet,
    pub reserve: CpuSet,
    pub next_id: u64,
}

impl Replayed {
    /// Folds one record in.
    pub fn apply(&mut self, r: Record) {
        match r {
            Record::Header { .. } => {}
            Record::Cell {
                id,
                name,
                uid,
                spec,
                token,
            } => {
                self.cells.insert(
                    id,
                    CellRec {
                        name,
                        uid,
                        spec,
                        token,
                        members: vec![],
                        grant: None,
                        groups: vec![],
                    },
                );
                self.next_id = self.next_id.max(id.saturating_add(1));
            }
            Record::Member { id, member } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.members.retain(|m| m.pid != member.pid);
                    c.members.push(member);
                }
            }
            Record::Gone { id, pid } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.members.retain(|m| m.pid != pid);
                }
            }
            Record::Spec { id, spec } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.spec = spec;
                }
            }
            Record::Token { id, token } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.token = token;
                }
            }
            Record::Grant { id, grant } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.grant = Some(grant);
                }
            }
            Record::Group { id, dir } => {
                if let Some(c) = self.cells.get_mut(&id)
                    && !c.groups.contains(&dir)
                {
                    c.groups.push(dir);
                }
            }
            Record::Shared { pool, reserve } => {
                self.pool = pool;
                self.reserve = reserve;
            }
            Record::End { id } => {
                self.cells.remove(&id);
            }
            Record::NextId { next } => self.next_id = self.next_id.max(next),
        }
    }

    /// The records that recreate this state, header first.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut out = vec![
            Record::Header {
                version: JOURNAL_VERSION,
            },
            Record::NextId { next: self.next_id },
            Record::Shared {
                pool: self.pool,
                reserve: self.reserve,
            },
        ];
        for (&id, c) in &self.cells {
            out.push(Record::Cell {
                id,
                name: c.name.clone(),
                uid: c.uid,
                spec: c.spec,
                token: c.token,
            });
            for &m in &c.members {
                out.push(Record::Member { id, member: m });
            }
            for dir in &c.groups {
                out.push(Record::Group {
                    id,
                    dir: dir.clone(),
                });
            }
            if let Some(g) = &c.grant {
                out.push(Record::Grant {
                    id,
                    grant: g.clone(),
                });
            }
        }
        out
    }
}

// ---------------------------------------------------------------------------
// Conversions between the records and what they store
// ---------------------------------------------------------------------------

impl SpecRec {
    /// A spec for the journal.
    pub fn of(s: &CellSpec) -> SpecRec {
        SpecRec {
            min: s.min,
            max: s.max,
            weight: s.weight,
            exclusive: s.exclusive,
            placement: match s.placement {
                Placement::Any => PlacementRec::Any,
                Placement::Llc => PlacementRec::Llc,
                Placement::Numa => PlacementRec::Numa,
            },
            time: match s.time {
                TimeContract::Space => TimeRec::Space,
                TimeContract::Fraction { ppm, slice_us } => TimeRec::Fraction { ppm, slice_us },
                TimeContract::Triggered {
                    period_us,
                    budget_us,
                } => TimeRec::Triggered {
                    period_us,
                    budget_us,
                },
                TimeContract::Message { idle_ms } => TimeRec::Message { idle_ms },
            },
            goal: match s.goal {
                Goal::None => GoalRec::None,
                Goal::Rate { milli_per_s } => GoalRec::Rate { milli_per_s },
                Goal::P99 { us } => GoalRec::P99 { us },
            },
            memory: MemoryRec {
                min: s.memory.min,
                max: s.memory.max,
            },
            cache: CacheRec {
                ways: s.cache.ways,
                bandwidth: s.cache.bandwidth,
            },
        }
    }

    /// A spec from the journal.
    pub fn spec(&self) -> CellSpec {
        let r = self;
        CellSpec {
            min: r.min,
            max: r.max,
            weight: r.weight,
            exclusive: r.exclusive,
            placement: match r.placement {
                PlacementRec::Any => Placement::Any,
                PlacementRec::Llc => Placement::Llc,
                PlacementRec::Numa => Placement::Numa,
            },
            time: match r.time {
                TimeRec::Space => TimeContract::Space,
                TimeRec::Fraction { ppm, slice_us } => TimeContract::Fraction { ppm, slice_us },
                TimeRec::Triggered {
                    period_us,
                    budget_us,
                } => TimeContract::Triggered {
                    period_us,
                    budget_us,
                },
                TimeRec::Message { idle_ms } => TimeContract::Message { idle_ms },
            },
            goal: match r.goal {
                GoalRec::None => Goal::None,
                GoalRec::Rate { milli_per_s } => Goal::Rate { milli_per_s },
                GoalRec::P99 { us } => Goal::P99 { us },
            },
            memory: allot_spec::Memory {
                min: r.memory.min,
                max: r.memory.max,
            },
            cache: allot_spec::Cache {
                ways: r.cache.ways,
                bandwidth: r.cache.bandwidth,
            },
        }
    }
}

impl GrantRec {
    /// A grant for the journal, with its generation and the demand estimate.
    pub fn of(g: &Allotment, generation: u64, demand: Option<u32>) -> GrantRec {
        GrantRec {
            generation,
            cpus: g.cpus,
            lent: g.lent,
            entitled: g.entitled,
            threads: g.threads,
            stacked: g.stacked,
            home: g.home,
            share: g.share,
            demand,
        }
    }

    /// A grant from the journal.
    pub fn grant(&self) -> Allotment {
        let r = self;
        Allotment {
            cpus: r.cpus,
            lent: r.lent,
            entitled: r.entitled,
            threads: r.threads,
            stacked: r.stacked,
            home: r.home,
            share: r.share,
            // The ledger is not journaled: a restarted broker holds nothing
            // for `require` until processes ask again.
            held: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spec the vocabulary can say comes back from the journal as it
    /// went in.
    #[test]
    fn specs_round_trip_through_the_journal() {
        let times = [
            TimeContract::Space,
            TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 0,
            },
            TimeContract::Triggered {
                period_us: 10_000,
                budget_us: 3_000,
            },
            TimeContract::Message { idle_ms: 40 },
        ];
        let goals = [
            Goal::None,
            Goal::Rate {
                milli_per_s: 12_500,
            },
            Goal::P99 { us: 5_000 },
        ];
        for placement in [Placement::Any, Placement::Llc, Placement::Numa] {
            for time in times {
                for (goal, memory) in goals.into_iter().zip([
                    allot_spec::Memory::default(),
                    allot_spec::Memory {
                        min: 0,
                        max: 8 << 30,
                    },
                    allot_spec::Memory {
                        min: 1 << 30,
                        max: 2 << 30,
                    },
                ]) {
                    let s = CellSpec {
                        min: 2,
                        max: 7,
                        weight: 3,
                        exclusive: true,
                        placement,
                        time,
                        goal,
                        memory,
                        cache: allot_spec::Cache {
                            ways: memory.min.count_ones(),
                            bandwidth: 0,
                        },
                    };
                    let rec = SpecRec::of(&s);
                    assert_eq!(rec.spec(), s);
                    let line = serde_json::to_string(&rec).unwrap();
                    let back: SpecRec = serde_json::from_str(&line).unwrap();
                    assert_eq!(back.spec(), s, "{line}");
                    // A spec without memory is written as before version 5.
                    assert_eq!(line.contains("memory"), !memory.is_none(), "{line}");
                }
            }
        }
    }

    #[test]
    fn grants_round_trip_through_the_journal() {
        let g = Allotment {
            cpus: CpuSet::parse_list("0-3").unwrap(),
            lent: CpuSet::parse_list("3").unwrap(),
            entitled: CpuSet::parse_list("0-2").unwrap(),
            threads: 4,
            stacked: false,
            home: 1,
            share: 2.5,
            held: Default::default(),
        };
        let r = GrantRec::of(&g, 7, Some(3));
        assert_eq!((r.generation, r.demand), (7, Some(3)));
        assert_eq!(r.grant(), g);
    }
}
