//! The broker's event loop: one thread, one epoll set.
//!
//! - this file: the loop, ticks, process exits, and start-up's order;
//! - `setup`: start-up's steps (the socket and state directory claimed,
//!   the journal opened, the listener, the timers) and why it can fail;
//! - `accept`: new connections, per-user connection limits, running out
//!   of descriptors;
//! - `session`: reading requests within each user's turn, queueing and
//!   flushing replies;
//! - `activation`: serving a socket systemd passed (`allotd.socket`).
//!
//! Sources, each with an epoll token:
//!
//! | source          | token            | on readiness                                |
//! |-----------------|------------------|---------------------------------------------|
//! | listening socket| `LISTENER`       | accept, record peer credentials              |
//! | monitor timerfd | `TIMER`          | `Engine::tick` (usage → demand → re-plan)      |
//! | gathering timerfd | `GATHER`       | `Engine::gathered` (arrivals whose turn came)  |
//! | stop pipe       | `STOP`           | leave the loop (signals write to it)         |
//! | metrics pipe    | `METRICS`        | a scrape waits: publish a metrics snapshot   |
//! | client socket   | `SESSION | id`   | requests within its user's turn budget       |
//! | pidfd           | `PIDFD | pid`    | `Engine::exited` (reclaim in the same step)    |
//! | channel doorbell| `DOORBELL | cell`| `Engine::doorbell` (wake an idle message-triggered cell) |
//!
//! # Fairness
//!
//! Each loop iteration (a *turn*) serves every user at most [`USER_TURN`]
//! units of requests, across all of that user's connections: a status or
//! kind listing (whose cost grows with the cells) counts
//! [`EXPENSIVE`] units, anything else one. Epoll is level-triggered, so
//! requests left over wait in their sockets for the next turn. A user who
//! floods the broker from as many connections as it may open is therefore
//! served no faster than one with one busy connection, and everyone else's
//! requests are served within a turn or two (`allot bench load` measures
//! it). Replies are queued per session and flushed when the
//! socket is writable; a client whose queue exceeds [`MAX_QUEUED_BYTES`]
//! is disconnected (it is not reading them).
//!
//! # Connections
//!
//! Each user may keep `limits.connections` connections open (root is
//! exempt); one more is accepted, answered with an `ErrorCode::Limit`
//! error that says so, and closed. When the process runs out of file
//! descriptors, the listener is taken out of the epoll set for a back-off
//! that doubles up to [`ACCEPT_BACKOFF_MAX`] (a level-triggered listener
//! that cannot accept would otherwise wake the loop forever), and every
//! waiting client is told why, through a descriptor kept in reserve for
//! exactly that, instead of hanging. Such conditions are logged at most
//! once per [`LOG_EVERY`], with a count of what was held back.
//!
//! # Datagrams
//!
//! An empty datagram (not end of stream: the peer is still there) and one
//! that does not decode are answered with an error, unless its header
//! names a one-way kind (`allot_proto::msg::kind_expects_reply`).
//!
//! Processes without a pidfd (kernels before 5.3) are polled through `/proc`
//! on every tick instead.

mod accept;
mod activation;
mod notify;
mod session;
mod setup;

use accept::open_spare;
pub use session::{EXPENSIVE, MAX_QUEUED_BYTES, USER_TURN};
pub use setup::StartError;
use setup::other;

use crate::config::Config;
use crate::core::{Effect, Engine};
use crate::journal::Journal;
use crate::log::{Throttle, info, warn};
use crate::metrics::Exporter;
use crate::peer::{Peer, SessionId};
use crate::realtime::{Change, LoopClass, this_thread_cpu};
use allot_enforce::os::{Os, RealOs};
use allot_proto::msg::MAX_MESSAGE;
use rustix::event::epoll::{self, CreateFlags, Event, EventData, EventFlags};
use rustix::fd::{AsFd, AsRawFd, OwnedFd};
use rustix::time::{Itimerspec, TimerfdTimerFlags, Timespec};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

const LISTENER: u64 = 1;
const TIMER: u64 = 2;
const STOP: u64 = 3;
const METRICS: u64 = 4;
const GATHER: u64 = 5;
const SESSION: u64 = 1 << 62;
const PIDFD: u64 = 2 << 62;
const DOORBELL: u64 = 3 << 62;
const KIND_MASK: u64 = 3 << 62;

/// First pause of the listener when descriptors run out.
const ACCEPT_BACKOFF_MIN: Duration = Duration::from_millis(25);
/// Longest pause of the listener.
pub const ACCEPT_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// At most one log line per condition this often.
pub const LOG_EVERY: Duration = Duration::from_secs(10);

#[derive(Debug)]
struct Session {
    sock: OwnedFd,
    peer: Peer,
    /// The connecting process's pidfd (`SO_PEERPIDFD`, Linux 6.5), asked
    /// with every message whether that process still runs
    /// ([`Peer::runs`]); `None` on older kernels.
    pidfd: Option<OwnedFd>,
    out: VecDeque<(Vec<u8>, Vec<OwnedFd>)>,
    out_bytes: usize,
    writable_wanted: bool,
}

/// The listener taken out of the epoll set until `until`.
#[derive(Debug, Clone, Copy)]
struct Paused {
    until: Instant,
}

/// A running broker: the state plus its event sources.
#[derive(Debug)]
pub struct Broker {
    core: Engine,
    /// The journal the engine's records are appended to (`Effect::Journal`).
    journal: Journal,
    cfg: Config,
    epoll: OwnedFd,
    listener: OwnedFd,
    timer: OwnedFd,
    /// One-shot timer for the next gathered arrival due.
    gather_timer: OwnedFd,
    /// The instant `gather_timer` is armed for (`None`: disarmed).
    gather_armed: Option<Instant>,
    stop_r: OwnedFd,
    stop_w: Arc<OwnedFd>,
    sessions: HashMap<SessionId, Session>,
    pidfds: HashMap<u32, OwnedFd>,
    /// Doorbells polled for idle message-triggered cells, by cell.
    doorbells: HashMap<u64, Vec<OwnedFd>>,
    polled: HashSet<u32>,
    next_session: SessionId,
    socket_ino: Option<u64>,
    _lock: OwnedFd,
    buf: Vec<u8>,
    /// Open connections per uid.
    conns: HashMap<u32, u32>,
    /// A descriptor kept free to answer one client when none is left.
    spare: Option<OwnedFd>,
    paused: Option<Paused>,
    backoff: Duration,
    fd_log: Throttle,
    limit_log: Throttle,
    slow_log: Throttle,
    /// Units served per uid in this turn.
    turn: HashMap<u32, u32>,
    /// The metrics endpoint, when configured.
    exporter: Option<Exporter>,
    /// The service manager's readiness and watchdog protocol (`notify`).
    notifier: notify::Notifier,
}

/// Stops a running broker from another thread or a signal handler.
#[derive(Debug, Clone)]
pub struct StopHandle {
    w: Arc<OwnedFd>,
}

impl StopHandle {
    /// Asks the broker to leave its loop.
    pub fn stop(&self) {
        let _ = rustix::io::write(&*self.w, b"x");
    }

    /// The raw write end, for `signal_hook::low_level::pipe::register_raw`.
    pub fn raw_fd(&self) -> i32 {
        self.w.as_raw_fd()
    }
}

fn add(ep: &OwnedFd, fd: impl AsFd, token: u64, flags: EventFlags) -> std::io::Result<()> {
    epoll::add(ep, fd, EventData::new_u64(token), flags)?;
    Ok(())
}

impl Broker {
    /// Sets everything up: topology, backend, journal (adopting surviving
    /// cells), the socket. Fails if another broker serves the socket.
    pub fn start(cfg: Config) -> Result<Broker, StartError> {
        let claimed = setup::claim(&cfg)?;
        let machine = cfg.machine().map_err(other)?;
        let (enforcer, notes) = allot_enforce::open(
            cfg.backend,
            &allot_enforce::OpenOptions {
                cgroup_name: cfg.cgroup_name(),
                cgroup2_root: cfg.cgroup2_root.clone(),
                usable: *machine.usable(),
            },
        )
        .map_err(|e| other(format!("cannot set up the {} backend: {e}", cfg.backend)))?;
        for n in &notes {
            info!("{n}");
        }
        let mut journal = setup::open_journal(&cfg)?;
        raise_fd_limit();
        let os: Arc<dyn Os> = Arc::new(RealOs);
        let (mut core, mut effects) = Engine::new(&cfg, machine, enforcer, os, Some(&journal));
        // What the restore decided is written now, before anything below
        // can fail: the rest (pids to watch) waits for the event loop.
        effects.retain(|e| match e {
            Effect::Journal(recs) => {
                append_logged(&mut journal, recs);
                false
            }
            _ => true,
        });
        let restored = core.journaled(&[], Duration::ZERO, journal.problem().map(str::to_string));
        debug_assert!(restored.is_empty());
        core.set_backend_notes(notes);
        core.batch_arrivals(true);

        let exporter = match cfg.metrics {
            Some(addr) => Some(Exporter::start(addr).map_err(|e| {
                other(format!(
                    "cannot serve metrics on {addr}: {e} (is the port in use? choose another \
                     with --metrics or `metrics =` in the config)"
                ))
            })?),
            None => None,
        };
        let epoll = epoll::create(CreateFlags::CLOEXEC).map_err(other)?;
        let (listener, socket_ino) = setup::listen(&cfg, claimed.activated, claimed.private)?;
        add(&epoll, &listener, LISTENER, EventFlags::IN).map_err(other)?;
        let (timer, gather_timer) = setup::timers(cfg.tick)?;
        add(&epoll, &timer, TIMER, EventFlags::IN).map_err(other)?;
        add(&epoll, &gather_timer, GATHER, EventFlags::IN).map_err(other)?;
        let (stop_r, stop_w) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )
        .map_err(other)?;
        add(&epoll, &stop_r, STOP, EventFlags::IN).map_err(other)?;
        if let Some(x) = &exporter {
            add(&epoll, x.wake_fd(), METRICS, EventFlags::IN).map_err(other)?;
            info!("metrics at http://{}/metrics", x.addr());
        }

        let mut b = Broker {
            core,
            journal,
            cfg,
            epoll,
            listener,
            timer,
            gather_timer,
            gather_armed: None,
            stop_r,
            stop_w: Arc::new(stop_w),
            sessions: HashMap::new(),
            pidfds: HashMap::new(),
            doorbells: HashMap::new(),
            polled: HashSet::new(),
            next_session: 1,
            socket_ino,
            _lock: claimed.lock,
            buf: vec![0; MAX_MESSAGE + 1],
            conns: HashMap::new(),
            spare: open_spare(),
            paused: None,
            backoff: ACCEPT_BACKOFF_MIN,
            fd_log: Throttle::new(LOG_EVERY),
            limit_log: Throttle::new(LOG_EVERY),
            slow_log: Throttle::new(LOG_EVERY),
            turn: HashMap::new(),
            exporter,
            notifier: notify::Notifier::from_env(),
        };
        b.apply(effects);
        info!(
            "serving {} on {} with the {} backend; {} CPUs for cells",
            b.core.machine.summary(),
            b.cfg.socket.display(),
            b.core.backend(),
            b.core.planner.capacity()
        );
        let status = format!(
            "serving {} cells on {} CPUs with the {} backend",
            b.core.cells.len(),
            b.core.planner.capacity(),
            b.core.backend()
        );
        b.notifier.ready(&status);
        Ok(b)
    }

    /// A handle that stops the loop.
    pub fn stop_handle(&self) -> StopHandle {
        StopHandle {
            w: self.stop_w.clone(),
        }
    }

    /// Runs until stopped (signal, `Shutdown` request, or idle exit).
    pub fn run(mut self) -> std::io::Result<()> {
        let mut events: Vec<Event> = Vec::with_capacity(256);
        let mut idle_since: Option<Instant> = None;
        let (mut class, change) =
            LoopClass::start(self.cfg.realtime, Instant::now(), this_thread_cpu());
        match change {
            Some(c) => log_class_change(&c),
            None => info!("event loop: {} (realtime = false)", class.class()),
        }
        loop {
            events.clear();
            self.arm_gather_timer();
            let timeout = Timespec {
                tv_sec: 1,
                tv_nsec: 0,
            };
            match epoll::wait(
                &self.epoll,
                rustix::buffer::spare_capacity(&mut events),
                Some(&timeout),
            ) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let mut stop = false;
            let busy_since = Instant::now();
            self.turn.clear();
            for ev in events.iter() {
                let token = ev.data.u64();
                let flags = ev.flags;
                match token & KIND_MASK {
                    SESSION => self.on_session(token & !KIND_MASK, flags),
                    PIDFD => {
                        let pid = (token & !KIND_MASK) as u32;
                        let effects = self.core.exited(pid);
                        self.apply(effects);
                    }
                    DOORBELL => {
                        let cell = token & !KIND_MASK;
                        self.forget_doorbells(cell);
                        let effects = self.core.doorbell(cell);
                        self.apply(effects);
                    }
                    _ => match token {
                        LISTENER => self.accept(),
                        TIMER => {
                            let mut b = [0u8; 8];
                            let _ = rustix::io::read(&self.timer, &mut b);
                            self.on_tick();
                        }
                        GATHER => {
                            // Answered below, with any other arrival due.
                            let mut b = [0u8; 8];
                            let _ = rustix::io::read(&self.gather_timer, &mut b);
                            self.gather_armed = None;
                        }
                        STOP => {
                            let mut b = [0u8; 64];
                            let _ = rustix::io::read(&self.stop_r, &mut b);
                            stop = true;
                        }
                        METRICS => {
                            if let Some(x) = self.exporter.as_ref().filter(|x| x.wanted()) {
                                x.publish(&self.core.metrics_snapshot());
                            }
                        }
                        _ => {}
                    },
                }
            }
            // Arrivals whose turn came while the loop waited or served.
            if self
                .core
                .next_gathered()
                .is_some_and(|t| t <= Instant::now())
            {
                let effects = self.core.gathered(Instant::now());
                self.apply(effects);
            }
            // The cells admitted in this turn join together.
            let effects = self.core.settle();
            self.apply(effects);
            self.core.between_turns();
            if !events.is_empty() {
                self.core.counters.turn.observe(busy_since.elapsed());
            }
            if let Some(c) = class.turn(Instant::now(), this_thread_cpu) {
                log_class_change(&c);
            }
            if stop || self.core.stop_requested() {
                break;
            }
            if let Some(limit) = self.cfg.idle_exit {
                if self.core.idle() && self.sessions.is_empty() {
                    let since = *idle_since.get_or_insert_with(Instant::now);
                    if since.elapsed() >= limit {
                        info!("idle for {:?}; exiting", limit);
                        break;
                    }
                } else {
                    idle_since = None;
                }
            }
        }
        self.finish();
        Ok(())
    }

    fn finish(&mut self) {
        self.notifier.stopping();
        // Flush what we can (a Shutdown reply, for one).
        let ids: Vec<SessionId> = self.sessions.keys().copied().collect();
        for id in ids {
            self.flush(id);
        }
        let effects = self.core.shutdown();
        self.apply(effects);
        // Remove the socket only if it is still ours.
        let ours = std::fs::metadata(&self.cfg.socket)
            .map(|m| Some(std::os::unix::fs::MetadataExt::ino(&m)) == self.socket_ino)
            .unwrap_or(false);
        if ours {
            let _ = std::fs::remove_file(&self.cfg.socket);
        }
        info!("stopped");
    }

    /// Arms the gathering timer for the engine's next arrival due (or
    /// disarms it), unless it is armed for that instant already.
    fn arm_gather_timer(&mut self) {
        let due = self.core.next_gathered();
        if due == self.gather_armed {
            return;
        }
        let after = due.map_or(Duration::ZERO, |t| {
            t.saturating_duration_since(Instant::now())
                .max(Duration::from_nanos(1))
        });
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let value = Timespec {
            tv_sec: after.as_secs() as i64,
            tv_nsec: after.subsec_nanos() as _,
        };
        let armed = rustix::time::timerfd_settime(
            &self.gather_timer,
            TimerfdTimerFlags::empty(),
            &Itimerspec {
                it_interval: zero,
                it_value: value,
            },
        );
        match armed {
            Ok(_) => self.gather_armed = due,
            Err(e) => warn!("gathering timer: {e}"),
        }
    }

    fn on_tick(&mut self) {
        self.catch_up_journal();
        self.notifier.tick(Instant::now());
        self.resume_listener(Instant::now());
        // Exit polling for processes without a pidfd.
        let gone: Vec<u32> = self
            .polled
            .iter()
            .copied()
            .filter(|&p| !self.core.os().alive(p))
            .collect();
        for pid in gone {
            self.polled.remove(&pid);
            let effects = self.core.exited(pid);
            self.apply(effects);
        }
        let effects = self.core.tick(Instant::now());
        self.apply(effects);
    }

    /// Appends a step's records (`Effect::Journal`, [`append_logged`]) and
    /// tells the engine how it went.
    pub(super) fn record(&mut self, recs: &[crate::journal::Record]) {
        let started = Instant::now();
        append_logged(&mut self.journal, recs);
        let took = started.elapsed();
        let behind = self.journal.problem().map(str::to_string);
        // A newcomer whose record did not reach the file is refused.
        let effects = self.core.journaled(recs, took, behind);
        self.apply(effects);
    }

    /// A journal that is behind tries to catch up (a rewrite of its whole
    /// state), before a registration is handled and on every tick:
    /// admission waits for it.
    pub(super) fn catch_up_journal(&mut self) {
        if self.journal.problem().is_none() {
            return;
        }
        if self.journal.writable() {
            info!(
                "the journal {} is written again",
                self.journal.path().display()
            );
        }
        let behind = self.journal.problem().map(str::to_string);
        let effects = self.core.journaled(&[], Duration::ZERO, behind);
        self.apply(effects);
    }

    /// Polls `fds` for cell `cell` (level-triggered; never read here).
    pub(super) fn watch_doorbells(&mut self, cell: u64, fds: Vec<OwnedFd>) {
        self.forget_doorbells(cell);
        let mut kept = Vec::new();
        for fd in fds {
            if add(&self.epoll, &fd, DOORBELL | cell, EventFlags::IN).is_ok() {
                kept.push(fd);
            }
        }
        self.doorbells.insert(cell, kept);
    }

    pub(super) fn forget_doorbells(&mut self, cell: u64) {
        for fd in self.doorbells.remove(&cell).unwrap_or_default() {
            let _ = epoll::delete(&self.epoll, &fd);
        }
    }

    fn watch(&mut self, pid: u32) {
        if self.pidfds.contains_key(&pid) {
            return;
        }
        let Some(p) = rustix::process::Pid::from_raw(pid as i32) else {
            return;
        };
        match rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()) {
            Ok(fd) => {
                if add(&self.epoll, &fd, PIDFD | pid as u64, EventFlags::IN).is_ok() {
                    self.pidfds.insert(pid, fd);
                } else {
                    self.polled.insert(pid);
                }
            }
            Err(rustix::io::Errno::SRCH) => {
                let effects = self.core.exited(pid);
                self.apply(effects);
            }
            Err(_) => {
                // No pidfd support: poll /proc on every tick.
                self.polled.insert(pid);
            }
        }
    }

    /// The socket this broker serves.
    pub fn socket(&self) -> &Path {
        &self.cfg.socket
    }

    /// Where metrics are served, if they are (the port the kernel chose
    /// when the configuration gave port 0).
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.exporter.as_ref().map(Exporter::addr)
    }

    /// The tick period.
    pub fn tick(&self) -> Duration {
        self.cfg.tick
    }
}

/// Says in the log what became of the event loop's class.
fn log_class_change(c: &Change) {
    match c {
        Change::Promoted => info!(
            "event loop: SCHED_FIFO {} (while it uses under {:.0} % of a CPU)",
            crate::realtime::LOOP_PRIORITY,
            crate::realtime::DEMOTE_ABOVE * 100.0
        ),
        Change::Demoted { busy } => warn!(
            "event loop: used {:.0} % of a CPU over the last second; back to SCHED_OTHER until \
             a second under {:.0} %",
            busy * 100.0,
            crate::realtime::PROMOTE_BELOW * 100.0
        ),
        Change::Refused(e) => info!(
            "event loop: SCHED_OTHER (real-time priority refused: {e}; or set realtime = \
             false to keep it ordinary)"
        ),
    }
}

/// Appends `recs` to `journal`; a failure is logged when the journal
/// falls behind (once, not per record), and so is its catching up.
fn append_logged(journal: &mut Journal, recs: &[crate::journal::Record]) {
    let behind = journal.problem().is_some();
    match (journal.append(recs), behind) {
        (Err(e), false) => warn!(
            "cannot write the journal {} ({e}): a restart would lose recent changes; \
             no new cells are admitted until it can be written (free space on its filesystem)",
            journal.path().display()
        ),
        (Ok(()), true) => info!("the journal {} is written again", journal.path().display()),
        _ => {}
    }
}

/// Raises the soft limit on open files to the hard limit: every client
/// connection and pidfd is a descriptor.
fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        // `None` is unlimited.
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}
