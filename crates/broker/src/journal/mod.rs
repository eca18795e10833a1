//! The broker's journal: enough state to restart without moving anyone.
//!
//! # Format
//!
//! A file of JSON lines, one [`Record`] each, headed by
//! `{"t":"header","version":JOURNAL_VERSION}`. Journals without a header
//! are version 1 (written before the journal had versions) and replay the
//! same way; a journal of a *newer* version than this broker's is refused
//! rather than misread. The records and the state they fold into live in
//! `records` (pure); this module is the file.
//!
//! # Writing
//!
//! Appends are plain `write`s (no `fsync`): the journal must survive the
//! broker being killed, not the machine losing power (which ends the cells
//! too). When it grows past [`COMPACT_AFTER`] records it is rewritten as a
//! snapshot into a temporary file and renamed over the old one, so a crash
//! mid-compaction leaves either the old or the new journal, never a torn
//! one.
//!
//! # When writing fails (a full disk)
//!
//! The in-memory state is always updated, the failure is remembered
//! ([`Journal::problem`]) and every later append first tries to catch up by
//! rewriting the whole snapshot: a failed append may have left a partial
//! line, and appending after it would hide every later record from replay.
//! While the journal cannot be written, the broker admits no new cell
//! (the engine is told after every append, and [`Journal::writable`]
//! tries to catch up before each registration and on each tick), and a
//! newcomer whose own record failed is refused: a cell it could not record
//! would be lost on restart (with the affinity backend, which keeps no list
//! of cells) or come back without its spec and token.
//!
//! # Reading
//!
//! Replay folds the records into [`Replayed`]. A torn last line (the
//! broker died mid-write) is dropped quietly. Any other line that does not
//! parse means the file was damaged: replay keeps what came before it, the
//! whole file is copied aside to `journal.corrupt-<unix seconds>` for
//! inspection, and [`Journal::open`] reports it ([`Opened::damaged`]) so the
//! broker can warn loudly.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Records before compaction.
pub const COMPACT_AFTER: usize = 4096;

mod records;

pub use records::*;

/// Why a journal cannot be used at all.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The file cannot be read, created or rewritten.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// Written by a newer allot.
    #[error(
        "it was written by a newer allot (journal version {0}; this broker reads up to {JOURNAL_VERSION}): \
         upgrade this broker, or move the journal away to start empty"
    )]
    Newer(u32),
}

/// What [`Journal::open`] found.
#[derive(Debug)]
pub struct Opened {
    /// The journal, replayed.
    pub journal: Journal,
    /// The file was damaged: what replay kept, and where the damaged copy
    /// was saved.
    pub damaged: Option<Damage>,
}

/// A damaged journal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The first line (1-based) that did not parse.
    pub line: usize,
    /// Records kept (those before it).
    pub kept: usize,
    /// Where the damaged file was copied (`None` if the copy failed).
    pub copy: Option<PathBuf>,
}

/// The open journal.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    state: Replayed,
    records: usize,
    problem: Option<String>,
}

fn write_lines(w: &mut impl Write, recs: &[Record]) -> std::io::Result<()> {
    let mut buf = Vec::new();
    for r in recs {
        serde_json::to_writer(&mut buf, r).map_err(std::io::Error::other)?;
        buf.push(b'\n');
    }
    w.write_all(&buf)
}

/// What [`replay`] rebuilt from a journal's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct Replay {
    pub state: Replayed,
    /// Records folded in.
    pub records: usize,
    /// The first line (1-based) that did not parse, when it was not a torn
    /// last line.
    pub damaged_at: Option<usize>,
}

/// Folds a journal's bytes into its state (pure: [`Journal::open`] reads
/// the file and acts on the damage).
pub fn replay(bytes: &[u8]) -> Result<Replay, OpenError> {
    let mut state = Replayed {
        next_id: 1,
        ..Default::default()
    };
    let mut records = 0;
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.split_terminator('\n').collect();
    let torn_tail = !bytes.is_empty() && !bytes.ends_with(b"\n");
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<Record>(line) {
            Ok(Record::Header { version }) if version > JOURNAL_VERSION => {
                return Err(OpenError::Newer(version));
            }
            Ok(r) => {
                state.apply(r);
                records += 1;
            }
            // The broker died in the middle of its last write.
            Err(_) if torn_tail && i + 1 == lines.len() => break,
            Err(_) => {
                return Ok(Replay {
                    state,
                    records,
                    damaged_at: Some(i + 1),
                });
            }
        }
    }
    Ok(Replay {
        state,
        records,
        damaged_at: None,
    })
}

/// The lines that recreate `state` (what compaction writes).
pub fn snapshot_bytes(state: &Replayed) -> Vec<u8> {
    let mut buf = Vec::new();
    write_lines(&mut buf, &state.snapshot()).expect("writing to memory cannot fail");
    buf
}

impl Journal {
    /// Opens (creating if needed) the journal at `path`, replays it and
    /// rewrites it as a clean snapshot.
    pub fn open(path: &Path) -> Result<Opened, OpenError> {
        let (state, records, damaged) = match std::fs::read(path) {
            Ok(bytes) => {
                let r = replay(&bytes)?;
                let damaged = r.damaged_at.map(|line| Damage {
                    line,
                    kept: r.records,
                    copy: keep_copy(path, &bytes),
                });
                (r.state, r.records, damaged)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
                Replayed {
                    next_id: 1,
                    ..Default::default()
                },
                0,
                None,
            ),
            Err(e) => return Err(e.into()),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)?;
        let mut j = Journal {
            path: path.to_path_buf(),
            file,
            state,
            records,
            problem: None,
        };
        // Rewrite from the replayed state: drops a torn tail, damage and
        // old history, and adds the header.
        j.compact()?;
        Ok(Opened {
            journal: j,
            damaged,
        })
    }

    /// The replayed state (kept current as records are appended, also
    /// when writing them fails).
    pub fn state(&self) -> &Replayed {
        &self.state
    }

    /// Where the journal is kept.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Why the journal is behind the state, if it is.
    pub fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }

    /// Whether the journal holds everything, catching up first if it was
    /// behind. `false` means nothing new may be started that must survive a
    /// restart.
    pub fn writable(&mut self) -> bool {
        if self.problem.is_some() {
            let _ = self.compact();
        }
        self.problem.is_none()
    }

    /// Appends records (folding them into the state whatever happens). On
    /// failure the journal is marked behind ([`Journal::problem`]) and the
    /// next append rewrites the whole snapshot instead.
    pub fn append(&mut self, recs: &[Record]) -> std::io::Result<()> {
        if recs.is_empty() {
            return Ok(());
        }
        for r in recs {
            self.state.apply(r.clone());
        }
        if self.problem.is_some() {
            return self.compact();
        }
        match write_lines(&mut self.file, recs) {
            Ok(()) => {
                self.records += recs.len();
                if self.records > COMPACT_AFTER {
                    self.compact()?;
                }
                Ok(())
            }
            Err(e) => {
                self.problem = Some(e.to_string());
                Err(e)
            }
        }
    }

    /// Rewrites the journal as a snapshot of the current state. Clears the
    /// problem when it succeeds.
    pub fn compact(&mut self) -> std::io::Result<()> {
        let tmp = self.path.with_extension("tmp");
        let snap = self.state.snapshot();
        let result = (|| -> std::io::Result<()> {
            {
                // Private: it holds the cells' rejoin secrets.
                let mut f = OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)?;
                write_lines(&mut f, &snap)?;
                f.sync_all()?;
            }
            std::fs::rename(&tmp, &self.path)?;
            self.file = OpenOptions::new().append(true).open(&self.path)?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.records = snap.len();
                self.problem = None;
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                self.problem = Some(e.to_string());
                Err(e)
            }
        }
    }
}

/// Copies a damaged journal's bytes aside, next to it.
fn keep_copy(path: &Path, bytes: &[u8]) -> Option<PathBuf> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let name = format!("{}.corrupt-{secs}", path.file_name()?.to_string_lossy());
    let copy = path.with_file_name(name);
    std::fs::write(&copy, bytes).ok().map(|()| copy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_topo::CpuSet;

    fn spec() -> SpecRec {
        SpecRec {
            min: 0,
            max: 0,
            weight: 1,
            exclusive: false,
            placement: PlacementRec::Any,
            time: TimeRec::Space,
            goal: GoalRec::None,
            memory: Default::default(),
            cache: Default::default(),
        }
    }

    fn cell(id: u64, token: u64) -> Record {
        Record::Cell {
            id,
            name: "a".into(),
            uid: 0,
            spec: spec(),
            token,
        }
    }

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

    fn open(p: &Path) -> Journal {
        let o = Journal::open(p).unwrap();
        assert_eq!(o.damaged, None);
        o.journal
    }

    #[test]
    fn replays_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let mut j = open(&p);
            j.append(&[
                cell(1, 7),
                Record::Member {
                    id: 1,
                    member: MemberRec { pid: 10, start: 5 },
                },
                Record::Grant {
                    id: 1,
                    grant: grant(3),
                },
                cell(2, 8),
                Record::End { id: 2 },
            ])
            .unwrap();
        }
        let j = open(&p);
        let s = j.state();
        assert_eq!(s.cells.len(), 1);
        assert_eq!(s.cells[&1].members, vec![MemberRec { pid: 10, start: 5 }]);
        assert_eq!(s.cells[&1].grant.as_ref().unwrap().generation, 3);
        assert_eq!(s.next_id, 3, "ids are never reused");
        let first = std::fs::read_to_string(&p).unwrap();
        assert!(
            first.starts_with(&format!(
                "{{\"t\":\"header\",\"version\":{JOURNAL_VERSION}}}\n"
            )),
            "{first}"
        );
    }

    #[test]
    fn a_version_2_journal_replays_and_a_time_contract_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        std::fs::write(
            &p,
            "{\"t\":\"header\",\"version\":2}\n\
             {\"t\":\"cell\",\"id\":4,\"name\":\"make\",\"uid\":1000,\"spec\":{\"min\":0,\"max\":0,\"weight\":1,\"exclusive\":false,\"placement\":\"any\"},\"token\":9}\n",
        )
        .unwrap();
        let mut j = open(&p);
        assert_eq!(j.state().cells[&4].spec.time, TimeRec::Space);
        let timed = SpecRec {
            min: 1,
            time: TimeRec::Triggered {
                period_us: 10_000,
                budget_us: 3_000,
            },
            ..spec()
        };
        j.append(&[Record::Spec { id: 4, spec: timed }]).unwrap();
        drop(j);
        let j = open(&p);
        assert_eq!(j.state().cells[&4].spec, timed);
    }

    #[test]
    fn a_version_3_journal_replays_without_goals_and_a_goal_survives_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        std::fs::write(
            &p,
            "{\"t\":\"header\",\"version\":3}\n\
             {\"t\":\"cell\",\"id\":4,\"name\":\"srv\",\"uid\":1000,\"spec\":{\"min\":0,\"max\":0,\"weight\":1,\"exclusive\":false,\"placement\":\"any\",\"time\":{\"kind\":\"space\"}},\"token\":9}\n",
        )
        .unwrap();
        let mut j = open(&p);
        assert_eq!(j.state().cells[&4].spec.goal, GoalRec::None);
        let with_goal = SpecRec {
            goal: GoalRec::P99 { us: 5_000 },
            ..spec()
        };
        j.append(&[Record::Spec {
            id: 4,
            spec: with_goal,
        }])
        .unwrap();
        drop(j);
        let j = open(&p);
        assert_eq!(j.state().cells[&4].spec, with_goal);
    }

    #[test]
    fn a_version_1_journal_replays() {
        // As brokers before the header wrote it: the spec in the planner's
        // own serde shape, which SpecRec keeps.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        std::fs::write(
            &p,
            "{\"t\":\"next_id\",\"next\":5}\n\
             {\"t\":\"cell\",\"id\":4,\"name\":\"make\",\"uid\":1000,\"spec\":{\"min\":1,\"max\":0,\"weight\":2,\"exclusive\":true,\"placement\":\"numa\"},\"token\":9}\n\
             {\"t\":\"member\",\"id\":4,\"member\":{\"pid\":77,\"start\":12}}\n",
        )
        .unwrap();
        let j = open(&p);
        let c = &j.state().cells[&4];
        assert_eq!(c.spec.placement, PlacementRec::Numa);
        assert!(c.spec.exclusive);
        assert_eq!(
            c.spec.time,
            TimeRec::Space,
            "older journals hold space cells"
        );
        assert_eq!(c.members[0].pid, 77);
        assert_eq!(j.state().next_id, 5);
    }

    #[test]
    fn a_journal_of_a_newer_version_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        std::fs::write(&p, "{\"t\":\"header\",\"version\":99}\n").unwrap();
        let e = Journal::open(&p).unwrap_err();
        assert!(e.to_string().contains("newer allot"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&p).unwrap(),
            "{\"t\":\"header\",\"version\":99}\n",
            "left untouched"
        );
    }

    #[test]
    fn a_torn_tail_is_dropped_quietly() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let mut j = open(&p);
            j.append(&[cell(4, 1)]).unwrap();
        }
        let mut f = OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"{\"t\":\"cell\",\"id\":5,\"na").unwrap();
        drop(f);
        let j = open(&p);
        assert_eq!(j.state().cells.keys().copied().collect::<Vec<_>>(), vec![4]);
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.lines()
                .all(|l| serde_json::from_str::<Record>(l).is_ok())
        );
    }

    #[test]
    fn damage_in_the_middle_is_reported_and_kept_aside() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        {
            let mut j = open(&p);
            j.append(&[cell(1, 1)]).unwrap();
        }
        let mut text = std::fs::read_to_string(&p).unwrap();
        text.push_str("#### not json ####\n");
        text.push_str("{\"t\":\"end\",\"id\":1}\n");
        std::fs::write(&p, &text).unwrap();
        let o = Journal::open(&p).unwrap();
        let d = o.damaged.expect("damage is reported");
        assert_eq!(d.kept, 4, "header, next id, shared, cell");
        let copy = d.copy.expect("a copy is kept");
        assert_eq!(std::fs::read_to_string(&copy).unwrap(), text);
        assert!(
            o.journal.state().cells.contains_key(&1),
            "records after the damage are not trusted"
        );
    }

    #[test]
    fn compaction_keeps_state() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("journal");
        let mut j = open(&p);
        j.append(&[cell(1, 1)]).unwrap();
        for g in 0..(COMPACT_AFTER as u64 + 10) {
            j.append(&[Record::Grant {
                id: 1,
                grant: grant(g),
            }])
            .unwrap();
        }
        let lines = std::fs::read_to_string(&p).unwrap().lines().count();
        assert!(lines < 100, "compacted to {lines} lines");
        let again = open(&p);
        assert_eq!(again.state(), j.state());
    }

    #[test]
    fn a_snapshot_replays_to_the_same_state() {
        let mut s = Replayed {
            next_id: 9,
            ..Default::default()
        };
        s.apply(cell(3, 5));
        s.apply(Record::Grant {
            id: 3,
            grant: grant(2),
        });
        let again = replay(&snapshot_bytes(&s)).unwrap();
        assert_eq!(again.state, s);
        assert_eq!(again.damaged_at, None);
    }

    /// Found by the `journal` fuzz target: a share written with more
    /// digits than a double holds replayed, was snapshot, and replayed as
    /// a neighbouring double (JSON numbers are now parsed exactly, the
    /// `float_roundtrip` feature of serde_json).
    #[test]
    fn fuzz_a_long_float_survives_a_snapshot() {
        let text = br#"{"t":"next_id","next":5}
{"t":"cell","id":4,"name":"make","uid":1000,"spec":{"min":1,"max":0,"weight":2,"exclusive":true,"placement":"numa"},"token":9}
{"t":"member","id":4,"member":{"pid":77,"start":12}}
{"t":"grant","id":4,"grant":{"generation":3,"cpus":"0-1","lent":"","entitled":"0-0","threads":2,"stacked":false,"share":266666666666666666666666666666666666666666666666666666666666666666666666666666666666.0,"demand":null}}
"#;
        let r = replay(text).unwrap();
        let again = replay(&snapshot_bytes(&r.state)).unwrap();
        assert_eq!(again.state, r.state);
    }

    #[test]
    fn ids_survive_overflowing_records() {
        let mut s = Replayed::default();
        s.apply(cell(u64::MAX, 1));
        assert_eq!(s.next_id, u64::MAX, "saturates instead of wrapping to 0");
    }
}
