//! `allot daemon`: the broker in the foreground.

use allot_broker::{Broker, Config, StartError};
use allot_enforce::BackendKind;
use allot_plan::{GlobalPolicy, Weighing};
use allot_topo::CpuSet;
use std::path::PathBuf;

/// Arguments of `allot daemon`. Command-line values override the config file.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Socket to serve [default: $ALLOT_SOCKET, else $XDG_RUNTIME_DIR/allot/allot.sock,
    /// else /run/allot/allot.sock for root]
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// How to enforce grants: auto picks cgroup2, then cgroup1, then affinity.
    #[arg(long, value_name = "auto|cgroup2|cgroup1|affinity|dry-run", value_parser = super::choice::<BackendKind>(&["auto", "cgroup2", "cgroup1", "affinity", "dry-run"]))]
    backend: Option<BackendKind>,
    /// TOML configuration file (see docs/operations.md).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// How CPUs are divided among cells.
    #[arg(long, value_name = "fair-share|priority|goals", value_parser = super::choice::<GlobalPolicy>(&["fair-share", "priority", "goals"]))]
    policy: Option<GlobalPolicy>,
    /// How the cells weigh against work outside them: as the threads
    /// their programs would run (threads, the default), or all together
    /// as one process (group).
    #[arg(long, value_name = "threads|group", value_parser = super::choice::<Weighing>(&["threads", "group"]))]
    weigh: Option<Weighing>,
    /// CPUs kept for processes outside any cell.
    #[arg(long, value_name = "N")]
    reserve: Option<u32>,
    /// Memory never guaranteed to cells (K, M, G, T or bytes) [default: a
    /// twentieth of the memory cells live within].
    #[arg(long, value_name = "SIZE", value_parser = allot_spec::parse_size)]
    memory_reserve: Option<u64>,
    /// Do not lend idle CPUs to busy cells (for experiments).
    #[arg(long)]
    no_lend: bool,
    /// Manage only these CPUs (cpulist, e.g. 0-7).
    #[arg(long, value_name = "LIST")]
    cpus: Option<CpuSet>,
    /// Monitor period in milliseconds (usage sampling, demand).
    #[arg(long, value_name = "MS")]
    tick_ms: Option<u64>,
    /// Exit after this many seconds with no cell and no client.
    #[arg(long, value_name = "SECS")]
    idle_exit: Option<u64>,
    /// Directory for the journal [default: the socket's directory].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Name of allot's directory in each cgroup hierarchy [default: allot
    /// for the state directory /run/allot, else allot-<its name>-<hash of
    /// its path>]. Two running brokers never share one: the second is
    /// refused.
    #[arg(long, value_name = "NAME")]
    cgroup_name: Option<String>,
    /// Serve Prometheus metrics at http://ADDR/metrics (IP:PORT, e.g.
    /// 127.0.0.1:9464; everyone who can reach it sees every cell).
    #[arg(long, value_name = "IP:PORT", value_parser = allot_broker::config::parse_metrics_addr)]
    metrics: Option<std::net::SocketAddr>,
    /// Read the configuration (file and options), check it against this
    /// machine, print the settings in effect and exit: 0 when it is usable,
    /// 2 when not.
    #[arg(long)]
    check_config: bool,
    /// Plan for a fixture machine's topology (sysfs tree); for simulations
    /// with --backend dry-run.
    #[arg(long, value_name = "DIR", hide = true)]
    sysfs: Option<PathBuf>,
}

fn config(a: &Args) -> Result<Config, String> {
    let socket = a
        .socket
        .clone()
        .unwrap_or_else(allot_proto::default_socket_path);
    let mut c = Config::new(socket.clone());
    if let Some(f) = &a.config {
        c.load_file(f)?;
        if a.socket.is_some() {
            c.socket = socket;
        }
    }
    if let Some(b) = a.backend {
        c.backend = b;
    }
    if let Some(p) = a.policy {
        c.policy = p;
    }
    if let Some(w) = a.weigh {
        c.weigh = w;
    }
    if let Some(m) = a.memory_reserve {
        c.memory_reserve = Some(m);
    }
    if let Some(r) = a.reserve {
        c.reserve = r;
    }
    if a.no_lend {
        c.lend = false;
    }
    if let Some(cpus) = a.cpus {
        c.cpus = Some(cpus);
    }
    if let Some(t) = a.tick_ms {
        if !(10..=10_000).contains(&t) {
            return Err(format!("--tick-ms {t} is out of range (10 to 10000)"));
        }
        c.tick = std::time::Duration::from_millis(t);
    }
    if let Some(s) = a.idle_exit {
        c.idle_exit = (s > 0).then(|| std::time::Duration::from_secs(s));
    }
    if let Some(d) = a.state_dir.clone() {
        c.state_dir = d;
    }
    if let Some(n) = a.cgroup_name.clone() {
        allot_broker::config::check_cgroup_name(&n).map_err(|e| format!("--cgroup-name: {e}"))?;
        c.cgroup_name_set = Some(n);
    }
    if let Some(m) = a.metrics {
        c.metrics = Some(m);
    }
    c.sysfs = a.sysfs.clone();
    c.validate()?;
    Ok(c)
}

/// `--check-config`: the settings in effect, after checking what can be
/// checked without starting (the CPUs against this machine's topology).
fn check(c: &Config) -> Result<String, String> {
    let machine = c.machine()?;
    if c.reserve as usize >= machine.usable().len() {
        return Err(format!(
            "reserve = {} leaves no CPU for cells ({} usable: {})",
            c.reserve,
            machine.usable().len(),
            machine.usable()
        ));
    }
    let l = &c.limits;
    Ok(format!(
        "socket            {}\n\
         state_dir         {}\n\
         backend           {}\n\
         policy            {}\n\
         weigh             {}\n\
         cpus              {} ({})\n\
         reserve           {}\n\
         lend              {}\n\
         tick_ms           {}\n\
         idle_exit_s       {}\n\
         cgroup_name       {}\n\
         show_other_users  {}\n\
         metrics           {}\n\
         confine_unmanaged {}\n\
         partitions        {}\n\
         isolate           {}\n\
         realtime          {}\n\
         limits            connections {} cells {} queued {} members {} kinds {} devices {} \
         holdings {} cells_total {} kinds_total {} channels {} channel_mib {} guaranteed_cpus {} \
         guaranteed_memory_mib {} weight {} user_weight {} processes {}",
        c.socket.display(),
        c.state_dir.display(),
        c.backend,
        c.policy,
        c.weigh,
        machine.usable(),
        machine.summary(),
        c.reserve,
        c.lend,
        c.tick.as_millis(),
        c.idle_exit.map_or(0, |d| d.as_secs()),
        c.cgroup_name(),
        c.show_other_users,
        c.metrics
            .map_or("off".to_string(), |m| format!("http://{m}/metrics")),
        if c.confine_unmanaged {
            format!(
                "on, from {}",
                c.unmanaged_from
                    .as_ref()
                    .map_or("the root of the backend's hierarchy".to_string(), |p| p
                        .display()
                        .to_string())
            )
        } else {
            "off".to_string()
        },
        partitions_note(c),
        if c.isolate {
            format!("on, under {}", c.isolate_root.display())
        } else {
            "off".to_string()
        },
        realtime_note(c.realtime),
        l.connections,
        l.cells,
        l.queued,
        l.members,
        l.kinds,
        l.devices,
        l.holdings,
        l.cells_total,
        l.kinds_total,
        l.channels,
        l.channel_mib,
        match l.guaranteed_cpus {
            0 => format!(
                "{} (all but one)",
                machine
                    .usable()
                    .len()
                    .saturating_sub(c.reserve as usize + 1)
                    .max(1)
            ),
            n => n.to_string(),
        },
        match l.guaranteed_memory_mib {
            0 => "3/4 of what cells may be guaranteed".to_string(),
            n => n.to_string(),
        },
        l.weight,
        l.user_weight,
        l.processes,
    ))
}

/// `realtime` in `--check-config`: off, or on and whether this process
/// may take the real-time class (tried on a thread of its own, which
/// ends at once).
fn realtime_note(on: bool) -> String {
    use allot_broker::realtime::{Class, DEMOTE_ABOVE, LOOP_PRIORITY, set_this_thread};
    if !on {
        return "off: the event loop is an ordinary thread".into();
    }
    let tried = std::thread::spawn(|| set_this_thread(Class::Fifo(LOOP_PRIORITY)))
        .join()
        .unwrap_or_else(|_| Err(std::io::Error::other("the trial thread panicked")));
    match tried {
        Ok(()) => format!(
            "on: the event loop runs at SCHED_FIFO {LOOP_PRIORITY} while it uses under {:.0} % \
             of a CPU",
            DEMOTE_ABOVE * 100.0
        ),
        Err(e) => format!(
            "on, but refused here ({}): the event loop will be an ordinary thread",
            allot_broker::realtime::refused(&e, LOOP_PRIORITY)
        ),
    }
}

/// `partitions` in `--check-config`: on or off, and whether this machine
/// can make exclusive cells kernel partitions (the backend, the kernel's
/// version, where allot's directory would be), read without starting.
fn partitions_note(c: &Config) -> String {
    if !c.partitions {
        return "off".into();
    }
    let stay = "exclusive cells stay exclusive by their cpusets alone";
    match c.backend {
        BackendKind::Cgroup2 | BackendKind::Auto => {}
        other => {
            return format!(
                "on, but the {other} backend makes no cpuset partitions (cgroup v2 only): {stay}"
            );
        }
    }
    let mounts = allot_enforce::detect::Mounts::read();
    let v2_cpuset = mounts.cgroup2.as_ref().is_some_and(|m| {
        std::fs::read_to_string(m.join("cgroup.controllers"))
            .is_ok_and(|t| t.split_whitespace().any(|c| c == "cpuset"))
    });
    if c.backend == BackendKind::Auto && !v2_cpuset {
        return format!(
            "on, but auto picks cgroup1 or affinity here (no cgroup v2 cpuset controller), \
             which make no cpuset partitions: {stay}"
        );
    }
    let cells = match &c.cgroup2_root {
        Some(r) => Ok(r.clone()),
        None => allot_enforce::cgroup2_layout(&mounts, &c.cgroup_name())
            .map(|l| l.cells().to_path_buf())
            .map_err(|e| e.to_string()),
    };
    let auto = if c.backend == BackendKind::Auto {
        " (if auto picks cgroup2)"
    } else {
        ""
    };
    match cells {
        Err(e) => format!("on, but no cgroup v2 here ({e}): {stay}"),
        Ok(dir) => {
            use allot_enforce::partition::{Scheme, scheme};
            match scheme(&allot_enforce::cgroupfs::KernelFs, &dir) {
                Ok(Scheme::Remote) => format!(
                    "on: exclusive cells become isolated cpuset partitions under {}{auto}",
                    dir.display()
                ),
                Ok(Scheme::Local) => format!(
                    "on: exclusive cells become isolated cpuset partitions beside {} \
                     ({}.cell-N: a kernel before 6.7){auto}",
                    dir.display(),
                    dir.display()
                ),
                // A fresh machine: nothing to read the kernel's files from
                // until the broker makes its directory.
                Err(_) if v2_cpuset && !dir.exists() && !any_cpuset_child(dir.parent()) => format!(
                    "on; whether this kernel makes them is read when the broker makes {} \
                     (no cgroup with the cpuset controller yet): allot status says per cell{auto}",
                    dir.display()
                ),
                Err(why) => format!("on, but none here{auto}: {why}; {stay}"),
            }
        }
    }
}

/// Whether some cgroup below `dir` has the cpuset controller (files to
/// read the kernel's partition support from).
fn any_cpuset_child(dir: Option<&std::path::Path>) -> bool {
    dir.and_then(|d| std::fs::read_dir(d).ok())
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| e.path().join("cpuset.cpus").exists())
}

/// `allot daemon`'s exit status when another broker serves its socket
/// (`allot run`'s auto-start then waits for that broker's socket).
pub const EXIT_ALREADY_SERVED: i32 = 3;

/// Runs `allot daemon`.
pub fn run(a: Args) -> i32 {
    let cfg = match config(&a) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("allot: {e}");
            return 2;
        }
    };
    if a.check_config {
        return match check(&cfg) {
            Ok(text) => {
                println!("{text}");
                println!("configuration OK");
                0
            }
            Err(e) => {
                eprintln!("allot: configuration not usable: {e}");
                2
            }
        };
    }
    let broker = match Broker::start(cfg) {
        Ok(b) => b,
        Err(e @ StartError::AlreadyRunning(_)) => {
            eprintln!("allot: {e}; stop it first (allot status shows it)");
            return EXIT_ALREADY_SERVED;
        }
        Err(e @ StartError::StateDirTaken { .. }) => {
            eprintln!("allot: {e}");
            return 4;
        }
        Err(e) => {
            eprintln!("allot: {e}");
            return 1;
        }
    };
    let stop = broker.stop_handle();
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGHUP,
    ] {
        if let Err(e) = signal_hook::low_level::pipe::register_raw(sig, stop.raw_fd()) {
            eprintln!("allot: cannot handle signal {sig}: {e}");
            return 1;
        }
    }
    match broker.run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("allot: broker failed: {e}");
            1
        }
    }
}
