//! One place that chooses between `std` and `loom` primitives.
//!
//! Every module of the crate that takes part in a concurrency protocol
//! (queues, sleep/wake, latches, thread policies) imports its atomics,
//! locks, threads and cells from here. Under `cfg(loom)` they become loom's
//! model-checked versions, so the loom models in `crate::models` exercise
//! the real protocol code, not a copy.
//!
//! Differences papered over:
//! - loom's `UnsafeCell` exposes `with`/`with_mut` closures instead of
//!   `get`; [`cell::UnsafeCell`] offers the closure API on both.
//! - spinning must yield under loom (a model cannot make progress inside a
//!   busy loop), so [`hint::spin_loop`] is `yield_now` there.
//! - time does not exist in a model: [`time::Instant`] is a counter that
//!   treats every spin budget as already spent.

#[cfg(not(loom))]
pub(crate) mod sync {
    #[allow(unused_imports)]
    pub(crate) use std::sync::{Arc, Condvar, Mutex, MutexGuard};

    pub(crate) mod atomic {
        #[allow(unused_imports)]
        pub(crate) use std::sync::atomic::{
            AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
        };
    }
}

#[cfg(loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Arc, Condvar, Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{
            AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
        };
    }
}

pub(crate) mod thread {
    #[cfg(not(loom))]
    #[allow(unused_imports)]
    pub(crate) use std::thread::{Thread, current, park, yield_now};

    #[cfg(loom)]
    #[allow(unused_imports)]
    pub(crate) use loom::thread::{Thread, current, park, yield_now};
}

pub(crate) mod hint {
    /// A busy-wait pause; a scheduler yield under loom.
    #[inline]
    pub(crate) fn spin_loop() {
        #[cfg(not(loom))]
        std::hint::spin_loop();
        #[cfg(loom)]
        loom::thread::yield_now();
    }
}

pub(crate) mod time {
    /// Wall-clock instants for spin budgets (std), or a stand-in under
    /// loom where every budget is exhausted at once.
    #[cfg(not(loom))]
    pub(crate) use std::time::Instant;

    #[cfg(loom)]
    #[derive(Debug, Clone, Copy)]
    pub(crate) struct Instant;

    #[cfg(loom)]
    impl Instant {
        pub(crate) fn now() -> Instant {
            Instant
        }
        pub(crate) fn elapsed(&self) -> std::time::Duration {
            std::time::Duration::MAX
        }
    }
}

pub(crate) mod cell {
    /// `UnsafeCell` with loom's closure API on both back ends.
    #[cfg(not(loom))]
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    #[cfg(not(loom))]
    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(v: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(v))
        }
        #[inline]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
        #[inline]
        pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
            f(self.0.get())
        }
    }

    #[cfg(loom)]
    pub(crate) use loom::cell::UnsafeCell;
}
