//! What the engine asks its journal to record, and what it knows of the
//! journal's health. The engine writes no journal: the records of a step
//! leave it as the first effect of that step ([`Effect::Journal`]), and the
//! event loop appends them before it sends any reply of the step
//! (`server`), then says how the append went ([`Engine::journaled`]).
//!
//! Invariants:
//!
//! - Records leave in the order the engine made them: every entry point
//!   hands out all the records waiting (`Engine::with_records`), and one
//!   not handed out by an entry point leaves with the next one's.
//! - While the journal is behind (its last write failed and no rewrite has
//!   caught up since), no cell is admitted or taken from the queue.
//! - No cell is answered that the journal could not record. Under the
//!   event loop a newcomer's answer waits for the end of the turn
//!   (`arrival`), after its record was appended; if that append failed,
//!   [`Engine::journaled`] ends the cell and refuses it instead. (A caller
//!   that does not batch arrivals gets the answer in the admitting step,
//!   before any append: tests, whose journal has room.)
//! - Without a journal (a broker that keeps none) nothing is recorded and
//!   nothing is refused for it.

use super::effect::{Effect, err};
use crate::journal::{Journal, Record};
use allot_proto::msg::{ErrorCode, Reply};
use std::path::PathBuf;

/// The request kind of a registration.
pub(super) const REGISTER: u16 = 0x02;

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

    /// Why the journal is behind, if it is.
    pub(super) fn behind(&self) -> Option<&str> {
        self.behind.as_deref()
    }

    /// The event loop's word on the journal: why it is behind, or `None`.
    pub(super) fn set_behind(&mut self, behind: Option<String>) {
        self.behind = behind;
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
