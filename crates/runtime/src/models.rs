//! Loom models of the runtime's concurrency protocols, run with
//!
//! ```text
//! RUSTFLAGS="--cfg loom" cargo test -p allot-runtime --release --lib loom
//! ```
//!
//! They drive the real `Sleep`, `Event`, queue and policy code (built on
//! loom's primitives through `crate::loom`) with tiny thread counts, so
//! loom can explore every interleaving in minutes on two cores.

use crate::loom::sync::Arc;
use crate::loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use crate::policy::{
    Here, Hint, Idle, Local, Place, PolicyKind, PolicySpec, PoolInfo, ThreadPolicy, Wake,
};
use crate::sleep::{Sleep, Woken};
use crate::sync::Event;
use crate::task::Task;
use loom::thread;

/// An idle worker's loop in miniature (bell `index`): look, announce,
/// re-check, park. Returns once `flag` is seen.
fn idle_until(sleep: &Sleep, index: usize, flag: &AtomicBool) {
    loop {
        if flag.load(Ordering::SeqCst) {
            return;
        }
        let s = sleep.announce(index);
        if flag.load(Ordering::SeqCst) {
            let _ = sleep.cancel(s);
            return;
        }
        let _ = sleep.park(s);
    }
}

/// No lost wake-up: a worker going to sleep while another thread publishes
/// work and wakes through `wake_for_work` (the path `Registry::wake_for`
/// takes, with the policy's choice) always wakes (loom reports a deadlock
/// if the worker could park forever).
#[test]
fn loom_sleep_no_lost_wakeup() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(1));
        let flag = Arc::new(AtomicBool::new(false));
        let (s2, f2) = (sleep.clone(), flag.clone());
        let worker = thread::spawn(move || {
            s2.register(0, thread::current());
            idle_until(&s2, 0, &f2);
        });
        flag.store(true, Ordering::Relaxed);
        sleep.wake_for_work(true, || Wake::Any);
        worker.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// A targeted wake-up (resize, latch) racing the worker's own cancel never
/// leaves the sleeper count wrong or the worker parked.
#[test]
fn loom_sleep_targeted_notify() {
    loom::model(|| {
        let sleep = Arc::new(Sleep::new(2));
        let flag = Arc::new(AtomicBool::new(false));
        let (s2, f2) = (sleep.clone(), flag.clone());
        let worker = thread::spawn(move || {
            s2.register(0, thread::current());
            idle_until(&s2, 0, &f2);
        });
        flag.store(true, Ordering::SeqCst);
        sleep.notify_worker(0);
        worker.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}

/// `Event::set` racing a waiter that spins, then blocks: the waiter always
/// returns.
#[test]
fn loom_event_set_wait() {
    loom::model(|| {
        let ev = Arc::new(Event::new());
        let e2 = ev.clone();
        let t = thread::spawn(move || e2.wait());
        ev.set();
        t.join().unwrap();
        assert!(ev.is_set());
    });
}

fn counting_task(hits: &Arc<[AtomicUsize; 3]>, i: usize) -> Task {
    let h = hits.clone();
    Task::heap(move || {
        h[i].fetch_add(1, Ordering::SeqCst);
    })
}

/// Resize: worker 0 has tasks queued locally and retires (`drain`) while
/// worker 1 steals concurrently (`idle`) and then takes whatever is left
/// (`dequeue`, `idle`). Every task runs exactly once.
fn retire_model(kind: PolicyKind) {
    loom::model(move || {
        let info = PoolInfo::new(2);
        // One priority level: levels multiply the queues (and the model's
        // state space) without changing the drain protocol.
        let spec = PolicySpec::new(kind).with_levels(1);
        let policy: Arc<Box<dyn ThreadPolicy>> = Arc::new(spec.build(&info));
        let hits = Arc::new([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ]);
        let id = info.id;
        let (p1, h1) = (policy.clone(), hits.clone());
        let retiring = thread::spawn(move || {
            let here = Here::new(0, id);
            for i in 0..3 {
                // Fork placement puts tasks on the worker's own deque.
                let place = p1.place(Some(&here), Hint::Fork);
                assert_eq!(place, Place::Local);
                p1.enqueue(Some(&here), place, counting_task(&h1, i), Hint::Fork);
            }
            // Runs one of its own tasks, then its CPU is revoked.
            if let Some(t) = p1.dequeue(&here, Hint::Continue) {
                t.run();
            }
            p1.drain(&here, Hint::Resize);
        });
        let p2 = policy.clone();
        let thief = thread::spawn(move || {
            let here = Here::new(1, id);
            if let Idle::Run(t) | Idle::Migrated(t) = p2.idle(&here, 0, Hint::Steal) {
                t.run();
            }
        });
        retiring.join().unwrap();
        thief.join().unwrap();
        // The surviving worker finishes whatever the retiree handed over.
        let here = Here::new(1, id);
        while let Some(t) = policy.dequeue(&here, Hint::Resize) {
            t.run();
        }
        while let Idle::Run(t) | Idle::Migrated(t) = policy.idle(&here, 0, Hint::Steal) {
            t.run();
        }
        for h in hits.iter() {
            assert_eq!(h.load(Ordering::SeqCst), 1);
        }
    });
}

#[test]
fn loom_resize_retire_drains_exactly_once_lifo() {
    retire_model(PolicyKind::LocalLifo);
}

#[test]
fn loom_resize_retire_drains_exactly_once_fifo() {
    retire_model(PolicyKind::GlobalFifo);
}

#[test]
fn loom_resize_retire_drains_exactly_once_local_fifo() {
    retire_model(PolicyKind::LocalFifo);
}

#[test]
fn loom_resize_retire_drains_exactly_once_global_lifo() {
    retire_model(PolicyKind::GlobalLifo);
}

/// The shared queue (a stack for `global-lifo`) and a worker's inbox: an
/// outside thread queues two tasks of different priorities and one for
/// worker 0, which holds no CPU; worker 1 takes work concurrently, then
/// finishes what is left. Every task runs exactly once.
fn shared_and_inbox_model(kind: PolicyKind) {
    let mut model = loom::model::Builder::new();
    // Bounded preemptions keep the model small enough for every CI run; the
    // races here need at most two.
    model.preemption_bound = Some(2);
    model.check(move || {
        let info = PoolInfo::new(2);
        info.roster.set(1, true);
        let spec = PolicySpec::new(kind).with_levels(2);
        let policy: Arc<Box<dyn ThreadPolicy>> = Arc::new(spec.build(&info));
        let hits = Arc::new([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ]);
        let id = info.id;
        let (p1, h1) = (policy.clone(), hits.clone());
        let outsider = thread::spawn(move || {
            let high = counting_task(&h1, 0).with_priority(crate::task::Priority::High);
            p1.enqueue(None, Place::Global, high, Hint::Spawn);
            p1.enqueue(None, Place::Global, counting_task(&h1, 1), Hint::Spawn);
            p1.enqueue(None, Place::Worker(0), counting_task(&h1, 2), Hint::Spawn);
        });
        let here = Here::new(1, id);
        if let Some(t) = policy.dequeue(&here, Hint::Continue) {
            t.run();
        }
        outsider.join().unwrap();
        loop {
            if let Some(t) = policy.dequeue(&here, Hint::Continue) {
                t.run();
                continue;
            }
            match policy.idle(&here, 0, Hint::Steal) {
                Idle::Run(t) | Idle::Migrated(t) => {
                    t.run();
                }
                Idle::Retry => continue,
                Idle::Park => break,
            }
        }
        for h in hits.iter() {
            assert_eq!(h.load(Ordering::SeqCst), 1);
        }
    });
}

#[test]
fn loom_shared_queue_and_inbox_exactly_once_global_lifo() {
    shared_and_inbox_model(PolicyKind::GlobalLifo);
}

#[test]
fn loom_shared_queue_and_inbox_exactly_once_local_fifo() {
    shared_and_inbox_model(PolicyKind::LocalFifo);
}

/// The lifo policy's queues as used by one owner and one thief: each task
/// once (checks the policy's own bookkeeping, not just the deque).
#[test]
fn loom_lifo_owner_and_thief() {
    loom::model(|| {
        let info = PoolInfo::new(2);
        let lifo = Arc::new(Local::new(
            &info,
            PolicySpec::new(PolicyKind::LocalLifo).with_levels(1),
        ));
        let hits = Arc::new([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ]);
        let id = info.id;
        let (l2, h2) = (lifo.clone(), hits.clone());
        let owner = thread::spawn(move || {
            let here = Here::new(0, id);
            l2.enqueue(
                Some(&here),
                Place::Local,
                counting_task(&h2, 0),
                Hint::Spawn,
            );
            l2.enqueue(
                Some(&here),
                Place::Local,
                counting_task(&h2, 1),
                Hint::Spawn,
            );
            while let Some(t) = l2.dequeue(&here, Hint::Continue) {
                t.run();
            }
        });
        let here = Here::new(1, id);
        lifo.enqueue(None, Place::Global, counting_task(&hits, 2), Hint::Spawn);
        if let Idle::Run(t) | Idle::Migrated(t) = lifo.idle(&here, 0, Hint::Steal) {
            t.run();
        }
        owner.join().unwrap();
        while let Some(t) = lifo.dequeue(&here, Hint::Continue) {
            t.run();
        }
        for h in hits.iter() {
            assert_eq!(h.load(Ordering::SeqCst), 1);
        }
    });
}

/// The controller's idle path on a real policy: the worker looks for work
/// (`dequeue` + `idle`), announces, looks again, parks; an outside thread
/// queues a task on the global queue and wakes through the fenced path.
/// The task always runs (no lost wake-up between "no work" and "parked").
#[test]
fn loom_sleep_with_policy_queue() {
    loom::model(|| {
        let info = PoolInfo::new(1);
        let policy: Arc<Box<dyn ThreadPolicy>> = Arc::new(PolicyKind::LocalLifo.build(&info));
        let sleep = Arc::new(Sleep::new(1));
        let hits = Arc::new([
            AtomicUsize::new(0),
            AtomicUsize::new(0),
            AtomicUsize::new(0),
        ]);
        let id = info.id;
        let (p2, s2, h2) = (policy.clone(), sleep.clone(), hits.clone());
        let worker = thread::spawn(move || {
            s2.register(0, thread::current());
            let here = Here::new(0, id);
            let find = || match p2.dequeue(&here, Hint::Continue) {
                Some(t) => Some(t),
                None => match p2.idle(&here, 0, Hint::Steal) {
                    Idle::Run(t) | Idle::Migrated(t) => Some(t),
                    _ => None,
                },
            };
            while h2[0].load(Ordering::SeqCst) == 0 {
                if let Some(t) = find() {
                    t.run();
                    continue;
                }
                let s = s2.announce(0);
                if let Some(t) = find() {
                    let _ = s2.cancel(s);
                    t.run();
                    continue;
                }
                let _ = s2.park(s);
            }
        });
        policy.enqueue(None, Place::Global, counting_task(&hits, 0), Hint::Spawn);
        // As `Registry::inject`: fenced, the policy chooses whom to wake.
        sleep.wake_for_work(true, || policy.wake(None, Place::Global, Hint::Spawn));
        worker.join().unwrap();
        assert_eq!(hits[0].load(Ordering::SeqCst), 1);
    });
}

/// A wake-up for work absorbed by a worker whose wait ends at the same
/// moment is passed on. Worker 0 waits inside a task (for `latch`); worker
/// 1 is idle at the top. The main thread sets the latch and notifies worker
/// 0, then publishes work and wakes a sleeper for it — possibly worker 0,
/// which then returns to its task: it must `pass_on` the wake-up, or
/// worker 1 sleeps forever beside the work (loom reports the deadlock).
#[test]
fn loom_waiter_passes_on_a_wakeup_for_work() {
    // Three threads with two bells explore for minutes unbounded; the race
    // needs two preemptions (main between its two wake-ups, the waiter
    // between its announce and its re-check).
    let mut model = loom::model::Builder::new();
    model.preemption_bound = Some(3);
    model.check(|| {
        let sleep = Arc::new(Sleep::new(2));
        let latch = Arc::new(AtomicBool::new(false));
        let work = Arc::new(AtomicBool::new(false));
        let (s0, l0) = (sleep.clone(), latch.clone());
        let waiter = thread::spawn(move || {
            s0.register(0, thread::current());
            let mut nudged = false;
            while !l0.load(Ordering::SeqCst) {
                let s = s0.announce(0);
                let woken = if l0.load(Ordering::SeqCst) {
                    s0.cancel(s)
                } else {
                    s0.park(s)
                };
                nudged |= woken == Woken::ForWork;
            }
            // As `WorkerThread::find_work` on `Found::Done`.
            if nudged {
                s0.pass_on();
            }
        });
        let (s1, w1) = (sleep.clone(), work.clone());
        let idle = thread::spawn(move || {
            s1.register(1, thread::current());
            idle_until(&s1, 1, &w1);
        });
        latch.store(true, Ordering::SeqCst);
        sleep.notify_worker(0);
        work.store(true, Ordering::SeqCst);
        sleep.wake_for_work(true, || Wake::Any);
        waiter.join().unwrap();
        idle.join().unwrap();
        assert_eq!(sleep.sleepers(), 0);
    });
}
