//! `allot run`: an unmodified program in a cell.
//!
//! Steps, each in its own file:
//!
//! 1. [`plan`]: resolve the command like `env` does (unknown: exit 127;
//!    not executable: 126), plan a make's jobs, check the cell's spec —
//!    before anything else, so a mistake creates no cell.
//! 2. [`register`]: make sure a broker answers (starting a user-mode one on
//!    first use; if none can be had, run the program unconfined with a
//!    warning — never refuse to run it) and register a cell with this
//!    process as its member: the broker confines this process *before*
//!    the program exists, so the program, forked from it, inherits the
//!    cell's cgroup and CPUs and runs its first instruction inside. The
//!    OpenMP shim and the thread composability manager are made ready
//!    while the broker decides.
//! 3. Here: the program's environment — the thread-count variables, the
//!    cell's grant page (`ALLOT_GRANT_FD`), its jobserver, the shim.
//! 4. [`supervise`]: start the program, add it as a member so the broker
//!    watches it, follow the grant (jobserver tokens track it; a broker
//!    restart is survived: the client library rejoins, handing the page
//!    back), forward termination signals, and pass the exit status
//!    through (a program killed by a signal makes `allot run` die of the
//!    same signal). No release: the cell ends when its last member exits.

mod autostart;
mod channels;
mod contract;
pub mod env;
pub mod jobserver;
pub mod makeargs;
mod nested;
mod plan;
mod register;
pub mod resolve;
mod spawn;
mod supervise;
mod timeline;

use allot_client::Cell;
use allot_spec::{CellSpec, Placement};
use env::{CellEnv, LaunchRule};
use jobserver::Jobserver;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
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
    goal: Option<allot_spec::Goal>,
    /// Memory guaranteed to the program (K, M, G, T or bytes, e.g. 2G):
    /// the kernel does not reclaim it under pressure, and admission never
    /// promises more than the machine has.
    #[arg(long, value_name = "SIZE", value_parser = allot_spec::parse_size, help_heading = "Memory")]
    memory_min: Option<u64>,
    /// The most memory the program may use (e.g. 8G): past it the kernel
    /// reclaims its memory and, failing that, kills one of its processes;
    /// nothing else pays.
    #[arg(long, value_name = "SIZE", value_parser = allot_spec::parse_size, help_heading = "Memory")]
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

/// Runs `allot run`; returns the exit code where it cannot run the
/// program, else exits (or dies) as the program did.
pub fn run(a: Args) -> i32 {
    let mut marks = timeline::Marks::start();
    let plan = match plan::Plan::of(&a) {
        Ok(p) => p,
        Err(code) => return code,
    };
    let cmd = &a.command[0];

    // Inside a cell already (an allot run below another's program): the
    // program runs in that cell, unchanged, as taskset inside taskset.
    if let Some(outer) = nested::enclosing(&plan.socket) {
        if plan.spec != CellSpec::default() || a.wait || a.partition.is_some() {
            warn(format!(
                "this allot run is inside cell {outer} (an outer allot run's): {} runs in that \
                 cell, and the options that ask for a cell of its own are not applied; give \
                 them to the outer allot run (or run with ALLOT_CELL unset for a cell of its \
                 own)",
                cmd.to_string_lossy()
            ));
        }
        let e = std::process::Command::new(&plan.program)
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
    let register::Registered {
        cell,
        libraries,
        go_follows,
    } = match register::register(&a, &plan, &mut marks) {
        Ok(r) => r,
        Err(code) => return code,
    };
    if let Some(c) = &cell
        && a.settle > 0
    {
        settle(c, Duration::from_millis(a.settle));
    }
    let grant = cell.as_ref().map(|c| c.grant());
    // Without a cell nothing confined this process since `launch_cpus`.
    let threads = grant.map_or_else(
        || launch_cpus.as_ref().map_or(1, |s| s.len() as u32),
        |g| g.threads.max(1),
    );
    let machine_cpus = launch_cpus.as_ref().map_or(threads, |s| s.len() as u32);
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
    let cap = plan.cap;
    let slots = |t: u32| cap.map_or(t as usize, |c: usize| c.min(t as usize)).max(1);
    let jobserver = match plan.style {
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
    let js_flags = jobserver
        .as_ref()
        .and_then(|j| j.prepare_for_children(cap.unwrap_or(max as usize)).ok());

    let page_fd = cell.as_ref().and_then(|c| c.inheritable_page_fd().ok());
    // The permit table stays open (the program inherits it) until
    // `allot run` exits.
    let register::Libraries { shim, tcm } = libraries;
    let cell_env = CellEnv {
        launch,
        max,
        go_follows,
        cell: cell.as_ref().zip(page_fd.as_ref()).map(|(c, fd)| {
            use rustix::fd::AsRawFd;
            (plan.socket.clone(), c.id(), fd.as_raw_fd())
        }),
        jobserver: js_flags,
        make_jobs: plan.make_jobs,
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
    let channels = if a.channel.is_empty() {
        None
    } else {
        match channels::open(&plan.socket, &a.channel) {
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
    let memory_max = a.memory_max.filter(|_| cell.is_some());
    let on_this_cpu = spawn::on_this_cpu(
        cell.as_ref().is_some_and(Cell::in_v1_cpuset),
        launch_cpus.as_ref().map(|s| s.len()),
        online_cpus,
    );
    let plan::Plan {
        program,
        args,
        socket,
        ..
    } = plan;
    let code = supervise::run(
        supervise::Launch {
            program,
            cmd: cmd.clone(),
            args,
            vars,
            cell,
            jobserver,
            cap,
            page_fd,
            channels,
            memory_max,
            timeline: a.timeline.then_some(socket),
            on_this_cpu,
        },
        marks,
    );
    drop(tcm);
    code
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

/// How many CPUs are online (`None` where that cannot be read).
fn online_cpus() -> Option<usize> {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).ok()
}
