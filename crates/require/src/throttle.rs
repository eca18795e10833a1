//! Throttling fractional CPU allocations (`require(cpu(0, 0.3))`).
//!
//! Two mechanisms, chosen per call of [`set`]:
//!
//! - **A cgroup quota** ([`Quota`]) when `ALLOT_THROTTLE_CGROUP` names a
//!   cgroup directory this process may create children in: the thread moves
//!   into its own child cgroup `allot-t<tid>` whose CPU quota is its
//!   fraction of a 100 ms period (cgroup v1 `cpu.cfs_quota_us`, or a
//!   threaded cgroup v2 child with `cpu.max`), and moves back when the limit
//!   is lifted. The kernel enforces it exactly and costs nothing meanwhile.
//! - **The monitor thread** otherwise, as Poli-C does: it watches each
//!   throttled thread's CPU time and, when the thread ran ahead of its share
//!   over the last window, interrupts it with a real-time signal whose
//!   handler sleeps just long enough to bring it back to its rate. The
//!   handler only reads a lock-free table (thread id → nanoseconds to
//!   sleep) and calls `nanosleep`: both async-signal-safe.
//!
//! If the quota cannot be set (no permission, no cpu controller), the
//! monitor takes over for that thread.

mod quota;
pub use quota::Quota;

use super::tree::Tid;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often the monitor thread samples throttled threads' CPU time.
pub const PERIOD: Duration = Duration::from_millis(10);
/// Window over which a thread's rate is measured.
pub const WINDOW: Duration = Duration::from_millis(100);
/// Table size (throttled threads at once).
const SLOTS: usize = 256;

static TID: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
static SLEEP_NS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];

#[derive(Debug, Default)]
struct Watched {
    fraction: f64,
    samples: Vec<(Instant, u64)>,
}

fn table() -> &'static Mutex<HashMap<Tid, Watched>> {
    static T: OnceLock<Mutex<HashMap<Tid, Watched>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

fn signal() -> i32 {
    libc::SIGRTMIN() + 4
}

extern "C" fn on_signal(_: libc::c_int) {
    // SAFETY: gettid and nanosleep are async-signal-safe; the table is
    // read with atomics only.
    let me = unsafe { libc::syscall(libc::SYS_gettid) } as u64;
    for i in 0..SLOTS {
        if TID[i].load(Ordering::Acquire) == me {
            let ns = SLEEP_NS[i].swap(0, Ordering::AcqRel);
            if ns > 0 {
                let ts = libc::timespec {
                    tv_sec: (ns / 1_000_000_000) as _,
                    tv_nsec: (ns % 1_000_000_000) as _,
                };
                // SAFETY: a valid timespec; a null remainder is allowed.
                unsafe { libc::nanosleep(&ts, std::ptr::null_mut()) };
            }
            return;
        }
    }
}

fn start() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        // SAFETY: installing a handler that only uses async-signal-safe calls.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(signal(), &sa, std::ptr::null_mut());
        }
        let _ = std::thread::Builder::new()
            .name("allot-throttle".into())
            .spawn(monitor);
    });
}

/// CPU time of thread `tid` of this process, in nanoseconds.
fn cpu_ns(tid: Tid) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/schedstat")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// The quota directory from `ALLOT_THROTTLE_CGROUP`, if usable.
fn quota() -> Option<&'static Quota> {
    static Q: OnceLock<Option<Quota>> = OnceLock::new();
    Q.get_or_init(|| {
        let dir = std::env::var_os(allot_proto::env::THROTTLE_CGROUP)?;
        Quota::at(dir.into()).ok()
    })
    .as_ref()
}

/// Limits thread `tid` to `fraction` of a CPU (`None`: no limit), with a
/// cgroup quota when one is configured, else with the monitor thread.
pub fn set(tid: Tid, fraction: Option<f64>) {
    if let Some(q) = quota() {
        match fraction {
            Some(f) if q.limit(tid, f).is_ok() => {
                monitor_set(tid, None);
                return;
            }
            Some(_) => {}
            None => {
                let _ = q.lift(tid);
            }
        }
    }
    monitor_set(tid, fraction);
}

fn monitor_set(tid: Tid, fraction: Option<f64>) {
    let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
    match fraction {
        Some(f) => {
            start();
            t.entry(tid).or_default().fraction = f.clamp(0.01, 1.0);
            if !(0..SLOTS).any(|i| TID[i].load(Ordering::Acquire) == tid)
                && let Some(i) = (0..SLOTS).find(|&i| TID[i].load(Ordering::Acquire) == 0)
            {
                TID[i].store(tid, Ordering::Release);
            }
        }
        None => {
            if t.remove(&tid).is_some() {
                for i in 0..SLOTS {
                    if TID[i].load(Ordering::Acquire) == tid {
                        SLEEP_NS[i].store(0, Ordering::Release);
                        TID[i].store(0, Ordering::Release);
                    }
                }
            }
        }
    }
}

fn monitor() {
    loop {
        std::thread::sleep(PERIOD);
        let mut t = table().lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let pid = std::process::id() as i32;
        t.retain(|&tid, w| {
            let Some(ns) = cpu_ns(tid) else { return false };
            w.samples.push((now, ns));
            w.samples
                .retain(|(at, _)| now.duration_since(*at) <= WINDOW);
            let (t0, c0) = w.samples[0];
            let elapsed = now.duration_since(t0).as_nanos() as f64;
            let used = ns.saturating_sub(c0) as f64;
            let allowed = elapsed * w.fraction;
            if used > allowed && elapsed > 0.0 {
                // Sleep until the usage over the window matches the rate.
                let sleep = (used / w.fraction - elapsed).max(0.0) as u64;
                if let Some(i) = (0..SLOTS).find(|&i| TID[i].load(Ordering::Acquire) == tid) {
                    SLEEP_NS[i].store(sleep.min(WINDOW.as_nanos() as u64), Ordering::Release);
                    // SAFETY: tgkill to a thread of this process.
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid as i32, signal()) };
                }
            }
            true
        });
    }
}
