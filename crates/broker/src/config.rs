//! Broker configuration: command-line settings over an optional TOML file.
//!
//! ```toml
//! # /etc/allot/allotd.toml (every key optional)
//! backend = "auto"          # auto | cgroup2 | cgroup1 | affinity | dry-run
//! policy = "fair-share"     # fair-share | priority
//! reserve = 0               # CPUs kept for processes outside any cell
//! lend = true               # lend idle CPUs (work conservation)
//! cpus = "0-15"             # manage only these CPUs (default: all allowed)
//! tick_ms = 100             # monitor period: usage sampling, demand
//! cgroup_name = "allot"     # allot's directory in each cgroup hierarchy
//! cgroup2_root = "/sys/fs/cgroup/allot"  # explicit (delegated) v2 subtree
//! idle_exit_s = 0           # exit after this long with no cell and no client (0: never)
//! state_dir = "/run/allot"  # journal location (default: next to the socket)
//! ```

use allot_enforce::BackendKind;
use allot_plan::GlobalPolicy;
use allot_topo::CpuSet;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Default monitor period.
pub const DEFAULT_TICK: Duration = Duration::from_millis(100);

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
    /// CPUs kept for processes outside any cell.
    pub reserve: u32,
    /// Work conservation.
    pub lend: bool,
    /// Restrict management to these CPUs.
    pub cpus: Option<CpuSet>,
    /// Monitor period.
    pub tick: Duration,
    /// cgroup directory name.
    pub cgroup_name: String,
    /// Explicit cgroup v2 subtree.
    pub cgroup2_root: Option<PathBuf>,
    /// Exit when idle this long.
    pub idle_exit: Option<Duration>,
    /// Sysfs root for topology (tests use fixtures).
    pub sysfs: Option<PathBuf>,
}

impl Config {
    /// Defaults for a socket path: journal beside it, auto backend.
    pub fn new(socket: PathBuf) -> Config {
        let state_dir = socket
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        Config {
            socket,
            state_dir,
            backend: BackendKind::Auto,
            policy: GlobalPolicy::FairShare,
            reserve: 0,
            lend: true,
            cpus: None,
            tick: DEFAULT_TICK,
            cgroup_name: "allot".to_string(),
            cgroup2_root: None,
            idle_exit: None,
            sysfs: None,
        }
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
            reserve: Option<u32>,
            lend: Option<bool>,
            cpus: Option<String>,
            tick_ms: Option<u64>,
            cgroup_name: Option<String>,
            cgroup2_root: Option<PathBuf>,
            idle_exit_s: Option<u64>,
            state_dir: Option<PathBuf>,
            socket: Option<PathBuf>,
        }
        let f: File = toml::from_str(text).map_err(|e| e.to_string())?;
        if let Some(b) = f.backend {
            self.backend = b.parse()?;
        }
        if let Some(p) = f.policy {
            self.policy = p.parse()?;
        }
        if let Some(r) = f.reserve {
            self.reserve = r;
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
            if n.is_empty() || n.contains('/') || n.starts_with('.') {
                return Err(format!("cgroup_name {n:?} must be a plain directory name"));
            }
            self.cgroup_name = n;
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
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(c.cpus.unwrap().to_string(), "0-3");
        assert_eq!(c.tick, Duration::from_millis(50));
        assert_eq!(c.idle_exit, Some(Duration::from_secs(5)));
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
    }
}
