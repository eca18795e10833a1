//! A cell as its program sees it: the grant, changes to it, reports.
//!
//! [`Cell`] hides where the grant comes from:
//!
//! - **registered**: this program asked the broker for a cell;
//! - **joined**: `allot run` put this program in a cell and passed the grant
//!   page down (`ALLOT_CELL`, `ALLOT_GRANT_FD`);
//! - **standalone**: no broker; the grant is the CPUs the process may use
//!   and never changes (the ARS "graceful fallback");
//! - **manual**: the caller publishes grants itself (tests, simulations,
//!   embedding the runtime under another resource manager).
//!
//! Reading the grant is a seqlock read of a shared page behind one atomic
//! pointer: no system call, no lock. The page pointer changes only if the
//! broker restarts *and* cannot adopt the page this client held; old
//! mappings stay mapped until the `Cell` drops, so a reader racing the
//! switch still reads valid memory.
//!
//! For registered cells a watcher thread notices when the broker goes away
//! (end of stream on the socket), keeps the last grant meanwhile, and
//! rejoins the restarted broker with the cell's token, handing its page back
//! so every process that mapped it keeps reading the same page. If the new
//! broker no longer knows the cell (its journal was lost) the watcher
//! registers it again (`watch`).

use crate::conn::{Client, ClientError};
use allot_proto::{GrantPage, PageMap, ReportPage};
use allot_spec::CellSpec;
use rustix::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use allot_proto::Grant;

mod manual;
mod register;
mod ticket;
mod watch;
pub use manual::GrantWriter;
pub use register::{Options, Registering};
pub use ticket::{Ticket, include_group};

use watch::{WATCH_PERIOD, Watcher};

/// How a [`Cell`] gets its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Registered with the broker by this program.
    Registered,
    /// Put in a cell by `allot run`.
    Joined,
    /// No broker: the allowed CPUs, fixed.
    Standalone,
    /// Grants published by the caller.
    Manual,
}

#[derive(Debug)]
struct Inner {
    current: AtomicPtr<GrantPage>,
    /// The report page of the current page's memfd; null when it has none
    /// (an older broker's memfd).
    reports: AtomicPtr<ReportPage>,
    pages: Mutex<Vec<Arc<PageMap>>>,
    mode: Mode,
    id: AtomicU64,
    token: AtomicU64,
    socket: Option<PathBuf>,
    conn: Mutex<Option<Client>>,
    name: String,
    /// What the cell asks for (changed by [`Cell::set_goal`]; asked for
    /// again when the cell re-registers after a broker restart).
    spec: Mutex<CellSpec>,
    stop: AtomicBool,
    /// Readable once the cell is being dropped: ends the watcher's poll at
    /// once instead of at its next period.
    stop_fd: Option<OwnedFd>,
    /// Bumped by [`Cell::interrupt_waits`]; `wait_change` returns when it
    /// moves.
    interrupts: AtomicU64,
    broker_up: AtomicBool,
    fallback_reason: Option<String>,
    /// Release the cell when the last handle drops (unless the process is
    /// about to exit and the broker will notice: [`Cell::leave_at_exit`]).
    release_on_drop: AtomicBool,
    /// The cell's cgroup v2 directory, for starting a process inside it
    /// (`Options::joins_itself`; taken by [`Cell::take_spawn_cgroup`]).
    spawn_cgroup: Mutex<Option<OwnedFd>>,
    /// This process joined the cell's cgroup v1 hierarchies (a cgroup1
    /// broker): its CPUs are the cell's cpuset's (see [`Cell::in_v1_cpuset`]).
    in_v1_cpuset: AtomicBool,
}

// SAFETY: `current` and `reports` always point into mappings owned by
// `pages`, which is only ever appended to while `Inner` lives; every access
// through them is to atomics.
unsafe impl Send for Inner {}
// SAFETY: see `Send`.
unsafe impl Sync for Inner {}

impl Inner {
    fn page(&self) -> &GrantPage {
        // SAFETY: the pointer is set from a `PageMap` kept alive in `pages`
        // until `Inner` drops (mappings are never removed).
        unsafe { &*self.current.load(Ordering::Acquire) }
    }

    /// The current report page, if any.
    fn reports(&self) -> Option<&ReportPage> {
        let p = self.reports.load(Ordering::Acquire);
        // SAFETY: non-null pointers come from a `PageMap` kept alive in
        // `pages` until `Inner` drops, like `current`.
        (!p.is_null()).then(|| unsafe { &*p })
    }

    fn switch_to(&self, page: Arc<PageMap>) {
        let ptr = page.page() as *const GrantPage as *mut GrantPage;
        let reports = reports_ptr(&page);
        self.pages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(page);
        self.reports.store(reports, Ordering::Release);
        self.current.store(ptr, Ordering::Release);
    }

    fn current_map(&self) -> Option<Arc<PageMap>> {
        let ptr = self.current.load(Ordering::Acquire) as *const GrantPage;
        self.pages
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .find(|p| std::ptr::eq(p.page(), ptr))
            .cloned()
    }
}

/// A cell: read its grant, wait for changes, report progress.
#[derive(Debug, Clone)]
pub struct Cell {
    inner: Arc<Inner>,
    /// The watcher of a registered cell, shared by every handle: its
    /// thread stopped (and the cell released) when the last one drops.
    watcher: Option<Arc<Watcher>>,
}

fn reports_ptr(page: &PageMap) -> *mut ReportPage {
    page.reports().map_or(std::ptr::null_mut(), |r| {
        r as *const ReportPage as *mut ReportPage
    })
}

fn local_page(g: &Grant) -> Result<Arc<PageMap>, ClientError> {
    let p = PageMap::create(g.cell, 0)?;
    p.page().publish(g);
    Ok(Arc::new(p))
}

/// How a cell reaches the broker, if it does.
#[derive(Default)]
struct Link {
    id: u64,
    token: u64,
    socket: Option<PathBuf>,
    conn: Option<Client>,
}

/// What a registration waits for ([`Cell::register_with`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait<'a> {
    /// Queued behind others: `position` (1: next) and why.
    Queued {
        /// Place in the queue.
        position: u32,
        /// Why it waits.
        reason: &'a str,
    },
    /// Admitted paused: other cells' guarantees take every CPU. Its
    /// processes stop as they join it and run when a CPU frees.
    Paused,
}

impl Cell {
    fn from_parts(
        mode: Mode,
        page: Arc<PageMap>,
        link: Link,
        opts: Option<&Options>,
        reason: Option<String>,
    ) -> Cell {
        let Link {
            id,
            token,
            socket,
            conn,
        } = link;
        let ptr = page.page() as *const GrantPage as *mut GrantPage;
        let inner = Arc::new(Inner {
            current: AtomicPtr::new(ptr),
            reports: AtomicPtr::new(reports_ptr(&page)),
            pages: Mutex::new(vec![page]),
            mode,
            id: AtomicU64::new(id),
            token: AtomicU64::new(token),
            socket,
            conn: Mutex::new(conn),
            name: opts.map(|o| o.name.clone()).unwrap_or_default(),
            spec: Mutex::new(opts.map(|o| o.spec).unwrap_or_default()),
            stop: AtomicBool::new(false),
            stop_fd: (mode == Mode::Registered)
                .then(|| rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).ok())
                .flatten(),
            interrupts: AtomicU64::new(0),
            broker_up: AtomicBool::new(matches!(mode, Mode::Registered | Mode::Joined)),
            fallback_reason: reason,
            release_on_drop: AtomicBool::new(true),
            spawn_cgroup: Mutex::new(None),
            in_v1_cpuset: AtomicBool::new(false),
        });
        let watcher = (mode == Mode::Registered).then(|| Arc::new(Watcher::new(&inner)));
        let cell = Cell { inner, watcher };
        if !opts.is_some_and(|o| o.watch_later) {
            cell.watch();
        }
        cell
    }

    /// Starts the thread that rejoins a restarted broker, where
    /// [`Options::watch_later`] left it for later; a no-op when it runs
    /// already or the cell has no broker.
    pub fn watch(&self) {
        if let Some(w) = &self.watcher {
            w.start();
        }
    }

    /// Where the grant comes from.
    pub fn mode(&self) -> Mode {
        self.inner.mode
    }

    /// Why the cell is standalone, if it fell back.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.inner.fallback_reason.as_deref()
    }

    /// The cell id (0 when standalone or manual).
    pub fn id(&self) -> u64 {
        self.inner.id.load(Ordering::Acquire)
    }

    /// The socket of the broker the cell is registered with (`None` when
    /// standalone or manual).
    pub fn socket(&self) -> Option<&Path> {
        self.inner.socket.as_deref()
    }

    /// What the cell asks for, as the broker has it.
    pub fn spec(&self) -> CellSpec {
        *self.inner.spec.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether the broker currently answers (registered cells).
    pub fn broker_up(&self) -> bool {
        self.inner.broker_up.load(Ordering::Acquire)
    }

    /// The current grant. A few dozen loads, no system call.
    pub fn grant(&self) -> Grant {
        self.inner.page().read()
    }

    /// The grant generation (one load).
    pub fn generation(&self) -> u64 {
        self.inner.page().generation()
    }

    /// Recommended worker count (one load).
    pub fn threads(&self) -> u32 {
        self.inner.page().threads().max(1)
    }

    /// Blocks until the grant's generation differs from `seen` (or `timeout`
    /// passes) and returns the grant then current.
    pub fn wait_change(&self, seen: u64, timeout: Option<Duration>) -> Grant {
        let deadline = timeout.map(|t| std::time::Instant::now() + t);
        let interrupts = self.inner.interrupts.load(Ordering::Acquire);
        loop {
            let page = self.inner.page();
            let word = page.futex_word();
            let g = page.read();
            if g.generation != seen || self.inner.interrupts.load(Ordering::Acquire) != interrupts {
                return g;
            }
            let left = match deadline {
                Some(d) => match d.checked_duration_since(std::time::Instant::now()) {
                    Some(l) if !l.is_zero() => Some(l.min(WATCH_PERIOD)),
                    _ => return g,
                },
                // Bounded waits so a page switch (broker restart) is noticed.
                None => Some(WATCH_PERIOD),
            };
            page.wait(word, left);
        }
    }

    /// Counts `n` units of work done (frames, requests, iterations: the
    /// unit of the cell's rate goal, `--goal rate=…`). One atomic add on
    /// the cell's report page, no system call; the broker reads the rate
    /// from it. Cheap enough to call per request. A no-op without a
    /// report page (an older broker).
    pub fn heartbeat(&self, n: u64) {
        if let Some(r) = self.inner.reports() {
            r.heartbeat(n);
        }
    }

    /// Records one request's latency (for a `--goal p99=…` cell). Three
    /// atomic adds on the report page, no system call; the broker reads
    /// the percentiles from it. A no-op without a report page.
    pub fn report_latency(&self, d: Duration) {
        if let Some(r) = self.inner.reports() {
            r.record_latency(d);
        }
    }

    /// What this cell's report page holds now (all zero without one): the
    /// counters [`Cell::heartbeat`] and [`Cell::report_latency`] add to.
    pub fn reports(&self) -> allot_proto::Reports {
        self.inner
            .reports()
            .map(ReportPage::snapshot)
            .unwrap_or_default()
    }

    /// Blocks until the cell's next window opens and returns its scheduled
    /// start (`CLOCK_MONOTONIC` ns); inside a window it waits for the
    /// following one. Returns `None` at once when the cell has no windows
    /// (it is not time-triggered, or runs without a broker).
    ///
    /// The periodic loop of a time-triggered cell: do the period's work,
    /// then `wait_window()`. The wait survives the cell being suspended
    /// between windows (see [`allot_proto::window::sleep_until`]) and
    /// returns at the opening, not a timer's wake-up later. The schedule is
    /// read when the wait starts: if the cell's windows change meanwhile,
    /// the wait still ends at the opening it computed (at most a period).
    pub fn wait_window(&self) -> Option<u64> {
        let w = self.grant().window;
        let at = w.next_opening(allot_proto::window::monotonic_ns())?;
        allot_proto::window::sleep_until(at);
        Some(at)
    }

    /// Makes every [`Cell::wait_change`] in progress on this cell (in this
    /// process) return now with the current grant, e.g. so a thread that
    /// follows the grant notices it should stop. Other processes mapping
    /// the page see a spurious wake-up and wait again.
    pub fn interrupt_waits(&self) {
        self.inner.interrupts.fetch_add(1, Ordering::AcqRel);
        self.inner.page().wake_waiters();
    }

    /// Adds process `pid` (a child of this one, typically) to the cell, so
    /// the broker watches it. A no-op without a broker connection.
    pub fn add_member(&self, pid: u32) -> Result<(), ClientError> {
        let id = self.id();
        let mut conn = self.inner.conn.lock().unwrap_or_else(|p| p.into_inner());
        match conn.as_mut() {
            Some(c) if id != 0 => c.add_member(id, pid),
            _ => Ok(()),
        }
    }

    /// Asks the broker to add process `pid` without waiting for its answer
    /// (a failure cannot be seen; the next request on the connection skips
    /// the reply). For a launcher that must not wait: the process is
    /// confined already if it was forked from this one, and the broker
    /// finds it in the cell's cgroup when this process's last member exits.
    pub fn add_member_nowait(&self, pid: u32) -> Result<(), ClientError> {
        let id = self.id();
        let mut conn = self.inner.conn.lock().unwrap_or_else(|p| p.into_inner());
        match conn.as_mut() {
            Some(c) if id != 0 => c.add_member_nowait(id, pid),
            _ => Ok(()),
        }
    }

    /// The cell's cgroup v2 directory, once, for a launcher that asked to
    /// join itself (`Options::joins_itself`) on a broker that handed it
    /// over: start the program with `clone3(CLONE_INTO_CGROUP)` on it, and
    /// it begins inside the cell without the kernel's grace-period wait a
    /// move by pid takes. `None` otherwise (this thread moved itself in, or
    /// the broker moved the process).
    pub fn take_spawn_cgroup(&self) -> Option<OwnedFd> {
        self.inner
            .spawn_cgroup
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
    }

    /// Whether this process is in the cell's cgroup v1 hierarchies, known
    /// where a cgroup1 broker handed it their `tasks` files (a launcher
    /// that joins itself, `Options::joins_itself`): the CPUs it may use are
    /// then the cell's cpuset's, which the broker rewrites, not a mask the
    /// broker sets on its threads (the affinity backend's way). `false`
    /// where that is not known.
    pub fn in_v1_cpuset(&self) -> bool {
        self.inner.in_v1_cpuset.load(Ordering::Relaxed)
    }

    /// Lets go of this handle without releasing the cell, for a process
    /// about to exit: the broker ends the cell when its last process exits
    /// (within the same loop iteration, through pidfds), so the release
    /// round trip would only make the exit slower. For the same reason the
    /// last handle tells the watcher thread to stop without waiting for
    /// it, and leaves the connection and the page mapped for the exit to
    /// reclaim (closing and unmapping them one by one costs more).
    pub fn leave_at_exit(self) {
        self.inner.release_on_drop.store(false, Ordering::Release);
        if let Some(w) = &self.watcher
            && Arc::strong_count(w) == 1
        {
            w.stop_unjoined();
            std::mem::forget(self);
        }
    }

    /// A new descriptor for the current grant page, without close-on-exec,
    /// for a child process to inherit (`ALLOT_GRANT_FD`). The caller owns it.
    pub fn inheritable_page_fd(&self) -> Result<OwnedFd, ClientError> {
        let map = self
            .inner
            .current_map()
            .ok_or_else(|| ClientError::Protocol("no grant page".into()))?;
        let fd = rustix::io::fcntl_dupfd_cloexec(map.fd(), 3).map_err(std::io::Error::from)?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::empty()).map_err(std::io::Error::from)?;
        Ok(fd)
    }

    /// Sets what the cell wants to achieve ([`Goal`](allot_spec::Goal):
    /// a rate of heartbeats or a latency percentile) and waits for the
    /// broker to accept it; the rest of the cell's request stays as the
    /// broker has it (so a program in a cell of `allot run`'s may set its
    /// goal too). The goals policy then sizes the cell's CPUs to meet it.
    /// Errors without a broker (a standalone cell, or the broker gone), or
    /// when the broker refuses the goal (a time cell).
    pub fn set_goal(&self, goal: allot_spec::Goal) -> Result<(), ClientError> {
        goal.validate().map_err(allot_spec::SpecError::from)?;
        self.call_broker(|c, id| c.set_goal(id, goal))?;
        // Asked again with the rest of the spec if the cell re-registers
        // after a broker restart.
        self.inner
            .spec
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .goal = goal;
        Ok(())
    }

    /// Sets the cell's memory guarantee and limit
    /// ([`Memory`](allot_spec::Memory)) and waits for the broker to accept
    /// them; the rest of the cell's request stays as the broker has it.
    /// Errors without a broker, when the guarantee does not fit beside the
    /// others, when the limit is below what the cell uses now (the cell is
    /// then left as it was), or when the broker's backend has no memory
    /// control.
    pub fn set_memory(&self, memory: allot_spec::Memory) -> Result<(), ClientError> {
        memory.validate().map_err(allot_spec::SpecError::from)?;
        self.call_broker(|c, id| c.set_memory(id, memory))?;
        self.inner
            .spec
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .memory = memory;
        Ok(())
    }

    /// Sets the cell's L3 ways of its own and memory bandwidth ceiling
    /// ([`Cache`](allot_spec::Cache)) and waits for the broker to accept
    /// them; the rest of the cell's request stays as the broker has it.
    /// Errors without a broker, when the ways do not fit beside the other
    /// cells', or where the machine has no resctrl.
    pub fn set_cache(&self, cache: allot_spec::Cache) -> Result<(), ClientError> {
        cache.validate().map_err(allot_spec::SpecError::from)?;
        self.call_broker(|c, id| c.set_cache(id, cache))?;
        self.inner
            .spec
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .cache = cache;
        Ok(())
    }

    /// Calls the cell's broker with `call` (connecting first when needed);
    /// a failed call drops the connection, so the next one reconnects.
    fn call_broker(
        &self,
        call: impl FnOnce(&mut Client, u64) -> Result<(), ClientError>,
    ) -> Result<(), ClientError> {
        let mut conn = self.inner.conn.lock().unwrap_or_else(|p| p.into_inner());
        let id = self.id();
        if id == 0 {
            return Err(ClientError::NoBrokerForCell("standalone"));
        }
        if conn.is_none() {
            let Some(socket) = &self.inner.socket else {
                return Err(ClientError::NoBrokerForCell(
                    "its broker's socket is unknown",
                ));
            };
            *conn = Some(Client::connect(socket)?);
        }
        let c = conn.as_mut().expect("set above");
        if let Err(e) = call(c, id) {
            if matches!(e, ClientError::Call(_)) {
                *conn = None;
            }
            return Err(e);
        }
        Ok(())
    }

    /// Tells the broker how the cell is doing: workers busy now, CPUs it
    /// could use now (0: unknown), a monotone progress counter. Ignored when
    /// there is no broker.
    pub fn report(&self, busy: u32, wanted: u32, progress: u64) -> Result<(), ClientError> {
        self.send_one_way(|c, id| c.report(id, busy, wanted, progress))
    }

    /// Tells the broker what the cell's runtime pool has done (its
    /// per-worker statistics, summed); `allot status` shows the last one.
    /// Ignored when there is no broker.
    pub fn report_pool_stats(&self, stats: allot_proto::PoolStatsWire) -> Result<(), ClientError> {
        self.send_one_way(|c, id| c.pool_stats(id, stats))
    }

    /// Sends a one-way message about this cell on the cell's own
    /// connection (made on first use, dropped after a failure).
    fn send_one_way(
        &self,
        send: impl FnOnce(&mut Client, u64) -> Result<(), ClientError>,
    ) -> Result<(), ClientError> {
        let id = self.id();
        if id == 0 {
            return Ok(());
        }
        let mut conn = self.inner.conn.lock().unwrap_or_else(|p| p.into_inner());
        if conn.is_none() {
            let Some(socket) = &self.inner.socket else {
                return Ok(());
            };
            *conn = Some(Client::connect(socket)?);
        }
        let c = conn.as_mut().expect("set above");
        if let Err(e) = send(c, id) {
            *conn = None;
            return Err(e);
        }
        Ok(())
    }
}

/// Maps a grant page from a raw inherited descriptor (for the C API and
/// the preload shim, which receive descriptors from the environment).
///
/// # Safety
/// `fd` must be an open descriptor this call may take ownership of.
pub unsafe fn page_from_raw_fd(fd: i32) -> Result<PageMap, ClientError> {
    // SAFETY: the caller hands over ownership of an open descriptor.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    Ok(PageMap::open(owned)?)
}

/// Whether a broker answers on `socket`.
pub fn broker_alive(socket: &Path) -> bool {
    Client::connect(socket).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_proto::window::monotonic_ns;
    use allot_topo::CpuSet;

    #[test]
    fn heartbeats_and_latencies_land_on_the_report_page() {
        let (cell, _writer) = Cell::manual(CpuSet::first_n(1)).unwrap();
        cell.heartbeat(3);
        cell.heartbeat(4);
        cell.report_latency(Duration::from_micros(250));
        let r = cell.reports();
        assert_eq!((r.beats, r.count), (7, 1));
        assert_eq!(r.latency_quantile_us(0.99), Some(256));
        // The clone of a cell reports to the same page.
        cell.clone().heartbeat(1);
        assert_eq!(cell.reports().beats, 8);
    }

    #[test]
    fn a_cell_without_a_broker_cannot_take_a_goal() {
        let cell = Cell::standalone();
        let e = cell
            .set_goal(allot_spec::Goal::P99 { us: 5_000 })
            .unwrap_err();
        assert!(matches!(e, ClientError::NoBrokerForCell(_)), "{e}");
        assert!(e.to_string().contains("without a broker"), "{e}");
        // A malformed goal is refused before anything else.
        let e = cell
            .set_goal(allot_spec::Goal::Rate { milli_per_s: 0 })
            .unwrap_err();
        assert!(matches!(e, ClientError::Spec(_)), "{e}");
    }

    #[test]
    fn wait_window_returns_at_the_next_opening_of_the_published_schedule() {
        let (cell, mut writer) = Cell::manual(CpuSet::first_n(1)).unwrap();
        assert_eq!(cell.wait_window(), None, "no windows: no wait");
        // 1 ms windows every 20 ms, the first 5 ms from now.
        let origin = monotonic_ns() + 5_000_000;
        let window = allot_proto::Window {
            origin_ns: origin,
            period_us: 20_000,
            budget_us: 1_000,
        };
        writer.publish_window(window);
        assert_eq!(cell.wait_window(), Some(origin));
        assert!(monotonic_ns() >= origin);
        // Called inside a window, it waits for the following one.
        let next = origin + 20_000_000;
        assert_eq!(cell.wait_window(), Some(next));
        assert!(monotonic_ns() >= next);
        writer.publish_window(allot_proto::Window::default());
        assert_eq!(cell.wait_window(), None, "lifted: no wait");
    }
}
