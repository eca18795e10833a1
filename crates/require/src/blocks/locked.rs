//! The state lock, and which of the calling thread's futex waits are the
//! runtime's own.
//!
//! The preload shim gives a block's allocation back around every futex
//! wait of a thread that holds one. The runtime's own locks are futexes
//! too (std's `Mutex` and `Condvar` wait with `syscall(SYS_futex)`, which
//! the shim wraps), so a thread that waits for the state lock, or sleeps
//! on its condition variable, or waits for anything while holding it,
//! reaches the shim from inside the runtime. Giving back there would take
//! the very lock the thread is after.
//!
//! Invariant: `IN_STATE` is non-zero exactly while the calling thread is
//! between asking for the state lock ([`Blocks::lock`]) and dropping the
//! [`Locked`] guard, condition-variable sleeps included. A futex wait made
//! while it is non-zero gives nothing back ([`in_state`]); any other futex
//! wait of a holding thread gives back as every other wait does.

use super::{Blocks, State};
use std::cell::Cell;
use std::sync::MutexGuard;

thread_local! {
    static IN_STATE: Cell<u32> = const { Cell::new(0) };
}

/// Whether the calling thread is waiting for, holding, or sleeping under
/// the state lock of some [`Blocks`].
pub(super) fn in_state() -> bool {
    IN_STATE.with(Cell::get) > 0
}

/// Counts the calling thread in `IN_STATE` while it lives.
struct Mark;

impl Mark {
    fn new() -> Mark {
        IN_STATE.with(|d| d.set(d.get() + 1));
        Mark
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        IN_STATE.with(|d| d.set(d.get() - 1));
    }
}

/// The state lock, held. Fields drop in order: the lock is released
/// before the thread's mark is.
pub(super) struct Locked<'s> {
    /// `None` only while [`Locked::wait_on`] sleeps on the condition
    /// variable.
    guard: Option<MutexGuard<'s, State>>,
    _mark: Mark,
}

impl Blocks {
    /// Takes the state lock (a poisoned one too), marking the thread
    /// before it asks.
    pub(super) fn lock(&self) -> Locked<'_> {
        let mark = Mark::new();
        let guard = self.state.lock().unwrap_or_else(|p| p.into_inner());
        Locked {
            guard: Some(guard),
            _mark: mark,
        }
    }
}

impl Locked<'_> {
    /// Sleeps on `cond` (at most `timeout`; `None`: until woken), the lock
    /// released meanwhile and the thread still marked.
    pub(super) fn wait_on(
        &mut self,
        cond: &std::sync::Condvar,
        timeout: Option<std::time::Duration>,
    ) {
        let g = self.guard.take().expect("the state lock is held");
        let g = match timeout {
            Some(t) => cond.wait_timeout(g, t).unwrap_or_else(|p| p.into_inner()).0,
            None => cond.wait(g).unwrap_or_else(|p| p.into_inner()),
        };
        self.guard = Some(g);
    }
}

impl std::ops::Deref for Locked<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        self.guard.as_deref().expect("the state lock is held")
    }
}

impl std::ops::DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        self.guard.as_deref_mut().expect("the state lock is held")
    }
}
