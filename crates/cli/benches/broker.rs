//! Broker latencies on this machine, as medians over repeated runs:
//!
//! - **reclaim**: from SIGKILL of one cell's process to the surviving cell's
//!   grant page showing the freed CPU (the broker learns of the death via
//!   pidfd, re-plans, rewrites `cpuset.cpus` or affinities, publishes);
//! - **register**: a client's round trip to create a cell (admission, plan,
//!   cgroup or affinity set-up, page creation, fd passing).
//!
//! Run: `cargo bench -p allot-cli --bench broker` (root for the cgroup1
//! rows). Prints one table; each backend is measured in the same run.

use allot_client::Client;
use allot_spec::CellSpec;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const ROUNDS: usize = 30;

struct Guard(Child);
impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spinner() -> Guard {
    Guard(
        Command::new("sh")
            .arg("-c")
            .arg("while :; do :; done")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    )
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn measure(backend: &str) -> Option<(Vec<Duration>, Vec<Duration>)> {
    let dir = tempfile::tempdir().ok()?;
    let socket = dir.path().join("allot.sock");
    let cgroup = format!("allot-bench-{}", std::process::id());
    let mut daemon = Guard(
        Command::new(env!("CARGO_BIN_EXE_allot"))
            .args(["daemon", "--socket"])
            .arg(&socket)
            .args(["--backend", backend, "--cgroup-name", &cgroup])
            .stderr(Stdio::null())
            .spawn()
            .ok()?,
    );
    let start = Instant::now();
    while Client::connect(&socket).is_err() {
        if start.elapsed() > Duration::from_secs(10) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut reclaim = Vec::new();
    let mut register = Vec::new();
    for _ in 0..ROUNDS {
        let mut client = Client::connect(&socket).ok()?;
        let mut a = spinner();
        let b = spinner();
        let t = Instant::now();
        let _ra = client
            .register(
                "a",
                CellSpec::default(),
                &[a.0.id()],
                false,
                false,
                |_, _| {},
            )
            .ok()?;
        register.push(t.elapsed());
        let rb = client
            .register(
                "b",
                CellSpec::default(),
                &[b.0.id()],
                false,
                false,
                |_, _| {},
            )
            .ok()?;
        let page = rb.page.page();
        let before = page.read().cpus.len();
        let t0 = Instant::now();
        let _ = a.0.kill();
        loop {
            let word = page.futex_word();
            if page.read().cpus.len() > before {
                break;
            }
            if t0.elapsed() > Duration::from_secs(5) {
                return None;
            }
            page.wait(word, Some(Duration::from_millis(50)));
        }
        reclaim.push(t0.elapsed());
        let _ = a.0.wait();
        drop(b);
        // Let the second cell end before the next round.
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(daemon.0.id() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    let _ = daemon.0.wait();
    Some((reclaim, register))
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let mut backends = vec!["affinity"];
    if rustix::process::getuid().is_root()
        && Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists()
    {
        backends.insert(0, "cgroup1");
    }
    println!("broker latencies, {ROUNDS} rounds each, medians (min … max)");
    println!(
        "{:<10} {:>28} {:>28}",
        "backend", "reclaim (kill → survivor page)", "register round trip"
    );
    for b in backends {
        match measure(b) {
            Some((mut r, mut g)) => {
                let fmt = |v: &mut Vec<Duration>| {
                    let m = median(v);
                    format!(
                        "{:.0} µs ({:.0} … {:.0})",
                        m.as_secs_f64() * 1e6,
                        v[0].as_secs_f64() * 1e6,
                        v[v.len() - 1].as_secs_f64() * 1e6
                    )
                };
                println!("{:<10} {:>28} {:>28}", b, fmt(&mut r), fmt(&mut g));
            }
            None => println!("{b:<10} (could not run: broker did not start or a round timed out)"),
        }
    }
    println!("reference: the ARS prototype polled every 500 ms; libdispatch's monitor every 1 s");
}
