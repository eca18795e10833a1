//! `allot bench isolation`: Tessellation's performance isolation, with
//! memory. A latency-sensitive request server (`bench serve` with a data
//! set in the page cache) runs beside a memory hog and a memory-bandwidth
//! streamer, three ways:
//!
//! - `plain`: the three programs as they are;
//! - `cpus`: under allot, the server in an exclusive cell of one CPU, the
//!   others best effort: CPUs partitioned, memory not;
//! - `memory`: the same, and memory partitioned too: the server guaranteed
//!   its data set (`--memory-min`), the hog and the streamer limited
//!   (`--memory-max`);
//! - `cache` (only where the machine has resctrl): the same, and the
//!   memory system too: the server gets half the L3 ways for its own
//!   (`--cache-ways`), the streamer a bandwidth ceiling
//!   (`--mem-bandwidth`).
//!
//! Memory is made scarce without touching the machine: the experiment
//! runs inside a memory group of its own, `--limit` bytes, created below
//! the memory group it was started in (cgroup v1) and removed at the end;
//! the broker it starts runs there too, so its cells nest inside. The hog
//! asks for more than that group leaves beside the server's data set, so
//! without a memory partition the kernel reclaims the server's pages
//! (which it then reads from the disk again, inside its requests) and, at
//! worst, kills the largest process in the group.
//!
//! It reports, per way, the median over `--runs` of the server's p99 and
//! requests served, what it read again from the disk, what became of the
//! hog, and the streamer's copy rate. Where the machine has no resctrl
//! the `cache` way is left out, saying why.

use super::broker::PrivateBroker;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

/// Arguments of `allot bench isolation`.
#[derive(Debug, clap::Args)]
pub struct IsolationArgs {
    /// Seconds the server serves in each run.
    #[arg(long, default_value_t = 10, value_name = "SECS")]
    seconds: u64,
    /// Runs per way (the median is reported).
    #[arg(long, default_value_t = 3, value_name = "N")]
    runs: usize,
    /// The experiment's memory group: what the three programs and the
    /// broker share.
    #[arg(long, default_value = "2G", value_parser = allot_spec::parse_size, value_name = "SIZE")]
    limit: u64,
    /// The server's data set (a file it reads random pages of).
    #[arg(long, default_value = "640M", value_parser = allot_spec::parse_size, value_name = "SIZE")]
    data: u64,
    /// What the hog asks for.
    #[arg(long, default_value = "1600M", value_parser = allot_spec::parse_size, value_name = "SIZE")]
    hog: u64,
    /// The hog's limit in the `memory` way.
    #[arg(long, default_value = "768M", value_parser = allot_spec::parse_size, value_name = "SIZE")]
    hog_limit: u64,
    /// Ways to run (comma-separated): plain, cpus, memory, cache (cache:
    /// only where the machine has resctrl).
    #[arg(long, default_value = "plain,cpus,memory,cache", value_name = "LIST")]
    ways: String,
    /// Where the data set is written (a disk, not tmpfs: its pages must
    /// be reclaimable) [default: a private directory under /var/tmp].
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// One way of running the three programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    Plain,
    Cpus,
    Memory,
    Cache,
}

impl Way {
    fn parse(s: &str) -> Result<Way, String> {
        match s.trim() {
            "plain" => Ok(Way::Plain),
            "cpus" => Ok(Way::Cpus),
            "memory" => Ok(Way::Memory),
            "cache" => Ok(Way::Cache),
            other => Err(format!(
                "--ways: unknown way {other:?} (plain, cpus, memory, cache)"
            )),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Way::Plain => "plain",
            Way::Cpus => "allot, CPUs partitioned",
            Way::Memory => "allot, CPUs and memory partitioned",
            Way::Cache => "allot, CPUs, memory, cache and bandwidth",
        }
    }
}

/// What one run measured.
#[derive(Debug, Clone, Default)]
struct Run {
    p99_us: f64,
    p50_us: f64,
    requests: f64,
    /// Bytes the server read from the disk while serving (pages the
    /// kernel had reclaimed), MiB.
    reread_mib: f64,
    hog: String,
    copy_gbs: f64,
}

/// The experiment's memory group, removed on drop (everything in it is
/// moved back to the group it was made in first).
struct Group {
    dir: PathBuf,
    parent: PathBuf,
}

impl Group {
    /// Makes `<own memory group>/allot-isolation-<pid>` of `limit` bytes
    /// and moves this process into it.
    fn enter(limit: u64) -> Result<Group, String> {
        let own = allot_enforce::memory::own_v1_group().ok_or(
            "needs the cgroup v1 memory hierarchy (this machine has none; the experiment \
             makes memory scarce inside a memory group of its own)",
        )?;
        let mount = Path::new("/sys/fs/cgroup/memory");
        let parent = mount.join(own.trim_start_matches('/'));
        let dir = parent.join(format!("allot-isolation-{}", std::process::id()));
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot create {} (needs root): {e}", dir.display()))?;
        let g = Group { dir, parent };
        std::fs::write(g.dir.join("memory.limit_in_bytes"), limit.to_string())
            .map_err(|e| format!("cannot limit {}: {e}", g.dir.display()))?;
        std::fs::write(g.dir.join("cgroup.procs"), std::process::id().to_string())
            .map_err(|e| format!("cannot move into {}: {e}", g.dir.display()))?;
        Ok(g)
    }

    /// Processes killed for want of memory in the group so far.
    fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.oom_control"))
            .ok()
            .and_then(|t| allot_enforce::memory::field(&t, "oom_kill"))
            .unwrap_or(0)
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let back = self.parent.join("cgroup.procs");
        for _ in 0..50 {
            let procs = std::fs::read_to_string(self.dir.join("cgroup.procs")).unwrap_or_default();
            for pid in procs.split_whitespace() {
                let _ = std::fs::write(&back, pid);
            }
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("warning: cannot remove {}", self.dir.display());
    }
}

/// The hog: asks for `bytes` in 32M steps, touching every page, then
/// holds them, touching them again every 200 ms, for `secs`.
fn hog_script(bytes: u64, secs: u64) -> String {
    format!(
        "import time, sys\n\
         chunks = []\n\
         step = 32 << 20\n\
         while len(chunks) * step < {bytes}:\n    chunks.append(bytearray(b'h' * step))\n\
         end = time.time() + {secs}\n\
         while time.time() < end:\n    for c in chunks:\n        c[::4096] = b'x' * len(c[::4096])\n    time.sleep(0.2)\n\
         print('held', len(chunks) * step >> 20)\n"
    )
}

/// The streamer: copies 128M back and forth for `secs`, and prints GB/s.
fn streamer_script(secs: u64) -> String {
    format!(
        "import time\n\
         a = bytearray(b's' * (128 << 20)); b = bytearray(len(a))\n\
         t0 = time.time(); n = 0\n\
         while time.time() - t0 < {secs}:\n    b[:] = a; a[:] = b; n += 2\n\
         print('copied', n * len(a) / (time.time() - t0) / 1e9)\n"
    )
}

/// Runs `allot bench isolation`.
pub fn run(a: IsolationArgs) -> Result<i32, String> {
    super::interrupt::install();
    let mut ways: Vec<Way> = a
        .ways
        .split(',')
        .map(Way::parse)
        .collect::<Result<_, _>>()?;
    // The cache way needs resctrl: its L3 ways, if it has them.
    let l3_ways = allot_enforce::resctrl::Facts::read(
        &allot_enforce::cgroupfs::KernelFs,
        std::path::Path::new(allot_enforce::resctrl::MOUNT),
    )
    .map(|f| f.offer.l3.map_or(0, |l| l.ways));
    if ways.contains(&Way::Cache) {
        match &l3_ways {
            Ok(w) if *w >= 2 => {}
            Ok(_) => {
                println!("isolation: the cache way is left out: this CPU has no L3 allocation");
                ways.retain(|w| *w != Way::Cache);
            }
            Err(why) => {
                println!("isolation: the cache way is left out: {why}");
                ways.retain(|w| *w != Way::Cache);
            }
        }
    }
    if ways.is_empty() {
        return Err(
            "no way is left to run (see above); add plain, cpus or memory to --ways".into(),
        );
    }
    let server_ways = l3_ways.unwrap_or(0) / 2;
    if a.runs == 0 || a.seconds == 0 {
        return Err("--runs and --seconds must be at least 1".into());
    }
    if a.data + (256 << 20) >= a.limit {
        return Err("--data must leave room in --limit for the programs themselves".into());
    }
    let allot = crate::product()?;
    let lab = crate::lab()?;
    let tmp = match &a.dir {
        Some(d) => tempfile::tempdir_in(d),
        None => tempfile::tempdir_in("/var/tmp"),
    }
    .map_err(|e| format!("cannot make a directory for the data set: {e}"))?;
    room_for(tmp.path(), a.data)?;
    let data = tmp.path().join("data");
    write_data(&data, a.data)?;
    let group = Group::enter(a.limit)?;
    println!(
        "isolation: a request server (data set {}) beside a memory hog ({}) and a streamer, \
         in a memory group of {}; {} runs of {} s per way",
        allot_spec::Size(a.data),
        allot_spec::Size(a.hog),
        allot_spec::Size(a.limit),
        a.runs,
        a.seconds
    );
    let mut results: Vec<(Way, Vec<Run>)> = Vec::new();
    for &way in &ways {
        let mut runs = Vec::new();
        for i in 0..a.runs {
            let r = one_run(&a, way, server_ways, &allot, &lab, &data, &group)?;
            println!(
                "  {} run {}: p99 {:.0} µs, p50 {:.0} µs, {} requests, {:.0} MiB read again from \
                 the disk; hog {}; streamer {:.2} GB/s",
                way.name(),
                i + 1,
                r.p99_us,
                r.p50_us,
                r.requests,
                r.reread_mib,
                r.hog,
                r.copy_gbs
            );
            runs.push(r);
        }
        results.push((way, runs));
    }
    print!("{}", summary(&results));
    Ok(0)
}

/// Whether the file system under `dir` has room for a data set of
/// `bytes` (and a margin, so that the experiment does not fill the disk
/// for everyone else); refuses, saying what to do, where it has not.
fn room_for(dir: &Path, bytes: u64) -> Result<(), String> {
    let fs = rustix::fs::statvfs(dir)
        .map_err(|e| format!("cannot read the free space under {}: {e}", dir.display()))?;
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    let needed = bytes + (256 << 20);
    if free < needed {
        return Err(format!(
            "the data set needs {} under {} (with a margin), which has {} free: free some \
             space, pass --dir on a disk with room, or a smaller --data",
            allot_spec::Size(needed),
            dir.display(),
            allot_spec::Size(free)
        ));
    }
    Ok(())
}

/// Writes `bytes` of data to `path` (and syncs, so that its pages are
/// clean and reclaimable).
fn write_data(path: &Path, bytes: u64) -> Result<(), String> {
    use std::io::Write;
    let what = |e: std::io::Error| format!("cannot write the data set {}: {e}", path.display());
    let mut f = std::fs::File::create(path).map_err(what)?;
    let block: Vec<u8> = (0..1 << 20).map(|i| (i % 251) as u8).collect();
    for _ in 0..bytes.div_ceil(1 << 20) {
        f.write_all(&block).map_err(what)?;
    }
    f.sync_all().map_err(what)
}

/// Asks the kernel to drop `path`'s clean pages from the page cache.
fn drop_cache(path: &Path) -> Result<(), String> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    rustix::fs::fadvise(&f, 0, None, rustix::fs::Advice::DontNeed)
        .map_err(|e| format!("cannot drop {} from the page cache: {e}", path.display()))
}

#[allow(clippy::too_many_arguments)]
fn one_run(
    a: &IsolationArgs,
    way: Way,
    server_ways: u32,
    allot: &Path,
    lab: &Path,
    data: &Path,
    group: &Group,
) -> Result<Run, String> {
    let broker = match way {
        Way::Plain => None,
        _ => Some(PrivateBroker::start(allot, "cgroup1")?),
    };
    // A program as it is (plain), or through `allot run FLAGS`.
    let wrap = |cmd: Command, flags: &[String]| -> Command {
        match &broker {
            None => cmd,
            Some(b) => {
                let mut c = Command::new(allot);
                c.arg("run")
                    .args(flags)
                    .arg("--")
                    .arg(cmd.get_program())
                    .args(cmd.get_args())
                    .env("ALLOT_SOCKET", b.socket());
                c
            }
        }
    };
    // The data set leaves the page cache: the server's first read brings
    // it back, charged to the server (not to whoever wrote it).
    drop_cache(data)?;
    let memory = matches!(way, Way::Memory | Way::Cache);
    let cache = way == Way::Cache;
    let serve_secs = a.seconds + 3;
    let mut server = Command::new(lab);
    server.args(["bench", "serve", "--rate", "200", "--service-us", "500"]);
    server.args(["--workers", "1", "--warmup", "3", "--reads", "16"]);
    server.arg("--seconds").arg(serve_secs.to_string());
    server.arg("--file").arg(data);
    let mut flags = vec!["--name".into(), "server".into(), "--exclusive".into()];
    flags.extend(["--min".into(), "1".into()]);
    if memory {
        flags.extend(["--memory-min".into(), (a.data + (64 << 20)).to_string()]);
    }
    if cache {
        flags.extend(["--cache-ways".into(), server_ways.to_string()]);
    }
    let server = wrap(server, &flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the server: {e}"))?;
    // The server reads its data set first, then the others arrive.
    std::thread::sleep(Duration::from_secs(2));
    let kills_before = group.oom_kills();
    let mut hog = Command::new("python3");
    hog.args(["-c", &hog_script(a.hog, serve_secs)]);
    let mut flags = vec!["--name".to_string(), "hog".to_string()];
    if memory {
        flags.extend(["--memory-max".into(), a.hog_limit.to_string()]);
    }
    let hog = wrap(hog, &flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the hog: {e}"))?;
    let mut streamer = Command::new("python3");
    streamer.args(["-c", &streamer_script(a.seconds)]);
    let mut flags = vec!["--name".to_string(), "streamer".to_string()];
    if memory {
        flags.extend(["--memory-max".into(), (400u64 << 20).to_string()]);
    }
    if cache {
        flags.extend(["--mem-bandwidth".into(), "20".into()]);
    }
    let streamer = wrap(streamer, &flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start the streamer: {e}"))?;
    // Each of the three ends on its own clock.
    let out = |c: std::process::Child, what: &str| {
        c.wait_with_output()
            .map_err(|e| format!("cannot wait for the {what}: {e}"))
    };
    let server = out(server, "server")?;
    let hog = out(hog, "hog")?;
    let streamer = out(streamer, "streamer")?;
    drop(broker);
    let report: serde_json::Value = String::from_utf8_lossy(&server.stdout)
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .ok_or_else(|| {
            format!(
                "the server printed no report ({}); it may have been killed for want of memory",
                server.status
            )
        })?;
    let num = |k: &str| report.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
    let held = String::from_utf8_lossy(&hog.stdout);
    let hog_fate = match held.split_whitespace().nth(1) {
        Some(mib) => format!("held {mib} MiB"),
        None if hog.status.code() == Some(137) || hog.status.code().is_none() => {
            "killed (out of memory)".into()
        }
        None => format!("ended ({})", hog.status),
    };
    let kills = group.oom_kills() - kills_before;
    let copied = String::from_utf8_lossy(&streamer.stdout);
    Ok(Run {
        p99_us: num("p99_us"),
        p50_us: num("p50_us"),
        requests: num("requests"),
        reread_mib: num("disk_read_bytes") / f64::from(1u32 << 20),
        hog: if kills > 0 && memory {
            format!("{hog_fate}; {kills} OOM kill(s) in the experiment's group")
        } else {
            hog_fate
        },
        copy_gbs: copied
            .split_whitespace()
            .nth(1)
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0),
    })
}

fn summary(results: &[(Way, Vec<Run>)]) -> String {
    let mut out = String::from("\nmedians over the runs:\n");
    let _ = writeln!(
        out,
        "  {:<38} {:>10} {:>10} {:>9} {:>10} {:>10}  hog",
        "way", "p99 µs", "p50 µs", "requests", "reread MiB", "copy GB/s"
    );
    let base = results
        .iter()
        .find(|(w, _)| *w == Way::Plain)
        .map(|(_, r)| super::mix::median(&r.iter().map(|r| r.p99_us).collect::<Vec<_>>()));
    for (way, runs) in results {
        let m = |f: fn(&Run) -> f64| super::mix::median(&runs.iter().map(f).collect::<Vec<_>>());
        let p99 = m(|r| r.p99_us);
        let vs = match base {
            Some(b) if b > 0.0 && *way != Way::Plain => format!(" ({:.2}× plain)", p99 / b),
            _ => String::new(),
        };
        let _ = writeln!(
            out,
            "  {:<38} {:>10.0} {:>10.0} {:>9.0} {:>10.0} {:>10.2}  {}{vs}",
            way.name(),
            p99,
            m(|r| r.p50_us),
            m(|r| r.requests),
            m(|r| r.reread_mib),
            m(|r| r.copy_gbs),
            runs.last().map_or("", |r| r.hog.as_str())
        );
    }
    if !results.iter().any(|(w, _)| *w == Way::Cache) {
        let _ = writeln!(
            out,
            "  cache and memory bandwidth: not partitioned (no cache way was run)"
        );
    }
    out
}
