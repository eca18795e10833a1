//! `allot run`: an unmodified program in a cell.
//!
//! Steps:
//!
//! 1. Resolve the command like `env` does (unknown: exit 127; not
//!    executable: 126) before anything else, so a typo creates no cell.
//! 2. Make sure a broker answers (starting a user-mode one on first use);
//!    if none can be had, run the program unconfined with a warning — never
//!    refuse to run it.
//! 3. Register a cell with this process as its member: the broker confines
//!    this process *before* the program exists, so the program, forked from
//!    it, inherits the cell's cgroup and CPUs and runs its first instruction
//!    inside. Then the program is added as a member so the broker watches it.
//! 4. Start the program with the thread-count variables, the cell's grant
//!    page (`ALLOT_GRANT_FD`), its jobserver and the OpenMP shim.
//! 5. Follow the grant: jobserver tokens track it; a broker restart is
//!    survived (the client library rejoins, handing the page back).
//! 6. Pass the exit status through (a program killed by a signal makes
//!    `allot run` die of the same signal), forward termination signals, and
//!    release the cell.

mod autostart;
mod channels;
mod contract;
pub mod env;
pub mod jobserver;
pub mod makeargs;
mod nested;
pub mod resolve;
mod spawn;
mod timeline;

use allot_client::{Cell, ClientError, Options, Wait};
use allot_plan::{CellSpec, Placement};
use allot_proto::dirs::{DirError, Trust, TrustedDir};
use allot_proto::msg::ErrorCode;
use env::{CellEnv, LaunchRule};
use jobserver::{Jobserver, Style};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

pub use allot_proto::EXIT_ALLOT;

/// Arguments of `allot run`.
#[derive(Debug, clap::Args)]
#[command(trailing_var_arg = true)]
pub struct Args {
    /// CPUs guaranteed to the program (0: best effort).
    #[arg(long, default_value_t = 0, value_name = "N")]
    min: u32,
    /// Most CPUs the program may hold (0: the whole machine).
    #[arg(long, default_value_t = 0, value_name = "N")]
    max: u32,
    /// Share of contended CPUs relative to other cells (1-10000).
    #[arg(long, default_value_t = 1, value_name = "W")]
    weight: u32,
    /// Hold CPUs no other cell may use (implies at least one guaranteed).
    #[arg(long)]
    exclusive: bool,
    /// A partition: N CPUs of the program's own (exclusive, --min N
    /// --max N) whose runtime workers poll instead of sleeping (allot's
    /// pools: ALLOT_POOL_POLL=1; OpenMP: OMP_WAIT_POLICY=active). With
    /// `isolate = true` in the broker's configuration, interrupts and
    /// kernel workqueues are kept off them too.
    #[arg(long, value_name = "N", conflicts_with_all = ["min", "max", "exclusive", "fraction", "period", "message_idle"])]
    partition: Option<u32>,
    /// Keep the CPUs within one last-level cache or NUMA node when they fit.
    #[arg(long, default_value = "any", value_name = "any|llc|numa", value_parser = crate::cmd::choice::<Placement>(&["any", "llc", "numa"]))]
    place: Placement,
    /// Time-triggered: the program gets --budget every PERIOD on each of
    /// its --cpus, all of its threads in the same window (e.g. 10ms).
    #[arg(long, value_name = "DURATION", help_heading = "Time contracts")]
    period: Option<String>,
    /// Time-triggered: CPU time per period (e.g. 3ms).
    #[arg(long, value_name = "DURATION", help_heading = "Time contracts")]
    budget: Option<String>,
    /// Time-fraction: this share of each of its --cpus, 0 to 1 (e.g. 0.25).
    #[arg(long, value_name = "F", help_heading = "Time contracts")]
    fraction: Option<f64>,
    /// Time-fraction: never run in pieces shorter than this [default: 2ms].
    #[arg(long, value_name = "DURATION", help_heading = "Time contracts")]
    slice: Option<String>,
    /// Message-triggered: hold nothing until a message arrives; give the
    /// CPUs back after this long without one (needs channels).
    #[arg(long, value_name = "DURATION", help_heading = "Time contracts")]
    message_idle: Option<String>,
    /// CPUs a time contract covers [default: 1].
    #[arg(long, value_name = "N", help_heading = "Time contracts")]
    cpus: Option<u32>,
    /// What the program wants to achieve: rate=N/s (units of work it
    /// counts with allot heartbeats) or p99=DURATION (latency of the
    /// requests it reports); the goals policy sizes its CPUs to meet it.
    #[arg(long, value_name = "GOAL")]
    goal: Option<allot_client::Goal>,
    /// Memory guaranteed to the program (K, M, G, T or bytes, e.g. 2G):
    /// the kernel does not reclaim it under pressure, and admission never
    /// promises more than the machine has.
    #[arg(long, value_name = "SIZE", value_parser = allot_plan::spec::parse_size, help_heading = "Memory")]
    memory_min: Option<u64>,
    /// The most memory the program may use (e.g. 8G): past it the kernel
    /// reclaims its memory and, failing that, kills one of its processes;
    /// nothing else pays.
    #[arg(long, value_name = "SIZE", value_parser = allot_plan::spec::parse_size, help_heading = "Memory")]
    memory_max: Option<u64>,
    /// L3 cache ways of the program's own (needs resctrl: Intel RDT or
    /// AMD QoS): no other cell's data evicts its data from them.
    #[arg(long, value_name = "N", help_heading = "Memory")]
    cache_ways: Option<u32>,
    /// The most memory bandwidth the program may take, percent of each
    /// cache domain's (needs resctrl's memory bandwidth allocation).
    #[arg(long, value_name = "PCT", help_heading = "Memory")]
    mem_bandwidth: Option<u32>,
    /// Name shown by `allot status` [default: the program's name].
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Open an end of a named channel for the program (repeatable):
    /// NAME:send or NAME:recv; the program takes it with the client
    /// library (`allot_client::inherited`, `allot_channel_inherited`).
    #[arg(long, value_name = "NAME:END")]
    channel: Vec<channels::ChannelArg>,
    /// Wait in the broker's queue when CPUs cannot be guaranteed now.
    #[arg(long)]
    wait: bool,
    /// Do not preload the OpenMP shim (teams then stay as large as
    /// OMP_NUM_THREADS, which is set to the grant at launch).
    #[arg(long)]
    no_shim: bool,
    /// Do not offer oneTBB and Intel OpenMP allot's Thread Composability
    /// Manager (they then size their threads at start). Setting
    /// TCM_ENABLE=0 does the same.
    #[arg(long)]
    no_tcm: bool,
    /// Jobserver style for make, ninja, cargo and gcc -flto: pipe (make
    /// 4.3+), fifo (make 4.4+, ninja 1.13+), or off. Default: fifo for
    /// ninja unless a make older than 4.4 is on PATH, else pipe.
    #[arg(long, value_name = "pipe|fifo|off", value_parser = crate::cmd::choice::<String>(&["pipe", "fifo", "off"]))]
    jobserver: Option<String>,
    /// How thread-count variables read once at start are sized: the cell's
    /// fair share (share), the grant at the instant of launch (grant), or
    /// the cell's maximum (max). See docs/run.md.
    #[arg(long, default_value = "share", value_name = "share|grant|max", value_parser = crate::cmd::choice::<LaunchRule>(&["share", "grant", "max"]))]
    launch_threads: LaunchRule,
    /// Before starting the program, wait until the cell's grant has not
    /// changed for MS milliseconds (at most ten times that), so that
    /// programs started together see each other when they size themselves.
    #[arg(long, default_value_t = 0, value_name = "MS")]
    settle: u64,
    /// Broker socket [default: $ALLOT_SOCKET or the per-user default].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Do not start a broker when none answers (run the program unconfined,
    /// with a warning, instead).
    #[arg(long)]
    no_start: bool,
    /// When the program exits, print to stderr where its start and exit
    /// spent their time: this command's steps and the broker's for the
    /// cell (admission, cgroup and CPU-set writes with what each took,
    /// grants and their thread counts, joins, exits).
    #[arg(long)]
    timeline: bool,
    /// The program and its arguments.
    #[arg(required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

fn warn(msg: impl std::fmt::Display) {
    eprintln!("allot: warning: {msg}");
}

/// Runs `allot run`; returns the exit code (or dies of the program's signal).
/// The version of the make on `PATH` (`None`: none, or not GNU make).
fn installed_make_version() -> Option<(u32, u32)> {
    let out = std::process::Command::new("make")
        .arg("--version")
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    makeargs::make_version(&String::from_utf8_lossy(&out.stdout))
}

pub fn run(a: Args) -> i32 {
    let mut marks = timeline::Marks::start();
    let cmd = &a.command[0];
    let program = match resolve::resolve(cmd, std::env::var_os("PATH").as_deref()) {
        Ok(p) => p,
        Err(e) => {
            let what = match &e {
                resolve::Unrunnable::NotFound => "No such file or directory".to_string(),
                resolve::Unrunnable::NotExecutable(p) => {
                    format!("Permission denied ({})", p.display())
                }
            };
            eprintln!("allot: '{}': {what}", cmd.to_string_lossy());
            return e.exit_code();
        }
    };
    let jobserver_on = a.jobserver.as_deref() != Some("off");
    let ninja = makeargs::is_ninja(&program);
    let makeflags = std::env::var("MAKEFLAGS").ok();
    let makeargs::MakeJobs {
        args,
        cap,
        make_jobs,
    } = makeargs::plan_jobs(
        &program,
        a.command[1..].to_vec(),
        jobserver_on,
        makeflags.as_deref(),
    );
    let style = match a.jobserver.as_deref() {
        Some("off") => None,
        Some(s) => match s.parse::<Style>() {
            Ok(st) => Some(st),
            Err(e) => {
                eprintln!("allot: --jobserver: {e}");
                return 2;
            }
        },
        None if ninja => Some(makeargs::default_style(&program, installed_make_version())),
        None => Some(Style::Pipe),
    };
    if a.partition == Some(0) {
        eprintln!("allot: --partition 0: a partition has at least one CPU");
        return 2;
    }
    let mut spec = CellSpec {
        weight: a.weight,
        placement: a.place,
        goal: a.goal.unwrap_or_default(),
        ..match a.partition {
            Some(n) => CellSpec::partition(n),
            None => CellSpec {
                min: a.min,
                max: a.max,
                exclusive: a.exclusive,
                ..CellSpec::default()
            },
        }
    };
    let time = contract::TimeFlags {
        period: a.period.clone(),
        budget: a.budget.clone(),
        fraction: a.fraction,
        slice: a.slice.clone(),
        message_idle: a.message_idle.clone(),
        cpus: a.cpus,
    };
    spec.memory = allot_plan::Memory {
        min: a.memory_min.unwrap_or(0),
        max: a.memory_max.unwrap_or(0),
    };
    spec.cache = allot_plan::Cache {
        ways: a.cache_ways.unwrap_or(0),
        bandwidth: a.mem_bandwidth.unwrap_or(0),
    };
    if let Err(e) = contract::apply(&time, &mut spec) {
        eprintln!("allot: {e}");
        return 2;
    }
    // Checked once, here, where the flags enter; the broker checks what it
    // reads again (another process's word).
    let spec = match spec.check() {
        Ok(s) => s.into_spec(),
        Err(e) => {
            eprintln!("allot: {e}");
            return 2;
        }
    };
    let name = a.name.clone().unwrap_or_else(|| {
        program
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let socket = a
        .socket
        .clone()
        .unwrap_or_else(allot_proto::default_socket_path);

    // Inside a cell already (an allot run below another's program): the
    // program runs in that cell, unchanged, as taskset inside taskset.
    if let Some(outer) = nested::enclosing(&socket) {
        if spec != CellSpec::default() || a.wait || a.partition.is_some() {
            warn(format!(
                "this allot run is inside cell {outer} (an outer allot run's): {} runs in that \
                 cell, and the options that ask for a cell of its own are not applied; give \
                 them to the outer allot run (or run with ALLOT_CELL unset for a cell of its \
                 own)",
                cmd.to_string_lossy()
            ));
        }
        let e = std::process::Command::new(&program)
            .arg0(cmd)
            .args(&a.command[1..])
            .exec();
        eprintln!("allot: cannot run '{}': {e}", cmd.to_string_lossy());
        return 126;
    }

    // The CPUs this process may use before the broker confines it to its
    // first grant: the most the program could ever be given, so the
    // ceiling of its OpenMP teams (the grant of the moment may be smaller).
    let launch_cpus = allot_topo::allowed_cpus().ok();
    let allowed_before = launch_cpus.as_ref().map(|s| s.len() as u32);

    // The cell (or none: unconfined).
    let broker = autostart::ensure_broker(&socket, !a.no_start);
    marks.mark("broker answering");
    // The request goes out first; what the program needs besides its cell
    // (the shim, the thread composability manager) is made ready while
    // the broker decides.
    let registering = match broker {
        Err(autostart::NoBroker::Untrusted(e)) => {
            eprintln!("allot: refusing to use the broker's directory: {e}");
            return EXIT_ALLOT;
        }
        Err(autostart::NoBroker::NotASocket(e)) => {
            eprintln!("allot: {e}");
            return EXIT_ALLOT;
        }
        Err(e) => {
            warn(format!("{e}; running {} unconfined", cmd.to_string_lossy()));
            None
        }
        Ok(client) => {
            let mut opts = Options::new(&name);
            opts.spec = spec;
            opts.socket = Some(socket.clone());
            opts.wait = a.wait;
            opts.fallback = false;
            // This thread moves itself into the cell where the broker
            // lets it (no kernel-wide wait); the program, forked from
            // it, starts inside.
            opts.joins_itself = true;
            // Started with the other helpers once the program has run a
            // while (`HELPERS_AFTER`): a short one ends before it matters.
            opts.watch_later = true;
            match Cell::send_registration(client, &opts) {
                Ok(r) => Some(r),
                Err(e) => {
                    warn(format!("{e}; running {} unconfined", cmd.to_string_lossy()));
                    None
                }
            }
        }
    };
    let libraries = match &registering {
        Some(_) => match Libraries::ready(&socket, !a.no_shim, !a.no_tcm) {
            Ok(l) => l,
            Err(code) => return code,
        },
        None => Libraries::default(),
    };
    let go_follows = std::fs::File::open(&program)
        .ok()
        .and_then(|mut f| allot_enforce::runtimes::go_release(&mut f))
        .is_some_and(|r| r.follows_cpu_set());
    marks.mark("shim and thread composability manager ready");
    let cell = match registering {
        None => None,
        Some(r) => {
            let on_wait = |w: Wait<'_>| match w {
                Wait::Queued { position, reason } => {
                    eprintln!("allot: waiting for CPUs (position {position}): {reason}")
                }
                Wait::Paused => eprintln!("allot: paused: {}", allot_broker::core::PAUSED_WHY),
            };
            match r.finish(on_wait) {
                Ok(c) => Some(c),
                Err(ClientError::Broker {
                    code: ErrorCode::Refused | ErrorCode::Never | ErrorCode::Invalid,
                    message,
                }) => {
                    eprintln!("allot: {message}");
                    return EXIT_ALLOT;
                }
                Err(e) => {
                    warn(format!("{e}; running {} unconfined", cmd.to_string_lossy()));
                    None
                }
            }
        }
    };
    // Without a cell the program runs as it would without allot.
    let Libraries { shim, tcm } = if cell.is_some() {
        libraries
    } else {
        Libraries::default()
    };

    if let Some(c) = &cell {
        marks.mark(format!("registered as cell {}", c.id()));
    }
    if let Some(c) = &cell
        && a.settle > 0
    {
        settle(c, Duration::from_millis(a.settle));
    }
    let grant = cell.as_ref().map(|c| c.grant());
    let threads = grant.map_or_else(
        || allot_topo::allowed_cpus().map_or(1, |s| s.len() as u32),
        |g| g.threads.max(1),
    );
    let machine_cpus = allowed_before.unwrap_or(threads);
    let max = if a.max > 0 {
        a.max.min(machine_cpus)
    } else {
        machine_cpus
    };
    let launch = match (a.launch_threads, grant) {
        (LaunchRule::Max, _) => max,
        (LaunchRule::Grant, _) | (LaunchRule::Share, None) => threads,
        (LaunchRule::Share, Some(g)) => env::launch_threads(g.share_milli, max),
    };
    let slots = |t: u32| cap.map_or(t as usize, |c: usize| c.min(t as usize)).max(1);

    let mut js = match style {
        Some(st) => match Jobserver::new(st, slots(threads)) {
            Ok(j) => Some(j),
            Err(e) => {
                warn(format!(
                    "cannot create a jobserver ({e}); make runs without one"
                ));
                None
            }
        },
        None => None,
    };
    let js_flags = js
        .as_ref()
        .and_then(|j| j.prepare_for_children(cap.unwrap_or(max as usize)).ok());

    let page_fd = cell.as_ref().and_then(|c| c.inheritable_page_fd().ok());
    let memory_max = a.memory_max.filter(|_| cell.is_some());
    let cell_env = CellEnv {
        launch,
        max,
        go_follows,
        cell: cell.as_ref().zip(page_fd.as_ref()).map(|(c, fd)| {
            use rustix::fd::AsRawFd;
            (socket.clone(), c.id(), fd.as_raw_fd())
        }),
        jobserver: js_flags,
        make_jobs,
        shim,
        tcm: tcm.as_ref().map(|(dir, fd)| {
            use rustix::fd::AsRawFd;
            (dir.clone(), fd.as_raw_fd())
        }),
    };
    let with_shim = cell_env.shim.is_some();
    let mut vars = env::variables(&cell_env, &|k| std::env::var_os(k));
    if with_shim && let Some(cpus) = &launch_cpus {
        // What libgomp counts at start: the most the cell may be granted
        // (see allot_proto::env::LAUNCH_CPUS).
        vars.push((
            allot_proto::env::LAUNCH_CPUS.into(),
            cpus.to_string().into(),
        ));
    }
    if a.partition.is_some() {
        vars.extend(env::partition_variables(&|k| std::env::var_os(k)));
    }
    marks.mark("environment ready");
    // Channel ends, held open (by this process's connection) until the
    // program exits.
    let held = if a.channel.is_empty() {
        None
    } else {
        match channels::open(&socket, &a.channel) {
            Ok(h) => {
                vars.push((allot_proto::env::CHANNELS.into(), h.var.clone().into()));
                Some(h)
            }
            Err(e) => {
                eprintln!("allot: {e:#}");
                return EXIT_ALLOT;
            }
        }
    };

    // Handlers go in before the program exists, so an early Ctrl-C cannot
    // kill this process first; signals wait in the handler's pipe until
    // they can be forwarded to the program's pid.
    let mut signals = signal_setup();

    marks.mark("spawning the program");
    let cannot_run = |e: std::io::Error| {
        eprintln!("allot: cannot run '{}': {e}", cmd.to_string_lossy());
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            126
        } else {
            127
        }
    };
    // On cgroup v2 the broker may hand over the cell's directory: the
    // program is then created inside it (`spawn`).
    let into = cell.as_ref().and_then(|c| c.take_spawn_cgroup());
    let started = match into {
        Some(dir) => {
            let mut env: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            for (k, v) in &vars {
                env.retain(|(ek, _)| ek.as_os_str() != std::ffi::OsStr::new(k));
                env.push((k.into(), v.clone()));
            }
            match spawn::spawn_into(std::os::fd::AsFd::as_fd(&dir), &program, cmd, &args, &env) {
                Ok(pid) => Some(Program::Raw(pid)),
                Err(spawn::SpawnError::Exec(e)) => return cannot_run(e),
                Err(spawn::SpawnError::Clone(e)) => {
                    // Not started: the broker moves this process in, and
                    // the program starts from it as usual.
                    warn(format!(
                        "cannot start the program inside its cell directly ({e}); \
                         joining the cell first"
                    ));
                    if let Some(c) = &cell
                        && let Err(e) = c.add_member(std::process::id())
                    {
                        eprintln!("allot: cannot join the cell: {e}");
                        return EXIT_ALLOT;
                    }
                    None
                }
            }
        }
        None => None,
    };
    let mut child = match started {
        Some(p) => p,
        None => {
            let mut command = std::process::Command::new(&program);
            command.arg0(cmd).args(&args).envs(vars);
            match command.spawn() {
                Ok(c) => Program::Std(c),
                Err(e) => return cannot_run(e),
            }
        }
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

    // A short program ends before anything more is needed: the threads
    // that forward signals and keep the jobserver in step with the grant
    // start only once it has run for `HELPERS_AFTER` (each would cost its
    // start and, at the end, its join, while competing with the program
    // for the CPUs). Meanwhile signals are forwarded from here.
    let ended_early = ends_within(pid, HELPERS_AFTER, signals.as_mut());
    let forward = match signals {
        Some(s) if !ended_early => Some(forward_signals(s, pid)),
        _ => None,
    };
    if let Some(c) = cell.as_ref().filter(|_| !ended_early) {
        c.watch();
    }
    let done = Arc::new(AtomicBool::new(false));
    let follower = match (&cell, ended_early) {
        (Some(c), false) => js.take().map(|j| {
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
    drop(held);
    if a.timeline {
        match &cell {
            Some(c) => timeline::report(&socket, c.id(), pid, &marks),
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
            allot_plan::spec::Size(max)
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
    drop(js);
    std::process::exit(exit_like(status))
}

/// How long the program runs before `allot run` starts its helper threads
/// (signal forwarding, the jobserver's follower).
const HELPERS_AFTER: Duration = Duration::from_millis(10);

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

/// What the program loads besides itself: the OpenMP shim (`LD_PRELOAD`)
/// and allot's Thread Composability Manager (the directory holding
/// `libtcm.so.1`, and a new permit table). Either is `None`, with a
/// warning, where it cannot be had: OpenMP teams then keep their launch
/// size, and oneTBB and Intel OpenMP size their threads at start, as
/// without allot.
#[derive(Default)]
struct Libraries {
    shim: Option<std::path::PathBuf>,
    tcm: Option<(std::path::PathBuf, rustix::fd::OwnedFd)>,
}

impl Libraries {
    /// Installs what is wanted in the user's library directory beside
    /// `socket` (opened once, each step of its path checked). A directory
    /// others could replace files in is refused: the exit code then.
    fn ready(socket: &std::path::Path, shim: bool, tcm: bool) -> Result<Libraries, i32> {
        if !shim && !tcm {
            return Ok(Libraries::default());
        }
        let dir = match shim_dir(socket) {
            Err(e) if e.is_untrusted() => {
                eprintln!("allot: refusing to install the OpenMP shim: {e}");
                return Err(EXIT_ALLOT);
            }
            d => d.map_err(|e| e.to_string()),
        };
        let shim = shim
            .then(|| {
                let d = dir.as_ref().map_err(|e| std::io::Error::other(e.clone()));
                d.and_then(allot_capi::install_shim).map_err(|e| {
                    warn(format!(
                        "cannot install the OpenMP shim ({e}); OpenMP teams keep their launch size"
                    ))
                })
            })
            .and_then(Result::ok);
        let tcm = tcm
            .then(|| {
                let d = dir.as_ref().map_err(Clone::clone);
                d.and_then(|d| {
                    let lib = allot_capi::tcm::install_tcm(d, 0o700).map_err(|e| e.to_string())?;
                    let table = allot_capi::tcm::permit_table().map_err(|e| e.to_string())?;
                    Ok((lib, table))
                })
                .map_err(|e| {
                    warn(format!(
                        "cannot set up the thread composability manager ({e}); oneTBB and Intel \
                         OpenMP keep their own thread counts"
                    ))
                })
            })
            .and_then(Result::ok);
        Ok(Libraries { shim, tcm })
    }
}

/// Where the shim library is written: a `shim` directory beside the socket
/// when that directory is the user's (a broker of their own), else in the
/// user's own runtime directory (a system broker's directory is root's).
/// Either is a [`TrustedDir`]: nobody else can replace the library between
/// its installation and the loader mapping it.
fn shim_dir(socket: &std::path::Path) -> Result<TrustedDir, DirError> {
    let beside = TrustedDir::open(allot_proto::dirs::socket_parent(socket), Trust::Owner).ok();
    match beside {
        Some(d) => TrustedDir::create(&d.join("shim"), 0o700),
        None => TrustedDir::create(&allot_proto::default_state_dir().join("shim"), 0o700),
    }
}

/// Waits until the cell's grant has stayed the same for `quiet` (newcomers
/// move every cell's share), for at most ten times `quiet`.
fn settle(cell: &Cell, quiet: Duration) {
    let deadline = std::time::Instant::now() + quiet * 10;
    let mut seen = cell.generation();
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        let g = cell.wait_change(seen, Some(quiet.min(left)));
        if g.generation == seen {
            return;
        }
        seen = g.generation;
    }
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

fn signal_setup() -> Option<signal_hook::iterator::Signals> {
    use signal_hook::consts::*;
    signal_hook::iterator::Signals::new([SIGTERM, SIGHUP, SIGUSR1, SIGUSR2, SIGINT, SIGQUIT]).ok()
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

/// The program: started by `std::process::Command`, or created inside its
/// cgroup v2 cell (`spawn`).
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
