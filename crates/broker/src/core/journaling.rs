//! What the engine asks its journal to record, and what it knows of the
//! journal's health. The engine writes no file: the records of a step
//! leave it as the first effect of that step ([`Effect::Journal`]), and the
//! event loop appends them before it sends any reply of the step
//! (`server`), then says whether the journal is behind
//! ([`Engine::journaled`]).
//!
//! Invariants:
//!
//! - Records leave in the order the engine made them: every entry point
//!   hands out all the records waiting (`Engine::with_records`), and one
//!   not handed out by an entry point leaves with the next one's.
//! - While the journal is behind (its last write failed and no rewrite has
//!   caught up since), no cell is admitted or taken from the queue. A cell
//!   admitted just before a write failed is in the journal's state and is
//!   written by the rewrite that catches up; if the broker is killed first,
//!   the restart finds it in the backend (`restore`, step 2).
//! - Without a journal (a broker that keeps none) nothing is recorded and
//!   nothing is refused for it.

use super::Engine;
use super::effect::{Effect, err};
use crate::journal::{Journal, Record};
use allot_proto::msg::{ErrorCode, Reply};
use std::path::PathBuf;
use std::time::Duration;

/// The engine's side of the journal.
#[derive(Debug)]
pub(super) struct Journaling {
    /// Where the journal is kept; `None`: no journal, nothing recorded.
    path: Option<PathBuf>,
    /// Records made since the last entry point returned.
    pending: Vec<Record>,
    /// Why the journal is behind, as the event loop last said.
    behind: Option<String>,
}

impl Journaling {
    /// The side of `journal` (restored from; `None`: no journal).
    pub(super) fn of(journal: Option<&Journal>) -> Journaling {
        Journaling {
            path: journal.map(|j| j.path().to_path_buf()),
            pending: Vec::new(),
            behind: journal.and_then(|j| j.problem().map(str::to_string)),
        }
    }

    pub(super) fn record(&mut self, recs: &[Record]) {
        if self.path.is_some() {
            self.pending.extend_from_slice(recs);
        }
    }

    /// The records waiting, as the effect that writes them.
    pub(super) fn take(&mut self) -> Option<Effect> {
        if self.pending.is_empty() {
            return None;
        }
        Some(Effect::Journal(std::mem::take(&mut self.pending)))
    }

    /// Whether a new cell may be admitted now; the refusal to send when not.
    pub(super) fn ready(&self, kind: u16) -> Result<(), Reply> {
        let (Some(path), Some(why)) = (&self.path, &self.behind) else {
            return Ok(());
        };
        Err(err(
            ErrorCode::Internal,
            kind,
            format!(
                "the broker cannot write its journal {} ({why}), so it admits no new cell \
                 (one it could not record would be lost if it restarted); free space on that \
                 filesystem and retry",
                path.display(),
            ),
        ))
    }
}

impl Engine {
    /// Why the journal is behind, if it is.
    pub fn journal_problem(&self) -> Option<&str> {
        self.journaling.behind.as_deref()
    }

    /// The event loop's word after it appended `recs` (taking `took`), or
    /// caught up (no records): why the journal is behind, or `None` when
    /// it holds everything. The queue moves again at the next tick after
    /// it caught up. Each newly recorded cell's timeline shows the append.
    pub fn journaled(&mut self, recs: &[Record], took: Duration, behind: Option<String>) {
        self.journaling.behind = behind;
        for r in recs {
            if let Record::Cell { id, .. } = r
                && let Some(c) = self.cells.get_mut(id)
            {
                c.timeline.note("journal", format!("cell {id}"), Some(took));
            }
        }
    }

    /// Asks the journal to record `recs` (with the step's other records).
    pub(super) fn journal(&mut self, recs: &[Record]) {
        self.journaling.record(recs);
    }

    /// Whether a new cell may be admitted now; the refusal when not.
    pub(super) fn journal_ready(&self, kind: u16) -> Result<(), Reply> {
        self.journaling.ready(kind)
    }

    /// `effects`, after the records this step made: an entry point's
    /// last word.
    pub(super) fn with_records(&mut self, mut effects: Vec<Effect>) -> Vec<Effect> {
        if let Some(j) = self.journaling.take() {
            effects.insert(0, j);
        }
        effects
    }
}
