//! `allot bench launch --burst K`: K programs started at the same moment
//! under `allot run`, the way a job script or a test harness starts a
//! batch. The figure is how long until the last of them runs its first
//! instruction inside its cell: from just before the first spawn to the
//! latest clock reading the programs print (`date +%s%N`), against the
//! same burst of plain `date`s.
//!
//! Two ways, rounds interleaved: *warm*, with a private broker already
//! running, and *cold*, where no broker runs and the programs start one
//! themselves (`allot run`'s autostart, in a fresh private directory with
//! a private cgroup name per round, shut down and cleaned after the
//! round).

use super::broker::{PrivateBroker, remove_leftovers};
use super::quantile;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The wall clock in nanoseconds, as `date +%s%N` prints it.
fn wall_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// Starts every command at once and returns the milliseconds from just
/// before the first spawn to the latest clock reading they printed.
fn burst(mut cmds: Vec<Command>) -> Result<f64, String> {
    let t0 = wall_ns();
    let children: Vec<Child> = cmds
        .iter_mut()
        .map(|c| {
            c.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("cannot run {c:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let mut last = t0;
    for child in children {
        let out = child.wait_with_output().map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            return Err(format!(
                "a program of the burst failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let t: i128 = text
            .trim()
            .parse()
            .map_err(|_| format!("a program printed {text:?}, not a time"))?;
        last = last.max(t);
    }
    Ok((last - t0) as f64 / 1e6)
}

/// A broker the programs of a cold round started themselves: shut down,
/// waited for, and its cgroups removed when dropped.
struct Cold {
    dir: tempfile::TempDir,
    cgroup: String,
}

impl Cold {
    fn new(round: usize) -> Result<Cold, String> {
        let dir = tempfile::Builder::new()
            .prefix("allot-burst-")
            .tempdir()
            .map_err(|e| e.to_string())?;
        Ok(Cold {
            dir,
            cgroup: format!("allot-bench-{}-cold{round}", std::process::id()),
        })
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("allot.sock")
    }
}

impl Drop for Cold {
    fn drop(&mut self) {
        let socket = self.socket();
        if let Ok(mut c) = allot_client::Client::connect(&socket) {
            let _ = c.shutdown();
        }
        let t = Instant::now();
        while allot_client::broker_alive(&socket) && t.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        remove_leftovers(&self.cgroup);
    }
}

/// `allot run [--no-start] --socket S -- date +%s%N`.
fn allot_run(allot: &Path, socket: &Path, date: &Path, no_start: bool) -> Command {
    let mut c = Command::new(allot);
    c.arg("run").arg("--socket").arg(socket);
    if no_start {
        c.arg("--no-start");
    }
    c.args(["--name", "burst", "--"]).arg(date).arg("+%s%N");
    c
}

/// One backend's medians (ms): plain, warm and cold bursts.
#[derive(Debug)]
pub struct BurstRow {
    pub backend: String,
    pub plain: f64,
    pub warm: [f64; 2],
    pub cold: [f64; 2],
}

/// Median and largest of `v`.
fn p50_max(mut v: Vec<f64>) -> [f64; 2] {
    v.sort_by(f64::total_cmp);
    [quantile(&v, 0.5), quantile(&v, 1.0)]
}

/// Measures `rounds` rounds of bursts of `k` on `backend`.
pub fn measure(
    allot: &Path,
    date: &Path,
    backend: &str,
    k: usize,
    rounds: usize,
) -> Result<BurstRow, String> {
    let warm_broker = PrivateBroker::start(allot, backend)?;
    let (mut plain, mut warm, mut cold) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        if super::interrupt::requested() {
            return Err("interrupted".into());
        }
        plain.push(burst((0..k).map(|_| plain_date(date)).collect())?);
        warm.push(burst(
            (0..k)
                .map(|_| allot_run(allot, warm_broker.socket(), date, true))
                .collect(),
        )?);
        if !warm_broker.wait_idle(Duration::from_secs(5)) {
            return Err("the warm broker kept cells after a burst".into());
        }
        let c = Cold::new(round)?;
        let cmds = (0..k)
            .map(|_| {
                let mut cmd = allot_run(allot, &c.socket(), date, false);
                cmd.env(allot_proto::env::BACKEND, backend)
                    .env(allot_proto::env::CGROUP_NAME, &c.cgroup);
                cmd
            })
            .collect();
        cold.push(burst(cmds)?);
        drop(c);
    }
    Ok(BurstRow {
        backend: backend.to_string(),
        plain: p50_max(plain)[0],
        warm: p50_max(warm),
        cold: p50_max(cold),
    })
}

fn plain_date(date: &Path) -> Command {
    let mut c = Command::new(date);
    c.arg("+%s%N");
    c
}
