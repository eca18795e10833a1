//! `allot bench launch`: what `allot run` adds to a program's start and
//! exit.
//!
//! For each backend (by default every one this machine allows, of
//! `cgroup2`, `cgroup1` and `affinity`) a private broker is started; then
//! `--runs` rounds each time `date +%s%N` run directly and under `allot
//! run` against that broker, in alternating order. The program's printed
//! wall clock splits each run in two: *start* (spawn to the program
//! running) and *exit* (from there until its exit is seen). A round's
//! overhead is its `allot run` time minus the median of the direct runs,
//! for each part and in all. Printed per backend, in milliseconds: the
//! direct and `allot run` medians of the whole run, the start and exit
//! overheads' medians and p99, and the whole overhead's median, p90, p99. `--hogs K` keeps K busy
//! loops running meanwhile (children of this process, killed at the end):
//! the cost on a loaded machine. `--vs PATH` measures a second `allot`
//! binary in the same rounds (a broker of its own, the order rotating), a
//! row each: before and after in one run.

use super::broker::PrivateBroker;
use super::quantile;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Arguments of `allot bench launch`.
#[derive(Debug, clap::Args)]
pub struct LaunchArgs {
    /// Rounds per backend.
    #[arg(long, default_value_t = 200, value_name = "N")]
    runs: usize,
    /// Backends to measure (comma-separated) [default: every one available
    /// of cgroup2, cgroup1, affinity].
    #[arg(long, value_name = "LIST")]
    backends: Option<String>,
    /// CPU-bound busy loops kept running during the measurement.
    #[arg(long, default_value_t = 0, value_name = "K")]
    hogs: usize,
    /// Pause between rounds, ms: a launch after a quiet spell pays what a
    /// back-to-back one does not (a kernel grace period for a cgroup move
    /// by pid, cold caches).
    #[arg(long, default_value_t = 0, value_name = "MS")]
    gap: u64,
    /// Also start K programs at once, with a broker running and with none
    /// (the programs start it), and time until the last runs in its cell.
    #[arg(long, value_name = "K")]
    burst: Option<usize>,
    /// Rounds of bursts per backend.
    #[arg(long, default_value_t = 10, value_name = "N")]
    burst_rounds: usize,
    /// A second `allot` binary measured in the same rounds (each binary
    /// with a broker of its own, the order rotating): before and after a
    /// change, or a dynamic and a static build, in one run (the bursts
    /// measure the first only).
    #[arg(long, value_name = "PATH")]
    vs: Option<PathBuf>,
}

/// Busy loops, killed when dropped.
struct Hogs(Vec<Child>);

impl Hogs {
    fn start(k: usize) -> Result<Hogs, String> {
        let mut hogs = Hogs(Vec::new());
        for _ in 0..k {
            let child = Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .stdin(Stdio::null())
                .spawn()
                .map_err(|e| format!("cannot start a busy loop: {e}"))?;
            hogs.0.push(child);
        }
        Ok(hogs)
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// One timed run: milliseconds from spawn to the program's first
/// instruction that matters (it prints the wall clock) and from there to
/// the exit being seen.
#[derive(Debug, Clone, Copy)]
struct Timing {
    start: f64,
    exit: f64,
}

/// The wall clock in nanoseconds, as `date +%s%N` prints it.
fn wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Runs `cmd` (whose program is `date +%s%N`), which must succeed.
fn time_run(cmd: &mut Command) -> Result<Timing, String> {
    let t0 = wall_ns();
    let out = cmd
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let t2 = wall_ns();
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", out.status));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let t1: i128 = text
        .trim()
        .parse()
        .map_err(|_| format!("{cmd:?} printed {text:?}, not a time"))?;
    Ok(Timing {
        start: (t1 - t0) as f64 / 1e6,
        exit: (t2 - t1) as f64 / 1e6,
    })
}

/// Median, p90 and p99 of `v` less `base`.
fn over(v: impl Iterator<Item = f64>, base: f64) -> [f64; 3] {
    let mut v: Vec<f64> = v.map(|x| x - base).collect();
    v.sort_by(f64::total_cmp);
    [quantile(&v, 0.5), quantile(&v, 0.9), quantile(&v, 0.99)]
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    quantile(&v, 0.5)
}

/// One backend's figures (ms): medians of the direct and wrapped runs, and
/// the overhead's median, p90 and p99 at start, at exit and in all.
#[derive(Debug)]
struct Row {
    backend: String,
    direct: f64,
    run: f64,
    start: [f64; 3],
    exit: [f64; 3],
    total: [f64; 3],
}

/// Measures `allots` (one row each, in their order) on `backend`: every
/// round runs `date` directly and under each binary's `allot run`, the
/// order rotating from round to round, each binary with a private broker
/// of its own.
fn measure(
    allots: &[&Path],
    date: &Path,
    backend: &str,
    runs: usize,
    gap: std::time::Duration,
) -> Result<Vec<Row>, String> {
    // Each under a cgroup name of its own: two brokers never share one.
    let brokers = allots
        .iter()
        .enumerate()
        .map(|(i, a)| match i {
            0 => PrivateBroker::start(a, backend),
            i => PrivateBroker::start_tagged(a, backend, &format!("vs{i}")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut direct = Vec::with_capacity(runs);
    let mut run: Vec<Vec<Timing>> = vec![Vec::with_capacity(runs); allots.len()];
    let plain = || time_run(Command::new(date).arg("+%s%N"));
    let allot_run = |i: usize| {
        let mut c = Command::new(allots[i]);
        c.arg("run")
            .arg("--socket")
            .arg(brokers[i].socket())
            .args(["--no-start", "--name", "launch", "--"])
            .arg(date)
            .arg("+%s%N");
        time_run(&mut c)
    };
    // One of each first: the shim is installed and the caches are warm.
    for i in 0..allots.len() {
        allot_run(i)?;
    }
    // Slot 0 is the direct run, slot i + 1 binary i's.
    let slots = allots.len() + 1;
    for round in 0..runs {
        if super::interrupt::requested() {
            return Err("interrupted".into());
        }
        for k in 0..slots {
            std::thread::sleep(gap);
            match (round + k) % slots {
                0 => direct.push(plain()?),
                i => run[i - 1].push(allot_run(i - 1)?),
            }
        }
    }
    drop(brokers);
    let start = median(direct.iter().map(|t| t.start));
    let exit = median(direct.iter().map(|t| t.exit));
    let total = median(direct.iter().map(|t| t.start + t.exit));
    Ok(run
        .iter()
        .map(|run| Row {
            backend: backend.to_string(),
            direct: total,
            run: median(run.iter().map(|t| t.start + t.exit)),
            start: over(run.iter().map(|t| t.start), start),
            exit: over(run.iter().map(|t| t.exit), exit),
            total: over(run.iter().map(|t| t.start + t.exit), total),
        })
        .collect())
}

/// Runs `allot bench launch`.
pub fn run(a: LaunchArgs) -> Result<i32, String> {
    super::interrupt::install();
    if a.runs == 0 {
        return Err("--runs: give at least one round".into());
    }
    let allot: PathBuf = crate::product()?;
    if let Some(vs) = &a.vs
        && !vs.is_file()
    {
        return Err(format!("--vs {}: no such file", vs.display()));
    }
    // Both sides run `date` by its full path, so neither pays a PATH search.
    let path = std::env::var_os("PATH").unwrap_or_default();
    let date = std::env::split_paths(&path)
        .map(|dir| dir.join("date"))
        .find(|p| p.is_file())
        .ok_or("no `date` program in PATH")?;
    let asked = a.backends.is_some();
    let backends: Vec<String> = a
        .backends
        .as_deref()
        .unwrap_or("cgroup2,cgroup1,affinity")
        .split(',')
        .map(str::trim)
        .filter(|b| !b.is_empty())
        .map(str::to_string)
        .collect();
    let _hogs = Hogs::start(a.hogs)?;
    println!(
        "`allot run -- date` against `date`, {} rounds per backend, {} busy loop(s) running, {} ms \
         between runs",
        a.runs, a.hogs, a.gap
    );
    println!(
        "ms; start: spawn to the program running, exit: the program's clock reading to its exit seen"
    );
    let mut allots = vec![allot.as_path()];
    allots.extend(a.vs.as_deref());
    // With --vs the rows name their binary: A, B.
    let label = |i: usize| {
        if allots.len() > 1 {
            format!(" {}", (b'A' + i as u8) as char)
        } else {
            String::new()
        }
    };
    for (i, bin) in allots.iter().enumerate() {
        println!("allot{}: {} ({})", label(i), bin.display(), linking(bin));
    }
    println!(
        "{:<10} {:>7} {:>9} | {:>9} {:>7} | {:>8} {:>7} | {:>9} {:>7} {:>7}",
        "backend",
        "direct",
        "allot run",
        "start p50",
        "p99",
        "exit p50",
        "p99",
        "added p50",
        "p90",
        "p99"
    );
    let mut measured = 0;
    for b in &backends {
        match measure(
            &allots,
            &date,
            b,
            a.runs,
            std::time::Duration::from_millis(a.gap),
        ) {
            Ok(rows) => {
                measured += 1;
                for (i, r) in rows.iter().enumerate() {
                    println!(
                        "{:<10} {:>7.2} {:>9.2} | {:>9.2} {:>7.2} | {:>8.2} {:>7.2} | {:>9.2} {:>7.2} {:>7.2}",
                        format!("{}{}", r.backend, label(i)),
                        r.direct,
                        r.run,
                        r.start[0],
                        r.start[2],
                        r.exit[0],
                        r.exit[2],
                        r.total[0],
                        r.total[1],
                        r.total[2]
                    );
                }
            }
            Err(e) if super::interrupt::requested() => return Err(e),
            Err(e) if asked => return Err(format!("{b}: {e}")),
            Err(e) => println!("{b:<10} not available here: {e}"),
        }
    }
    if measured == 0 {
        return Err("no backend could be measured".into());
    }
    if let Some(k) = a.burst {
        if k == 0 || a.burst_rounds == 0 {
            return Err("--burst and --burst-rounds: give at least one".into());
        }
        println!();
        println!(
            "{k} programs started at once, {} rounds per backend: ms from the first spawn until the \
             last runs (its clock reading); medians, and the largest",
            a.burst_rounds
        );
        println!(
            "{:<10} {:>7} | {:>8} {:>7} | {:>8} {:>7}",
            "backend", "plain", "warm p50", "max", "cold p50", "max"
        );
        for b in &backends {
            match super::burst::measure(&allot, &date, b, k, a.burst_rounds) {
                Ok(r) => println!(
                    "{:<10} {:>7.2} | {:>8.2} {:>7.2} | {:>8.2} {:>7.2}",
                    r.backend, r.plain, r.warm[0], r.warm[1], r.cold[0], r.cold[1]
                ),
                Err(e) if super::interrupt::requested() => return Err(e),
                Err(e) if asked => return Err(format!("{b}: {e}")),
                Err(e) => println!("{b:<10} not available here: {e}"),
            }
        }
    }
    Ok(0)
}

/// How the measured `allot` is linked, as the table's reader needs to
/// know: a dynamically linked one pays the loader at every start.
fn linking(bin: &Path) -> &'static str {
    let mut head = vec![0u8; 4096];
    let read = std::fs::File::open(bin).and_then(|mut f| {
        use std::io::Read;
        f.read(&mut head)
    });
    match read.ok().and_then(|n| asks_for_loader(&head[..n])) {
        Some(false) => "static",
        Some(true) => {
            "dynamically linked: scripts/build-allot.sh builds it static, as the package ships it"
        }
        None => "linking unknown: not a 64-bit little-endian ELF file",
    }
}

/// Whether the 64-bit little-endian ELF executable starting with `elf`
/// names a program interpreter (a `PT_INTERP` program header), that is, is
/// linked dynamically; `None` where `elf` is not one or its program headers
/// lie beyond it.
fn asks_for_loader(elf: &[u8]) -> Option<bool> {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return None;
    }
    let u16_at = |i: usize| Some(u16::from_le_bytes(elf.get(i..i + 2)?.try_into().ok()?));
    let phoff = usize::try_from(u64::from_le_bytes(elf[32..40].try_into().ok()?)).ok()?;
    let (size, count) = (usize::from(u16_at(54)?), usize::from(u16_at(56)?));
    let mut interp = false;
    for i in 0..count {
        let at = phoff.checked_add(i.checked_mul(size)?)?;
        let kind = u32::from_le_bytes(elf.get(at..at + 4)?.try_into().ok()?);
        interp |= kind == PT_INTERP;
    }
    Some(interp)
}

#[cfg(test)]
mod tests {
    use super::{asks_for_loader, quantile};

    /// A minimal ELF header with program headers of the kinds given.
    fn elf(kinds: &[u32]) -> Vec<u8> {
        let mut b = vec![0u8; 64 + 56 * kinds.len()];
        b[..6].copy_from_slice(b"\x7fELF\x02\x01");
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&(kinds.len() as u16).to_le_bytes());
        for (i, k) in kinds.iter().enumerate() {
            b[64 + 56 * i..68 + 56 * i].copy_from_slice(&k.to_le_bytes());
        }
        b
    }

    #[test]
    fn a_program_interpreter_marks_a_dynamic_executable() {
        assert_eq!(asks_for_loader(&elf(&[6, 3, 1, 2])), Some(true));
        assert_eq!(asks_for_loader(&elf(&[1, 1, 2, 0x6474e550])), Some(false));
        // Cut short, or not ELF: unknown, never a guess.
        assert_eq!(asks_for_loader(&elf(&[1, 3])[..100]), None);
        assert_eq!(asks_for_loader(b"#!/bin/sh\n"), None);
        // This test's own binary, linked as cargo links it: dynamically.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(asks_for_loader(&me[..4096]), Some(true));
    }

    #[test]
    fn nearest_rank_quantiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 50.0);
        assert_eq!(quantile(&v, 0.99), 99.0);
        assert_eq!(quantile(&v, 1.0), 100.0);
        assert_eq!(quantile(&[3.0], 0.99), 3.0);
        assert_eq!(quantile(&[1.0, 2.0], 0.0), 1.0);
    }
}
