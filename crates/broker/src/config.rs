//! Broker configuration: command-line settings over an optional TOML file.
//!
//! Every key, with its default and meaning, is [`EXAMPLE`] (also the
//! `allotd.toml(5)` man page).
//!
//! The limits bound the broker's memory and time whatever its clients send
//! (a `Register` listing 4096 members, thousands of kind definitions, idle
//! connections by the thousand): a request past a limit is refused with
//! `ErrorCode::Limit` and a message naming the limit and its key here.

use allot_enforce::BackendKind;
use allot_plan::{GlobalPolicy, Weighing};
use allot_topo::CpuSet;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The configuration file, every key with its default and meaning: the
/// reference `allot man` renders as `allotd.toml(5)`.
pub const EXAMPLE: &str = r#"# /etc/allot/allotd.toml (every key optional)
backend = "auto"          # auto | cgroup2 | cgroup1 | affinity | dry-run
policy = "fair-share"     # fair-share | priority | goals
weigh = "threads"         # against work outside the cells, they weigh as their programs'
                          #   threads would (threads) or all together as one process (group)
reserve = 0               # CPUs kept for processes outside any cell
memory_reserve = "2G"     # memory never guaranteed to cells (default: 1/20 of it)
time_reserve = 0.05       # share of every CPU never promised to time cells
lend = true               # lend idle CPUs (work conservation)
cpus = "0-15"             # manage only these CPUs (default: all allowed)
tick_ms = 100             # monitor period: usage sampling, demand
cgroup_name = "allot"     # allot's directory in each cgroup hierarchy (default: "allot"
                          #   for state_dir /run/allot, else one named after state_dir)
cgroup2_root = "/sys/fs/cgroup/allot"  # explicit (delegated) v2 subtree
idle_exit_s = 0           # exit after this long with no cell and no client (0: never)
state_dir = "/run/allot"  # journal location (default: next to the socket)
show_other_users = false  # status (and metrics) show other users' cell names
metrics = "127.0.0.1:9464"  # serve Prometheus metrics at http://ADDR/metrics (default: off)
partitions = true         # exclusive cells are kernel cpuset partitions (cgroup v2, kernel 6.7+)
isolate = false           # keep interrupts and unbound workqueues off exclusive cells' CPUs
isolate_root = "/"        # where /proc/irq and /sys are (a test's fixture tree)
confine_unmanaged = false # run processes outside any cell on the reserve (needs reserve >= 1)
unmanaged_from = "/sys/fs/cgroup/cpuset"  # the cgroup whose processes count as unmanaged
realtime = true           # the event loop runs at real-time priority (SCHED_FIFO 1) while it
                          #   uses under a quarter of a CPU, so the cells it governs cannot
                          #   delay it (needs CAP_SYS_NICE)

[limits]                  # what one user may make the broker keep; root is exempt
connections = 64          # open connections
cells = 64                # admitted cells
queued = 4                # cells waiting for admission
members = 256             # processes per cell
kinds = 16                # resource kinds defined
devices = 256             # devices per kind
holdings = 1024           # ledger items held per process
cells_total = 4096        # admitted cells, all users together
kinds_total = 256         # kinds, all users together
channels = 64             # named channels created
channel_mib = 256         # MiB of channel memory created
guaranteed_cpus = 0       # guaranteed CPUs one user's cells hold and wait for together,
                          #   with CPUs its processes outside cells hold exclusively
                          #   through require (0: all but one of the CPUs for cells)
guaranteed_memory_mib = 0 # MiB of memory one user's cells are guaranteed together
                          #   (0: three quarters of what cells may be guaranteed)
weight = 100              # the largest weight one of a user's cells may have
user_weight = 400         # the weights of one user's cells together, admitted and waiting
processes = 256           # processes of one user watched for kinds and holdings

[[channel_acl]]           # who else may open a named channel (its creator always may)
name = "frames.in"        # the channel's name
uids = [1001, 1002]       # users allowed to open either end
"#;

/// Share of every CPU kept from time cells by default (5 %): the broker,
/// the kernel's own threads and unmanaged processes run in it.
pub const DEFAULT_TIME_RESERVE_PPM: u32 = 50_000;

/// Default monitor period.
pub const DEFAULT_TICK: Duration = Duration::from_millis(100);

/// Per-user bounds on what clients can make the broker keep (see the module
/// docs). Root (uid 0) is exempt from the per-user ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Open connections per user.
    pub connections: u32,
    /// Admitted cells per user.
    pub cells: u32,
    /// Cells waiting for admission per user.
    pub queued: u32,
    /// Member processes per cell.
    pub members: u32,
    /// Resource kinds defined per user.
    pub kinds: u32,
    /// Devices per kind.
    pub devices: u32,
    /// Ledger items held per process.
    pub holdings: u32,
    /// Admitted cells in all.
    pub cells_total: u32,
    /// Resource kinds in all (built-in ones excluded).
    pub kinds_total: u32,
    /// Named channels created per user.
    pub channels: u32,
    /// MiB of channel memory created per user.
    pub channel_mib: u32,
    /// Guaranteed CPUs (`--min`, exclusive cells) one user's cells may
    /// hold and wait for together, counting the CPUs the user's processes
    /// outside every cell hold exclusively through `require`; 0: all but
    /// one of the CPUs for cells, so another user's best-effort program
    /// always has one.
    pub guaranteed_cpus: u32,
    /// MiB of memory (`--memory-min`) one user's cells may be guaranteed
    /// together; 0: three quarters of what cells may be guaranteed.
    pub guaranteed_memory_mib: u64,
    /// The largest weight (`--weight`) one of a user's cells may have.
    pub weight: u32,
    /// The weights of one user's cells together, admitted and waiting:
    /// many cells of the largest weight outweigh another user's one no
    /// more than this.
    pub user_weight: u32,
    /// Processes of one user the broker watches for the ledger (each
    /// defined a kind or holds items outside a cell): each costs it a
    /// descriptor.
    pub processes: u32,
}

/// Users besides its creator who may open a named channel.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChannelAcl {
    /// The channel's name.
    pub name: String,
    /// The users allowed.
    pub uids: Vec<u32>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connections: 64,
            cells: 64,
            queued: 4,
            members: 256,
            kinds: 16,
            devices: 256,
            holdings: 1024,
            cells_total: 4096,
            kinds_total: 256,
            channels: 64,
            channel_mib: 256,
            guaranteed_cpus: 0,
            guaranteed_memory_mib: 0,
            weight: 100,
            user_weight: 400,
            processes: 256,
        }
    }
}

/// Everything the broker needs to start.
#[derive(Debug, Clone)]
pub struct Config {
    /// Control socket path.
    pub socket: PathBuf,
    /// Directory for the journal.
    pub state_dir: PathBuf,
    /// Enforcement backend.
    pub backend: BackendKind,
    /// Global policy.
    pub policy: GlobalPolicy,
    /// How the cells weigh in the kernel's scheduler against work outside
    /// them (`allot_plan::weight`).
    pub weigh: Weighing,
    /// CPUs kept for processes outside any cell.
    pub reserve: u32,
    /// Bytes of memory never guaranteed to cells (`None`: a twentieth of
    /// the capacity).
    pub memory_reserve: Option<u64>,
    /// Where the kernel's resctrl is mounted (cache ways and bandwidth).
    pub resctrl_root: PathBuf,
    /// Time of every CPU never promised to time cells, in parts per million.
    pub time_reserve_ppm: u32,
    /// Work conservation.
    pub lend: bool,
    /// Restrict management to these CPUs.
    pub cpus: Option<CpuSet>,
    /// Monitor period.
    pub tick: Duration,
    /// allot's directory name in each cgroup hierarchy, as set; `None`
    /// for one tied to the state directory ([`Config::cgroup_name`]).
    pub cgroup_name_set: Option<String>,
    /// Explicit cgroup v2 subtree.
    pub cgroup2_root: Option<PathBuf>,
    /// Exit when idle this long.
    pub idle_exit: Option<Duration>,
    /// Sysfs root for topology (tests use fixtures).
    pub sysfs: Option<PathBuf>,
    /// Per-user limits.
    pub limits: Limits,
    /// Whether clients see other users' cell names and pids in the status
    /// (and the metrics label cells with their names).
    pub show_other_users: bool,
    /// Where to serve Prometheus metrics (`crate::metrics`); off when `None`.
    pub metrics: Option<std::net::SocketAddr>,
    /// Who besides their creators may open named channels.
    pub channel_acl: Vec<ChannelAcl>,
    /// Make each exclusive cell a cpuset partition the kernel isolates
    /// where the backend can (cgroup v2; `Enforcer::set_partition`). On by
    /// default: it changes only allot's own cgroups.
    pub partitions: bool,
    /// Keep movable interrupts and unbound workqueues off the CPUs of
    /// exclusive cells (partitions); restored when none is left and on exit.
    pub isolate: bool,
    /// The root under which `proc/irq` and `sys` are (`/`).
    pub isolate_root: PathBuf,
    /// Confine processes that asked for nothing to the reserve (Poli-C's
    /// system minimum; `allot_enforce::unmanaged`). Off by default: it
    /// moves processes allot did not start.
    pub confine_unmanaged: bool,
    /// The cgroup whose processes count as unmanaged (default: the root of
    /// the backend's cpuset hierarchy).
    pub unmanaged_from: Option<PathBuf>,
    /// Run the event loop at real-time priority while it is cheap
    /// (`crate::realtime`).
    pub realtime: bool,
}

/// The state directory of the system's broker (root's, and the service's),
/// whose cgroup directory is plainly `allot`.
pub const SYSTEM_STATE_DIR: &str = "/run/allot";

/// The cgroup directory name of a broker whose state directory is
/// `state_dir` and which was given none: `allot` for the system's broker
/// ([`SYSTEM_STATE_DIR`]); for any other, `allot-` with the directory's
/// last name (up to 24 characters of `[A-Za-z0-9_-]`) and eight hex
/// digits of a hash of its whole path. A pure function of the path: the
/// same broker restarted finds its cells again.
pub fn default_cgroup_name(state_dir: &Path) -> String {
    if state_dir == Path::new(SYSTEM_STATE_DIR) {
        return "allot".into();
    }
    let last: String = state_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .take(24)
        .collect();
    // FNV-1a, 64 bits: stable across builds and releases.
    let hash = state_dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
        });
    let tag = format!("{:08x}", hash as u32);
    if last.is_empty() {
        format!("allot-{tag}")
    } else {
        format!("allot-{last}-{tag}")
    }
}

/// Refuses a cgroup directory name that is not a plain name.
pub fn check_cgroup_name(n: &str) -> Result<(), String> {
    if n.is_empty() || n.contains('/') || n.starts_with('.') {
        return Err(format!("cgroup_name {n:?} must be a plain directory name"));
    }
    Ok(())
}

impl Config {
    /// Defaults for a socket path: journal beside it, auto backend.
    pub fn new(socket: PathBuf) -> Config {
        let state_dir = allot_proto::dirs::socket_parent(&socket).to_path_buf();
        Config {
            socket,
            state_dir,
            backend: BackendKind::Auto,
            policy: GlobalPolicy::FairShare,
            weigh: Weighing::Threads,
            reserve: 0,
            memory_reserve: None,
            resctrl_root: PathBuf::from(allot_enforce::resctrl::MOUNT),
            time_reserve_ppm: DEFAULT_TIME_RESERVE_PPM,
            lend: true,
            cpus: None,
            tick: DEFAULT_TICK,
            cgroup_name_set: None,
            cgroup2_root: None,
            idle_exit: None,
            sysfs: None,
            limits: Limits::default(),
            show_other_users: false,
            metrics: None,
            channel_acl: Vec::new(),
            partitions: true,
            isolate: false,
            isolate_root: PathBuf::from("/"),
            confine_unmanaged: false,
            unmanaged_from: None,
            realtime: true,
        }
    }

    /// The machine this configuration manages: the topology of this
    /// machine's allowed CPUs (or of the `sysfs` fixture), restricted to
    /// `cpus`. The broker plans on it; `allot daemon --check-config` checks
    /// it.
    pub fn machine(&self) -> Result<allot_topo::Machine, String> {
        let allowed = allot_topo::allowed_cpus().map_err(|e| e.to_string())?;
        let machine = match &self.sysfs {
            Some(root) => allot_topo::discover(root, &root.display().to_string(), None),
            None => allot_topo::discover(Path::new("/sys"), "this machine", Some(&allowed)),
        }
        .map_err(|e| format!("cannot read the machine's topology: {e}"))?;
        match &self.cpus {
            Some(c) => {
                // A CPU the machine lacks (or does not allow the broker) is
                // a mistake to name, not one to drop silently.
                let missing = c.difference(machine.usable());
                if !missing.is_empty() {
                    return Err(format!(
                        "cpus = {c}: CPU(s) {missing} are not on {} or not allowed to the \
                         broker (it may use {}); name CPUs among those",
                        machine.name(),
                        machine.usable()
                    ));
                }
                machine.restrict(c).map_err(|e| format!("cpus = {c}: {e}"))
            }
            None => Ok(machine),
        }
    }

    /// Checks the settings that depend on each other (after the file and
    /// the command line are both applied).
    pub fn validate(&self) -> Result<(), String> {
        if self.confine_unmanaged && self.reserve == 0 {
            return Err(
                "confine_unmanaged = true needs reserve >= 1: the processes it \
                 confines run on the reserve"
                    .into(),
            );
        }
        Ok(())
    }

    /// allot's directory in each cgroup hierarchy: as set, else one tied
    /// to the state directory ([`default_cgroup_name`]), so that brokers
    /// with different state directories never share one.
    pub fn cgroup_name(&self) -> String {
        self.cgroup_name_set.clone().unwrap_or_else(|| {
            let dir = std::path::absolute(&self.state_dir).unwrap_or(self.state_dir.clone());
            default_cgroup_name(&dir)
        })
    }

    /// The journal file.
    pub fn journal_path(&self) -> PathBuf {
        self.state_dir.join("journal")
    }

    /// Applies a TOML file's settings over `self`.
    pub fn load_file(&mut self, path: &Path) -> Result<(), String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config {}: {e}", path.display()))?;
        self.apply_toml(&text)
            .map_err(|e| format!("config {}: {e}", path.display()))
    }

    /// Applies TOML text over `self`.
    pub fn apply_toml(&mut self, text: &str) -> Result<(), String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            backend: Option<String>,
            policy: Option<String>,
            weigh: Option<String>,
            reserve: Option<u32>,
            memory_reserve: Option<String>,
            time_reserve: Option<f64>,
            lend: Option<bool>,
            cpus: Option<String>,
            tick_ms: Option<u64>,
            cgroup_name: Option<String>,
            cgroup2_root: Option<PathBuf>,
            idle_exit_s: Option<u64>,
            state_dir: Option<PathBuf>,
            socket: Option<PathBuf>,
            show_other_users: Option<bool>,
            metrics: Option<String>,
            limits: Option<Limits>,
            channel_acl: Option<Vec<ChannelAcl>>,
            partitions: Option<bool>,
            isolate: Option<bool>,
            isolate_root: Option<PathBuf>,
            confine_unmanaged: Option<bool>,
            unmanaged_from: Option<PathBuf>,
            realtime: Option<bool>,
        }
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(b) = f.backend {
            self.backend = b.parse()?;
        }
        if let Some(p) = f.policy {
            self.policy = p.parse()?;
        }
        if let Some(w) = f.weigh {
            self.weigh = w.parse().map_err(|e| format!("weigh: {e}"))?;
        }
        if let Some(r) = f.reserve {
            self.reserve = r;
        }
        if let Some(m) = f.memory_reserve {
            self.memory_reserve =
                Some(allot_spec::parse_size(&m).map_err(|e| format!("memory_reserve: {e}"))?);
        }
        if let Some(t) = f.time_reserve {
            if !(0.0..1.0).contains(&t) {
                return Err(format!(
                    "time_reserve = {t} is out of range: a share of each CPU from 0 to below 1 \
                     (0.05 keeps 5 %)"
                ));
            }
            self.time_reserve_ppm = (t * 1e6).round() as u32;
        }
        if let Some(l) = f.lend {
            self.lend = l;
        }
        if let Some(c) = f.cpus {
            self.cpus = Some(CpuSet::parse_list(&c).map_err(|e| format!("cpus: {e}"))?);
        }
        if let Some(t) = f.tick_ms {
            if !(10..=10_000).contains(&t) {
                return Err(format!("tick_ms = {t} is out of range (10 to 10000)"));
            }
            self.tick = Duration::from_millis(t);
        }
        if let Some(n) = f.cgroup_name {
            check_cgroup_name(&n)?;
            self.cgroup_name_set = Some(n);
        }
        if let Some(r) = f.cgroup2_root {
            self.cgroup2_root = Some(r);
        }
        if let Some(s) = f.idle_exit_s {
            self.idle_exit = (s > 0).then(|| Duration::from_secs(s));
        }
        if let Some(d) = f.state_dir {
            self.state_dir = d;
        }
        if let Some(s) = f.socket {
            self.socket = s;
        }
        if let Some(v) = f.show_other_users {
            self.show_other_users = v;
        }
        if let Some(m) = f.metrics {
            self.metrics = Some(parse_metrics_addr(&m)?);
        }
        if let Some(p) = f.partitions {
            self.partitions = p;
        }
        if let Some(i) = f.isolate {
            self.isolate = i;
        }
        if let Some(r) = f.isolate_root {
            self.isolate_root = r;
        }
        if let Some(c) = f.confine_unmanaged {
            self.confine_unmanaged = c;
        }
        if let Some(r) = f.realtime {
            self.realtime = r;
        }
        if let Some(d) = f.unmanaged_from {
            self.unmanaged_from = Some(d);
        }

        if let Some(acl) = f.channel_acl {
            for a in &acl {
                allot_channel::check_name(&a.name).map_err(|e| format!("channel_acl: {e}"))?;
            }
            self.channel_acl = acl;
        }
        if let Some(l) = f.limits {
            if [l.connections, l.cells, l.members, l.cells_total].contains(&0) {
                return Err(
                    "limits: connections, cells, members and cells_total must be at least 1".into(),
                );
            }
            self.limits = l;
        }
        Ok(())
    }
}

/// A metrics address: `HOST:PORT` (an IP address, IPv6 in brackets).
pub fn parse_metrics_addr(s: &str) -> Result<std::net::SocketAddr, String> {
    s.parse().map_err(|_| {
        format!(
            "metrics address {s:?} is not IP:PORT (for example 127.0.0.1:9464, [::1]:9464, \
             or 0.0.0.0:9464 to serve every interface)"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_file_is_a_valid_configuration() {
        let mut c = Config::new(PathBuf::from("/tmp/x/sock"));
        c.apply_toml(EXAMPLE).unwrap();
        assert_eq!(c.cgroup_name(), "allot");
        assert_eq!(c.limits.connections, 64);
    }

    #[test]
    fn each_state_directory_has_a_cgroup_directory_of_its_own() {
        assert_eq!(default_cgroup_name(Path::new("/run/allot")), "allot");
        let a = default_cgroup_name(Path::new("/home/ann/b"));
        let b = default_cgroup_name(Path::new("/home/bob/b"));
        assert!(
            a.starts_with("allot-b-") && b.starts_with("allot-b-"),
            "{a} {b}"
        );
        assert_ne!(a, b);
        assert_eq!(a, default_cgroup_name(Path::new("/home/ann/b")));
        assert_eq!(a.len(), "allot-b-".len() + 8);
        let odd = default_cgroup_name(Path::new("/tmp/a b/..x/.hidden ünï"));
        assert!(
            odd.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
            "{odd}"
        );
        // Set, it is kept; unset, it follows the state directory.
        let mut c = Config::new(PathBuf::from("/tmp/x/sock"));
        assert_eq!(c.cgroup_name(), default_cgroup_name(Path::new("/tmp/x")));
        c.state_dir = PathBuf::from("/run/allot");
        assert_eq!(c.cgroup_name(), "allot");
        c.apply_toml("cgroup_name = \"mine\"").unwrap();
        assert_eq!(c.cgroup_name(), "mine");
    }

    #[test]
    fn file_overrides_defaults() {
        let mut c = Config::new("/tmp/x/allot.sock".into());
        assert_eq!(c.state_dir, Path::new("/tmp/x"));
        c.apply_toml(
            "backend = \"dry-run\"\nreserve = 1\ncpus = \"0-3\"\ntick_ms = 50\nidle_exit_s = 5\n",
        )
        .unwrap();
        assert_eq!(c.backend, BackendKind::DryRun);
        assert_eq!(c.reserve, 1);
        assert_eq!(c.time_reserve_ppm, DEFAULT_TIME_RESERVE_PPM);
        let mut t = Config::new("/tmp/x.sock".into());
        t.apply_toml("time_reserve = 0.2\n").unwrap();
        assert_eq!(t.time_reserve_ppm, 200_000);
        let e = t.apply_toml("time_reserve = 1.0\n").unwrap_err();
        assert!(e.contains("out of range"), "{e}");
        assert_eq!(c.cpus.unwrap().to_string(), "0-3");
        assert_eq!(c.tick, Duration::from_millis(50));
        assert_eq!(c.idle_exit, Some(Duration::from_secs(5)));
    }

    #[test]
    fn weigh_defaults_to_threads_and_takes_group() {
        let mut c = Config::new("/tmp/s".into());
        assert_eq!(c.weigh, Weighing::Threads);
        c.apply_toml("weigh = \"group\"").unwrap();
        assert_eq!(c.weigh, Weighing::Group);
        let e = c.apply_toml("weigh = \"heavy\"").unwrap_err();
        assert!(e.contains("weigh") && e.contains("threads"), "{e}");
        assert_eq!(c.weigh, Weighing::Group, "a refused value changes nothing");
    }

    #[test]
    fn metrics_address_parses_or_says_the_form() {
        let mut c = Config::new("/tmp/s".into());
        c.apply_toml("metrics = \"127.0.0.1:9464\"").unwrap();
        assert_eq!(c.metrics.unwrap().port(), 9464);
        let e = c.apply_toml("metrics = \"localhost\"").unwrap_err();
        assert!(e.contains("IP:PORT"), "{e}");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let mut c = Config::new("/tmp/s".into());
        assert!(
            c.apply_toml("backend = \"zfs\"")
                .unwrap_err()
                .contains("unknown backend")
        );
        assert!(
            c.apply_toml("colour = 1")
                .unwrap_err()
                .contains("unknown field")
        );
        assert!(
            c.apply_toml("tick_ms = 1")
                .unwrap_err()
                .contains("out of range")
        );
        assert!(
            c.apply_toml("cgroup_name = \"../x\"")
                .unwrap_err()
                .contains("plain directory")
        );
        assert!(
            c.apply_toml("[limits]\ncells = 0")
                .unwrap_err()
                .contains("at least 1")
        );
        assert!(
            c.apply_toml("[limits]\nsockets = 3")
                .unwrap_err()
                .contains("unknown field")
        );
    }

    #[test]
    fn limits_keep_defaults_for_keys_not_given() {
        let mut c = Config::new("/tmp/s".into());
        c.apply_toml("show_other_users = true\n[limits]\nqueued = 9\n")
            .unwrap();
        assert!(c.show_other_users);
        assert_eq!(c.limits.queued, 9);
        assert_eq!(c.limits.cells, Limits::default().cells);
    }

    #[test]
    fn channel_acls_name_valid_channels() {
        let mut c = Config::new("/tmp/s".into());
        c.apply_toml(
            "[limits]\nchannels = 3\n[[channel_acl]]\nname = \"frames.in\"\nuids = [1001, 1002]\n",
        )
        .unwrap();
        assert_eq!(c.limits.channels, 3);
        assert_eq!(
            c.channel_acl,
            vec![ChannelAcl {
                name: "frames.in".into(),
                uids: vec![1001, 1002]
            }]
        );
        let e = c
            .apply_toml("[[channel_acl]]\nname = \"../x\"\nuids = [1]\n")
            .unwrap_err();
        assert!(e.contains("channel_acl"), "{e}");
    }
}
