//! The program's life under `allot run`: started (inside its cgroup v2
//! cell directly where the broker handed over the directory), watched,
//! its signals forwarded, the jobserver kept in step with the grant, and
//! its end passed on as `allot run`'s own.
//!
//! A short program ends before anything more is needed: the threads that
//! forward signals, follow the grant for the jobserver and rejoin a
//! restarted broker start only once it has run for [`HELPERS_AFTER`]
//! (each would cost its start and, at the end, its join, while competing
//! with the program for the CPUs); until then signals are forwarded from
//! the waiting thread. At the end nothing is released or dropped that the
//! exit reclaims anyway: the broker ends the cell when its last member
//! exits.

use super::channels::Held;
use super::jobserver::Jobserver;
use super::timeline::{self, Marks};
use super::{spawn, warn};
use allot_client::Cell;
use allot_proto::EXIT_ALLOT;
use std::ffi::{OsStr, OsString};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long the program runs before `allot run` starts its helper threads.
pub(super) const HELPERS_AFTER: Duration = Duration::from_millis(10);

/// The program to start and what comes with it.
pub(super) struct Launch {
    /// The program's path, its name as typed (`argv[0]`), its arguments.
    pub program: PathBuf,
    pub cmd: OsString,
    pub args: Vec<OsString>,
    /// The variables `allot run` sets (the rest is inherited).
    pub vars: Vec<(String, OsString)>,
    /// The cell (`None`: unconfined).
    pub cell: Option<Cell>,
    /// The jobserver, and the most jobs it hands out.
    pub jobserver: Option<Jobserver>,
    pub cap: Option<usize>,
    /// The grant page's descriptor the program inherits, closed here once
    /// it started.
    pub page_fd: Option<rustix::fd::OwnedFd>,
    /// Channel ends held open until the program exits.
    pub channels: Option<Held>,
    /// `--memory-max`, to say so when the program dies at it.
    pub memory_max: Option<u64>,
    /// `--timeline`: the broker's socket, to fetch the cell's steps.
    pub timeline: Option<PathBuf>,
    /// Create the program on this process's CPU (`spawn::spawn_here`:
    /// only where the cell's cpuset alone limits this process).
    pub on_this_cpu: bool,
}

/// Starts the program and sees it through; exits like it did (the return
/// value is `allot run`'s exit code where it could not start it).
pub(super) fn run(l: Launch, mut marks: Marks) -> i32 {
    let Launch {
        program,
        cmd,
        args,
        vars,
        cell,
        mut jobserver,
        cap,
        page_fd,
        channels,
        memory_max,
        timeline,
        on_this_cpu,
    } = l;
    // Handlers go in before the program exists, so an early Ctrl-C cannot
    // kill this process first; signals wait in the handler's pipe until
    // they can be forwarded to the program's pid.
    let mut signals = signal_setup();
    marks.mark("spawning the program");
    let mut child = match start(&program, &cmd, &args, vars, cell.as_ref(), on_this_cpu) {
        Ok(c) => c,
        Err(code) => return code,
    };
    drop(page_fd);
    let pid = child.id();
    marks.mark(format!("program started (process {pid})"));
    // OOM kills in the program's cell memory group so far, to tell
    // afterwards whether a SIGKILL came from its limit.
    let oom_before = memory_max.and_then(|_| {
        let group = allot_enforce::memory::cell_group_of(pid)?;
        let kills = allot_enforce::memory::oom_kills(&group)?;
        Some((group, kills))
    });
    // The program is confined already (forked from this process, inside the
    // cell): adding it as a member only lets the broker watch it, so the
    // answer is not waited for. Should it fail, the broker still finds it
    // in the cell when this process exits.
    if let Some(c) = &cell
        && let Err(e) = c.add_member_nowait(pid)
    {
        warn(format!(
            "cannot ask the broker to watch the program ({e}); it stays confined through this process"
        ));
    }

    let ended_early = ends_within(pid, HELPERS_AFTER, signals.as_mut());
    // Where the program ended already, the handlers stay registered until
    // this process exits (a Ctrl-C now must not kill it first).
    let (forward, _signals) = match signals {
        Some(s) if !ended_early => (Some(forward_signals(s, pid)), None),
        other => (None, other),
    };
    if let Some(c) = cell.as_ref().filter(|_| !ended_early) {
        c.watch();
    }
    let done = Arc::new(AtomicBool::new(false));
    let follower = match (&cell, ended_early) {
        (Some(c), false) => jobserver.take().map(|j| {
            let (c, d) = (c.clone(), done.clone());
            std::thread::spawn(move || follow(c, j, cap, pid, d))
        }),
        _ => None,
    };

    let status = loop {
        match child.wait() {
            Ok(s) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("allot: cannot wait for the program: {e}");
                return EXIT_ALLOT;
            }
        }
    };
    marks.mark("program exited");
    done.store(true, Ordering::Release);
    if let Some(f) = follower {
        if let Some(c) = &cell {
            c.interrupt_waits(); // the follower stops now, not at its next tick
        }
        // Joined: the jobserver it holds removes its fifo when dropped.
        let _ = f.join();
    }
    if let Some(h) = forward {
        h.close();
    }
    drop(channels);
    if let Some(socket) = &timeline {
        match &cell {
            Some(c) => timeline::report(socket, c.id(), pid, &marks),
            None => eprintln!("allot: no timeline: the program ran outside any cell"),
        }
    }
    if status.signal() == Some(libc::SIGKILL)
        && let (Some(max), Some((group, before))) = (memory_max, &oom_before)
        && allot_enforce::memory::oom_kills(group).is_some_and(|now| now > *before)
    {
        eprintln!(
            "allot: {}: killed: out of memory at its {} limit (--memory-max); give it more \
             or make it use less",
            cmd.to_string_lossy(),
            allot_spec::Size(max)
        );
    }
    // No release: this process and the program are the cell's members, and
    // the broker ends the cell the moment the last of them exits.
    if let Some(c) = cell {
        c.leave_at_exit();
    }
    // The jobserver's fifo (if any) goes with it; everything else (the
    // signal handlers, descriptors, memory) the exit reclaims, sooner
    // than dropping it one by one would.
    drop(jobserver);
    std::process::exit(exit_like(status))
}

/// Starts the program: inside its cell's cgroup v2 directory where the
/// broker handed it over (`spawn::spawn_into`), else from this process
/// (inside the cell already): on this CPU where `on_this_cpu`
/// (`spawn::spawn_here`), else, or where that could not create it, by
/// `std::process::Command`. A failure is the exit code, its reason
/// printed.
fn start(
    program: &Path,
    cmd: &OsStr,
    args: &[OsString],
    vars: Vec<(String, OsString)>,
    cell: Option<&Cell>,
    on_this_cpu: bool,
) -> Result<Program, i32> {
    let cannot_run = |e: std::io::Error| {
        eprintln!("allot: cannot run '{}': {e}", cmd.to_string_lossy());
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            126
        } else {
            127
        }
    };
    // The whole environment, for the raw spawns (`Command` builds its own).
    let env = || {
        let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
        for (k, v) in &vars {
            env.retain(|(ek, _)| ek.as_os_str() != OsStr::new(k));
            env.push((k.into(), v.clone()));
        }
        env
    };
    if let Some(dir) = cell.and_then(|c| c.take_spawn_cgroup()) {
        match spawn::spawn_into(std::os::fd::AsFd::as_fd(&dir), program, cmd, args, &env()) {
            Ok(pid) => return Ok(Program::Raw(pid)),
            Err(spawn::SpawnError::Exec(e)) => return Err(cannot_run(e)),
            Err(spawn::SpawnError::Clone(e)) => {
                // Not started: the broker moves this process in, and the
                // program starts from it as usual.
                warn(format!(
                    "cannot start the program inside its cell directly ({e}); \
                     joining the cell first"
                ));
                if let Some(c) = cell
                    && let Err(e) = c.add_member(std::process::id())
                {
                    eprintln!("allot: cannot join the cell: {e}");
                    return Err(EXIT_ALLOT);
                }
            }
        }
    }
    if on_this_cpu {
        match spawn::spawn_here(program, cmd, args, &env()) {
            Ok(pid) => return Ok(Program::Raw(pid)),
            Err(spawn::SpawnError::Exec(e)) => return Err(cannot_run(e)),
            Err(spawn::SpawnError::Clone(_)) => {}
        }
    }
    let mut command = std::process::Command::new(program);
    command.arg0(cmd).args(args).envs(vars);
    command.spawn().map(Program::Std).map_err(cannot_run)
}

/// Whether process `pid` (this process's child, not yet reaped) ends
/// within `limit`, forwarding the termination signals this process
/// receives meanwhile. `false` when that cannot be watched (no pidfd).
fn ends_within(
    pid: u32,
    limit: Duration,
    mut signals: Option<&mut signal_hook::iterator::Signals>,
) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let Some(fd) = rustix::process::Pid::from_raw(pid as i32)
        .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
    else {
        return false;
    };
    let deadline = std::time::Instant::now() + limit;
    loop {
        if let Some(s) = signals.as_deref_mut() {
            s.pending().for_each(|sig| forward_one(sig, pid));
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return false;
        }
        let timeout = Timespec::try_from(left).ok();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        match poll(&mut fds, timeout.as_ref()) {
            Ok(n) if n > 0 => return true,
            // A timeout, or a signal (forwarded at the top).
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return false,
        }
    }
}

fn signal_setup() -> Option<signal_hook::iterator::Signals> {
    use signal_hook::consts::*;
    signal_hook::iterator::Signals::new([SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT]).ok()
}

/// Forwards signal `sig` to `pid`: SIGTERM, SIGHUP, SIGUSR1 and SIGUSR2.
/// SIGINT and SIGQUIT reach the program from the terminal directly (same
/// process group), so they are only kept from killing `allot run`.
fn forward_one(sig: i32, pid: u32) {
    use signal_hook::consts::*;
    if sig == SIGINT || sig == SIGQUIT {
        return;
    }
    if let (Some(p), Some(s)) = (
        rustix::process::Pid::from_raw(pid as i32),
        rustix::process::Signal::from_named_raw(sig),
    ) {
        let _ = rustix::process::kill_process(p, s);
    }
}

/// Forwards the termination signals to `pid` from a thread of its own
/// ([`forward_one`]). Closing the handle stops forwarding.
fn forward_signals(
    mut signals: signal_hook::iterator::Signals,
    pid: u32,
) -> signal_hook::iterator::Handle {
    let handle = signals.handle();
    std::thread::spawn(move || {
        for sig in signals.forever() {
            forward_one(sig, pid);
        }
    });
    handle
}

/// Keeps the jobserver in step with the grant until `done`.
///
/// While tokens are being withheld the follower sits in `poll` on the pipe,
/// so a token a client writes back is taken before the client's next read
/// (make returns a token when it reaps a job and reads again only after its
/// bookkeeping); otherwise it sleeps on the grant page's futex.
fn follow(cell: Cell, mut js: Jobserver, cap: Option<usize>, pid: u32, done: Arc<AtomicBool>) {
    const TICK: Duration = Duration::from_millis(50);
    const LEAK_CHECK: Duration = Duration::from_millis(250);
    let os = allot_enforce::os::RealOs;
    let mut seen = 0;
    let mut last_check = std::time::Instant::now();
    while !done.load(Ordering::Acquire) {
        let g = if js.withholding() {
            js.wait_returned(Duration::from_millis(5));
            cell.grant()
        } else {
            cell.wait_change(seen, Some(TICK))
        };
        if g.generation != seen {
            seen = g.generation;
            let slots = cap
                .map_or(g.threads as usize, |c| c.min(g.threads as usize))
                .max(1);
            let _ = js.set_slots(slots);
        }
        js.withhold();
        if last_check.elapsed() >= LEAK_CHECK {
            last_check = std::time::Instant::now();
            let n = js.check_leaks(&os, pid);
            if n > 0 {
                warn(format!(
                    "{n} jobserver token(s) were lost with a client that died; restored"
                ));
            }
        }
    }
}

/// The program: created by `spawn`, or started by
/// `std::process::Command`.
enum Program {
    Std(std::process::Child),
    Raw(u32),
}

impl Program {
    fn id(&self) -> u32 {
        match self {
            Program::Std(c) => c.id(),
            Program::Raw(pid) => *pid,
        }
    }

    fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Program::Std(c) => c.wait(),
            Program::Raw(pid) => spawn::wait(*pid),
        }
    }
}

/// Exits like the program did: same code, or death by the same signal.
fn exit_like(status: std::process::ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return code;
    }
    if let Some(sig) = status.signal() {
        // Restore the default action and deliver the signal to ourselves so
        // the shell sees the same death (and prints "Killed", etc.).
        // SAFETY: resetting a disposition and raising a signal have no
        // memory-safety preconditions.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return 128 + sig;
    }
    EXIT_ALLOT
}
