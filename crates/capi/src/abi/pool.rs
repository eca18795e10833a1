//! `allot_pool_*` and `allot_task_*`: pools over [`allot_runtime::Pool`].
//!
//! # Calls and lifetimes
//!
//! The pool table holds `Arc<Pool>`. Every call clones the `Arc` out of
//! the table (under its lock) and drops the clone when it returns, so a
//! pool is never dropped while a call uses it: `allot_pool_free` takes the
//! pool out of the table (new calls then fail with `ALLOT_ERR_HANDLE`) and
//! waits until its own reference is the last ([`finish`]), then drops the
//! pool, which lets queued tasks finish and joins the workers.
//!
//! A task's `JoinHandle` lives in the task table, apart from its pool:
//! joining a task of a freed pool works (the task ran before the pool's
//! workers stopped).
//!
//! # Callback frames
//!
//! C code runs on pool workers only inside callbacks, and every callback
//! is entered through this module, which pushes a [`Frame`] (the pool's
//! handle id and, for a spawned task, the task's) on a per-thread stack
//! for the callback's duration. That makes calls that would wait for
//! themselves detectable, and they fail with `ALLOT_ERR_INVALID` instead
//! of deadlocking:
//!
//! - `allot_pool_free(P)` inside a callback of `P` (the pool would wait
//!   for the callback that waits for it);
//! - `allot_shutdown()` inside any callback;
//! - `allot_task_join(T)` inside task `T` itself.
//!
//! # Unwinding
//!
//! Callbacks are called through `extern "C"` trampolines
//! ([`call_task`], [`call_body`]). A callback that unwinds (a C++
//! exception, or a Rust `extern "C-unwind"` function that panics) reaches
//! the trampoline's non-unwinding boundary and the process aborts; it never
//! unwinds through the runtime. A callback that `longjmp`s out skips Rust
//! frames and is undefined behaviour, as the header says.

use super::handle::Kind;
use super::status::{Code, Error, entry};
use super::{
    CELLS, CellHandle, POOLS, PoolHandle, TASKS, TaskHandle, ensure_live, need_out, write_out,
};
use allot_runtime::{JoinHandle, PolicySpec, Pool, Priority, SpawnOptions};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;
use std::time::Duration;

/// `void (*)(void *)`, declared unwinding so that an exception thrown by
/// one has defined behaviour (an abort at the trampoline) instead of being
/// undefined.
pub type TaskFn = unsafe extern "C-unwind" fn(*mut c_void);
/// `void (*)(size_t lo, size_t hi, void *)`.
pub type BodyFn = unsafe extern "C-unwind" fn(usize, usize, *mut c_void);

/// The name of pools made by `allot_pool_new` (thread names, and the cell
/// name when it registers one itself).
const POOL_NAME: &str = "liballot";

/// With grain 0, aim at this many chunks per worker.
const AUTO_CHUNKS_PER_WORKER: usize = 8;

/// The C caller's `void *arg`, handed to a callback on another thread.
#[derive(Debug, Clone, Copy)]
pub(super) struct Arg(pub(super) *mut c_void);

// SAFETY: the pointer is only passed back to the C callback the caller
// paired it with; making that safe across threads is the C caller's
// contract (documented under "Undefined behaviour" in the header).
unsafe impl Send for Arg {}
// SAFETY: see `Send`; the library never dereferences it.
unsafe impl Sync for Arg {}

impl Arg {
    /// The pointer (a method, so closures capture the whole `Arg`).
    fn ptr(self) -> *mut c_void {
        self.0
    }
}

/// Calls a task callback. Not unwinding: an unwind out of `f` aborts here.
extern "C" fn call_task(f: TaskFn, arg: *mut c_void) {
    // SAFETY: `f` is the function pointer the C caller passed (non-null,
    // checked at entry) and `arg` its argument; the caller promises `f`
    // is a function of this type.
    unsafe { f(arg) }
}

/// Calls a loop body. Not unwinding, like [`call_task`].
extern "C" fn call_body(f: BodyFn, lo: usize, hi: usize, arg: *mut c_void) {
    // SAFETY: as in `call_task`.
    unsafe { f(lo, hi, arg) }
}

/// A callback running on this thread.
#[derive(Debug, Clone, Copy)]
struct Frame {
    pool: u64,
    /// The task's handle id, or 0 for loop bodies and join halves.
    task: u64,
}

thread_local! {
    static FRAMES: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

/// Pops its frame when the callback returns.
struct FrameGuard;

impl FrameGuard {
    fn enter(pool: u64, task: u64) -> FrameGuard {
        FRAMES.with(|f| f.borrow_mut().push(Frame { pool, task }));
        FrameGuard
    }
}

impl Drop for FrameGuard {
    fn drop(&mut self) {
        // A callback frame is pushed and popped on the same thread, so the
        // slot exists; `try_with` only guards thread teardown.
        let _ = FRAMES.try_with(|f| f.borrow_mut().pop());
    }
}

fn any_frame(pred: impl Fn(&Frame) -> bool) -> bool {
    FRAMES
        .try_with(|f| f.borrow().iter().any(pred))
        .unwrap_or(false)
}

/// Whether this thread is inside a callback of any pool.
pub(crate) fn in_any_callback() -> bool {
    any_frame(|_| true)
}

/// Runs task callback `f(arg)` as task `task` of pool `pool`.
pub(super) fn run_task(pool: u64, task: u64, f: TaskFn, arg: Arg) {
    let _frame = FrameGuard::enter(pool, task);
    call_task(f, arg.ptr());
}

/// Runs loop body `f(lo, hi, arg)` on the piece `r` of a loop on pool
/// `pool`.
fn run_piece(pool: u64, f: BodyFn, r: std::ops::Range<usize>, arg: Arg) {
    let _frame = FrameGuard::enter(pool, 0);
    call_body(f, r.start, r.end, arg.ptr());
}

/// What the task table holds.
#[derive(Debug)]
pub struct TaskEntry {
    pub(super) handle: JoinHandle<()>,
}

/// Waits until `pool` is the last reference to its pool, then drops it:
/// queued tasks finish, workers are joined.
///
/// Other references are clones held by calls in progress on other
/// threads (see the module docs); they are dropped when those calls
/// return, so this polls with a backoff (1 µs doubling to 1 ms) rather
/// than adding a counter to every call.
pub(crate) fn finish(mut pool: Arc<Pool>) {
    let mut pause = Duration::from_micros(1);
    loop {
        match Arc::try_unwrap(pool) {
            Ok(p) => {
                drop(p);
                return;
            }
            Err(shared) => {
                pool = shared;
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        }
    }
}

/// `int allot_pool_new(allot_cell_t cell, allot_pool_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_new(cell: CellHandle, out: *mut PoolHandle) -> c_int {
    entry("allot_pool_new", || new_pool(cell, None, out))
}

/// `int allot_pool_new_policy(allot_cell_t cell, const char *policy,
/// allot_pool_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write; `policy` is null or a
/// NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_new_policy(
    cell: CellHandle,
    policy: *const c_char,
    out: *mut PoolHandle,
) -> c_int {
    entry("allot_pool_new_policy", || {
        let spec = if policy.is_null() {
            None
        } else {
            // SAFETY: non-null and NUL-terminated by the caller's contract.
            let name = unsafe { super::cell::c_str(policy, "policy") }?;
            Some(
                name.parse::<PolicySpec>()
                    .map_err(|e| Error::invalid(e.to_string()))?,
            )
        };
        new_pool(cell, spec, out)
    })
}

/// Starts a pool (with the policy `spec`, else the defaults and the
/// environment) and writes its handle to `out`.
fn new_pool(cell: CellHandle, spec: Option<PolicySpec>, out: *mut PoolHandle) -> Result<(), Error> {
    ensure_live()?;
    need_out(out, "out")?;
    let cell = if cell.id == 0 {
        super::cell::auto_cell(POOL_NAME)?
    } else {
        CELLS.get(cell.id)?
    };
    let mut builder = Pool::builder().cell(cell).name(POOL_NAME);
    if let Some(spec) = spec {
        builder = builder.policy(spec);
    }
    let pool = builder
        .build()
        .map_err(|e| Error::new(Code::Os, format!("cannot start the pool: {e}")))?;
    let pool = Arc::new(pool);
    match POOLS.insert(pool.clone()) {
        Ok(id) => {
            // SAFETY: `need_out` checked it non-null.
            unsafe { write_out(out, PoolHandle { id }) };
            Ok(())
        }
        Err(e) => {
            // Shut down meanwhile: stop the workers we started.
            finish(pool);
            Err(e)
        }
    }
}

/// `int allot_pool_workers(allot_pool_t pool, uint32_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_workers(pool: PoolHandle, out: *mut u32) -> c_int {
    entry("allot_pool_workers", || {
        need_out(out, "out")?;
        let n = POOLS.with(pool.id, |p| p.workers())?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, u32::try_from(n).unwrap_or(u32::MAX)) };
        Ok(())
    })
}

/// `allot_worker_stats_t`: one worker's statistics
/// ([`allot_runtime::WorkerStats`]).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStatsC {
    /// The worker's slot.
    pub worker: u32,
    /// The CPU it serves now, -1 if none.
    pub cpu: i32,
    /// Tasks it ran.
    pub tasks_run: u64,
    /// Tasks created while running on it.
    pub tasks_created: u64,
    /// Tasks it took from others' or shared queues.
    pub tasks_stolen: u64,
    /// Times it parked.
    pub sleeps: u64,
    /// Time parked, in ns.
    pub ns_asleep: u64,
    /// Time not parked since the pool started, in ns.
    pub ns_awake: u64,
    /// Times its CPU was revoked.
    pub retirements: u64,
    /// Most tasks its own queue held at once.
    pub queue_high_water: u64,
    /// Times a task on it used up its quantum and let another run.
    pub yields: u64,
    /// Of `tasks_stolen`, those taken from a retired worker.
    pub tasks_migrated: u64,
    /// Tasks created suspended while running on it.
    pub tasks_suspended: u64,
    /// Resumed (or timed) tasks it ran.
    pub tasks_resumed: u64,
}

const _: () = assert!(std::mem::size_of::<WorkerStatsC>() == 104);

impl From<allot_runtime::WorkerStats> for WorkerStatsC {
    fn from(s: allot_runtime::WorkerStats) -> Self {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        WorkerStatsC {
            worker: u32::try_from(s.worker).unwrap_or(u32::MAX),
            cpu: s.cpu.and_then(|c| i32::try_from(c).ok()).unwrap_or(-1),
            tasks_run: s.tasks_run,
            tasks_created: s.tasks_created,
            tasks_stolen: s.tasks_stolen,
            sleeps: s.sleeps,
            ns_asleep: ns(s.time_asleep),
            ns_awake: ns(s.time_awake),
            retirements: s.retirements,
            queue_high_water: s.queue_high_water,
            yields: s.yields,
            tasks_migrated: s.tasks_migrated,
            tasks_suspended: s.tasks_suspended,
            tasks_resumed: s.tasks_resumed,
        }
    }
}

/// `int allot_pool_slots(allot_pool_t pool, uint32_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_slots(pool: PoolHandle, out: *mut u32) -> c_int {
    entry("allot_pool_slots", || {
        need_out(out, "out")?;
        let n = POOLS.with(pool.id, |p| p.max_workers())?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, u32::try_from(n).unwrap_or(u32::MAX)) };
        Ok(())
    })
}

/// `int allot_pool_worker_stats(allot_pool_t pool, uint32_t worker,
/// allot_worker_stats_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_worker_stats(
    pool: PoolHandle,
    worker: u32,
    out: *mut WorkerStatsC,
) -> c_int {
    entry("allot_pool_worker_stats", || {
        need_out(out, "out")?;
        let all = POOLS.with(pool.id, |p| p.worker_stats())?;
        let s = all.get(worker as usize).copied().ok_or_else(|| {
            Error::invalid(format!(
                "worker {worker} does not exist: the pool has {} slots (allot_pool_slots)",
                all.len()
            ))
        })?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, WorkerStatsC::from(s)) };
        Ok(())
    })
}

/// `int allot_pool_spawn(allot_pool_t pool, void (*fn)(void *), void *arg,
/// allot_task_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write; `f` is null or a function of this
/// type, safe to call with `arg` on another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_spawn(
    pool: PoolHandle,
    f: Option<TaskFn>,
    arg: *mut c_void,
    out: *mut TaskHandle,
) -> c_int {
    entry("allot_pool_spawn", || {
        spawn(pool, f, arg, SpawnOptions::new(), out)
    })
}

/// `int allot_pool_spawn_with(allot_pool_t pool, void (*fn)(void *), void
/// *arg, int priority, int worker, allot_task_t *out)`.
///
/// # Safety
/// As [`allot_pool_spawn`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_spawn_with(
    pool: PoolHandle,
    f: Option<TaskFn>,
    arg: *mut c_void,
    priority: c_int,
    worker: c_int,
    out: *mut TaskHandle,
) -> c_int {
    entry("allot_pool_spawn_with", || {
        let opts = options(pool, priority, worker)?;
        spawn(pool, f, arg, opts, out)
    })
}

/// The options of a spawn from C: a priority (`ALLOT_PRIORITY_*`) and a
/// worker slot of `pool`, or -1 for any.
pub(super) fn options(
    pool: PoolHandle,
    priority: c_int,
    worker: c_int,
) -> Result<SpawnOptions, Error> {
    let p = u32::try_from(priority)
        .ok()
        .and_then(Priority::from_level)
        .ok_or_else(|| {
            Error::invalid(format!(
                "priority {priority}: use ALLOT_PRIORITY_LOW (0), _NORMAL (1) or _HIGH (2)"
            ))
        })?;
    let opts = SpawnOptions::new().priority(p);
    if worker == -1 {
        return Ok(opts);
    }
    if worker < 0 {
        return Err(Error::invalid(format!(
            "worker {worker}: a slot index, or -1 for any"
        )));
    }
    let slots = POOLS.with(pool.id, |p| p.max_workers())?;
    let w = worker as usize;
    if w >= slots {
        return Err(Error::invalid(format!(
            "worker {worker} does not exist: the pool has {slots} slots (allot_pool_slots)"
        )));
    }
    Ok(opts.worker(w))
}

fn spawn(
    pool: PoolHandle,
    f: Option<TaskFn>,
    arg: *mut c_void,
    opts: SpawnOptions,
    out: *mut TaskHandle,
) -> Result<(), Error> {
    need_out(out, "out")?;
    let f = f.ok_or_else(|| Error::invalid("fn is NULL"))?;
    let p = POOLS.get(pool.id)?;
    let arg = Arg(arg);
    let pool_id = pool.id;
    // The task is started under the task table's lock, once its id is
    // certain, so that it knows its own id (for the self-join check).
    let id = TASKS.insert_with(|task| TaskEntry {
        handle: p
            .spawn_with(opts, move || run_task(pool_id, task, f, arg))
            .expect("worker index checked against the pool"),
    })?;
    // SAFETY: `need_out` checked it non-null.
    unsafe { write_out(out, TaskHandle { id }) };
    Ok(())
}

/// `int allot_yield(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_yield() -> c_int {
    c_int::from(allot_runtime::yield_now())
}

/// `int allot_task_join(allot_task_t task)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_task_join(task: TaskHandle) -> c_int {
    entry("allot_task_join", || {
        // Before the table check: another thread may already be joining
        // this task (the handle is then gone), and the answer is the same.
        if task.id != 0 && any_frame(|f| f.task == task.id) {
            return Err(Error::invalid(
                "a task cannot join itself (it would wait forever); join it from another thread or task",
            ));
        }
        let t = TASKS.remove(task.id)?;
        t.handle.join().map_err(|p| {
            if p.is_cancelled() {
                Error::new(Code::Cancelled, p.to_string())
            } else {
                Error::new(
                    Code::Internal,
                    format!("the task panicked inside allot ({p:?}); please report it"),
                )
            }
        })
    })
}

/// `int allot_task_detach(allot_task_t task)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_task_detach(task: TaskHandle) -> c_int {
    entry("allot_task_detach", || {
        drop(TASKS.remove(task.id)?);
        Ok(())
    })
}

/// `int allot_pool_parallel_for(allot_pool_t pool, size_t begin, size_t
/// end, size_t grain, void (*body)(size_t, size_t, void *), void *arg)`.
///
/// # Safety
/// `body` is null or a function of this type, safe to call concurrently
/// with `arg` from several threads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_parallel_for(
    pool: PoolHandle,
    begin: usize,
    end: usize,
    grain: usize,
    body: Option<BodyFn>,
    arg: *mut c_void,
) -> c_int {
    entry("allot_pool_parallel_for", || {
        let body = body.ok_or_else(|| Error::invalid("body is NULL"))?;
        let p = POOLS.get(pool.id)?;
        check_range(begin, end)?;
        if begin == end {
            return Ok(());
        }
        let grain = if grain == 0 {
            let chunks = p.workers().max(1) * AUTO_CHUNKS_PER_WORKER;
            ((end - begin) / chunks).max(1)
        } else {
            grain
        };
        let arg = Arg(arg);
        let pool_id = pool.id;
        p.for_each_chunk(begin..end, grain, move |r| run_piece(pool_id, body, r, arg));
        Ok(())
    })
}

/// `int allot_pool_parallel_for_static(allot_pool_t pool, size_t begin,
/// size_t end, void (*body)(size_t, size_t, void *), void *arg)`.
///
/// # Safety
/// As [`allot_pool_parallel_for`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_parallel_for_static(
    pool: PoolHandle,
    begin: usize,
    end: usize,
    body: Option<BodyFn>,
    arg: *mut c_void,
) -> c_int {
    entry("allot_pool_parallel_for_static", || {
        let body = body.ok_or_else(|| Error::invalid("body is NULL"))?;
        let p = POOLS.get(pool.id)?;
        check_range(begin, end)?;
        let arg = Arg(arg);
        let pool_id = pool.id;
        p.for_each_static(begin..end, move |r| run_piece(pool_id, body, r, arg));
        Ok(())
    })
}

/// Fails unless `begin <= end`.
fn check_range(begin: usize, end: usize) -> Result<(), Error> {
    if begin > end {
        return Err(Error::invalid(format!(
            "begin ({begin}) is after end ({end}); the range is [begin, end)"
        )));
    }
    Ok(())
}

/// `int allot_pool_join(allot_pool_t pool, void (*a)(void *), void *a_arg,
/// void (*b)(void *), void *b_arg)`.
///
/// # Safety
/// `a` and `b` are null or functions of this type, safe to call with their
/// arguments on other threads.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_join(
    pool: PoolHandle,
    a: Option<TaskFn>,
    a_arg: *mut c_void,
    b: Option<TaskFn>,
    b_arg: *mut c_void,
) -> c_int {
    entry("allot_pool_join", || {
        let a = a.ok_or_else(|| Error::invalid("a is NULL"))?;
        let b = b.ok_or_else(|| Error::invalid("b is NULL"))?;
        let p = POOLS.get(pool.id)?;
        let (a_arg, b_arg) = (Arg(a_arg), Arg(b_arg));
        let pool_id = pool.id;
        p.join(
            move || run_task(pool_id, 0, a, a_arg),
            move || run_task(pool_id, 0, b, b_arg),
        );
        Ok(())
    })
}

/// `int allot_pool_free(allot_pool_t pool)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_pool_free(pool: PoolHandle) -> c_int {
    entry("allot_pool_free", || {
        POOLS.check(pool.id)?;
        if any_frame(|f| f.pool == pool.id) {
            return Err(Error::invalid(format!(
                "called from a callback running on this pool; the pool would wait for that \
                 callback to finish. Free it from a thread outside the pool (the {} stays valid)",
                Kind::Pool.c_name()
            )));
        }
        finish(POOLS.remove(pool.id)?);
        Ok(())
    })
}
