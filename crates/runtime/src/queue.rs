//! Queue primitives, free of any scheduling policy.
//!
//! Three shapes, the building blocks thread policies combine:
//!
//! - [`LocalQueue`]: a per-worker deque. Only its owner pushes and pops
//!   (the type is `!Sync`); either LIFO or FIFO at the owner's end.
//! - [`Stealer`]: the other end of a [`LocalQueue`], shared with every
//!   thread; takes the oldest task.
//! - [`Injector`]: a multi-producer multi-consumer FIFO queue.
//! - [`Stack`]: a multi-producer multi-consumer LIFO stack (a locked
//!   vector: pushes and pops are short critical sections, and a lock-free
//!   stack would need memory reclamation for no measured gain).
//!
//! Taking from a shared end returns [`Steal`], a `#[must_use]` tri-state:
//! `Retry` means "lost a race, the queue may still hold work", which a
//! policy must not confuse with `Empty` before it decides to park.
//!
//! Normal builds wrap `crossbeam-deque` (used as a library). Under
//! `cfg(loom)` the same API is backed by a locked `VecDeque` built on loom's
//! `Mutex`, so the models check the protocols *around* the queues (every
//! task taken exactly once, no wake-up lost) with model-checked
//! synchronisation.
//!
//! Invariant shared by both back ends: an element pushed is returned by
//! exactly one successful `pop`/`steal*`, never duplicated, never dropped
//! while the queue lives.

/// The result of taking from a shared queue end.
#[must_use = "`Steal::Retry` means the queue may still hold work"]
#[derive(Debug, PartialEq, Eq)]
pub enum Steal<T> {
    /// The queue was empty.
    Empty,
    /// Took one element.
    Success(T),
    /// Lost a race with another thread; try again.
    Retry,
}

impl<T> Steal<T> {
    /// The element, if any.
    pub fn success(self) -> Option<T> {
        match self {
            Steal::Success(t) => Some(t),
            _ => None,
        }
    }

    /// Whether a retry could find something.
    pub fn is_retry(&self) -> bool {
        matches!(self, Steal::Retry)
    }
}

#[cfg(not(loom))]
mod imp {
    use super::Steal;
    use crossbeam_deque as cd;

    fn conv<T>(s: cd::Steal<T>) -> Steal<T> {
        match s {
            cd::Steal::Empty => Steal::Empty,
            cd::Steal::Success(t) => Steal::Success(t),
            cd::Steal::Retry => Steal::Retry,
        }
    }

    /// A per-worker deque; only its owner pushes and pops.
    #[derive(Debug)]
    pub struct LocalQueue<T>(cd::Worker<T>);

    impl<T> LocalQueue<T> {
        /// The owner pops the newest element (stack order).
        pub fn new_lifo() -> Self {
            LocalQueue(cd::Worker::new_lifo())
        }
        /// The owner pops the oldest element (queue order).
        pub fn new_fifo() -> Self {
            LocalQueue(cd::Worker::new_fifo())
        }
        /// Adds an element at the owner's end.
        #[inline]
        pub fn push(&self, t: T) {
            self.0.push(t)
        }
        /// Takes an element at the owner's end.
        #[inline]
        pub fn pop(&self) -> Option<T> {
            self.0.pop()
        }
        /// A handle other threads take the oldest elements through.
        pub fn stealer(&self) -> Stealer<T> {
            Stealer(self.0.stealer())
        }
        /// Whether the queue is empty now.
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        /// Elements queued now.
        pub fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// The shared end of a [`LocalQueue`].
    #[derive(Debug)]
    pub struct Stealer<T>(cd::Stealer<T>);

    impl<T> Clone for Stealer<T> {
        fn clone(&self) -> Self {
            Stealer(self.0.clone())
        }
    }

    impl<T> Stealer<T> {
        /// Takes the oldest element.
        pub fn steal(&self) -> Steal<T> {
            conv(self.0.steal())
        }
        /// Moves about half the elements into `dest` and returns one.
        pub fn steal_batch_and_pop(&self, dest: &LocalQueue<T>) -> Steal<T> {
            conv(self.0.steal_batch_and_pop(&dest.0))
        }
        /// Whether the queue is empty now.
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        /// Elements queued now.
        pub fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// A shared FIFO queue.
    #[derive(Debug)]
    pub struct Injector<T>(cd::Injector<T>);

    impl<T> Default for Injector<T> {
        fn default() -> Self {
            Injector(cd::Injector::new())
        }
    }

    impl<T> Injector<T> {
        /// An empty queue.
        pub fn new() -> Self {
            Self::default()
        }
        /// Appends an element.
        pub fn push(&self, t: T) {
            self.0.push(t)
        }
        /// Takes the oldest element.
        pub fn steal(&self) -> Steal<T> {
            conv(self.0.steal())
        }
        /// Moves a batch into `dest` and returns one element.
        pub fn steal_batch_and_pop(&self, dest: &LocalQueue<T>) -> Steal<T> {
            conv(self.0.steal_batch_and_pop(&dest.0))
        }
        /// Whether the queue is empty now.
        pub fn is_empty(&self) -> bool {
            self.0.is_empty()
        }
        /// Elements queued now.
        pub fn len(&self) -> usize {
            self.0.len()
        }
    }
}

#[cfg(loom)]
mod imp {
    use super::Steal;
    use crate::loom::sync::{Arc, Mutex};
    use std::collections::VecDeque;

    fn lock<T>(m: &Mutex<VecDeque<T>>) -> crate::loom::sync::MutexGuard<'_, VecDeque<T>> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Loom stand-in: a locked deque.
    #[derive(Debug)]
    pub struct LocalQueue<T> {
        q: Arc<Mutex<VecDeque<T>>>,
        lifo: bool,
        _not_sync: std::marker::PhantomData<std::cell::Cell<()>>,
    }

    impl<T> LocalQueue<T> {
        pub fn new_lifo() -> Self {
            LocalQueue {
                q: Arc::new(Mutex::new(VecDeque::new())),
                lifo: true,
                _not_sync: Default::default(),
            }
        }
        pub fn new_fifo() -> Self {
            LocalQueue {
                q: Arc::new(Mutex::new(VecDeque::new())),
                lifo: false,
                _not_sync: Default::default(),
            }
        }
        pub fn push(&self, t: T) {
            lock(&self.q).push_back(t)
        }
        pub fn pop(&self) -> Option<T> {
            let mut q = lock(&self.q);
            if self.lifo {
                q.pop_back()
            } else {
                q.pop_front()
            }
        }
        pub fn stealer(&self) -> Stealer<T> {
            Stealer(self.q.clone())
        }
        pub fn is_empty(&self) -> bool {
            lock(&self.q).is_empty()
        }
        pub fn len(&self) -> usize {
            lock(&self.q).len()
        }
    }

    #[derive(Debug)]
    pub struct Stealer<T>(Arc<Mutex<VecDeque<T>>>);

    impl<T> Clone for Stealer<T> {
        fn clone(&self) -> Self {
            Stealer(self.0.clone())
        }
    }

    impl<T> Stealer<T> {
        pub fn steal(&self) -> Steal<T> {
            match lock(&self.0).pop_front() {
                Some(t) => Steal::Success(t),
                None => Steal::Empty,
            }
        }
        pub fn steal_batch_and_pop(&self, _dest: &LocalQueue<T>) -> Steal<T> {
            self.steal()
        }
        pub fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
        pub fn len(&self) -> usize {
            lock(&self.0).len()
        }
    }

    #[derive(Debug)]
    pub struct Injector<T>(Mutex<VecDeque<T>>);

    impl<T> Default for Injector<T> {
        fn default() -> Self {
            Injector(Mutex::new(VecDeque::new()))
        }
    }

    impl<T> Injector<T> {
        pub fn new() -> Self {
            Self::default()
        }
        pub fn push(&self, t: T) {
            lock(&self.0).push_back(t)
        }
        pub fn steal(&self) -> Steal<T> {
            match lock(&self.0).pop_front() {
                Some(t) => Steal::Success(t),
                None => Steal::Empty,
            }
        }
        pub fn steal_batch_and_pop(&self, _dest: &LocalQueue<T>) -> Steal<T> {
            self.steal()
        }
        pub fn is_empty(&self) -> bool {
            lock(&self.0).is_empty()
        }
        pub fn len(&self) -> usize {
            lock(&self.0).len()
        }
    }
}

pub use imp::{Injector, LocalQueue, Stealer};

/// A shared LIFO stack: the newest element is taken first.
#[derive(Debug)]
pub struct Stack<T>(crate::loom::sync::Mutex<Vec<T>>);

impl<T> Default for Stack<T> {
    fn default() -> Self {
        Stack(crate::loom::sync::Mutex::new(Vec::new()))
    }
}

impl<T> Stack<T> {
    /// An empty stack.
    pub fn new() -> Self {
        Self::default()
    }

    fn items(&self) -> crate::loom::sync::MutexGuard<'_, Vec<T>> {
        // A panic cannot happen while the lock is held (push and pop only).
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds an element on top.
    pub fn push(&self, t: T) {
        self.items().push(t);
    }

    /// Takes the newest element (never `Retry`: the lock serialises takers).
    pub fn steal(&self) -> Steal<T> {
        match self.items().pop() {
            Some(t) => Steal::Success(t),
            None => Steal::Empty,
        }
    }

    /// Elements queued now.
    pub fn len(&self) -> usize {
        self.items().len()
    }

    /// Whether the stack is empty now.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn lifo_owner_order_and_steal_oldest() {
        let q = LocalQueue::new_lifo();
        let s = q.stealer();
        for i in 0..4 {
            q.push(i);
        }
        assert_eq!(q.pop(), Some(3));
        assert_eq!(s.steal(), Steal::Success(0));
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn injector_fifo() {
        let q = Injector::new();
        q.push(1);
        q.push(2);
        assert_eq!(q.steal(), Steal::Success(1));
        assert_eq!(q.steal(), Steal::Success(2));
        assert_eq!(q.steal(), Steal::Empty);
    }

    #[test]
    fn stack_lifo_across_threads() {
        let s = std::sync::Arc::new(Stack::new());
        let pushers: Vec<_> = (0..4)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || (0..1000).for_each(|i| s.push(t * 1000 + i)))
            })
            .collect();
        pushers.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(s.len(), 4000);
        let mut seen = Vec::new();
        while let Steal::Success(v) = s.steal() {
            seen.push(v);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..4000).collect::<Vec<_>>());
        s.push(1);
        s.push(2);
        assert_eq!(s.steal(), Steal::Success(2));
    }
}
