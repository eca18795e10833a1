//! The window driver: the broker's timer that opens and closes the
//! windows of time-triggered cells (Tessellation's gang activation).
//!
//! One thread, started with the first windowed cell, owns every cell's
//! [`Gate`] (its freezer) and [`Slot`] (its schedule). It sleeps until the
//! earliest edge on `CLOCK_MONOTONIC` (with the timer slack at 1 ns, and
//! at real-time priority when the broker may have it), performs every
//! edge that is due, and sleeps again. The event loop talks to it only
//! through [`Windows`]: add, remove, read the schedule and the delivery.
//!
//! # Waking on time
//!
//! A timer wakes a thread late by the machine's timer latency (about
//! 90 µs median on a small VM, more under load). The driver therefore
//! sleeps until `edge − lead`, where the lead is the 90th percentile of
//! its own recent lateness plus a margin (at most [`MAX_LEAD`]), then:
//! an opening waits out the rest by reading the clock (so the window
//! opens on time, at the cost of a short spin at real-time priority); a
//! closing acts at once (so suspensions land around the edge, early as
//! often as late, and the window-length accounting absorbs the rest).
//!
//! A close is checked: [`schedule::CHECK_AFTER_NS`] later the driver asks
//! the gate whether every thread stopped, and sends the close again (with
//! doubling waits) while one runs on — the kernel now and then lets a
//! thread that slept through the freeze run on.
//!
//! Invariants:
//! - A windowed cell's gate is shut outside its windows and open inside,
//!   up to the activation latency (measured, and shown in the status).
//! - Every gate the driver lets go is opened first: on [`Windows::remove`]
//!   (the cell ended or changed its contract) and when the driver stops
//!   (broker exit, [`Windows::stop`]). allot never leaves a cell frozen.
//! - The schedule readers see on the grant page ([`Window`]) is the one
//!   the driver follows: window k opens at `origin + k·period`.
//!
//! Work conservation comes from the mechanism: a frozen cell's CPUs run
//! best-effort cells, and inside its window a cell that sleeps leaves the
//! CPU to them too.

pub mod schedule;

use crate::log::{info, warn};
use allot_enforce::Gate;
use allot_proto::Window;
use allot_proto::window::{monotonic_ns, until};
pub use schedule::{Delivery, Edge, Slot, quantile};
use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Real-time priority of the driver thread (SCHED_FIFO), when allowed.
pub const DRIVER_PRIORITY: i32 = 10;

/// The longest the driver wakes before an edge (and so the longest it
/// spins before an opening), ns.
pub const MAX_LEAD: u64 = 250_000;

/// Added to the lateness percentile to make the lead, ns.
const LEAD_MARGIN: u64 = 10_000;

/// Wake-up lateness samples kept for the lead.
const LATENESS_SAMPLES: usize = 64;

#[derive(Debug)]
struct Entry {
    slot: Slot,
    gate: Box<dyn Gate>,
    /// A failed close was logged (once per cell).
    close_failed: bool,
}

#[derive(Debug, Default)]
struct Table {
    cells: BTreeMap<u64, Entry>,
    stop: bool,
    /// Recent timer lateness of the driver (woken − asked), ns.
    lateness: std::collections::VecDeque<u64>,
    /// Recent durations of an opening (the gate write), ns.
    open_cost: std::collections::VecDeque<u64>,
}

impl Table {
    /// How long before an edge to wake.
    fn lead(&self) -> u64 {
        quantile(&self.lateness, 0.9).map_or(MAX_LEAD / 2, |p90| (p90 + LEAD_MARGIN).min(MAX_LEAD))
    }

    fn woke_late_by(&mut self, ns: u64) {
        push_bounded(&mut self.lateness, ns);
    }

    /// How long before a window's start to begin opening it: the median
    /// time an opening takes (thawing a v1 freezer cgroup takes tens of
    /// microseconds), so that the cell resumes at the start.
    fn open_early(&self) -> u64 {
        quantile(&self.open_cost, 0.5).map_or(0, |p50| p50.min(MAX_LEAD))
    }
}

fn push_bounded(q: &mut std::collections::VecDeque<u64>, v: u64) {
    if q.len() == LATENESS_SAMPLES {
        q.pop_front();
    }
    q.push_back(v);
}

#[derive(Debug, Default)]
struct Shared {
    table: Mutex<Table>,
    wake: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The event loop's handle on the window driver.
#[derive(Debug)]
pub struct Windows {
    /// The time base of every cell's windows (`CLOCK_MONOTONIC`, ns, a
    /// whole µs): a cell placed at phase `φ` opens its windows at
    /// `epoch + φ + k·period`, so cells sharing a CPU keep the distances
    /// the plan gave them.
    epoch_ns: u64,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    /// The schedule of every cell in the driver's table. Only this handle
    /// adds or removes cells, so this copy is exact; [`Windows::holds`]
    /// and [`Windows::window`] read it without the table's lock, which the
    /// driver keeps while it spins up to an opening and writes gates (the
    /// event loop asks at every re-plan, for every cell).
    schedules: BTreeMap<u64, Window>,
}

impl Default for Windows {
    fn default() -> Windows {
        Windows::new()
    }
}

impl Windows {
    /// No cells, no thread yet; the epoch is now.
    pub fn new() -> Windows {
        Windows {
            epoch_ns: monotonic_ns().div_ceil(1000) * 1000,
            shared: Default::default(),
            thread: None,
            schedules: BTreeMap::new(),
        }
    }

    /// When the first window of a cell placed at `phase_us` opens.
    pub fn origin_ns(&self, phase_us: u32) -> u64 {
        self.epoch_ns + u64::from(phase_us) * 1000
    }

    /// Starts driving `cell`'s windows on `gate`; the cell runs on `cpus`
    /// CPUs. Its gate is shut at once when `now` is between windows (so a
    /// process that joins later never runs outside one).
    pub fn add(&mut self, cell: u64, window: Window, cpus: u32, mut gate: Box<dyn Gate>) {
        let slot = Slot::new(window, cpus, monotonic_ns());
        if slot.closed()
            && let Err(e) = gate.close()
        {
            warn!("cell {cell}: cannot suspend it between windows: {e}");
        }
        self.schedules.insert(cell, window);
        self.shared.lock().cells.insert(
            cell,
            Entry {
                slot,
                gate,
                close_failed: false,
            },
        );
        self.ensure_thread();
        self.shared.wake.notify_one();
    }

    /// Stops driving `cell`'s windows and opens its gate. Returns whether
    /// it was driven.
    pub fn remove(&mut self, cell: u64) -> bool {
        if self.schedules.remove(&cell).is_none() {
            return false;
        }
        let entry = self.shared.lock().cells.remove(&cell);
        match entry {
            Some(mut e) => {
                if let Err(err) = e.gate.open() {
                    warn!("cell {cell}: cannot resume it: {err}");
                }
                self.shared.wake.notify_one();
                true
            }
            None => false,
        }
    }

    /// Whether `cell`'s windows are driven here.
    pub fn holds(&self, cell: u64) -> bool {
        self.schedules.contains_key(&cell)
    }

    /// `cell`'s schedule, if its windows are driven here.
    pub fn window(&self, cell: u64) -> Option<Window> {
        self.schedules.get(&cell).copied()
    }

    /// What `cell` was delivered so far.
    pub fn delivery(&self, cell: u64) -> Option<Delivery> {
        self.shared
            .lock()
            .cells
            .get(&cell)
            .map(|e| e.slot.delivery().clone())
    }

    /// Whether the driver thread runs (it starts with the first cell).
    pub fn running(&self) -> bool {
        self.thread.is_some()
    }

    /// Stops the driver and opens every gate (broker exit: cells that keep
    /// running do so without windows until a broker adopts them).
    pub fn stop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.wake.notify_one();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let mut table = self.shared.lock();
        for (id, e) in table.cells.iter_mut() {
            if let Err(err) = e.gate.open() {
                warn!("cell {id}: cannot resume it: {err}");
            }
        }
        table.cells.clear();
        self.schedules.clear();
        table.stop = false;
    }

    fn ensure_thread(&mut self) {
        if self.thread.is_some() {
            return;
        }
        let shared = self.shared.clone();
        match std::thread::Builder::new()
            .name("allotd-windows".into())
            .spawn(move || drive(&shared))
        {
            Ok(t) => self.thread = Some(t),
            Err(e) => warn!("cannot start the window driver thread: {e}"),
        }
    }
}

impl Drop for Windows {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Makes the calling thread a precise timer: no timer slack, and
/// SCHED_FIFO when the process may use it (`crate::realtime`). Says what
/// it got.
fn sharpen_this_thread() -> String {
    // SAFETY: prctl(PR_SET_TIMERSLACK) on the calling thread takes plain
    // integers.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
    let class = crate::realtime::Class::Fifo(DRIVER_PRIORITY);
    match crate::realtime::set_this_thread(class) {
        Ok(()) => class.to_string(),
        Err(e) => format!(
            "SCHED_OTHER (real-time priority refused: {}; its windows may open late)",
            crate::realtime::refused(&e, DRIVER_PRIORITY)
        ),
    }
}

/// The driver thread.
fn drive(shared: &Shared) {
    info!("window driver started ({})", sharpen_this_thread());
    let mut table = shared.lock();
    loop {
        if table.stop {
            return;
        }
        let now = monotonic_ns();
        let lead = table.lead();
        let horizon = now + lead;
        let early = table.open_early();
        let mut next = u64::MAX;
        let mut costs = Vec::new();
        for (id, e) in table.cells.iter_mut() {
            while let Some(at) = e.slot.next_edge() {
                if at > horizon {
                    next = next.min(at);
                    break;
                }
                costs.extend(perform(*id, e, at, early));
            }
        }
        for c in costs {
            push_bounded(&mut table.open_cost, c);
        }
        if next == u64::MAX {
            table = shared.wake.wait(table).unwrap_or_else(|p| p.into_inner());
            continue;
        }
        let asked = next.saturating_sub(lead);
        let (t, timeout) = shared
            .wake
            .wait_timeout(table, until(monotonic_ns(), asked))
            .unwrap_or_else(|p| p.into_inner());
        table = t;
        if timeout.timed_out() {
            let late = monotonic_ns().saturating_sub(asked);
            table.woke_late_by(late);
        }
    }
}

/// Performs `e`'s edge due at `at` (now or within the lead): an opening
/// reads the cell's usage while the cell is still shut, then waits on the
/// clock until `early` before the edge and opens; a closing acts at once;
/// a check closes again when a thread still runs.
/// Returns how long an opening's gate write took.
fn perform(id: u64, e: &mut Entry, at: u64, early: u64) -> Option<u64> {
    let opening = e.slot.opens_next();
    let usage = if opening { e.gate.usage_ns() } else { None };
    if opening {
        let go = at.saturating_sub(early);
        while monotonic_ns() < go {
            std::hint::spin_loop();
        }
    }
    match e.slot.due(monotonic_ns().max(at), usage) {
        Some(Edge::Open { scheduled_ns }) => {
            let t0 = monotonic_ns();
            if let Err(err) = e.gate.open() {
                warn!("cell {id}: cannot open its window: {err}");
            }
            let done = monotonic_ns();
            e.slot.opened(scheduled_ns, done);
            return Some(done - t0);
        }
        Some(Edge::Close) => close(id, e),
        Some(Edge::Check) if e.gate.stopped() == Some(false) => {
            close(id, e);
            e.slot.resent(monotonic_ns());
        }
        Some(Edge::Check) | None => {}
    }
    None
}

/// Closes `e`'s gate; a failure is logged once per cell.
fn close(id: u64, e: &mut Entry) {
    if let Err(err) = e.gate.close()
        && !e.close_failed
    {
        e.close_failed = true;
        warn!("cell {id}: cannot close its window (it runs on past its budget): {err}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_enforce::{DryRun, Enforcer, GateCall};
    use std::time::Duration;

    #[test]
    fn the_driver_opens_and_closes_a_cell_every_period_and_opens_it_on_removal() {
        let mut dry = DryRun::new();
        let gate = dry.gate(4).unwrap().unwrap();
        let mut w = Windows::new();
        let window = Window {
            origin_ns: monotonic_ns(),
            period_us: 5_000,
            budget_us: 1_000,
        };
        w.add(4, window, 1, gate);
        assert!(w.holds(4));
        assert_eq!(w.window(4), Some(window));
        std::thread::sleep(Duration::from_millis(60));
        assert!(w.remove(4));
        assert!(!w.holds(4));
        let calls = dry.gate_calls();
        let opens = calls.iter().filter(|c| **c == GateCall::Open(4)).count();
        let closes = calls.iter().filter(|c| **c == GateCall::Close(4)).count();
        // About 12 windows in 60 ms; a loaded test machine may delay the
        // thread, so only require that it ran several.
        assert!(opens >= 3 && closes >= 3, "{calls:?}");
        assert_eq!(calls.last(), Some(&GateCall::Open(4)), "removal opens");
        // Edges alternate: never two opens or two closes in a row (the
        // removal's open may follow an open window's).
        for pair in calls[..calls.len() - 1].windows(2) {
            assert_ne!(pair[0], pair[1], "{calls:?}");
        }
        assert!(w.running());
    }

    #[test]
    fn a_close_that_leaves_a_thread_running_is_sent_again() {
        let dry = DryRun::new();
        dry.set_gate_stopped(Some(false));
        let mut w = Windows::new();
        let window = Window {
            origin_ns: monotonic_ns(),
            period_us: 5_000,
            budget_us: 1_000,
        };
        w.add(4, window, 1, dry.clone().gate(4).unwrap().unwrap());
        std::thread::sleep(Duration::from_millis(60));
        let resent = w.delivery(4).unwrap().resent;
        w.remove(4);
        let calls = dry.gate_calls();
        // Every close is checked 0.5 ms later and sent again (then after
        // 1 ms and 2 ms while it still does not land, before the next
        // opening 4 ms after the close).
        let twice = calls
            .windows(2)
            .filter(|p| p[0] == GateCall::Close(4) && p[1] == GateCall::Close(4))
            .count();
        assert!(resent >= 3 && twice >= 3, "{resent} {calls:?}");

        // A gate that reports its cell stopped gets each close once.
        let dry = DryRun::new();
        dry.set_gate_stopped(Some(true));
        let mut w = Windows::new();
        w.add(5, window, 1, dry.clone().gate(5).unwrap().unwrap());
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(w.delivery(5).unwrap().resent, 0);
        w.remove(5);
        let calls = dry.gate_calls();
        // (The removal's open may follow an open window's.)
        for pair in calls[..calls.len() - 1].windows(2) {
            assert_ne!(pair[0], pair[1], "{calls:?}");
        }
    }

    #[test]
    fn stopping_opens_every_gate() {
        let mut dry = DryRun::new();
        let mut w = Windows::new();
        for id in [1, 2] {
            let window = Window {
                // Far in the future: both cells wait, shut.
                origin_ns: monotonic_ns() + 3_600_000_000_000,
                period_us: 10_000,
                budget_us: 2_000,
            };
            w.add(id, window, 1, dry.gate(id).unwrap().unwrap());
        }
        assert_eq!(
            dry.gate_calls(),
            vec![GateCall::Close(1), GateCall::Close(2)],
            "a cell between windows is shut at once"
        );
        w.stop();
        let calls = dry.gate_calls();
        assert!(calls.contains(&GateCall::Open(1)) && calls.contains(&GateCall::Open(2)));
        assert!(!w.holds(1));
    }
}
