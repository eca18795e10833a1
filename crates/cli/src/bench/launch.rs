//! `allot bench launch`: what `allot run` adds to a program's start and
//! exit.
//!
//! For each backend (by default every one this machine allows, of
//! `cgroup2`, `cgroup1` and `affinity`) a private broker is started; then
//! `--runs` rounds each time `true` run directly and `allot run -- true`
//! against that broker, in alternating order, from spawn to exit. A round's
//! overhead is its `allot run` time minus the median of the direct runs.
//! Printed per backend: the direct and `allot run` medians and the
//! overhead's median, p90 and p99, in milliseconds. `--hogs K` keeps K busy
//! loops running meanwhile (children of this process, killed at the end):
//! the cost on a loaded machine.

use super::broker::PrivateBroker;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Instant;

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

/// Milliseconds from spawn to exit of `cmd`, which must succeed.
fn time_ms(cmd: &mut Command) -> Result<f64, String> {
    let t = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    if !status.success() {
        return Err(format!("{cmd:?} failed: {status}"));
    }
    Ok(ms)
}

/// The `q` quantile (0..=1) of sorted `v`, nearest rank.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// One backend's figures.
#[derive(Debug)]
struct Row {
    backend: String,
    direct: f64,
    run: f64,
    overhead: [f64; 3],
}

fn measure(allot: &Path, true_bin: &Path, backend: &str, runs: usize) -> Result<Row, String> {
    let broker = PrivateBroker::start(allot, backend)?;
    let mut direct = Vec::with_capacity(runs);
    let mut run = Vec::with_capacity(runs);
    let allot_run = || {
        let mut c = Command::new(allot);
        c.arg("run")
            .arg("--socket")
            .arg(broker.socket())
            .args(["--no-start", "--name", "launch", "--"])
            .arg(true_bin);
        time_ms(&mut c)
    };
    // One of each first: the shim is installed and the caches are warm.
    allot_run()?;
    for round in 0..runs {
        if super::interrupt::requested() {
            return Err("interrupted".into());
        }
        if round % 2 == 0 {
            direct.push(time_ms(&mut Command::new(true_bin))?);
            run.push(allot_run()?);
        } else {
            run.push(allot_run()?);
            direct.push(time_ms(&mut Command::new(true_bin))?);
        }
    }
    drop(broker);
    direct.sort_by(f64::total_cmp);
    let base = quantile(&direct, 0.5);
    let mut over: Vec<f64> = run.iter().map(|r| r - base).collect();
    over.sort_by(f64::total_cmp);
    run.sort_by(f64::total_cmp);
    Ok(Row {
        backend: backend.to_string(),
        direct: base,
        run: quantile(&run, 0.5),
        overhead: [
            quantile(&over, 0.5),
            quantile(&over, 0.9),
            quantile(&over, 0.99),
        ],
    })
}

/// Runs `allot bench launch`.
pub fn run(a: LaunchArgs) -> Result<i32, String> {
    super::interrupt::install();
    if a.runs == 0 {
        return Err("--runs: give at least one round".into());
    }
    let allot: PathBuf = std::env::current_exe().map_err(|e| e.to_string())?;
    let path = std::env::var_os("PATH");
    let true_bin = crate::run::resolve::resolve("true".as_ref(), path.as_deref())
        .map_err(|_| "no `true` program in PATH".to_string())?;
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
        "`allot run -- true` against `true`, {} rounds per backend, {} busy loop(s) running; ms",
        a.runs, a.hogs
    );
    println!(
        "{:<10} {:>10} {:>10} {:>13} {:>8} {:>8}",
        "backend", "direct", "allot run", "overhead p50", "p90", "p99"
    );
    let mut measured = 0;
    for b in &backends {
        match measure(&allot, &true_bin, b, a.runs) {
            Ok(r) => {
                measured += 1;
                println!(
                    "{:<10} {:>10.2} {:>10.2} {:>13.2} {:>8.2} {:>8.2}",
                    r.backend, r.direct, r.run, r.overhead[0], r.overhead[1], r.overhead[2]
                );
            }
            Err(e) if super::interrupt::requested() => return Err(e),
            Err(e) if asked => return Err(format!("{b}: {e}")),
            Err(e) => println!("{b:<10} not available here: {e}"),
        }
    }
    if measured == 0 {
        return Err("no backend could be measured".into());
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::quantile;

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
