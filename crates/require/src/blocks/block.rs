//! Blocking: a thread inside a block that waits (a join, a condition or
//! semaphore wait, a blocking read or accept, a futex wait) gives back
//! what no other running thread uses, and retakes it before it goes on
//! (Poli-C §2.7). The preload shim's wrappers call these through
//! liballot's `allot_rq_*` hooks.
//!
//! A thread-local flag filters the calls of threads that never held
//! anything (liballot's own threads, a program's threads outside every
//! block): set when the thread enters a scope or starts as a child of one,
//! never cleared, it lets them return without the runtime's lock. Holding
//! requires one of those two events, so the filter never skips a thread
//! that holds something.

use super::*;
use std::cell::Cell;

thread_local! {
    static MAY_HOLD: Cell<bool> = const { Cell::new(false) };
}

/// Whether the calling thread may hold allocations (it entered a scope or
/// started as a child of one). A thread-local read: cheap enough for a
/// wrapper around every blocking call.
pub fn may_hold_current() -> bool {
    MAY_HOLD.with(Cell::get)
}

/// Marks the calling thread as one that may hold allocations.
pub(super) fn mark_may_hold() {
    MAY_HOLD.with(|m| m.set(true));
}

impl Blocks {
    /// [`Blocks::block_current`] for waits the runtime's own code may be
    /// in (a futex wait: std's locks are futexes): never waits for the
    /// runtime's lock. Returns whether the thread is now blocked, so the
    /// caller calls [`Blocks::unblock_current`] after its wait only then;
    /// false when it holds nothing or the lock is taken (perhaps by this
    /// very thread, waiting on another lock inside the runtime).
    pub fn try_block_current(&self) -> bool {
        if !may_hold_current() {
            return false;
        }
        let tid = current_tid();
        let mut st = match self.state.try_lock() {
            Ok(st) => st,
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return false,
        };
        if !st.trees.holds_any(tid) {
            return false;
        }
        st.trees.block(tid);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
        true
    }

    /// The calling thread is about to block (a join, a condition wait, an
    /// idle park): it gives back what no other running thread uses.
    pub fn block_current(&self) {
        if !may_hold_current() {
            return;
        }
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return;
        }
        st.trees.block(tid);
        st.epoch += 1;
        if st.sleepers > 0 {
            self.cond.notify_all();
        }
    }

    /// The calling thread continues after blocking: it retakes its
    /// allocations, waiting until it can.
    pub fn unblock_current(&self) {
        if !may_hold_current() {
            return;
        }
        let tid = current_tid();
        let st = self.lock();
        // A thread without frames was never blocked (see `block_current`);
        // leave it unregistered so waits of unrelated threads cost no entry.
        if !st.trees.holds_any(tid) {
            return;
        }
        let mut st = self.retake(st, tid);
        // A placed thread whose team ended while it waited (a join) gets
        // its whole allocation back.
        if st
            .threads
            .get(&tid)
            .is_some_and(|t| !t.placed.is_empty() && !t.in_team())
        {
            self.apply(&mut st, tid);
        }
    }

    /// Like [`Blocks::unblock_current`] but never waits: returns false
    /// (the thread stays blocked) if its allocations cannot be retaken now.
    /// For callers that hold a lock another thread may need before the
    /// allocations come back (a condition wait's mutex): they drop the
    /// lock, call `unblock_current`, and lock again.
    pub fn try_unblock_current(&self) -> bool {
        if !may_hold_current() {
            return true;
        }
        let tid = current_tid();
        let mut st = self.lock();
        if !st.trees.holds_any(tid) {
            return true;
        }
        st.trees.unblock(tid).is_ok()
    }
}
