//! `allot_pool_spawn_suspended`, `allot_resume`, `allot_resumer_cancel`,
//! `allot_pool_spawn_after` and `allot_pool_suspended`: suspended and
//! timed tasks over [`allot_runtime::Pool::spawn_suspended`] and
//! [`allot_runtime::Pool::spawn_after`].
//!
//! A suspended task has two handles: its `allot_task_t` (in the task
//! table, joined or detached like any task's) and its `allot_resumer_t`
//! (in the resumer table). `allot_resume` and `allot_resumer_cancel` take
//! the resumer out of its table, so a second use of the same handle fails
//! with `ALLOT_ERR_HANDLE`: a task is resumed at most once. Resumers still
//! in the table when the library shuts down are cancelled after the pools
//! are freed.

use super::pool::{Arg, TaskEntry, TaskFn, options, run_task};
use super::status::{Code, Error, entry};
use super::{POOLS, PoolHandle, RESUMERS, ResumerHandle, TASKS, TaskHandle, need_out, write_out};
use std::ffi::{c_int, c_void};
use std::time::Duration;

/// `int allot_pool_spawn_suspended(allot_pool_t pool, void (*fn)(void *),
/// void *arg, int priority, int worker, allot_resumer_t *resumer,
/// allot_task_t *task)`.
///
/// # Safety
/// `resumer` and `task` are null or valid for a write; `f` is null or a
/// function of this type, safe to call with `arg` on another thread.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_spawn_suspended(
    pool: PoolHandle,
    f: Option<TaskFn>,
    arg: *mut c_void,
    priority: c_int,
    worker: c_int,
    resumer: *mut ResumerHandle,
    task: *mut TaskHandle,
) -> c_int {
    entry("allot_pool_spawn_suspended", || {
        need_out(resumer, "resumer")?;
        need_out(task, "task")?;
        let f = f.ok_or_else(|| Error::invalid("fn is NULL"))?;
        let opts = options(pool, priority, worker)?;
        let p = POOLS.get(pool.id)?;
        let arg = Arg(arg);
        let pool_id = pool.id;
        let mut made = None;
        let task_id = TASKS.insert_with(|task_id| {
            let (r, handle) = p
                .spawn_suspended(opts, move || run_task(pool_id, task_id, f, arg))
                .expect("worker index checked against the pool");
            made = Some(r);
            TaskEntry { handle }
        })?;
        let r = made.expect("the task table made the task");
        let resumer_id = match RESUMERS.insert(r) {
            Ok(id) => id,
            Err(e) => {
                // The resumer was dropped (the task cancelled): take its
                // handle back out, so nothing is left half made.
                drop(TASKS.remove(task_id));
                return Err(e);
            }
        };
        // SAFETY: `need_out` checked both non-null.
        unsafe {
            write_out(resumer, ResumerHandle { id: resumer_id });
            write_out(task, TaskHandle { id: task_id });
        }
        Ok(())
    })
}

/// `int allot_resume(allot_resumer_t resumer)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_resume(resumer: ResumerHandle) -> c_int {
    entry("allot_resume", || {
        let r = RESUMERS.remove(resumer.id)?;
        if r.resume() {
            Ok(())
        } else {
            Err(Error::new(
                Code::Cancelled,
                "the task's pool was freed before it was resumed: the task was cancelled \
                 (allot_task_join on it returns ALLOT_ERR_CANCELLED)",
            ))
        }
    })
}

/// `int allot_resumer_cancel(allot_resumer_t resumer)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_resumer_cancel(resumer: ResumerHandle) -> c_int {
    entry("allot_resumer_cancel", || {
        RESUMERS.remove(resumer.id)?.cancel_now();
        Ok(())
    })
}

/// `int allot_pool_spawn_after(allot_pool_t pool, uint64_t delay_ns, void
/// (*fn)(void *), void *arg, int priority, int worker, allot_task_t *out)`.
///
/// # Safety
/// As [`allot_pool_spawn_suspended`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_spawn_after(
    pool: PoolHandle,
    delay_ns: u64,
    f: Option<TaskFn>,
    arg: *mut c_void,
    priority: c_int,
    worker: c_int,
    out: *mut TaskHandle,
) -> c_int {
    entry("allot_pool_spawn_after", || {
        need_out(out, "out")?;
        let f = f.ok_or_else(|| Error::invalid("fn is NULL"))?;
        let opts = options(pool, priority, worker)?;
        let p = POOLS.get(pool.id)?;
        let arg = Arg(arg);
        let pool_id = pool.id;
        let delay = Duration::from_nanos(delay_ns);
        let id = TASKS.insert_with(|task_id| TaskEntry {
            handle: p
                .spawn_after(delay, opts, move || run_task(pool_id, task_id, f, arg))
                .expect("worker index checked against the pool"),
        })?;
        // SAFETY: `need_out` checked it non-null.
        unsafe { write_out(out, TaskHandle { id }) };
        Ok(())
    })
}

/// `int allot_pool_suspended(allot_pool_t pool, uint64_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_pool_suspended(pool: PoolHandle, out: *mut u64) -> c_int {
    entry("allot_pool_suspended", || {
        need_out(out, "out")?;
        let n = POOLS.with(pool.id, |p| p.suspended())?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, n as u64) };
        Ok(())
    })
}
