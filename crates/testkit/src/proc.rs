//! Processes a test starts, killed and reaped on drop.

use std::process::{Child, Command, Output, Stdio};

/// A child process, killed (SIGKILL) and reaped on drop.
pub struct Proc(pub Child);

impl Proc {
    /// The child's pid; after `kill9` it may name another process.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
    /// Kills and reaps it now.
    pub fn kill9(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A CPU-bound shell loop.
pub fn spinner() -> Proc {
    Proc(
        Command::new("sh")
            .arg("-c")
            .arg("while :; do :; done")
            .stdin(Stdio::null())
            .spawn()
            .expect("sh runs"),
    )
}

/// `sleep 120`.
pub fn sleeper() -> Proc {
    Proc(
        Command::new("sleep")
            .arg("120")
            .stdin(Stdio::null())
            .spawn()
            .expect("sleep runs"),
    )
}

/// The Python interpreter tests run: Debian's, by path. A version
/// manager's `python3` on `PATH` (pyenv's shim is a shell script) forks
/// helpers before it becomes Python, which land in whatever cgroup a test
/// just put the process in.
pub const PYTHON: &str = "/usr/bin/python3";

/// A Python process that starts `early` threads now and `late` more after
/// `delay_ms`, then sleeps.
pub fn threaded(early: u32, late: u32, delay_ms: u32) -> Proc {
    let code = format!(
        "import threading,time\n\
         def s(): time.sleep(60)\n\
         [threading.Thread(target=s,daemon=True).start() for _ in range({early})]\n\
         time.sleep({delay_ms}/1000)\n\
         [threading.Thread(target=s,daemon=True).start() for _ in range({late})]\n\
         time.sleep(60)\n"
    );
    Proc(
        Command::new(PYTHON)
            .arg("-c")
            .arg(code)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3 runs"),
    )
}

/// A shell that forks `n` sleeping children and waits for them. (Its only
/// children are the sleepers: no command substitution, whose short-lived
/// subshell a test could take for one of them.)
pub fn forking(n: u32) -> Proc {
    let script = format!("i=0; while [ $i -lt {n} ]; do sleep 60 & i=$((i+1)); done; wait");
    Proc(
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .spawn()
            .expect("sh runs"),
    )
}

/// `(tid, Cpus_allowed_list)` of every thread of `pid`.
pub fn thread_masks(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let tid: u32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
            if let Ok(s) = std::fs::read_to_string(e.path().join("status"))
                && let Some(l) = s.lines().find(|l| l.starts_with("Cpus_allowed_list:"))
            {
                out.push((tid, l.split_whitespace().nth(1).unwrap_or("").to_string()));
            }
        }
    }
    out
}

/// `(tid, name, scheduling policy, real-time priority)` of every thread
/// of `pid`, from `/proc` (fields 41 and 40 of `stat`).
pub fn thread_classes(pid: u32) -> Vec<(u32, String, u32, u32)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let tid: u32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                continue;
            };
            let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
                continue;
            };
            let name = stat[open + 1..close].to_string();
            // After the name, field 3 (the state) is f[0]: rt_priority is
            // field 40, policy field 41.
            let f: Vec<&str> = stat[close + 2..].split(' ').collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse().ok()).unwrap_or(u32::MAX);
            out.push((tid, name, num(38), num(37)));
        }
    }
    out
}

/// Runs `cmd` with its output captured; kills it (by its pid) and panics
/// if it has not exited after `limit`, e.g. because it deadlocked.
pub fn output_within(cmd: &mut Command, limit: std::time::Duration) -> Output {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = rustix::process::Pid::from_child(&child);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(out) => {
            waiter.join().unwrap();
            out.unwrap()
        }
        Err(_) => {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            let out = rx.recv().unwrap().unwrap();
            waiter.join().unwrap();
            panic!(
                "{cmd:?} did not finish within {limit:?} (killed); stdout: {}; stderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}
