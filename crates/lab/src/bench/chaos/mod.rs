//! `allot bench chaos`: a soak that breaks things on purpose while it
//! checks allot's invariants.
//!
//! For `--seconds`, at random (seeded) moments, it starts `allot run`
//! jobs against a private broker (best-effort, guaranteed and exclusive
//! cells; CPU loops, sleepers and `make -j` builds that draw jobserver
//! tokens), SIGKILLs the broker and starts it again on the same state,
//! SIGKILLs `allot run` wrappers, and SIGKILLs the programs they run.
//! Every [`CHECK_EVERY`] it checks:
//!
//! 1. **Exclusivity**: no CPU of an exclusive cell is in another cell's
//!    grant (the broker's status) or in another populated cell's cpuset
//!    (the kernel's, cgroup v1; read before and after whether each cell
//!    ran, so that a change between two reads is not taken for an
//!    overlap). A frozen cell (a best-effort cell paused while guarantees
//!    take every CPU) runs nowhere and is exempt: its cpuset cannot be
//!    empty. So is one still freezing whose threads are all asleep: none
//!    returns to its program unfrozen. One still freezing with a thread
//!    runnable is not: the broker moves it off exclusive CPUs first.
//! 2. **No leaked cgroup**: a `cell-N` directory the broker does not list
//!    is gone within [`LEAK_AFTER`].
//! 3. **Restarts**: every cell whose processes live when the broker is
//!    killed is listed again by the new broker within [`ADOPT_WITHIN`],
//!    and every `allot run` that lives rejoins it (its program's page is
//!    written again) within [`REJOIN_WITHIN`].
//! 4. **No lost token**: every `make` whose wrapper was not killed
//!    finishes within [`JOB_LIMIT`] (a lost jobserver token would hang it).
//!
//! At the end every job is stopped (the soak is a child subreaper, so the
//! programs of killed wrappers are its own to stop), the broker's open
//! descriptors (sockets, pidfds, grant pages) must be back to what it had
//! with no cell, and a clean stop must leave no cgroup behind. Channels do
//! not exist yet; there is nothing of theirs to leak.
//!
//! The exit status is 1 if any check failed; every failure is printed
//! with what was seen.

mod invariants;
mod procs;
mod tally;

use super::broker::PrivateBroker;
use allot_proto::status::Status;
use invariants::{check_exclusive, check_leaks};
use procs::{alive, children, extra_fds, kill_group, open_fds};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
pub use tally::{ADOPT_WITHIN, JOB_LIMIT, LEAK_AFTER, REJOIN_WITHIN};
use tally::{Bounds, Tally, overall, summary};

/// How often the invariants are checked.
pub const CHECK_EVERY: Duration = Duration::from_millis(50);
/// One step of the schedule.
const STEP: Duration = Duration::from_millis(10);

/// Arguments of `allot bench chaos`.
#[derive(Debug, clap::Args)]
pub struct ChaosArgs {
    /// How long to run.
    #[arg(long, default_value_t = 120, value_name = "SECS")]
    seconds: u64,
    /// Jobs running at once (at most).
    #[arg(long, default_value_t = 6, value_name = "N")]
    jobs: usize,
    /// Mean time between broker kills (at least one, halfway at the latest).
    #[arg(long, default_value_t = 3000, value_name = "MS")]
    restart_every_ms: u64,
    /// Seed of the random schedule.
    #[arg(long, default_value_t = 1, value_name = "S", conflicts_with = "seeds")]
    seed: u64,
    /// Several soaks one after the other, each `--seconds` long on a fresh
    /// broker, one per seed (`1-8`, `3,7,11`, `1-4,9`), and a summary of
    /// them all at the end.
    #[arg(long, value_name = "LIST")]
    seeds: Option<String>,
    /// Enforcement backend of the soak's private broker [default: cgroup1
    /// as root with a v1 cpuset hierarchy, else affinity].
    #[arg(long, value_name = "BACKEND")]
    backend: Option<String>,
    /// The brokers' log level (`ALLOT_LOG`), whose log a failing soak
    /// keeps: `debug` says most; `info` costs an emulated machine less.
    #[arg(long, default_value = "debug", value_name = "LEVEL", value_parser = ["debug", "info", "warn"])]
    broker_log: String,
    /// Multiplies every time bound of the checks (adoption, rejoining,
    /// leaked cgroups, hung jobs) and of the broker's start: for emulated
    /// machines only, such as the
    /// guest lane's (scripts/test-guest.sh), whose speed says nothing.
    #[arg(long, default_value_t = 1.0, value_name = "F")]
    patience: f64,
}

/// A tiny deterministic generator (the schedule must be reproducible).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() as f64 / (1u64 << 31) as f64) < p
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Program {
    Spin,
    Sleep,
    Make,
}

struct Job {
    wrapper: Child,
    program: Program,
    started: Instant,
    /// The wrapper was killed (its program may live on, orphaned).
    wrapper_killed: bool,
    /// The program was killed.
    program_killed: bool,
}

/// Runs `allot bench chaos`: one soak, or one per seed of `--seeds`.
pub fn run(a: ChaosArgs) -> Result<i32, String> {
    super::interrupt::install();
    if a.seconds == 0 || a.jobs == 0 {
        return Err("--seconds and --jobs must be at least 1".into());
    }
    if !(1.0..=100.0).contains(&a.patience) {
        return Err(format!(
            "--patience {}: a factor from 1 to 100 on the checks' time bounds",
            a.patience
        ));
    }
    let seeds = match &a.seeds {
        Some(list) => parse_seeds(list).map_err(|e| format!("--seeds {list}: {e}"))?,
        None => vec![a.seed],
    };
    // Programs of killed wrappers become ours, so that we can stop them.
    rustix::process::set_child_subreaper(Some(rustix::process::getpid()))
        .map_err(|e| format!("cannot become a child subreaper: {e}"))?;
    let allot = crate::product()?;
    let backend = a.backend.clone().unwrap_or_else(|| {
        if rustix::process::geteuid().is_root()
            && Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists()
        {
            "cgroup1".into()
        } else {
            "affinity".into()
        }
    });
    let mut runs = Vec::new();
    for (i, &seed) in seeds.iter().enumerate() {
        if seeds.len() > 1 {
            eprintln!("soak {} of {}:", i + 1, seeds.len());
        }
        let t = soak(&a, seed, &allot, &backend)?;
        print!("{}", summary(a.seconds, &backend, seed, &t));
        runs.push((seed, t));
    }
    if runs.len() > 1 {
        print!("{}", overall(a.seconds, &backend, &runs));
    }
    Ok(if runs.iter().all(|(_, t)| t.failures.is_empty()) {
        0
    } else {
        1
    })
}

/// The seeds of `--seeds`: numbers and ranges, comma-separated, in order.
fn parse_seeds(list: &str) -> Result<Vec<u64>, String> {
    let num = |x: &str| {
        x.trim()
            .parse::<u64>()
            .map_err(|_| format!("{x:?} is not a seed (a whole number)"))
    };
    let mut out = Vec::new();
    for part in list.split(',') {
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if hi < lo || hi - lo >= 10_000 {
                    return Err(format!("{part:?} is not a range of at most 10000 seeds"));
                }
                out.extend(lo..=hi);
            }
            None => out.push(num(part)?),
        }
    }
    Ok(out)
}

/// One soak with `seed` on a fresh broker: what it counted and found.
fn soak(a: &ChaosArgs, seed: u64, allot: &Path, backend: &str) -> Result<Tally, String> {
    // Every broker's log (at debug level by default), kept when a check
    // fails: the steps around a breach are what finds its cause.
    let mut broker = PrivateBroker::start_patient(
        allot,
        backend,
        &["--tick-ms", "50"],
        &[("ALLOT_LOG", a.broker_log.as_str())],
        a.patience,
    )?;
    let makefile = broker.dir().join("Makefile");
    std::fs::write(&makefile, MAKEFILE).map_err(|e| e.to_string())?;
    // The baseline once the broker answers: a socket accepts connections
    // before the broker's event loop (and the descriptor it keeps in
    // reserve) exists.
    let answered = allot_testkit::eventually(Bounds::scaled(a.patience).adopt_within, || {
        status(broker.socket()).is_some()
    });
    if !answered {
        return Err(format!("the broker did not answer: {}", broker.log()));
    }
    let baseline_fds = broker.pid().map(open_fds).unwrap_or_default();
    eprintln!(
        "chaos for {} s with the {} backend, up to {} jobs, a broker kill every ~{} ms (seed {})",
        a.seconds, backend, a.jobs, a.restart_every_ms, seed
    );

    let mut rng = Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1);
    let mut jobs: Vec<Job> = Vec::new();
    let mut t = Tally {
        bounds: Bounds::scaled(a.patience),
        ..Tally::default()
    };
    let mut unlisted: BTreeMap<u64, Instant> = BTreeMap::new();
    let end = Instant::now() + Duration::from_secs(a.seconds);
    // At least one restart, halfway at the latest: a busy machine takes
    // fewer random steps than the mean interval assumes.
    let restart_by = Instant::now() + Duration::from_secs(a.seconds) / 2;
    let mut next_check = Instant::now();
    let mut last_report = Instant::now();
    let p_kill = STEP.as_millis() as f64 / a.restart_every_ms.max(1) as f64;
    while Instant::now() < end {
        if super::interrupt::requested() {
            stop_jobs(&mut jobs, broker.pid());
            return Err(super::interrupt::error().to_string());
        }
        reap(&mut jobs, &mut t);
        // Actions.
        if jobs.iter().filter(|j| !j.wrapper_killed).count() < a.jobs && rng.chance(0.3) {
            match start_job(allot, broker.socket(), &makefile, &mut rng) {
                Ok(j) => {
                    t.started += 1;
                    jobs.push(j);
                }
                Err(e) => t.failures.push(format!("cannot start a job: {e}")),
            }
        }
        if rng.chance(0.03) {
            kill_a_wrapper(&mut jobs, &mut rng, &mut t);
        }
        if rng.chance(0.03) {
            kill_a_program(&mut jobs, &mut rng, &mut t);
        }
        if rng.chance(p_kill) || (t.restarts == 0 && Instant::now() >= restart_by) {
            restart(&mut broker, &jobs, &mut t)?;
        }
        // Checks.
        if Instant::now() >= next_check {
            next_check = Instant::now() + CHECK_EVERY;
            if let Some(st) = status(broker.socket()) {
                t.checks += 1;
                check_exclusive(&st, &broker, &mut t);
                check_leaks(&st, &broker, &mut unlisted, &mut t);
            }
            for j in &jobs {
                if j.program == Program::Make
                    && !j.wrapper_killed
                    && !j.program_killed
                    && j.started.elapsed() > t.bounds.job_limit
                {
                    t.failures.push(format!(
                        "make under allot run (pid {}) still runs after {:?}: a jobserver token was lost",
                        j.wrapper.id(),
                        t.bounds.job_limit
                    ));
                }
            }
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            last_report = Instant::now();
            eprintln!(
                "  {:>4.0} s: {} jobs started, {} broker restarts, {} checks, {} failures",
                a.seconds as f64 - end.saturating_duration_since(Instant::now()).as_secs_f64(),
                t.started,
                t.restarts,
                t.checks,
                t.failures.len()
            );
        }
        std::thread::sleep(STEP);
    }
    // Quiesce: every job stopped, the broker left with no cell.
    stop_jobs(&mut jobs, broker.pid());
    if !broker.wait_idle(Duration::from_secs(10)) {
        let left: Vec<String> =
            match allot_client::Client::connect(broker.socket()).and_then(|mut c| c.status()) {
                Ok(st) => st
                    .cells
                    .iter()
                    .map(|c| format!("{} {:?} pids {:?}", c.id, c.name, c.pids))
                    .collect(),
                Err(e) => vec![format!("(no status: {e})")],
            };
        t.failures.push(format!(
            "cells were still listed 10 s after every job ended: {left:?}"
        ));
    }
    if let Some(pid) = broker.pid() {
        // Pidfds of members close with them; pages of ended cells drop.
        let settled = allot_testkit::eventually(Duration::from_secs(5), || {
            open_fds(pid).len() <= baseline_fds.len()
        });
        if !settled {
            let now = open_fds(pid);
            t.failures.push(format!(
                "the broker holds {} descriptors with no cell, against {} at start; not there at start: {}",
                now.len(),
                baseline_fds.len(),
                extra_fds(&baseline_fds, &now)
            ));
        }
    }
    let log = broker.log();
    if !t.failures.is_empty() {
        let kept =
            std::env::temp_dir().join(format!("allot-chaos-seed{seed}-{}.log", std::process::id()));
        match std::fs::write(&kept, &log) {
            Ok(()) => t.log = Some(kept),
            Err(e) => eprintln!("cannot keep the brokers' log in {}: {e}", kept.display()),
        }
    }
    let clean = broker.stop();
    if !clean {
        t.failures.push(format!(
            "a clean stop left cgroup directories behind; the broker's last words:\n{}",
            log.lines().rev().take(8).collect::<Vec<_>>().join("\n")
        ));
    }
    Ok(t)
}

const MAKEFILE: &str = "\
T := a b c d e f g h
.PHONY: all $(T)
all: $(T)
$(T):
\t@sleep 0.1
";

fn start_job(allot: &Path, socket: &Path, makefile: &Path, rng: &mut Rng) -> Result<Job, String> {
    let program = match rng.below(3) {
        0 => Program::Spin,
        1 => Program::Sleep,
        _ => Program::Make,
    };
    let mut cmd = Command::new(allot);
    // A broker the soak killed is restarted by the soak, never by a job.
    cmd.arg("run").arg("--no-start").arg("--socket").arg(socket);
    match rng.below(4) {
        0 => {
            cmd.args(["--min", "1", "--wait"]);
        }
        1 => {
            cmd.args(["--exclusive", "--wait"]);
        }
        _ => {}
    }
    cmd.arg("--");
    match program {
        Program::Spin => cmd.args([
            "sh",
            "-c",
            "i=0; while [ $i -lt 150000 ]; do i=$((i+1)); done",
        ]),
        Program::Sleep => cmd.args(["sleep", "1"]),
        Program::Make => cmd.arg("make").arg("-s").arg("-j4").arg("-f").arg(makefile),
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    // Its own process group: the job's whole tree can be stopped at the
    // end, its orphaned program included.
    std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
    let wrapper = cmd.spawn().map_err(|e| e.to_string())?;
    Ok(Job {
        wrapper,
        program,
        started: Instant::now(),
        wrapper_killed: false,
        program_killed: false,
    })
}

fn reap(jobs: &mut Vec<Job>, t: &mut Tally) {
    jobs.retain_mut(|j| match j.wrapper.try_wait() {
        Ok(Some(st)) => {
            if st.code() == Some(allot_proto::EXIT_ALLOT) {
                t.refused += 1;
            } else {
                t.finished += 1;
            }
            // The program of a killed wrapper may live on: keep stopping it
            // with its group at the end.
            if j.wrapper_killed {
                kill_group(j.wrapper.id(), rustix::process::Signal::KILL);
            }
            false
        }
        _ => true,
    });
    // Orphans handed to us by the kernel (programs of killed wrappers).
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {}
}

fn kill_a_wrapper(jobs: &mut [Job], rng: &mut Rng, t: &mut Tally) {
    let live: Vec<usize> = (0..jobs.len())
        .filter(|&i| !jobs[i].wrapper_killed)
        .collect();
    if live.is_empty() {
        return;
    }
    let j = &mut jobs[live[rng.below(live.len() as u64) as usize]];
    let _ = j.wrapper.kill();
    j.wrapper_killed = true;
    t.wrappers_killed += 1;
}

fn kill_a_program(jobs: &mut [Job], rng: &mut Rng, t: &mut Tally) {
    let live: Vec<usize> = (0..jobs.len())
        .filter(|&i| !jobs[i].wrapper_killed && !jobs[i].program_killed)
        .collect();
    if live.is_empty() {
        return;
    }
    let j = &mut jobs[live[rng.below(live.len() as u64) as usize]];
    for pid in children(j.wrapper.id()) {
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            j.program_killed = true;
        }
    }
    if j.program_killed {
        t.programs_killed += 1;
    }
}

/// SIGKILLs the broker, starts it again, and checks that the surviving
/// cells are adopted and rejoined in time.
fn restart(broker: &mut PrivateBroker, jobs: &[Job], t: &mut Tally) -> Result<(), String> {
    let Some(before) = status(broker.socket()) else {
        return Ok(());
    };
    broker.kill9();
    t.restarts += 1;
    // Where one broker's lines end and the next one's begin (each counts
    // its time from its own start).
    {
        use std::io::Write;
        let _ = std::fs::OpenOptions::new()
            .append(true)
            .open(broker.dir().join("broker.log"))
            .and_then(|mut f| writeln!(f, "=== chaos: broker killed, restart {}", t.restarts));
    }
    let log_len = broker_log_len(broker);
    let t0 = Instant::now();
    broker.spawn()?;
    // Cells whose processes still run must come back.
    let surviving: BTreeSet<u64> = before
        .cells
        .iter()
        .filter(|c| c.pids.iter().any(|&p| alive(p)))
        .map(|c| c.id)
        .collect();
    let mut adopted_at = None;
    while t0.elapsed() < t.bounds.adopt_within {
        if let Some(st) = status(broker.socket()) {
            let listed: BTreeSet<u64> = st.cells.iter().map(|c| c.id).collect();
            let missing: Vec<u64> = surviving
                .iter()
                .copied()
                .filter(|id| !listed.contains(id) && cell_alive(&before, *id))
                .collect();
            if missing.is_empty() {
                adopted_at = Some(t0.elapsed());
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    match adopted_at {
        Some(d) => t.adopt_ms.push(d.as_millis() as u64),
        None => t.failures.push(format!(
            "after restart {}, cells {surviving:?} were not all listed within {:?}",
            t.restarts, t.bounds.adopt_within
        )),
    }
    // Every live allot run rejoins (the broker logs it).
    let wrappers: usize = jobs
        .iter()
        .filter(|j| !j.wrapper_killed && alive(j.wrapper.id()))
        .count();
    let expected = surviving.len().min(wrappers);
    let mut rejoined_at = None;
    while t0.elapsed() < t.bounds.rejoin_within {
        let rejoins = broker
            .log()
            .get(log_len..)
            .map_or(0, |l| l.matches("rejoined by pid").count());
        if rejoins >= expected {
            rejoined_at = Some(t0.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    match rejoined_at {
        Some(d) => t.rejoin_ms.push(d.as_millis() as u64),
        // A wrapper may end during the window: only a shortfall among
        // those still running counts.
        None => {
            let still = jobs
                .iter()
                .filter(|j| !j.wrapper_killed && alive(j.wrapper.id()))
                .count()
                .min(surviving.len());
            let rejoins = broker
                .log()
                .get(log_len..)
                .map_or(0, |l| l.matches("rejoined by pid").count());
            if rejoins < still {
                t.failures.push(format!(
                    "after restart {}, {rejoins} of {still} running allot run wrappers rejoined within {:?}",
                    t.restarts, t.bounds.rejoin_within
                ));
            }
        }
    }
    Ok(())
}

fn cell_alive(st: &Status, id: u64) -> bool {
    st.cells
        .iter()
        .find(|c| c.id == id)
        .is_some_and(|c| c.pids.iter().any(|&p| alive(p)))
}

/// Stops every job and whatever else of ours runs, except `keep` (the
/// broker).
fn stop_jobs(jobs: &mut Vec<Job>, keep: Option<u32>) {
    for j in jobs.iter() {
        kill_group(j.wrapper.id(), rustix::process::Signal::TERM);
    }
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline
        && jobs
            .iter_mut()
            .any(|j| matches!(j.wrapper.try_wait(), Ok(None)))
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    for j in jobs.iter_mut() {
        kill_group(j.wrapper.id(), rustix::process::Signal::KILL);
        let _ = j.wrapper.wait();
    }
    jobs.clear();
    // Whatever else is ours (orphaned programs, a stray `sleep`).
    for pid in children(std::process::id())
        .into_iter()
        .filter(|&p| Some(p) != keep)
    {
        if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
        }
    }
    while let Ok(Some(_)) = rustix::process::waitpid(None, rustix::process::WaitOptions::NOHANG) {}
}

fn status(socket: &Path) -> Option<Status> {
    let mut c = allot_client::Client::connect(socket).ok()?;
    c.set_timeout(Some(Duration::from_secs(2))).ok()?;
    c.status().ok()
}

fn broker_log_len(broker: &PrivateBroker) -> usize {
    broker.log().len()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_are_numbers_and_ranges_in_order() {
        assert_eq!(parse_seeds("1-3,9").unwrap(), vec![1, 2, 3, 9]);
        assert_eq!(parse_seeds("7").unwrap(), vec![7]);
        assert!(parse_seeds("5-2").unwrap_err().contains("range"));
        assert!(parse_seeds("1,x").unwrap_err().contains("\"x\""));
        assert!(parse_seeds("0-20000").is_err());
    }
}
