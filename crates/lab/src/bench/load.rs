//! `allot bench load`: the broker under many users, cells and connections.
//!
//! Three phases against a private broker, with users that are threads of
//! this process, each switched to a uid of its own by the per-thread
//! `setresuid` system call (the broker's peer credentials are those of the
//! thread that connects; their member processes are `sleep`s started by
//! that thread, so they belong to that user). No account is created; the
//! uids are unassigned numbers from [`FIRST_UID`]. Needs root.
//!
//! 1. **Cells**: every user registers its share of `--cells` cells at once
//!    (one `sleep` each), then releases them: latency of each registration
//!    and release (p50, p99, max), the broker's RSS and CPU time.
//! 2. **Idle connections**: `--idle` connections spread over the users are
//!    opened and held; the broker's RSS with them, and the latency of a
//!    `Hello` from another user meanwhile.
//! 3. **One user's flood**: `--victims` users register and release cells
//!    in a loop for `--seconds`, alone, then while one more user floods
//!    the broker from as many connections as its limit allows (status and
//!    kind listings it never reads, oversized hellos, registrations listing
//!    4096 members), keeping every socket full (it yields only when all
//!    are, so that it measures the broker's fairness, not the flooding
//!    process's own use of the CPU). The victims' p99 with the flood, against without it,
//!    must stay within [`FLOOD_BOUND`] (or [`FLOOD_FLOOR`] when the
//!    baseline is tiny).
//!
//! Exit status 1 if the flood bound is broken or a phase fails.

use super::broker::PrivateBroker;
use allot_client::Client;
use allot_proto::{Conn, Request};
use allot_spec::CellSpec;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// The first uid of the load's users.
pub const FIRST_UID: u32 = 430_000;
/// The victims' p99 under a flood may be at most this many times their p99
/// without one...
pub const FLOOD_BOUND: f64 = 5.0;
/// ...or this, whichever is larger (a baseline of a few hundred
/// microseconds on a shared 2-CPU machine moves by more than 5x on
/// scheduling noise alone).
pub const FLOOD_FLOOR: Duration = Duration::from_millis(50);

/// Arguments of `allot bench load`.
#[derive(Debug, clap::Args)]
pub struct LoadArgs {
    /// Cells registered at once (phase 1).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    cells: usize,
    /// Users (phases 1 and 2).
    #[arg(long, default_value_t = 100, value_name = "N")]
    users: u32,
    /// Idle connections held open (phase 2).
    #[arg(long, default_value_t = 5000, value_name = "N")]
    idle: usize,
    /// Users registering and releasing cells during the flood (phase 3).
    #[arg(long, default_value_t = 20, value_name = "N")]
    victims: u32,
    /// Length of each half of phase 3.
    #[arg(long, default_value_t = 5, value_name = "SECS")]
    seconds: u64,
    /// Enforcement backend of the private broker [default: cgroup1 with a
    /// v1 cpuset hierarchy, else affinity].
    #[arg(long, value_name = "BACKEND")]
    backend: Option<String>,
}

/// Latencies, summarized.
#[derive(Debug, Clone, Default)]
struct Lat(Vec<Duration>);

impl Lat {
    fn pct(&self, p: f64) -> Duration {
        if self.0.is_empty() {
            return Duration::ZERO;
        }
        let mut v = self.0.clone();
        v.sort_unstable();
        v[((v.len() - 1) as f64 * p).round() as usize]
    }
    fn line(&self) -> String {
        format!(
            "n {:>5}  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms",
            self.0.len(),
            ms(self.pct(0.5)),
            ms(self.pct(0.99)),
            ms(self.pct(1.0))
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Switches the calling thread (only) to `uid`.
pub(super) fn become_user(uid: u32) -> Result<(), String> {
    use rustix::process::{Gid, Uid};
    let g = Gid::from_raw(uid);
    rustix::thread::set_thread_groups(&[]).map_err(|e| format!("setgroups: {e}"))?;
    rustix::thread::set_thread_res_gid(g, g, g).map_err(|e| format!("setresgid: {e}"))?;
    let u = Uid::from_raw(uid);
    rustix::thread::set_thread_res_uid(u, u, u).map_err(|e| format!("setresuid: {e}"))
}

/// `sleep 3600`, started by the calling thread (so owned by its user).
pub(super) fn sleeper() -> Result<Child, String> {
    Command::new("/bin/sleep")
        .arg("3600")
        .current_dir("/")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start sleep: {e}"))
}

pub(super) fn kill_all(children: &mut [Child]) {
    for c in children.iter_mut() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// RSS (KiB) and CPU seconds of `pid`.
fn usage(pid: u32) -> (u64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let cpu = stat
        .rfind(')')
        .map(|i| {
            stat[i + 2..]
                .split_whitespace()
                .skip(11)
                .take(2)
                .filter_map(|x| x.parse::<u64>().ok())
                .sum::<u64>()
        })
        .unwrap_or(0) as f64
        / rustix::param::clock_ticks_per_second() as f64;
    (rss, cpu)
}

/// Runs `allot bench load`.
pub fn run(a: LoadArgs) -> Result<i32, String> {
    super::interrupt::install();
    if !rustix::process::geteuid().is_root() {
        return Err(
            "allot bench load needs root: its users are uids it switches threads to".into(),
        );
    }
    if a.users == 0 || a.victims == 0 || a.seconds == 0 {
        return Err("--users, --victims and --seconds must be at least 1".into());
    }
    raise_fd_limit();
    let allot = crate::product()?;
    let backend = a.backend.clone().unwrap_or_else(|| {
        if std::path::Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists() {
            "cgroup1".into()
        } else {
            "affinity".into()
        }
    });
    let broker = PrivateBroker::start_with(&allot, &backend, &[])?;
    {
        // Other users reach the socket (root's broker makes it 0666).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(broker.dir(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| e.to_string())?;
    }
    let pid = broker.pid().ok_or("the broker is not running")?;
    let socket = broker.socket().to_path_buf();
    let mut out = String::new();
    let (rss0, cpu0) = usage(pid);
    out += &format!(
        "load: {} backend; broker at start: RSS {} KiB\n",
        backend, rss0
    );
    let mut failed = false;

    // Phase 1: cells.
    let per = a.cells.div_ceil(a.users as usize);
    let start = Arc::new(Barrier::new(a.users as usize));
    let t1 = Instant::now();
    let results: Vec<Result<(Lat, Lat, Duration), String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.users)
            .map(|u| {
                let (socket, start) = (socket.clone(), start.clone());
                let n = per.min(a.cells.saturating_sub(u as usize * per));
                s.spawn(move || -> Result<(Lat, Lat, Duration), String> {
                    become_user(FIRST_UID + u)?;
                    let mut kids = Vec::new();
                    let r = (|| {
                        for _ in 0..n {
                            kids.push(sleeper()?);
                        }
                        let mut c = Client::connect(&socket).map_err(|e| e.to_string())?;
                        start.wait();
                        let (mut reg, mut rel) = (Lat::default(), Lat::default());
                        let mut cells = Vec::new();
                        for k in &kids {
                            let t = Instant::now();
                            let r = c
                                .register(
                                    "load",
                                    CellSpec::default(),
                                    &[k.id()],
                                    false,
                                    false,
                                    |_, _| {},
                                )
                                .map_err(|e| format!("uid {}: register: {e}", FIRST_UID + u))?;
                            reg.0.push(t.elapsed());
                            cells.push(r.cell);
                        }
                        // Everyone holds its cells before anyone leaves.
                        start.wait();
                        let held = t1.elapsed();
                        for cell in cells {
                            let t = Instant::now();
                            c.release(cell).map_err(|e| format!("release: {e}"))?;
                            rel.0.push(t.elapsed());
                        }
                        Ok((reg, rel, held))
                    })();
                    kill_all(&mut kids);
                    if r.is_err() {
                        // Let the others past the barriers.
                        start.wait();
                        start.wait();
                    }
                    r
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a user thread panicked".into()))
            })
            .collect()
    });
    let (rss1, cpu1) = usage(pid);
    let (mut reg, mut rel) = (Lat::default(), Lat::default());
    for r in results {
        match r {
            Ok((g, l, _)) => {
                reg.0.extend(g.0);
                rel.0.extend(l.0);
            }
            Err(e) => {
                failed = true;
                out += &format!("  phase 1 failed: {e}\n");
            }
        }
    }
    out += &format!(
        "1. {} cells from {} users at once\n   register: {}\n   release:  {}\n   broker after: RSS {} KiB, {:.2} s of CPU for the phase\n",
        reg.0.len(),
        a.users,
        reg.line(),
        rel.line(),
        rss1,
        cpu1 - cpu0
    );

    // Phase 2: idle connections.
    let per_user = a.idle.div_ceil(a.users as usize);
    let (rss_before, _) = usage(pid);
    let held: Vec<Result<Vec<Conn>, String>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..a.users)
            .map(|u| {
                let socket = socket.clone();
                let n = per_user.min(a.idle.saturating_sub(u as usize * per_user));
                s.spawn(move || -> Result<Vec<Conn>, String> {
                    become_user(FIRST_UID + u)?;
                    (0..n)
                        .map(|_| Conn::connect(&socket).map_err(|e| e.to_string()))
                        .collect()
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a user thread panicked".into()))
            })
            .collect()
    });
    let mut conns = Vec::new();
    for h in held {
        match h {
            Ok(c) => conns.extend(c),
            Err(e) => {
                failed = true;
                out += &format!("  phase 2 failed: {e}\n");
            }
        }
    }
    std::thread::sleep(Duration::from_millis(300));
    let (rss_idle, _) = usage(pid);
    let mut hello = Lat::default();
    {
        let socket = socket.clone();
        let r = std::thread::scope(|s| {
            s.spawn(|| -> Result<Lat, String> {
                become_user(FIRST_UID + a.users + a.victims + 1)?;
                let mut l = Lat::default();
                for _ in 0..200 {
                    let mut c = Client::connect(&socket).map_err(|e| e.to_string())?;
                    let t = Instant::now();
                    c.hello("idle-phase").map_err(|e| e.to_string())?;
                    l.0.push(t.elapsed());
                }
                Ok(l)
            })
            .join()
            .unwrap_or_else(|_| Err("panicked".into()))
        });
        match r {
            Ok(l) => hello = l,
            Err(e) => {
                failed = true;
                out += &format!("  phase 2 hello failed: {e}\n");
            }
        }
    }
    let idle_count = conns.len();
    drop(conns);
    out += &format!(
        "2. {idle_count} idle connections from {} users\n   broker RSS {} KiB (+{} KiB, {:.1} KiB each)\n   hello from another user meanwhile: {}\n",
        a.users,
        rss_idle,
        rss_idle.saturating_sub(rss_before),
        rss_idle.saturating_sub(rss_before) as f64 / idle_count.max(1) as f64,
        hello.line()
    );

    // Phase 3: one user's flood against the others.
    let quiet = victims(&socket, &a, None)?;
    let flooded = victims(&socket, &a, Some(FIRST_UID + a.users + a.victims))?;
    let (b, f) = (quiet.0.pct(0.99), flooded.0.pct(0.99));
    let bound =
        Duration::from_secs_f64((b.as_secs_f64() * FLOOD_BOUND).max(FLOOD_FLOOR.as_secs_f64()));
    let ok = f <= bound;
    failed |= !ok;
    out += &format!(
        "3. {} users registering and releasing, {} s each way\n   alone:        {}\n   with a flood: {}  ({} requests sent by the flooding user)\n   p99 with / without: {:.2}x; bound max({FLOOD_BOUND}x, {} ms): {}\n",
        a.victims,
        a.seconds,
        quiet.0.line(),
        flooded.0.line(),
        flooded.1,
        f.as_secs_f64() / b.as_secs_f64().max(1e-9),
        FLOOD_FLOOR.as_millis(),
        if ok { "kept" } else { "BROKEN" }
    );
    let (rss_end, cpu_end) = usage(pid);
    out += &format!(
        "broker at the end: RSS {rss_end} KiB, {:.2} s of CPU in all\n",
        cpu_end - cpu0
    );
    print!("{out}");
    drop(broker);
    Ok(if failed { 1 } else { 0 })
}

/// Phase 3 half: `victims` users register and release one cell each in a
/// loop for `seconds`, while `flooder` (if any) floods. Returns the
/// victims' latencies and the requests the flooder sent.
fn victims(
    socket: &std::path::Path,
    a: &LoadArgs,
    flooder: Option<u32>,
) -> Result<(Lat, u64), String> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let go = Arc::new(Barrier::new(
        a.victims as usize + usize::from(flooder.is_some()),
    ));
    let results: Vec<Result<Lat, String>> = std::thread::scope(|s| {
        let flood = flooder.map(|uid| {
            let (socket, stop, sent, go) =
                (socket.to_path_buf(), stop.clone(), sent.clone(), go.clone());
            s.spawn(move || flood(uid, &socket, &stop, &sent, &go))
        });
        let hs: Vec<_> = (0..a.victims)
            .map(|v| {
                let (socket, go) = (socket.to_path_buf(), go.clone());
                let secs = a.seconds;
                s.spawn(move || -> Result<Lat, String> {
                    become_user(FIRST_UID + a.users + v)?;
                    let mut kid = sleeper()?;
                    let r = (|| {
                        let mut c = Client::connect(&socket).map_err(|e| e.to_string())?;
                        c.set_timeout(Some(Duration::from_secs(30)))
                            .map_err(|e| e.to_string())?;
                        go.wait();
                        let mut l = Lat::default();
                        let end = Instant::now() + Duration::from_secs(secs);
                        while Instant::now() < end {
                            let t = Instant::now();
                            let r = c
                                .register(
                                    "victim",
                                    CellSpec::default(),
                                    &[kid.id()],
                                    false,
                                    false,
                                    |_, _| {},
                                )
                                .map_err(|e| format!("victim register: {e}"))?;
                            c.release(r.cell)
                                .map_err(|e| format!("victim release: {e}"))?;
                            l.0.push(t.elapsed());
                        }
                        Ok(l)
                    })();
                    let _ = kid.kill();
                    let _ = kid.wait();
                    r
                })
            })
            .collect();
        let r = hs
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a victim panicked".into())))
            .collect();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(f) = flood {
            let _ = f.join();
        }
        r
    });
    let mut all = Lat::default();
    for r in results {
        all.0.extend(r?.0);
    }
    Ok((all, sent.load(std::sync::atomic::Ordering::Relaxed)))
}

/// One user flooding from as many connections as it may open: requests it
/// never reads the replies of, and requests past its limits.
fn flood(
    uid: u32,
    socket: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
    sent: &std::sync::atomic::AtomicU64,
    go: &Barrier,
) -> Result<(), String> {
    use std::sync::atomic::Ordering;
    let r = become_user(uid);
    go.wait();
    r?;
    let msgs: Vec<Vec<u8>> = vec![
        Request::Status.encode(),
        Request::KindList {
            kind: String::new(),
        }
        .encode(),
        Request::Hello {
            client: "x".repeat(4000),
        }
        .encode(),
        Request::Register {
            name: "flood".into(),
            spec: allot_spec::CellSpec::default(),
            wait: true,
            members: vec![1; 4096],
            joins_itself: false,
        }
        .encode(),
    ];
    let mut conns: Vec<Conn> = Vec::new();
    let mut i = 0usize;
    let mut full = 0usize;
    while !stop.load(Ordering::Relaxed) {
        // Every socket full: the broker has all it can take from this
        // user; yield instead of spinning on the CPU the broker needs.
        if full >= conns.len().max(1) {
            std::thread::sleep(Duration::from_micros(200));
            full = 0;
        }
        if conns.len() < 64
            && let Ok(c) = Conn::connect(socket)
        {
            // Never blocks on a full socket: the flood moves on instead.
            let flags = rustix::fs::fcntl_getfl(c.fd()).map_err(|e| e.to_string())?;
            rustix::fs::fcntl_setfl(c.fd(), flags | rustix::fs::OFlags::NONBLOCK)
                .map_err(|e| e.to_string())?;
            conns.push(c);
        }
        if conns.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let k = i % conns.len();
        match conns[k].send_raw(&msgs[i % msgs.len()]) {
            Ok(()) => {
                sent.fetch_add(1, Ordering::Relaxed);
                full = 0;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => full += 1,
            // Disconnected for not reading its replies: open another.
            Err(_) => {
                conns.swap_remove(k);
            }
        }
        i += 1;
    }
    Ok(())
}

fn raise_fd_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current != l.maximum {
        l.current = l.maximum;
        let _ = setrlimit(Resource::Nofile, l);
    }
}
