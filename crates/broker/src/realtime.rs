//! The broker's own threads and the CPU: which of them run at real-time
//! priority, and when the event loop gives it up.
//!
//! The broker governs the work that oversubscribes the machine, so it must
//! not wait behind that work: a grant that changes a second late, a death
//! noticed late or a status that takes seconds all come from an event loop
//! that sat runnable while its own cells ran. As an ordinary thread it
//! does: on a machine of two CPUs running five spinning cells, a goal cell
//! and one spinning process outside allot, the loop was measured runnable
//! and not run for 1 to 16 s at a time, at nice 0 and at nice −10 alike,
//! and at SCHED_FIFO never. So two threads run at real-time priority
//! where the broker may (`CAP_SYS_NICE`; refused otherwise, and said so):
//!
//! | thread           | class                 | why |
//! |------------------|-----------------------|-----|
//! | window driver    | SCHED_FIFO [`crate::windows::DRIVER_PRIORITY`] | opens and closes time cells' windows on time |
//! | event loop       | SCHED_FIFO [`LOOP_PRIORITY`], while it uses little CPU | requests, ticks, deaths |
//!
//! Every other thread, and every process the broker starts, is an ordinary
//! one: both set `SCHED_RESET_ON_FORK`, so what they create does not
//! inherit the class.
//!
//! A real-time thread that keeps a CPU busy takes it from everyone below
//! it, and the loop's work grows with what clients ask. So the loop holds
//! the class only while it is cheap ([`next_class`], a pure function of
//! the CPU time the loop's thread used over the last [`WINDOW`], its own
//! clock: time it spent blocked or preempted does not count): above
//! [`DEMOTE_ABOVE`] of a CPU it returns to SCHED_OTHER, and it takes the
//! real-time class again after a window below [`PROMOTE_BELOW`]. A client flooding the
//! broker therefore moves it to the ordinary class, where it competes like
//! any process (the per-user turns of `crate::server` still apply), and
//! never holds a CPU at real-time priority for long.
//!
//! `realtime = false` in the configuration keeps the loop ordinary.

use std::time::{Duration, Instant};

/// The event loop's SCHED_FIFO priority: the lowest, below the window
/// driver's, so the driver's edges preempt the loop.
pub const LOOP_PRIORITY: i32 = 1;

/// How long the loop's busy time is summed before [`next_class`] looks.
pub const WINDOW: Duration = Duration::from_secs(1);

/// Busier than this share of one CPU over a [`WINDOW`], the loop returns
/// to the ordinary class.
pub const DEMOTE_ABOVE: f64 = 0.25;

/// The loop takes the real-time class again after a [`WINDOW`] less busy
/// than this (half the demotion bound: a loop between the two keeps its
/// class, so it does not change class every window).
pub const PROMOTE_BELOW: f64 = 0.1;

/// The scheduling class of a thread of the broker's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// SCHED_FIFO at this priority.
    Fifo(i32),
    /// SCHED_OTHER.
    Other,
}

impl std::fmt::Display for Class {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Class::Fifo(p) => write!(f, "SCHED_FIFO {p}"),
            Class::Other => f.write_str("SCHED_OTHER"),
        }
    }
}

/// Puts the calling thread in `class`, with `SCHED_RESET_ON_FORK` (what it
/// creates is ordinary).
pub fn set_this_thread(class: Class) -> std::io::Result<()> {
    let (policy, priority) = match class {
        Class::Fifo(p) => (libc::SCHED_FIFO, p),
        Class::Other => (libc::SCHED_OTHER, 0),
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler on the calling thread (pid 0) with a
    // valid pointer to a sched_param that outlives the call.
    let r = unsafe { libc::sched_setscheduler(0, policy | libc::SCHED_RESET_ON_FORK, &param) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// The class the event loop should be in after a [`WINDOW`] in which it
/// was busy `busy` of a CPU, being in `now`.
pub fn next_class(now: Class, busy: f64) -> Class {
    match now {
        Class::Fifo(_) if busy > DEMOTE_ABOVE => Class::Other,
        Class::Other if busy < PROMOTE_BELOW => Class::Fifo(LOOP_PRIORITY),
        c => c,
    }
}

/// A change of the loop's class, for the log.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Took the real-time class (at start, or again after a quiet window).
    Promoted,
    /// Returned to the ordinary class after a window this busy.
    Demoted { busy: f64 },
    /// The kernel refused the real-time class (no `CAP_SYS_NICE`, a
    /// real-time limit of 0, a cgroup without real-time runtime): the
    /// loop stays ordinary and does not ask again.
    Refused(String),
}

/// The CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`).
pub fn this_thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// The event loop's class, and where its current window began (on the
/// wall clock and on the thread's CPU clock).
#[derive(Debug)]
pub struct LoopClass {
    class: Class,
    /// Off by configuration, or refused by the kernel: never promoted.
    fixed: bool,
    window_start: Instant,
    cpu_at_start: Duration,
}

impl LoopClass {
    /// The calling thread (the event loop) in the real-time class if
    /// `wanted` and the kernel allows it.
    pub fn start(wanted: bool, now: Instant, cpu: Duration) -> (LoopClass, Option<Change>) {
        let mut l = LoopClass {
            class: Class::Other,
            fixed: !wanted,
            window_start: now,
            cpu_at_start: cpu,
        };
        let change = wanted.then(|| l.enter(Class::Fifo(LOOP_PRIORITY), 0.0));
        (l, change)
    }

    /// The class the loop is in.
    pub fn class(&self) -> Class {
        self.class
    }

    /// After one turn of the loop, at `now`: at the end of a window, reads
    /// the thread's CPU clock (`cpu`, called once a window) and moves the
    /// loop to the class [`next_class`] says for the share of a CPU it
    /// used.
    pub fn turn(&mut self, now: Instant, cpu: impl FnOnce() -> Duration) -> Option<Change> {
        let span = now.saturating_duration_since(self.window_start);
        if span < WINDOW {
            return None;
        }
        let cpu = cpu();
        let share = cpu.saturating_sub(self.cpu_at_start).as_secs_f64() / span.as_secs_f64();
        self.window_start = now;
        self.cpu_at_start = cpu;
        if self.fixed {
            return None;
        }
        let next = next_class(self.class, share);
        (next != self.class).then(|| self.enter(next, share))
    }

    fn enter(&mut self, class: Class, busy: f64) -> Change {
        match set_this_thread(class) {
            Ok(()) => {
                self.class = class;
                match class {
                    Class::Fifo(_) => Change::Promoted,
                    Class::Other => Change::Demoted { busy },
                }
            }
            Err(e) => {
                self.fixed = true;
                // Whatever the thread was in, it is not real-time now.
                let _ = set_this_thread(Class::Other);
                self.class = Class::Other;
                let priority = match class {
                    Class::Fifo(p) => p,
                    Class::Other => 0,
                };
                Change::Refused(refused(&e, priority))
            }
        }
    }
}

/// What the kernel shows of why this process may not take the real-time
/// class ([`refusal_reason`]'s inputs, read from `/proc` and cgroupfs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtPermission {
    /// `CAP_SYS_NICE` is in the effective set (`CapEff`, bit 23); `None`:
    /// unreadable.
    pub cap_sys_nice: Option<bool>,
    /// `RLIMIT_RTPRIO`'s soft limit: the highest priority the process may
    /// take without the capability.
    pub rtprio_limit: Option<u64>,
    /// The real-time budget of its cgroup v1 `cpu` group
    /// (`cpu.rt_runtime_us`; absent without real-time group scheduling).
    pub rt_runtime_us: Option<i64>,
    /// It runs below the root of a cgroup v2 hierarchy (where a kernel
    /// with real-time group scheduling gives it no real-time time).
    pub v2_below_root: bool,
}

impl RtPermission {
    /// This process's, as the kernel shows it now.
    pub fn read() -> RtPermission {
        let status = allot_enforce::os::read_kernel_file("/proc/self/status").unwrap_or_default();
        let cap_sys_nice = status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
            .map(|caps| caps & (1 << 23) != 0);
        let rtprio_limit = rustix::process::getrlimit(rustix::process::Resource::Rtprio).current;
        let groups = allot_enforce::os::read_kernel_file("/proc/self/cgroup").unwrap_or_default();
        let v1_cpu = allot_enforce::cgroupfs::group_in(&groups, Some("cpu"));
        let rt_runtime_us = v1_cpu.and_then(|g| {
            let mounts = allot_enforce::detect::Mounts::read();
            let dir = mounts.v1_for("cpu")?.join(g.trim_start_matches('/'));
            allot_enforce::os::read_kernel_file(dir.join("cpu.rt_runtime_us"))
                .ok()?
                .trim()
                .parse()
                .ok()
        });
        let v2_below_root =
            allot_enforce::cgroupfs::group_in(&groups, None).is_some_and(|g| g.trim() != "/");
        RtPermission {
            cap_sys_nice,
            rtprio_limit,
            rt_runtime_us,
            v2_below_root,
        }
    }
}

/// Why the real-time class at `priority` was refused, and what would let
/// it through, from what the kernel shows (`p`).
pub fn refusal_reason(p: &RtPermission, priority: i32) -> String {
    let mut why = Vec::new();
    let capable = p.cap_sys_nice == Some(true);
    if !capable && p.rtprio_limit.is_none_or(|l| l < priority as u64) {
        why.push(format!(
            "the broker lacks CAP_SYS_NICE{} and its RLIMIT_RTPRIO is {} (give it the \
             capability: a container drops it unless started with --cap-add SYS_NICE; or \
             raise the limit to {priority}, e.g. LimitRTPRIO= in its unit)",
            if p.cap_sys_nice.is_none() {
                " (unreadable)"
            } else {
                ""
            },
            p.rtprio_limit.map_or("unknown".into(), |l| l.to_string())
        ));
    }
    if p.rt_runtime_us == Some(0) {
        why.push(
            "its cgroup v1 cpu group has no real-time budget (cpu.rt_runtime_us is 0; give it \
             some, or run the broker in the root cpu group)"
                .into(),
        );
    }
    if why.is_empty() && p.v2_below_root {
        why.push(
            "it runs below the cgroup v2 root, where a kernel built with real-time group \
             scheduling gives no real-time time (run it in the root cgroup, or set \
             realtime = false)"
                .into(),
        );
    }
    if why.is_empty() {
        why.push("the kernel did not say why".into());
    }
    why.join("; ")
}

/// The refusal `e` of the real-time class at `priority`, said with its
/// reason where it is a permission the kernel withheld.
pub fn refused(e: &std::io::Error, priority: i32) -> String {
    if e.raw_os_error() == Some(libc::EPERM) {
        format!("{e}: {}", refusal_reason(&RtPermission::read(), priority))
    } else {
        e.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reasons follow what the kernel shows: no capability and no
    /// limit (a container's root), a cgroup with no real-time budget, a
    /// v2 cgroup below the root; with the capability nothing is blamed on
    /// it.
    #[test]
    fn a_refusal_names_what_withheld_the_real_time_class() {
        let container_root = RtPermission {
            cap_sys_nice: Some(false),
            rtprio_limit: Some(0),
            ..Default::default()
        };
        let r = refusal_reason(&container_root, 10);
        assert!(
            r.contains("lacks CAP_SYS_NICE") && r.contains("RLIMIT_RTPRIO is 0"),
            "{r}"
        );
        assert!(r.contains("--cap-add SYS_NICE"), "{r}");
        let limited = RtPermission {
            cap_sys_nice: Some(false),
            rtprio_limit: Some(20),
            ..Default::default()
        };
        assert_eq!(refusal_reason(&limited, 10), "the kernel did not say why");
        let no_budget = RtPermission {
            cap_sys_nice: Some(true),
            rt_runtime_us: Some(0),
            ..Default::default()
        };
        let r = refusal_reason(&no_budget, 1);
        assert!(
            r.contains("cpu.rt_runtime_us is 0") && !r.contains("CAP_SYS_NICE"),
            "{r}"
        );
        let v2 = RtPermission {
            cap_sys_nice: Some(true),
            v2_below_root: true,
            ..Default::default()
        };
        assert!(refusal_reason(&v2, 1).contains("below the cgroup v2 root"));
        // This process's own reading is well formed, whatever it finds.
        let here = RtPermission::read();
        assert!(here.rtprio_limit.is_some());
    }

    #[test]
    fn the_loop_leaves_the_real_time_class_when_busy_and_returns_when_quiet() {
        let rt = Class::Fifo(LOOP_PRIORITY);
        assert_eq!(next_class(rt, 0.02), rt);
        assert_eq!(next_class(rt, DEMOTE_ABOVE), rt, "at the bound it stays");
        assert_eq!(next_class(rt, 0.26), Class::Other);
        assert_eq!(next_class(rt, 1.0), Class::Other);
        // Between the bounds each class keeps itself: no flapping.
        assert_eq!(next_class(Class::Other, 0.2), Class::Other);
        assert_eq!(next_class(Class::Other, PROMOTE_BELOW), Class::Other);
        assert_eq!(next_class(Class::Other, 0.09), rt);
    }

    #[test]
    fn a_loop_kept_ordinary_counts_its_windows_and_never_changes() {
        let t0 = Instant::now();
        let (mut l, change) = LoopClass::start(false, t0, Duration::ZERO);
        assert_eq!(change, None);
        assert_eq!(l.class(), Class::Other);
        let cpu = Duration::from_secs(2);
        assert_eq!(
            l.turn(t0 + WINDOW * 2, || cpu),
            None,
            "busy, but kept ordinary"
        );
        assert_eq!(l.cpu_at_start, cpu, "a new window began");
        assert_eq!(l.class(), Class::Other);
    }

    /// Live, on a thread of its own: a loop busy over a window leaves the
    /// real-time class, and a quiet window brings it back.
    #[test]
    fn a_busy_window_demotes_the_loop_and_a_quiet_one_promotes_it() {
        std::thread::spawn(|| {
            let t0 = Instant::now();
            let ms = Duration::from_millis;
            let (mut l, change) = LoopClass::start(true, t0, ms(1000));
            if let Some(Change::Refused(e)) = change {
                eprintln!("real-time class refused here ({e}); nothing to check");
                assert_eq!(l.class(), Class::Other);
                assert_eq!(l.turn(t0 + WINDOW, || ms(1000)), None, "not asked again");
                return;
            }
            assert_eq!(change, Some(Change::Promoted));
            assert_eq!(l.class(), Class::Fifo(LOOP_PRIORITY));
            // Within a window nothing is decided (nor the clock read).
            let unread = || -> Duration { panic!("the CPU clock read within a window") };
            assert_eq!(l.turn(t0 + WINDOW / 2, unread), None);
            // 600 ms of CPU in a second: demoted.
            let c = l.turn(t0 + WINDOW, || ms(1600));
            assert_eq!(c, Some(Change::Demoted { busy: 0.6 }));
            assert_eq!(l.class(), Class::Other);
            // A middling window (150 ms) keeps it ordinary; a quiet one
            // (20 ms) promotes it.
            assert_eq!(l.turn(t0 + WINDOW * 2, || ms(1750)), None);
            let c = l.turn(t0 + WINDOW * 3, || ms(1770));
            assert_eq!(c, Some(Change::Promoted));
            assert_eq!(l.class(), Class::Fifo(LOOP_PRIORITY));
            set_this_thread(Class::Other).unwrap();
        })
        .join()
        .unwrap();
    }

    /// Live: the calling thread really takes each class (as root), and a
    /// thread it then starts is ordinary (`SCHED_RESET_ON_FORK`).
    #[test]
    fn a_thread_takes_the_class_and_what_it_starts_does_not() {
        std::thread::spawn(|| {
            let policy = || {
                // SAFETY: sched_getscheduler on the calling thread.
                unsafe { libc::sched_getscheduler(0) & !libc::SCHED_RESET_ON_FORK }
            };
            if let Err(e) = set_this_thread(Class::Fifo(LOOP_PRIORITY)) {
                eprintln!("real-time class refused here ({e}); nothing to check");
                return;
            }
            assert_eq!(policy(), libc::SCHED_FIFO);
            let child = std::thread::spawn(policy).join().unwrap();
            assert_eq!(child, libc::SCHED_OTHER, "a thread it starts is ordinary");
            set_this_thread(Class::Other).unwrap();
            assert_eq!(policy(), libc::SCHED_OTHER);
        })
        .join()
        .unwrap();
    }
}
