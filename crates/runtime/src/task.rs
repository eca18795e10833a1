//! Tasks: the type-erased units the controller runs and policies queue.
//!
//! A [`Task`] is two words: a pointer to the job's state and the function
//! that runs it. Two kinds of jobs stand behind it:
//!
//! - **heap jobs** ([`Task::heap`]): a boxed closure, for `spawn` and scoped
//!   spawns; running the task frees the box.
//! - **stack jobs** ([`StackJob`]): state in the frame of a `join` or an
//!   `install`, which cannot return before the job has run and signalled
//!   its latch; no allocation.
//!
//! Invariants:
//! - a `Task` is run at most once (`run` consumes it) and policies hand
//!   every task they receive back exactly once; a task that is dropped
//!   unrun leaks its heap job, or leaves a `join` waiting forever;
//! - job bodies never unwind into the controller: every job catches its
//!   closure's panic and hands it to whoever waits for the result.

use crate::loom::cell::UnsafeCell;
use std::any::Any;
use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::ptr::NonNull;

/// A task's priority. Policies that keep priority levels hand out the
/// highest level's tasks first; the others ignore it.
///
/// A task forked by `join` or spawned into a scope inherits the priority
/// of the task that creates it; a spawned task has the priority it was
/// given ([`SpawnOptions`](crate::SpawnOptions)), `Normal` by default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[repr(u8)]
pub enum Priority {
    /// Background work: runs when nothing else is ready.
    Low = 0,
    /// Ordinary work, and what a task gets when nothing sets its priority.
    #[default]
    Normal = 1,
    /// Runs before `Normal` and `Low` tasks queued with it.
    High = 2,
}

impl Priority {
    /// Every level, highest first.
    pub const ALL: [Priority; 3] = [Priority::High, Priority::Normal, Priority::Low];

    /// Its name as parsed (`"high"`, `"normal"`, `"low"`).
    pub fn name(self) -> &'static str {
        match self {
            Priority::Low => "low",
            Priority::Normal => "normal",
            Priority::High => "high",
        }
    }

    /// The priority with this number (0 = low, 1 = normal, 2 = high).
    pub fn from_level(n: u32) -> Option<Priority> {
        match n {
            0 => Some(Priority::Low),
            1 => Some(Priority::Normal),
            2 => Some(Priority::High),
            _ => None,
        }
    }
}

impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Priority {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Priority::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| format!("unknown priority {s:?}; known: high, normal, low"))
    }
}

/// A runnable unit of work, opaque to thread policies.
///
/// Policies move tasks between queues; only the controller runs them. A
/// policy may read the task's [`Priority`].
pub struct Task {
    ptr: NonNull<()>,
    /// Runs the job; false if the job had been done already (a claimed
    /// job's queued task, `crate::claim`).
    run: unsafe fn(NonNull<()>) -> bool,
    priority: Priority,
}

// SAFETY: a task is created only from `Send` closures (heap jobs) or from
// stack jobs whose closures are `Send` and whose frames outlive the run;
// the pointer is dereferenced by exactly one thread, once.
unsafe impl Send for Task {}

impl fmt::Debug for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Task({:p}, {})", self.ptr, self.priority)
    }
}

impl Task {
    /// A task owning the boxed closure `f`.
    #[cfg_attr(not(loom), allow(dead_code))]
    pub(crate) fn heap<F: FnOnce() + Send + 'static>(f: F) -> Task {
        // SAFETY: `'static` closures need no lifetime erasure.
        unsafe { Task::heap_unchecked(f) }
    }

    /// Like [`Task::heap`] for a closure that borrows.
    ///
    /// # Safety
    /// Everything `f` borrows must outlive the task's run (scopes wait for
    /// every spawned task before returning).
    pub(crate) unsafe fn heap_unchecked<F: FnOnce() + Send>(f: F) -> Task {
        unsafe fn run_box<F: FnOnce()>(p: NonNull<()>) -> bool {
            // SAFETY: `p` came from `Box::into_raw` below and is run once.
            let f = unsafe { Box::from_raw(p.as_ptr().cast::<F>()) };
            f();
            true
        }
        let p = Box::into_raw(Box::new(f));
        // SAFETY: `Box::into_raw` never returns null.
        let ptr = unsafe { NonNull::new_unchecked(p.cast::<()>()) };
        Task {
            ptr,
            run: run_box::<F>,
            priority: Priority::Normal,
        }
    }

    /// A task from a raw job pointer and its run function.
    ///
    /// # Safety
    /// `run(ptr)` must be sound to call once from any thread; it returns
    /// false only if it found its job done already.
    pub(crate) unsafe fn from_raw(ptr: NonNull<()>, run: unsafe fn(NonNull<()>) -> bool) -> Task {
        Task {
            ptr,
            run,
            priority: Priority::Normal,
        }
    }

    /// The task's priority.
    #[inline]
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// The same task with priority `p`.
    #[inline]
    pub(crate) fn with_priority(mut self, p: Priority) -> Task {
        self.priority = p;
        self
    }

    /// Runs the task; false if it found its job done already (by a waiter
    /// that claimed it).
    #[inline]
    pub(crate) fn run(self) -> bool {
        // SAFETY: constructors guarantee `run(ptr)` may be called once; `self`
        // is consumed, so it is.
        unsafe { (self.run)(self.ptr) }
    }

    /// An identity for "is this the task I pushed?" checks.
    #[inline]
    pub(crate) fn id(&self) -> *const () {
        self.ptr.as_ptr()
    }
}

/// A task's panic, handed to whoever joins it — or the news that the task
/// never ran: a suspended task that was cancelled
/// ([`TaskPanic::is_cancelled`]).
pub struct TaskPanic {
    payload: Box<dyn Any + Send + 'static>,
    cancelled: bool,
}

/// The message of a cancelled task's [`TaskPanic`].
const CANCELLED: &str = "the task was cancelled before it ran: it was suspended and its Resumer \
                         was dropped, or its pool was dropped, before it was resumed";

impl TaskPanic {
    pub(crate) fn new(payload: Box<dyn Any + Send + 'static>) -> TaskPanic {
        TaskPanic {
            payload,
            cancelled: false,
        }
    }

    /// A suspended task that was cancelled instead of resumed.
    pub(crate) fn cancelled() -> TaskPanic {
        TaskPanic {
            payload: Box::new(CANCELLED),
            cancelled: true,
        }
    }

    /// Whether the task never ran because it was cancelled while
    /// suspended (its closure was dropped unrun); false for a real panic.
    pub fn is_cancelled(&self) -> bool {
        self.cancelled
    }

    /// The panic message, when the payload is a string.
    pub fn message(&self) -> Option<&str> {
        if let Some(s) = self.payload.downcast_ref::<&'static str>() {
            Some(s)
        } else {
            self.payload.downcast_ref::<String>().map(String::as_str)
        }
    }

    /// The raw payload, as `std::panic::catch_unwind` returns it.
    pub fn into_payload(self) -> Box<dyn Any + Send + 'static> {
        self.payload
    }

    /// Continues the panic in the calling thread.
    pub fn resume(self) -> ! {
        panic::resume_unwind(self.payload)
    }
}

impl fmt::Debug for TaskPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskPanic")
            .field("message", &self.message())
            .finish()
    }
}

impl fmt::Display for TaskPanic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.message() {
            Some(m) if self.cancelled => f.write_str(m),
            Some(m) => write!(f, "task panicked: {m}"),
            None => write!(f, "task panicked"),
        }
    }
}

impl std::error::Error for TaskPanic {}

/// Something a finished stack job signals.
pub(crate) trait Signal {
    /// Marks the job done and wakes its waiter.
    ///
    /// # Safety
    /// `this` points to a live signal; once the signal is visible the
    /// waiter may free it, so implementations must not touch `*this` after
    /// publishing.
    unsafe fn signal(this: *const Self);
}

/// What a job left for its waiter: nothing yet, its value, or its panic.
pub(crate) enum JobResult<R> {
    Pending,
    Done(R),
    Panicked(Box<dyn Any + Send>),
}

/// A job living in the frame of the thread that waits for it.
pub(crate) struct StackJob<F, R, S> {
    f: UnsafeCell<Option<F>>,
    out: UnsafeCell<JobResult<R>>,
    pub(crate) signal: S,
}

impl<F, R, S> StackJob<F, R, S>
where
    F: FnOnce() -> R + Send,
    R: Send,
    S: Signal,
{
    pub(crate) fn new(f: F, signal: S) -> Self {
        StackJob {
            f: UnsafeCell::new(Some(f)),
            out: UnsafeCell::new(JobResult::Pending),
            signal,
        }
    }

    /// The task that runs this job.
    ///
    /// # Safety
    /// The job must stay in place until its signal is seen (or until the
    /// task is taken back unrun), and the task must be run at most once.
    pub(crate) unsafe fn as_task(&self) -> Task {
        unsafe fn run<F: FnOnce() -> R, R, S: Signal>(p: NonNull<()>) -> bool {
            let job = p.as_ptr().cast::<StackJob<F, R, S>>().cast_const();
            // SAFETY: the owner keeps the job alive until the signal, and
            // only this run touches `f` and `out` before it.
            unsafe {
                let f = (*job)
                    .f
                    .with_mut(|f| (*f).take())
                    .expect("stack job run twice");
                let out = match panic::catch_unwind(AssertUnwindSafe(f)) {
                    Ok(r) => JobResult::Done(r),
                    Err(p) => JobResult::Panicked(p),
                };
                (*job).out.with_mut(|o| *o = out);
                S::signal(&raw const (*job).signal);
            }
            true
        }
        let ptr = NonNull::from(self).cast::<()>();
        // SAFETY: see the contract above.
        unsafe { Task::from_raw(ptr, run::<F, R, S>) }
    }

    /// Takes the closure back to run it inline (the task was popped back by
    /// its owner and will never run).
    pub(crate) fn take(&self) -> F {
        // SAFETY: called by the owner after it took the only task back, so
        // no other thread can reach the job.
        self.f
            .with_mut(|f| unsafe { (*f).take() })
            .expect("stack job already taken")
    }

    /// The result after the signal was observed.
    pub(crate) fn into_outcome(self) -> JobResult<R> {
        // SAFETY: the signal happened-after the write of `out` (acquire on
        // the waiter's side), and nobody touches the job after signalling.
        self.out
            .with_mut(|o| unsafe { std::mem::replace(&mut *o, JobResult::Pending) })
    }
}
