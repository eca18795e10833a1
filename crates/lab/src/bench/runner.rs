//! Running a set of jobs and timing them.
//!
//! Concurrent runs start every job, then wait for all; a job's time runs
//! from its own start to its exit, the makespan from the first start to the
//! last exit. Each job's stdout is kept (workloads print their answer on
//! it). A run past its time limit is stopped: the harness kills the
//! processes it started (each job runs in its own process group, so
//! `allot run`'s program and a shell's children go too) and marks the jobs
//! as timed out. A stopping signal (see `interrupt`) kills them the same
//! way and makes the run return an `Interrupted` error.

use super::interrupt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One job's result.
#[derive(Debug, Clone)]
pub struct JobResult {
    /// Seconds from start to exit.
    pub seconds: f64,
    /// Exit code (None: killed or timed out).
    pub code: Option<i32>,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error (for failure messages).
    pub stderr: String,
    /// It was stopped at the time limit.
    pub timed_out: bool,
}

/// A whole run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Per job, in input order.
    pub jobs: Vec<JobResult>,
    /// First start to last exit.
    pub makespan: f64,
}

fn spawn(mut c: Command) -> std::io::Result<std::process::Child> {
    use std::os::unix::process::CommandExt;
    c.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    // If the harness itself is killed, so is the job it started.
    interrupt::die_with_parent(&mut c, rustix::process::Signal::KILL);
    c.spawn()
}

fn kill_group(pid: u32) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
    }
}

/// Runs `cmds` concurrently, stopping them after `limit`.
pub fn concurrent(cmds: Vec<Command>, limit: Duration) -> std::io::Result<RunResult> {
    if interrupt::requested() {
        return Err(interrupt::error());
    }
    let t0 = Instant::now();
    let mut children = Vec::new();
    for c in cmds {
        let started = t0.elapsed();
        children.push((spawn(c)?, started));
    }
    let handles: Vec<_> = children
        .into_iter()
        .map(|(child, started)| {
            let pid = child.id();
            let deadline = t0 + limit;
            let waiter = std::thread::spawn(move || {
                let out = child.wait_with_output();
                (out, t0.elapsed())
            });
            (pid, started, waiter, deadline)
        })
        .collect();
    // A watchdog kills whatever is still running at the deadline, or at
    // once on a stopping signal.
    let pids: Vec<u32> = handles.iter().map(|h| h.0).collect();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            while t0.elapsed() < limit && !interrupt::requested() {
                if done.load(std::sync::atomic::Ordering::Acquire) {
                    return false;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            for p in pids {
                kill_group(p);
            }
            true
        })
    };
    let mut jobs = Vec::new();
    let mut last_end = Duration::ZERO;
    for (_, started, waiter, _) in handles {
        let (out, ended) = waiter
            .join()
            .map_err(|_| std::io::Error::other("waiter panicked"))?;
        let out = out?;
        last_end = last_end.max(ended);
        jobs.push(JobResult {
            seconds: (ended - started).as_secs_f64(),
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            timed_out: false,
        });
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let fired = watchdog.join().unwrap_or(false);
    if interrupt::requested() {
        return Err(interrupt::error());
    }
    if fired {
        for j in &mut jobs {
            if j.code != Some(0) {
                j.timed_out = true;
            }
        }
    }
    Ok(RunResult {
        jobs,
        makespan: last_end.as_secs_f64(),
    })
}

/// Runs `cmds` one after the other (each under the same limit overall).
pub fn sequential(cmds: Vec<Command>, limit: Duration) -> std::io::Result<RunResult> {
    let t0 = Instant::now();
    let mut jobs = Vec::new();
    for c in cmds {
        let left = limit.saturating_sub(t0.elapsed());
        let r = concurrent(vec![c], left)?;
        jobs.extend(r.jobs);
    }
    Ok(RunResult {
        jobs,
        makespan: t0.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(s: &str) -> Command {
        let mut c = Command::new("sh");
        c.arg("-c").arg(s);
        c
    }

    #[test]
    fn concurrent_and_sequential_timing() {
        let r = concurrent(
            vec![sh("sleep 0.2; echo a"), sh("sleep 0.3; echo b")],
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(r.jobs.iter().all(|j| j.code == Some(0)));
        assert_eq!(r.jobs[0].stdout, "a\n");
        assert!(r.makespan >= 0.3 && r.makespan < 0.5, "{}", r.makespan);
        let r = sequential(
            vec![sh("sleep 0.2"), sh("sleep 0.2")],
            Duration::from_secs(5),
        )
        .unwrap();
        assert!(r.makespan >= 0.4, "{}", r.makespan);
    }

    #[test]
    fn runs_past_the_limit_are_stopped() {
        let t = Instant::now();
        let r = concurrent(vec![sh("sleep 30"), sh("true")], Duration::from_millis(300)).unwrap();
        assert!(t.elapsed() < Duration::from_secs(5));
        assert!(r.jobs[0].timed_out);
        assert_eq!(r.jobs[1].code, Some(0));
        assert_ne!(r.jobs[0].code, Some(0));
    }
}
