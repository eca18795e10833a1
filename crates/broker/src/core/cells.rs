//! The cells subsystem: the admitted cells, the queue of those that wait
//! for admission, which cell each member process is in, and the ids given
//! out.
//!
//! Invariants, kept by owning the member lists (a cell's `members` can be
//! changed only through [`Cells`]):
//!
//! - A pid is a member of at most one cell, and [`Cells::cell_of`] names
//!   exactly the cell whose member list holds it.
//! - Removing a cell forgets all of its members at once.
//! - Every id handed out, live or queued, is below [`Cells::next_id`]; ids
//!   are never reused (the journal records `next_id` before an id is used,
//!   and a restore raises it above every id the backend still holds).
//! - A queued id is never a live cell's id.

use crate::demand::Estimator;
use crate::journal::MemberRec;
use crate::peer::SessionId;
use crate::timeline::Timeline;
use allot_plan::Allotment;
use allot_proto::PageMap;
use allot_spec::{CellSpec, ValidSpec};
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, VecDeque};

/// An admitted cell as the broker keeps it.
#[derive(Debug)]
pub(crate) struct Cell {
    pub(crate) name: String,
    pub(crate) uid: u32,
    pub(crate) spec: CellSpec,
    /// Rejoin secret; 0 for a cell recovered from the backend that no
    /// member has claimed yet.
    pub(super) token: u64,
    /// Only [`Cells`] changes it, so the pid index stays true.
    members: Vec<MemberRec>,
    pub(super) pages: Vec<PageMap>,
    pub(crate) generation: u64,
    pub(crate) published: Option<Allotment>,
    pub(crate) est: Estimator,
    pub(crate) progress: u64,
    pub(crate) busy_reported: u32,
    /// The runtime pool's statistics as last reported (status only).
    pub(crate) pool_stats: Option<allot_proto::PoolStatsWire>,
    /// What the cell achieved, tick by tick (`crate::series`).
    pub(crate) perf: crate::series::Perf,
    /// What its measurements say of its curve and goal (`core::measure`).
    pub(crate) tracker: allot_plan::tracking::Tracker,
    /// Hardware counters on its threads (`core::measure`; goal cells only).
    pub(crate) hw: allot_enforce::counters::ThreadCounts,
    /// What the broker did for it and when (`crate::timeline`).
    pub(crate) timeline: Timeline,
    /// Launcher cgroups it confines too (`core::groups`), as journaled.
    pub(crate) groups: Vec<String>,
}

impl Cell {
    /// A cell with no members yet, nothing published, no pages.
    pub(super) fn new(
        name: String,
        uid: u32,
        spec: CellSpec,
        token: u64,
        timeline: Timeline,
    ) -> Cell {
        Cell {
            name,
            uid,
            tracker: allot_plan::tracking::Tracker::new(spec.goal),
            spec,
            token,
            members: vec![],
            pages: vec![],
            generation: 0,
            published: None,
            est: Estimator::new(),
            progress: 0,
            busy_reported: 0,
            pool_stats: None,
            perf: Default::default(),
            hw: Default::default(),
            timeline,
            groups: Vec::new(),
        }
    }

    /// Its member processes, in the order they joined.
    pub(crate) fn members(&self) -> &[MemberRec] {
        &self.members
    }

    /// Publishes `g` on every page the cell holds.
    pub(super) fn publish(&self, g: &allot_proto::Grant) {
        for p in &self.pages {
            p.page().publish(g);
        }
    }
}

/// A registration waiting for admission.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) id: u64,
    pub(crate) name: String,
    pub(crate) uid: u32,
    /// Checked when it asked.
    pub(crate) spec: ValidSpec,
    /// Each member pid with its start time when it asked (`None` where it
    /// could not be read): a pid whose process ended and was reused by
    /// another process while the cell waited is no longer this member.
    pub(super) members: Vec<(u32, Option<u64>)>,
    pub(super) session: SessionId,
    pub(super) token: u64,
    pub(crate) reason: String,
    pub(super) timeline: Timeline,
}

/// The cells, the queue, the pid index and the id counter.
#[derive(Debug)]
pub(crate) struct Cells {
    live: BTreeMap<u64, Cell>,
    by_pid: HashMap<u32, u64>,
    /// Waiting registrations, in arrival order (admission keeps it).
    pub(crate) queue: VecDeque<Queued>,
    next_id: u64,
}

impl Cells {
    pub(super) fn new() -> Cells {
        Cells {
            live: BTreeMap::new(),
            by_pid: HashMap::new(),
            queue: VecDeque::new(),
            next_id: 1,
        }
    }

    pub(crate) fn get(&self, id: &u64) -> Option<&Cell> {
        self.live.get(id)
    }

    pub(crate) fn get_mut(&mut self, id: &u64) -> Option<&mut Cell> {
        self.live.get_mut(id)
    }

    pub(crate) fn contains_key(&self, id: &u64) -> bool {
        self.live.contains_key(id)
    }

    pub(crate) fn len(&self) -> usize {
        self.live.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &u64> {
        self.live.keys()
    }

    pub(crate) fn values(&self) -> impl Iterator<Item = &Cell> {
        self.live.values()
    }

    pub(crate) fn values_mut(&mut self) -> impl Iterator<Item = &mut Cell> {
        self.live.values_mut()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&u64, &Cell)> {
        self.live.iter()
    }

    /// Adds cell `id` with `members`; returns the pids that joined (those
    /// in no other cell).
    pub(super) fn insert(&mut self, id: u64, mut cell: Cell, members: Vec<MemberRec>) -> Vec<u32> {
        debug_assert!(!self.live.contains_key(&id), "cell {id} inserted twice");
        self.next_id = self.next_id.max(id.saturating_add(1));
        let mut joined = Vec::new();
        for m in members {
            if let Entry::Vacant(e) = self.by_pid.entry(m.pid) {
                e.insert(id);
                cell.members.push(m);
                joined.push(m.pid);
            }
        }
        self.live.insert(id, cell);
        joined
    }

    /// Removes cell `id`, forgetting its members.
    pub(super) fn remove(&mut self, id: &u64) -> Option<Cell> {
        let c = self.live.remove(id)?;
        for m in &c.members {
            self.by_pid.remove(&m.pid);
        }
        Some(c)
    }

    /// Makes `m` a member of cell `id`; false if there is no such cell or
    /// the process is a member already (of it or another).
    pub(super) fn join(&mut self, id: u64, m: MemberRec) -> bool {
        let Some(c) = self.live.get_mut(&id) else {
            return false;
        };
        match self.by_pid.entry(m.pid) {
            Entry::Occupied(_) => false,
            Entry::Vacant(e) => {
                e.insert(id);
                c.members.push(m);
                true
            }
        }
    }

    /// Takes `pid` out of the cell it is a member of; that cell's id.
    pub(super) fn leave(&mut self, pid: u32) -> Option<u64> {
        let id = self.by_pid.remove(&pid)?;
        if let Some(c) = self.live.get_mut(&id) {
            c.members.retain(|m| m.pid != pid);
        }
        Some(id)
    }

    /// The cell `pid` is a member of.
    pub(crate) fn cell_of(&self, pid: u32) -> Option<u64> {
        self.by_pid.get(&pid).copied()
    }

    /// Whether any cell has a member (else no process is in a cell, and
    /// no ancestor need be looked up to say so).
    pub(crate) fn has_members(&self) -> bool {
        !self.by_pid.is_empty()
    }

    /// The next id [`Cells::take_id`] gives.
    pub(super) fn next_id(&self) -> u64 {
        self.next_id
    }

    /// Raises the next id above `id` (ids the journal or the backend know).
    pub(super) fn ids_above(&mut self, id: u64) {
        self.next_id = self.next_id.max(id.saturating_add(1));
    }

    /// A fresh id; `None` once ids run out.
    pub(super) fn take_id(&mut self) -> Option<u64> {
        let id = self.next_id;
        self.next_id = id.checked_add(1)?;
        Some(id)
    }

    /// No cell, none queued.
    pub(super) fn idle(&self) -> bool {
        self.live.is_empty() && self.queue.is_empty()
    }
}

impl std::ops::Index<&u64> for Cells {
    type Output = Cell;

    fn index(&self, id: &u64) -> &Cell {
        &self.live[id]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell() -> Cell {
        Cell::new("c".into(), 0, CellSpec::default(), 1, Timeline::start())
    }

    fn m(pid: u32) -> MemberRec {
        MemberRec { pid, start: 1 }
    }

    #[test]
    fn a_pid_is_in_one_cell_and_the_index_follows_the_member_lists() {
        let mut cells = Cells::new();
        assert_eq!(cells.insert(1, cell(), vec![m(10), m(11)]), [10, 11]);
        assert_eq!(
            cells.insert(2, cell(), vec![m(11), m(12)]),
            [12],
            "11 is in cell 1 already"
        );
        assert!(!cells.join(2, m(10)), "10 is in cell 1");
        assert!(cells.join(2, m(13)));
        assert_eq!(cells.cell_of(13), Some(2));
        assert_eq!(cells.leave(11), Some(1));
        assert_eq!(cells[&1].members(), [m(10)]);
        assert_eq!(cells.cell_of(11), None);
        let two = cells.remove(&2).unwrap();
        assert_eq!(two.members(), [m(12), m(13)]);
        assert_eq!((cells.cell_of(12), cells.cell_of(13)), (None, None));
        assert_eq!(cells.cell_of(10), Some(1), "the other cell keeps its own");
        assert!(!cells.join(2, m(14)), "no such cell any more");
    }

    #[test]
    fn ids_are_never_reused() {
        let mut cells = Cells::new();
        assert_eq!(cells.take_id(), Some(1));
        cells.ids_above(7);
        assert_eq!(cells.take_id(), Some(8));
        cells.insert(20, cell(), vec![]);
        assert_eq!(cells.next_id(), 21, "an inserted id is given out no more");
        cells.ids_above(3);
        assert_eq!(cells.take_id(), Some(21), "never lowered");
        cells.ids_above(u64::MAX - 1);
        assert_eq!(cells.take_id(), None, "runs out rather than wrapping");
    }
}
