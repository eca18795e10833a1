//! `require` across processes, coordinated by a real broker's ledger.

mod common;

use allot_require::{Blocks, Request, policy};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

fn mono() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// The child role: enter `require(cpu(0, 1.0))`, report, hold, leave.
/// Selected by ALLOT_REQUIRE_CHILD=<hold milliseconds>.
#[test]
fn child_role() {
    let Ok(hold) = std::env::var("ALLOT_REQUIRE_CHILD") else {
        return;
    };
    let hold: u64 = hold.parse().unwrap();
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    let s = rt.enter(vec![Request::device("cpu", 0, 1.0)]).unwrap();
    println!("entered {}", mono());
    std::thread::sleep(Duration::from_millis(hold));
    println!("leaving {}", mono());
    drop(s);
}

fn child(d: &Daemon, hold_ms: u64) -> Proc {
    let argv = role("child_role");
    Proc(
        Command::new(&argv[0])
            .args(&argv[1..])
            .env("ALLOT_REQUIRE_CHILD", hold_ms.to_string())
            .env("ALLOT_SOCKET", &d.socket)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    )
}

/// The first "entered"/"leaving" timestamps a child printed.
fn stamps(p: &mut Proc) -> (f64, f64) {
    let out = BufReader::new(p.0.stdout.take().unwrap());
    stamps_in(out.lines().map_while(Result::ok))
}

/// The "entered"/"leaving" timestamps in a child's lines.
fn stamps_in(lines: impl IntoIterator<Item = String>) -> (f64, f64) {
    let (mut e, mut l) = (f64::NAN, f64::NAN);
    // libtest may print its own "test child_role ... " on the same line.
    let after = |line: &str, key: &str| {
        line.find(key).and_then(|i| {
            line[i + key.len()..]
                .split_whitespace()
                .next()?
                .parse::<f64>()
                .ok()
        })
    };
    for line in lines {
        if let Some(t) = after(&line, "entered ") {
            e = t;
        }
        if let Some(t) = after(&line, "leaving ") {
            l = t;
        }
    }
    (e, l)
}

/// A policy (not a device request) in a process coordinated through the
/// broker: its roots start empty, and the policy must still find CPUs to
/// choose from (it used to wait forever).
#[test]
fn a_policy_enters_in_a_process_coordinated_by_the_broker() {
    let d = Daemon::start("dry-run", &[]);
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(&d.socket)).into_static();
    assert!(rt.coordinated());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let s = rt.enter(vec![Request::policy(policy::cores(1))]);
        let _ = tx.send(s.map(|s| s.outcome().ncores).map_err(|e| e.to_string()));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("a cores(1) policy never entered with a broker");
    assert_eq!(got, Ok(1));
}

#[test]
fn two_processes_never_hold_the_same_cpu_at_once() {
    let d = Daemon::start("dry-run", &[]);
    let mut a = child(&d, 400);
    // b starts once a holds the CPU (a's "entered" line).
    let mut a_out = BufReader::new(a.0.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok);
    let mut a_lines = Vec::new();
    for line in a_out.by_ref() {
        let entered = line.contains("entered ");
        a_lines.push(line);
        if entered {
            break;
        }
    }
    let mut b = child(&d, 100);
    a_lines.extend(a_out);
    let (ea, la) = stamps_in(a_lines);
    let (eb, lb) = stamps(&mut b);
    assert!(a.0.wait().unwrap().success() && b.0.wait().unwrap().success());
    assert!(ea < la && eb < lb, "{ea} {la} {eb} {lb}");
    assert!(
        eb >= la,
        "b entered at {eb}, before a left at {la}: the exclusive CPU was held twice\n{}",
        d.log()
    );
}

#[test]
fn a_process_killed_inside_require_gives_everything_back() {
    let d = Daemon::start("dry-run", &[]);
    let mut a = child(&d, 60_000);
    // Wait until a holds the CPU.
    let out = BufReader::new(a.0.stdout.take().unwrap());
    let mut lines = out.lines();
    assert!(
        lines
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.contains("entered ")),
        "the holder never entered\n{}",
        d.log()
    );
    let mut b = child(&d, 10);
    std::thread::sleep(Duration::from_millis(300));
    let killed = mono();
    a.kill9();
    let (eb, _) = stamps(&mut b);
    assert!(b.0.wait().unwrap().success());
    let after = eb - killed;
    eprintln!(
        "the waiting process entered {:.1} ms after the holder was killed",
        after * 1e3
    );
    assert!(after >= 0.0, "b entered while a still held the CPU");
    assert!(after < 2.0, "reclaim took {after} s\n{}", d.log());
}
