//! A thread policy is safe code (`Builder::policy_with`), so it may panic.
//! When it panics while a `join`, `scope` or `install` frame is reachable
//! from other threads, unwinding that frame would be undefined behaviour;
//! the pool aborts the process instead. Each case runs in a child process
//! (this test binary, re-executed), which must die of `SIGABRT`.

#![cfg(not(loom))]

use allot_client::Cell;
use allot_runtime::policy::Local;
use allot_runtime::{Here, Hint, Idle, Place, PoolInfo, ThreadPolicy, Wake};
use allot_runtime::{Pool, Task};
use std::os::unix::process::ExitStatusExt;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

/// Environment variable that turns `panic_child` into one case.
const CHILD: &str = "ALLOT_RUNTIME_POLICY_PANIC_CASE";

const OFF: u8 = 0;
/// Panic in `dequeue` when a worker waits inside a task.
const DEQUEUE_WAIT: u8 = 1;
/// Panic in `wake` after a push from outside the pool.
const WAKE_EXTERNAL: u8 = 2;

/// `lifo`, plus a switch that makes one call panic.
#[derive(Debug)]
struct Panicky {
    inner: Local,
    mode: Arc<AtomicU8>,
}

impl ThreadPolicy for Panicky {
    fn name(&self) -> &'static str {
        "panicky"
    }
    fn enqueue(&self, from: Option<&Here>, place: Place, task: Task, hint: Hint) {
        self.inner.enqueue(from, place, task, hint)
    }
    fn dequeue(&self, here: &Here, hint: Hint) -> Option<Task> {
        if hint == Hint::Wait && self.mode.load(Ordering::SeqCst) == DEQUEUE_WAIT {
            panic!("policy dequeue panics");
        }
        self.inner.dequeue(here, hint)
    }
    fn idle(&self, here: &Here, round: u32, hint: Hint) -> Idle {
        self.inner.idle(here, round, hint)
    }
    fn drain(&self, here: &Here, hint: Hint) {
        self.inner.drain(here, hint)
    }
    fn wake(&self, from: Option<&Here>, place: Place, hint: Hint) -> Wake {
        if from.is_none() && self.mode.load(Ordering::SeqCst) == WAKE_EXTERNAL {
            panic!("policy wake panics");
        }
        self.inner.wake(from, place, hint)
    }
}

fn panicky_pool(mode: &Arc<AtomicU8>) -> Pool {
    let m = mode.clone();
    Pool::builder()
        .cell(Cell::standalone())
        .spin(Duration::ZERO)
        .name("panicky")
        .policy_with(move |info: &PoolInfo| {
            Box::new(Panicky {
                inner: Local::lifo(info),
                mode: m,
            })
        })
        .build()
        .expect("pool")
}

/// One case, in the child process.
fn run_case(case: &str) {
    let mode = Arc::new(AtomicU8::new(OFF));
    let pool = panicky_pool(&mode);
    match case {
        // `b` is queued in the frame of `join` when `dequeue` panics.
        "join" => {
            pool.install(|| {
                mode.store(DEQUEUE_WAIT, Ordering::SeqCst);
                pool.join(|| (), || ());
            });
        }
        // A scoped task points at the scope's frame when the owner's wait
        // calls the panicking `dequeue`.
        "scope" => {
            pool.scope(|s| {
                s.spawn(|_| std::thread::sleep(Duration::from_millis(50)));
                mode.store(DEQUEUE_WAIT, Ordering::SeqCst);
            });
        }
        // The installed job (in the caller's frame) is queued when `wake`
        // panics; the workers are parked, so `wake` is called.
        "install" => {
            std::thread::sleep(Duration::from_millis(200));
            mode.store(WAKE_EXTERNAL, Ordering::SeqCst);
            pool.install(|| ());
        }
        other => panic!("unknown case {other}"),
    }
    // Only reached if the pool did not abort.
    std::process::exit(3);
}

/// The child's entry point; does nothing in a normal test run.
#[test]
fn panic_child() {
    if let Ok(case) = std::env::var(CHILD) {
        run_case(&case);
    }
}

#[test]
fn policy_panic_with_a_shared_frame_aborts() {
    let exe = std::env::current_exe().expect("test binary");
    for case in ["join", "scope", "install"] {
        let out = Command::new(&exe)
            .args(["panic_child", "--exact", "--nocapture", "--test-threads=1"])
            .env(CHILD, case)
            .output()
            .expect("run child");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(6), // SIGABRT
            "{case}: child ended with {:?}, stderr:\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("thread policy panicked"),
            "{case}: no abort message, stderr:\n{stderr}"
        );
    }
}
