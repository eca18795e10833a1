//! The broker's journal: enough state to restart without moving anyone.
//!
//! An append-only file of JSON lines, one [`Record`] each. Appends are plain
//! `write`s (no `fsync`): the journal must survive the broker being killed,
//! not the machine losing power (which ends the cells too). When it grows
//! past [`COMPACT_AFTER`] records it is rewritten as a snapshot into a
//! temporary file and renamed over the old one, so a crash mid-compaction
//! leaves either the old or the new journal, never a torn one.
//!
//! Replay folds the records into [`Replayed`]: the live cells with their
//! members, specs, tokens, last grants and demands, the pool and reserve,
//! and the next cell id. A torn last line (the broker died mid-write) is
//! ignored.

use allot_plan::CellSpec;
use allot_topo::CpuSet;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

/// Records before compaction.
pub const COMPACT_AFTER: usize = 4096;

/// A process belonging to a cell, with its start time to detect pid reuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberRec {
    /// Process id.
    pub pid: u32,
    /// Start time in clock ticks after boot (`/proc/PID/stat` field 22).
    pub start: u64,
}

/// What a cell holds, as journaled.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GrantRec {
    /// Grant generation.
    pub generation: u64,
    /// CPUs.
    pub cpus: CpuSet,
    /// Lent part.
    pub lent: CpuSet,
    /// Entitlement.
    pub entitled: CpuSet,
    /// Threads.
    pub threads: u32,
    /// Stacked.
    pub stacked: bool,
    /// Position in the stacked pool (absent in older journals).
    #[serde(default)]
    pub home: u32,
    /// Share.
    pub share: f64,
    /// Demand estimate at the time.
    pub demand: Option<u32>,
}

/// One journal line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum Record {
    /// A cell was admitted.
    Cell {
        /// Id.
        id: u64,
        /// Name.
        name: String,
        /// Owner.
        uid: u32,
        /// Spec.
        spec: CellSpec,
        /// Rejoin secret.
        token: u64,
    },
    /// A process joined a cell.
    Member {
        /// Cell.
        id: u64,
        /// The process.
        member: MemberRec,
    },
    /// A process left a cell.
    Gone {
        /// Cell.
        id: u64,
        /// Process id.
        pid: u32,
    },
    /// A cell's spec changed.
    Spec {
        /// Cell.
        id: u64,
        /// New spec.
        spec: CellSpec,
    },
    /// A cell's grant changed.
    Grant {
        /// Cell.
        id: u64,
        /// The grant.
        grant: GrantRec,
    },
    /// The pool or reserve changed.
    Shared {
        /// Stacked pool.
        pool: CpuSet,
        /// Reserve.
        reserve: CpuSet,
    },
    /// A cell ended.
    End {
        /// Cell.
        id: u64,
    },
    /// Next cell id to allocate (written at start and in snapshots).
    NextId {
        /// The id.
        next: u64,
    },
}

/// A cell rebuilt from the journal.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRec {
    /// Name.
    pub name: String,
    /// Owner.
    pub uid: u32,
    /// Spec.
    pub spec: CellSpec,
    /// Rejoin secret.
    pub token: u64,
    /// Members.
    pub members: Vec<MemberRec>,
    /// Last grant.
    pub grant: Option<GrantRec>,
}

/// The state replay rebuilds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Replayed {
    /// Live cells by id.
    pub cells: BTreeMap<u64, CellRec>,
    /// Pool.
    pub pool: CpuSet,
    /// Reserve.
    pub reserve: CpuSet,
    /// Next id.
    pub next_id: u64,
}

impl Replayed {
    /// Folds one record in.
    pub fn apply(&mut self, r: Record) {
        match r {
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
                    },
                );
                self.next_id = self.next_id.max(id + 1);
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
            Record::Grant { id, grant } => {
                if let Some(c) = self.cells.get_mut(&id) {
                    c.grant = Some(grant);
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

    /// The records that recreate this state.
    pub fn snapshot(&self) -> Vec<Record> {
        let mut out = vec![Record::NextId { next: self.next_id }];
        out.push(Record::Shared {
            pool: self.pool,
            reserve: self.reserve,
        });
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

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    state: Replayed,
    records: usize,
}

impl Journal {
    /// Opens (creating if needed) the journal at `path` and replays it.
    pub fn open(path: &Path) -> std::io::Result<Journal> {
        let mut state = Replayed {
            next_id: 1,
            ..Default::default()
        };
        let mut records = 0;
        if let Ok(f) = File::open(path) {
            for line in BufReader::new(f).lines() {
                let Ok(line) = line else { break };
                match serde_json::from_str::<Record>(&line) {
                    Ok(r) => {
                        state.apply(r);
                        records += 1;
                    }
                    Err(_) => break, // a torn tail: stop at the last whole record
                }
            }
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let mut j = Journal {
            path: path.to_path_buf(),
            file,
            state,
            records,
        };
        // Rewrite from the replayed state: drops a torn tail and old history.
        j.compact()?;
        Ok(j)
    }

    /// The replayed state (kept current as records are appended).
    pub fn state(&self) -> &Replayed {
        &self.state
    }

    /// Appends records.
    pub fn append(&mut self, recs: &[Record]) -> std::io::Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        let mut buf = Vec::new();
        for r in recs {
            serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
            buf.push(b'\n');
            self.state.apply(r.clone());
        }
        self.file.write_all(&buf)?;
        self.records += recs.len();
        if self.records > COMPACT_AFTER {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the journal as a snapshot of the current state.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let snap = self.state.snapshot();
        {
            let mut f = File::create(&tmp)?;
            let mut buf = Vec::new();
            for r in &snap {
                serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
                buf.push(b'\n');
            }
            f.write_all(&buf)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new().append(true).open(&self.path)?;
        self.records = snap.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(g: u64) -> GrantRec {
        GrantRec {
            generation: g,
            cpus: CpuSet::first_n(2),
            lent: CpuSet::new(),
            entitled: CpuSet::first_n(2),
            threads: 2,
            stacked: false,
            home: 0,
            share: 2.0,
            demand: Some(1),
        }
    }

    #[test]
    fn replays_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let mut j = Journal::open(&p).unwrap();
            j.append(&[
                Record::Cell {
                    id: 1,
                    name: "a".into(),
                    uid: 0,
                    spec: CellSpec::default(),
                    token: 7,
                },
                Record::Member {
                    id: 1,
                    member: MemberRec { pid: 10, start: 5 },
                },
                Record::Grant {
                    id: 1,
                    grant: grant(3),
                },
                Record::Cell {
                    id: 2,
                    name: "b".into(),
                    uid: 0,
                    spec: CellSpec::default(),
                    token: 8,
                },
                Record::End { id: 2 },
            ])
            .unwrap();
        }
        let j = Journal::open(&p).unwrap();
        let s = j.state();
        assert_eq!(s.cells.len(), 1);
        assert_eq!(s.cells[&1].members, vec![MemberRec { pid: 10, start: 5 }]);
        assert_eq!(s.cells[&1].grant.as_ref().unwrap().generation, 3);
        assert_eq!(s.next_id, 3, "ids are never reused");
    }

    #[test]
    fn a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let mut j = Journal::open(&p).unwrap();
            j.append(&[Record::Cell {
                id: 4,
                name: "a".into(),
                uid: 0,
                spec: CellSpec::default(),
                token: 1,
            }])
            .unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"t\":\"cell\",\"id\":5,\"na").unwrap();
        drop(f);
        let j = Journal::open(&p).unwrap();
        assert_eq!(j.state().cells.keys().copied().collect::<Vec<_>>(), vec![4]);
        // And the rewritten journal is clean.
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<Record>(l).is_ok())
        );
    }

    #[test]
    fn compaction_keeps_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        let mut j = Journal::open(&p).unwrap();
        j.append(&[Record::Cell {
            id: 1,
            name: "a".into(),
            uid: 0,
            spec: CellSpec::default(),
            token: 1,
        }])
        .unwrap();
        for g in 0..(COMPACT_AFTER as u64 + 10) {
            j.append(&[Record::Grant {
                id: 1,
                grant: grant(g),
            }])
            .unwrap();
        }
        let lines = std::fs::read_to_string(&p).unwrap().lines().count();
        assert!(lines < 100, "compacted to {lines} lines");
        let again = Journal::open(&p).unwrap();
        assert_eq!(again.state(), j.state());
    }
}
