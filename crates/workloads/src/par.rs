//! `c/par.h` on allot's pool: the `par_for` and `par_workers` the kernels
//! call when loaded into a Rust program (handed to them by
//! [`KernelLib`](crate::KernelLib) through `c/par_bind.c`).
//!
//! # The process-wide slot
//!
//! The C kernels take no pool argument, so [`with_pool`] puts the pool in a
//! process-wide slot (`CURRENT`) for the length of one kernel run and takes
//! it out afterwards. Runs are serialised by `RUN`, so the slot names
//! exactly the pool of the run in progress. A `par_for` with an empty slot
//! (no run in progress) runs its chunks one after the other on the calling
//! thread.
//!
//! # Where the kernel runs
//!
//! [`with_pool`] runs the whole kernel as one task on a pool worker
//! (`Pool::install`): the kernel's sequential code runs on that worker,
//! which then takes part in every parallel region, like the master thread
//! of an OpenMP team. Each `par_for` is `Pool::for_each_chunk` over the
//! chunk *indices* `0..ceil(n / grain)` with a grain of one index: fork/join
//! in halves, with work stealing, down to single chunks, each called on
//! exactly the boundaries `par.h` promises (`[k·grain, min((k+1)·grain, n))`).
//! Back-to-back regions therefore cost no thread wake-up: the kernel's
//! worker never blocks between regions and the others are still spinning.
//! (The alternative, the kernel on the caller's thread and each region
//! handed to the pool with `install`, costs two wake-ups per region — the
//! caller's and a worker's — and ran the stencil kernel 2x slower.)
//!
//! # Following the grant
//!
//! Workers whose CPU is revoked retire between tasks, but the kernel is one
//! long task, so its worker would otherwise keep computing on the revoked
//! CPU until the kernel ends. Before each region `par_for` therefore checks
//! (one load of the grant generation, plus `sched_getcpu`) whether the
//! calling worker's CPU is still among the CPUs the pool wants under the
//! current grant (`allot_runtime::wanted_cpus`). If it is not, the region
//! is spawned as a scoped task and the worker waits for it: a worker whose
//! CPU was revoked takes no new work while waiting (it is re-pinned if the
//! grant moved it, else it parks), so the region runs on the granted
//! workers and the revoked CPU only runs the kernel's short sequential
//! parts until the kernel ends.

use crate::Schedule;
use allot_runtime::Pool;
use std::cell::Cell;
use std::ffi::{c_int, c_long, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// The pool of the run in progress (null outside [`with_pool`]).
static CURRENT: AtomicPtr<Pool> = AtomicPtr::new(std::ptr::null_mut());

/// Held for the length of a run: one kernel run at a time per process.
static RUN: Mutex<()> = Mutex::new(());

/// `par_for` calls since the current run started.
static REGIONS: AtomicU64 = AtomicU64::new(0);

/// Regions handed off because the kernel's worker had lost its CPU.
static HANDED_OFF: AtomicU64 = AtomicU64::new(0);

/// Whether the run in progress uses the static schedule (else adaptive).
static STATIC: AtomicBool = AtomicBool::new(false);

/// The body type of `par.h`.
pub type ParBody = unsafe extern "C" fn(lo: c_long, hi: c_long, ctx: *mut c_void);

/// What one run did besides its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RunStats {
    /// `par_for` calls.
    pub(crate) regions: u64,
    /// Of those, regions handed to other workers because the kernel's
    /// worker had lost its CPU.
    pub(crate) handed_off: u64,
}

/// Runs `f` as one task on a worker of `pool`, with `pool` in the slot
/// `par_for` uses and `schedule` for its regions; returns `f`'s result and
/// the run's statistics. Waits for any other run in the process to finish
/// first.
pub(crate) fn with_pool<R: Send>(
    pool: &Pool,
    schedule: Schedule,
    f: impl FnOnce() -> R + Send,
) -> (R, RunStats) {
    let _run = RUN.lock().unwrap_or_else(|p| p.into_inner());
    /// Empties the slot however `f` ends.
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            CURRENT.store(std::ptr::null_mut(), Ordering::Release);
        }
    }
    REGIONS.store(0, Ordering::Relaxed);
    HANDED_OFF.store(0, Ordering::Relaxed);
    STATIC.store(schedule == Schedule::Static, Ordering::Relaxed);
    CURRENT.store(std::ptr::from_ref(pool).cast_mut(), Ordering::Release);
    let clear = Clear;
    let r = pool.install(f);
    drop(clear);
    let stats = RunStats {
        regions: REGIONS.load(Ordering::Relaxed),
        handed_off: HANDED_OFF.load(Ordering::Relaxed),
    };
    (r, stats)
}

/// The pool in the slot, if a run is in progress.
fn current() -> Option<&'static Pool> {
    let p = CURRENT.load(Ordering::Acquire);
    // SAFETY: a non-null slot points at the `&Pool` that `with_pool` was
    // given; `with_pool` keeps that borrow alive and holds `RUN` until it
    // has emptied the slot, and only the kernel it runs calls `par_for`
    // (from within `f`, which `install` finishes before `with_pool`
    // returns), so the pool outlives every use made here. The `'static`
    // never escapes `par_for`/`par_workers`.
    unsafe { p.as_ref() }
}

thread_local! {
    /// `(grant generation, CPU, revoked)` of this thread's last check.
    static CHECKED: Cell<(u64, usize, bool)> = const { Cell::new((u64::MAX, usize::MAX, false)) };
}

/// Whether the calling thread (the kernel's worker) runs on a CPU the pool
/// no longer wants under the current grant.
fn cpu_revoked(pool: &Pool) -> bool {
    let cell = pool.source();
    let generation = cell.generation();
    let cpu = rustix::thread::sched_getcpu();
    let (g, c, revoked) = CHECKED.with(Cell::get);
    if (g, c) == (generation, cpu) {
        return revoked;
    }
    let wanted = allot_runtime::wanted_cpus(&cell.grant(), pool.max_workers());
    // A grant without CPUs is ignored by the pool: nothing is revoked.
    let revoked = !wanted.is_empty() && !wanted.contains(cpu);
    CHECKED.with(|k| k.set((generation, cpu, revoked)));
    revoked
}

/// The kernel's context pointer, shared by the chunks of one region.
#[derive(Clone, Copy)]
struct Ctx(*mut c_void);

// SAFETY: `par.h` makes the kernel promise that its body may be called
// with `ctx` concurrently from any thread (chunks write disjoint data); the
// pointer itself is only passed back to the body.
unsafe impl Send for Ctx {}
// SAFETY: as above.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// By method, so closures capture the whole `Ctx` (which is `Sync`)
    /// rather than its raw-pointer field.
    fn get(self) -> *mut c_void {
        self.0
    }
}

/// `par.h`'s `par_for`: runs `body` over `[0, n)` in chunks of `grain`,
/// in parallel on the current run's pool; returns when every chunk is done.
///
/// # Safety
///
/// `body` must be safe to call as `body(lo, hi, ctx)` for every chunk,
/// concurrently from any thread, until this returns (the `par.h` contract).
pub unsafe extern "C" fn par_for(
    n: c_long,
    grain: c_long,
    body: Option<ParBody>,
    ctx: *mut c_void,
) {
    let Some(body) = body else {
        eprintln!("allot-workloads: par_for called with a null body");
        std::process::abort();
    };
    if n <= 0 {
        return;
    }
    let grain = grain.max(1);
    let chunks = (n - 1) / grain + 1;
    let ctx = Ctx(ctx);
    let run = move |k: c_long| {
        let lo = k * grain;
        let hi = if n - lo <= grain { n } else { lo + grain };
        // SAFETY: the caller's contract: body may run on any chunk, from
        // any thread, with ctx, until par_for returns (and it has not).
        unsafe { body(lo, hi, ctx.get()) }
    };
    REGIONS.fetch_add(1, Ordering::Relaxed);
    let Some(pool) = current() else {
        (0..chunks).for_each(run);
        return;
    };
    let chunks = usize::try_from(chunks).expect("a positive c_long fits usize");
    let region = |r: std::ops::Range<usize>| {
        for k in r {
            run(k as c_long);
        }
    };
    let all = || {
        if STATIC.load(Ordering::Relaxed) {
            pool.for_each_static(0..chunks, region);
        } else {
            pool.for_each_chunk(0..chunks, 1, region);
        }
    };
    if cpu_revoked(pool) {
        HANDED_OFF.fetch_add(1, Ordering::Relaxed);
        pool.scope(|s| s.spawn(|_| all()));
    } else {
        all();
    }
}

/// `par.h`'s `par_workers`: the current run's pool's active workers (1
/// outside a run).
pub extern "C" fn par_workers() -> c_int {
    current().map_or(1, |p| c_int::try_from(p.workers()).unwrap_or(c_int::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    struct Seen {
        calls: Vec<AtomicUsize>,
        bad: AtomicUsize,
        n: c_long,
        grain: c_long,
    }

    unsafe extern "C" fn record(lo: c_long, hi: c_long, ctx: *mut c_void) {
        // SAFETY: the tests pass a `&Seen` as ctx and keep it alive.
        let seen = unsafe { &*ctx.cast::<Seen>() };
        let k = lo / seen.grain;
        if lo % seen.grain != 0 || hi != (lo + seen.grain).min(seen.n) {
            seen.bad.fetch_add(1, Ordering::Relaxed);
        }
        seen.calls[k as usize].fetch_add(1, Ordering::Relaxed);
    }

    fn check(n: c_long, grain: c_long, pool: Option<(&Pool, Schedule)>) {
        let g = grain.max(1);
        let chunks = if n <= 0 { 0 } else { (n + g - 1) / g };
        let seen = Seen {
            calls: (0..chunks).map(|_| AtomicUsize::new(0)).collect(),
            bad: AtomicUsize::new(0),
            n,
            grain: g,
        };
        let ctx = Ctx(std::ptr::from_ref(&seen).cast_mut().cast::<c_void>());
        // SAFETY: `record` accepts any chunk of `seen`, which outlives the call.
        let go = move || unsafe { par_for(n, grain, Some(record), ctx.get()) };
        let regions = match pool {
            Some((p, schedule)) => with_pool(p, schedule, go).1.regions,
            None => {
                go();
                u64::from(n > 0)
            }
        };
        assert_eq!(regions, u64::from(n > 0));
        assert_eq!(seen.bad.load(Ordering::Relaxed), 0, "n={n} grain={grain}");
        for (k, c) in seen.calls.iter().enumerate() {
            assert_eq!(
                c.load(Ordering::Relaxed),
                1,
                "chunk {k} of n={n} grain={grain}"
            );
        }
    }

    #[test]
    fn every_chunk_runs_once_on_its_exact_boundaries() {
        let pool = Pool::builder()
            .cell(allot_client::Cell::standalone())
            .name("wl-par-test")
            .build()
            .expect("pool");
        for (n, grain) in [
            (0, 4),
            (-3, 4),
            (1, 1),
            (10, 3),
            (64, 64),
            (1000, 7),
            (5, 0),
            (100, -2),
        ] {
            check(n, grain, Some((&pool, Schedule::Static)));
            check(n, grain, Some((&pool, Schedule::Dynamic)));
            check(n, grain, None);
        }
        assert!(with_pool(&pool, Schedule::Dynamic, || par_workers()).0 >= 1);
        assert_eq!(par_workers(), 1);
    }
}
