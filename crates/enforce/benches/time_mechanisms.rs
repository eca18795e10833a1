//! What Linux's time mechanisms give a time contract, measured on this
//! machine: "budget B every period P" for one CPU hog, beside a best-effort
//! hog on the same CPU, under
//!
//! - plain CFS (the baseline: no contract at all);
//! - CFS bandwidth control (cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`);
//! - the freezer driven by a timer (cgroup v1 `freezer.state`: thawed at the
//!   start of each window, frozen B later — gang activation of a whole cell);
//! - SCHED_DEADLINE (runtime B, deadline = period P, set by the hog on
//!   itself with `sched_setattr`).
//!
//! Every process is one this program starts (it runs itself again as the
//! hog and the competitor), all pinned to one CPU; every cgroup it makes is
//! removed on the way out, also on a panic. Needs root and cgroup v1
//! `cpu` and `freezer` hierarchies (present on the development VM).
//!
//! The hog spins and records the stretches it ran (a gap of more than
//! `GAP` between two clock reads means it was off the CPU), with
//! CLOCK_MONOTONIC, which the controller reads too. Per period: the CPU
//! time delivered against B, and how many stretches it came in (1 = one
//! window, as a gang scheduler would give). For the freezer also the
//! activation latency: from the write of `THAWED` to the hog's first
//! instruction.
//!
//! Run: `cargo bench -p allot-enforce --bench time_mechanisms`
//! (`-- --seconds N --budget-us B --period-us P`). Results and reading:
//! docs/time-mechanisms.md.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A longer pause between two clock reads means the hog was descheduled.
const GAP_NS: u64 = 20_000;

fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

fn sleep_until(ns: u64) {
    let ts = libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: a valid timespec; a null remainder is allowed with
    // TIMER_ABSTIME. Interrupted sleeps are retried.
    while unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        )
    } == libc::EINTR
    {}
}

fn pin(cpu: usize) {
    let mut set = rustix::thread::CpuSet::new();
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).expect("pin to the measured CPU");
}

/// The kernel's `struct sched_attr` (include/uapi/linux/sched/types.h).
#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const SCHED_DEADLINE: u32 = 6;

/// Makes the calling thread a SCHED_DEADLINE task.
fn set_deadline(runtime_ns: u64, period_ns: u64) -> io::Result<()> {
    let attr = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        sched_policy: SCHED_DEADLINE,
        sched_runtime: runtime_ns,
        sched_deadline: period_ns,
        sched_period: period_ns,
        ..SchedAttr::default()
    };
    // SAFETY: `attr` is a valid sched_attr of the size it states.
    let r = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const SchedAttr, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The child's side: `hog CPU SECONDS [dl RUNTIME_NS PERIOD_NS]` spins and
/// prints its stretches ("start end" in ns) and then "cpu NS"; `spin CPU
/// SECONDS` only spins and prints "cpu NS".
fn child(args: &[String]) {
    let seconds: f64 = args[2].parse().expect("seconds");
    // "all": no pinning (a deadline task must be free to run on every CPU
    // of its root domain).
    if let Ok(cpu) = args[1].parse::<usize>() {
        pin(cpu);
    }
    let record = args[0] == "hog";
    if args.get(3).map(String::as_str) == Some("dl") {
        let runtime = args[4].parse().expect("runtime");
        let period = args[5].parse().expect("period");
        if let Err(e) = set_deadline(runtime, period) {
            println!("error sched_setattr(SCHED_DEADLINE): {e}");
            return;
        }
        // The fork rule: a deadline task may not fork (its reservation
        // would be duplicated), unless it asked for reset-on-fork.
        // SAFETY: the child exits at once and touches nothing.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: async-signal-safe exit in the forked child.
            unsafe { libc::_exit(0) };
        } else if pid > 0 {
            // SAFETY: reaping the child just forked.
            unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
            println!("fork allowed");
        } else {
            println!("fork refused: {}", io::Error::last_os_error());
        }
    }
    let begin = now_ns();
    let end = begin + (seconds * 1e9) as u64;
    let mut stretches: Vec<(u64, u64)> = Vec::with_capacity(1 << 16);
    let mut start = now_ns();
    let mut last = start;
    loop {
        let t = now_ns();
        if t - last > GAP_NS {
            if record && stretches.len() < stretches.capacity() {
                stretches.push((start, last));
            }
            start = t;
        }
        last = t;
        if t >= end {
            break;
        }
    }
    stretches.push((start, last));
    let cpu_time = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    let mut out = io::BufWriter::new(io::stdout().lock());
    if record {
        for (a, b) in &stretches {
            let _ = writeln!(out, "{a} {b}");
        }
    }
    let _ = writeln!(
        out,
        "cpu {}",
        cpu_time.tv_sec as u64 * 1_000_000_000 + cpu_time.tv_nsec as u64
    );
    let _ = writeln!(out, "wall {}", last - begin);
}

/// A cgroup this program made; removed when dropped (after moving its
/// processes back to the hierarchy's root).
struct Group {
    dir: PathBuf,
}

impl Group {
    fn new(hierarchy: &str) -> io::Result<Group> {
        let dir = Path::new("/sys/fs/cgroup")
            .join(hierarchy)
            .join(format!("allot-timebench-{}", std::process::id()));
        fs::create_dir(&dir)?;
        Ok(Group { dir })
    }

    fn write(&self, file: &str, value: &str) -> io::Result<()> {
        fs::write(self.dir.join(file), value)
    }

    fn add(&self, pid: u32) -> io::Result<()> {
        self.write("cgroup.procs", &pid.to_string())
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let _ = fs::write(self.dir.join("freezer.state"), "THAWED");
        let root = self
            .dir
            .parent()
            .expect("a cgroup has a parent")
            .to_path_buf();
        if let Ok(procs) = fs::read_to_string(self.dir.join("cgroup.procs")) {
            for pid in procs.split_whitespace() {
                let _ = fs::write(root.join("cgroup.procs"), pid);
            }
        }
        for _ in 0..100 {
            if fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!("time_mechanisms: could not remove {}", self.dir.display());
    }
}

/// A child process, killed if still running when dropped.
struct Kid(Option<Child>);

impl Kid {
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Child::id)
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(args: &[String]) -> Kid {
    let exe = std::env::current_exe().expect("own executable");
    Kid(Some(
        Command::new(exe)
            .arg("--child")
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a child"),
    ))
}

/// What a child printed: its stretches, its CPU time, other lines.
struct Report {
    stretches: Vec<(u64, u64)>,
    cpu_ns: u64,
    wall_ns: u64,
    notes: Vec<String>,
}

fn collect(mut kid: Kid) -> Report {
    let child = kid.0.take().expect("collected once");
    let out = child.wait_with_output().expect("child output");
    let mut r = Report {
        stretches: Vec::new(),
        cpu_ns: 0,
        wall_ns: 1,
        notes: Vec::new(),
    };
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut w = line.split_whitespace();
        match (w.next(), w.next(), w.next()) {
            (Some("cpu"), Some(n), None) => r.cpu_ns = n.parse().unwrap_or(0),
            (Some("wall"), Some(n), None) => r.wall_ns = n.parse::<u64>().unwrap_or(1).max(1),
            (Some(a), Some(b), None) if a.parse::<u64>().is_ok() => {
                r.stretches
                    .push((a.parse().unwrap(), b.parse().unwrap_or(0)));
            }
            _ => r.notes.push(line.to_string()),
        }
    }
    r
}

#[derive(Clone, Copy)]
struct Params {
    cpu: usize,
    seconds: f64,
    budget_ns: u64,
    period_ns: u64,
}

/// Per period from `origin`: CPU time delivered and stretches touching it.
fn per_period(r: &Report, origin: u64, p: &Params) -> Vec<(u64, usize)> {
    let n = ((p.seconds * 1e9) as u64 / p.period_ns).saturating_sub(2) as usize;
    let mut out = vec![(0u64, 0usize); n];
    for &(a, b) in &r.stretches {
        if b <= origin {
            continue;
        }
        let (a, b) = (a.max(origin) - origin, b - origin);
        let first = (a / p.period_ns) as usize;
        let last = (b / p.period_ns) as usize;
        for (k, slot) in out.iter_mut().enumerate().take(last + 1).skip(first) {
            let lo = a.max(k as u64 * p.period_ns);
            let hi = b.min((k as u64 + 1) * p.period_ns);
            if hi > lo {
                slot.0 += hi - lo;
                slot.1 += 1;
            }
        }
    }
    out
}

fn percentile(mut v: Vec<f64>, q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// Budget errors (% of B) per measured period, the periods counted from
/// `origin` (the first two skipped: they settle).
fn errors(periods: &[(u64, usize)], p: &Params) -> Vec<f64> {
    periods
        .iter()
        .skip(2)
        .map(|(ns, _)| (*ns as f64 - p.budget_ns as f64).abs() / p.budget_ns as f64 * 100.0)
        .collect()
}

/// The period phase that fits the hog's stretches best (the kernel's own
/// period timers are not aligned with ours): origins from `start` to
/// `start + P` in steps of P/100, the one with the least median error.
fn best_origin(hog: &Report, start: u64, p: &Params) -> u64 {
    (0..100)
        .map(|i| start + p.period_ns * i / 100)
        .min_by(|a, b| {
            let e = |o: u64| percentile(errors(&per_period(hog, o, p), p), 0.5);
            e(*a).total_cmp(&e(*b))
        })
        .unwrap_or(start)
}

/// One line of the results table, periods counted from `origin`. The
/// rivals span the hog's whole run, so busy = (hog + rivals) ÷ (rivals'
/// wall time × CPUs measured).
fn row(name: &str, hog: &Report, rivals: &[Report], origin: u64, p: &Params, extra: &str) {
    let wall = hog.wall_ns as f64;
    let periods = per_period(hog, origin, p);
    let errs = errors(&periods, p);
    let pieces: Vec<f64> = periods.iter().skip(2).map(|(_, n)| *n as f64).collect();
    let short = periods
        .iter()
        .skip(2)
        .filter(|(ns, _)| (*ns as f64) < 0.9 * p.budget_ns as f64)
        .count();
    let rival_cpu: u64 = rivals.iter().map(|r| r.cpu_ns).sum();
    let rival_wall: f64 = rivals.iter().map(|r| r.wall_ns as f64).sum();
    println!(
        "| {name} | {:.1} % | {:.1} % | {:.1} % | {:.1} / {:.1} % | {} of {} | {:.0} / {:.0} | {extra} |",
        hog.cpu_ns as f64 / wall * 100.0,
        rival_cpu as f64 / rival_wall * 100.0,
        (hog.cpu_ns + rival_cpu) as f64 / rival_wall * 100.0,
        percentile(errs.clone(), 0.5),
        percentile(errs, 0.99),
        short,
        periods.len().saturating_sub(2),
        percentile(pieces.clone(), 0.5),
        percentile(pieces, 0.99),
    );
}

fn hog_args(p: &Params, cpu: &str, dl: bool) -> Vec<String> {
    let mut v = vec!["hog".to_string(), cpu.to_string(), p.seconds.to_string()];
    if dl {
        v.extend([
            "dl".to_string(),
            p.budget_ns.to_string(),
            p.period_ns.to_string(),
        ]);
    }
    v
}

/// A best-effort hog on `cpu`, running a little longer than the measured
/// one, so it competes for the whole run.
fn rival(p: &Params, cpu: usize) -> Kid {
    spawn(&[
        "spin".to_string(),
        cpu.to_string(),
        (p.seconds + 0.3).to_string(),
    ])
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--child") {
        return child(&args[1..]);
    }
    let flag = |name: &str, default: f64| -> f64 {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let allowed = allot_topo::allowed_cpus().expect("allowed CPUs");
    let p = Params {
        cpu: allowed.last().expect("a CPU"),
        seconds: flag("--seconds", 3.0),
        budget_ns: (flag("--budget-us", 3000.0) * 1e3) as u64,
        period_ns: (flag("--period-us", 10000.0) * 1e3) as u64,
    };
    if !rustix::process::geteuid().is_root() {
        eprintln!("time_mechanisms: needs root (cgroups, SCHED_DEADLINE); nothing measured");
        std::process::exit(2);
    }
    for h in ["cpu", "freezer"] {
        if !Path::new("/sys/fs/cgroup").join(h).join("tasks").exists() {
            eprintln!(
                "time_mechanisms: no cgroup v1 {h} hierarchy at /sys/fs/cgroup/{h}; nothing measured"
            );
            std::process::exit(2);
        }
    }
    println!(
        "One CPU hog with a contract of {} µs every {} µs ({:.0} %), beside one best-effort hog, both pinned to CPU {}; {} s per mechanism.\n",
        p.budget_ns / 1000,
        p.period_ns / 1000,
        p.budget_ns as f64 / p.period_ns as f64 * 100.0,
        p.cpu,
        p.seconds
    );
    println!(
        "| mechanism | hog CPU | rival CPU | CPU busy | budget error p50 / p99 | periods under 90 % of budget | stretches per period p50 / p99 | notes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|");

    // Plain CFS: no contract.
    {
        let r = rival(&p, p.cpu);
        let start = now_ns();
        let h = spawn(&hog_args(&p, &p.cpu.to_string(), false));
        let hog = collect(h);
        let riv = collect(r);
        row(
            "plain CFS (no contract)",
            &hog,
            &[riv],
            best_origin(&hog, start, &p),
            &p,
            "fair share, no windows",
        );
    }

    // CFS bandwidth control.
    {
        let g = Group::new("cpu").expect("make a cpu cgroup");
        g.write("cpu.cfs_period_us", &(p.period_ns / 1000).to_string())
            .expect("cfs_period_us");
        g.write("cpu.cfs_quota_us", &(p.budget_ns / 1000).to_string())
            .expect("cfs_quota_us");
        let r = rival(&p, p.cpu);
        let start = now_ns();
        let h = spawn(&hog_args(&p, &p.cpu.to_string(), false));
        g.add(h.pid()).expect("move the hog into the cpu cgroup");
        let hog = collect(h);
        let riv = collect(r);
        let stat = fs::read_to_string(g.dir.join("cpu.stat")).unwrap_or_default();
        let nr = stat
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .unwrap_or("?")
            .to_string();
        row(
            "CFS bandwidth (cpu.cfs_quota_us)",
            &hog,
            &[riv],
            best_origin(&hog, start, &p),
            &p,
            &format!("throttled {nr} times"),
        );
    }

    // The freezer driven by this thread's timer, alone and with the hog's
    // cell weighted far above the rival (cpu.shares) inside its windows.
    for weighted in [false, true] {
        let shares = if weighted {
            let g = Group::new("cpu").expect("make a cpu cgroup");
            g.write("cpu.shares", "262144").expect("cpu.shares");
            Some(g)
        } else {
            None
        };
        let g = Group::new("freezer").expect("make a freezer cgroup");
        let r = rival(&p, p.cpu);
        let h = spawn(&hog_args(&p, &p.cpu.to_string(), false));
        g.add(h.pid())
            .expect("move the hog into the freezer cgroup");
        if let Some(s) = &shares {
            s.add(h.pid()).expect("move the hog into the cpu cgroup");
        }
        let (stats, origin) = drive_freezer(&g, &p);
        let hog = collect(h);
        let riv = collect(r);
        let latency: Vec<f64> = stats
            .thawed_at
            .iter()
            .filter_map(|&t| {
                hog.stretches
                    .iter()
                    .find(|(a, b)| *b >= t && *a + GAP_NS >= t)
                    .map(|&(a, _)| a.saturating_sub(t) as f64 / 1e3)
            })
            .collect();
        row(
            if weighted {
                "freezer + cpu.shares 262144"
            } else {
                "freezer, timer-driven (freezer.state)"
            },
            &hog,
            &[riv],
            origin,
            &p,
            &format!(
                "activation p50 {:.1} µs / p99 {:.1} µs; controller {:.2} % of a CPU",
                percentile(latency.clone(), 0.5),
                percentile(latency, 0.99),
                stats.controller_share * 100.0
            ),
        );
    }

    // SCHED_DEADLINE, set by the hog on itself. A deadline task's affinity
    // must span its root domain (every CPU here), so the hog is not pinned
    // and a rival spins on every CPU.
    {
        let rivals: Vec<Kid> = allowed.iter().map(|c| rival(&p, c)).collect();
        let start = now_ns();
        let h = spawn(&hog_args(&p, "all", true));
        let hog = collect(h);
        let rivals: Vec<Report> = rivals.into_iter().map(collect).collect();
        let notes = hog.notes.join("; ");
        row(
            "SCHED_DEADLINE (sched_setattr), unpinned",
            &hog,
            &rivals,
            best_origin(&hog, start, &p),
            &p,
            &notes,
        );
    }
}

/// What driving the freezer cost and when each window opened.
struct Driven {
    thawed_at: Vec<u64>,
    controller_share: f64,
}

/// Thaws `g` at the start of every period and freezes it `B` later, for
/// the run's length; returns the windows' opening times and the periods'
/// origin. Leaves the group thawed.
fn drive_freezer(g: &Group, p: &Params) -> (Driven, u64) {
    g.write("freezer.state", "FROZEN").expect("freeze");
    let state = fs::OpenOptions::new()
        .write(true)
        .open(g.dir.join("freezer.state"))
        .expect("open freezer.state");
    let origin = now_ns() + p.period_ns;
    let end = origin + ((p.seconds - 0.1) * 1e9) as u64;
    let mut thawed_at = Vec::new();
    let cpu0 = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let mut k = 0u64;
    loop {
        let open = origin + k * p.period_ns;
        if open + p.budget_ns > end {
            break;
        }
        sleep_until(open);
        thawed_at.push(now_ns());
        let _ = (&state).write_all(b"THAWED");
        sleep_until(open + p.budget_ns);
        let _ = (&state).write_all(b"FROZEN");
        k += 1;
    }
    let cpu1 = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let _ = (&state).write_all(b"THAWED");
    let ns = (cpu1.tv_sec - cpu0.tv_sec) as f64 * 1e9 + (cpu1.tv_nsec - cpu0.tv_nsec) as f64;
    (
        Driven {
            thawed_at,
            controller_share: ns / (k.max(1) as f64 * p.period_ns as f64),
        },
        origin,
    )
}
