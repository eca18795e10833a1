//! `require` across processes, coordinated by a real broker's ledger.

mod common;

use allot_require::{Blocks, Need, policy};
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
    let s = rt.enter(vec![Need::device("cpu", 0, 1.0)]).unwrap();
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
        let s = rt.enter(vec![Need::policy(policy::cores(1))]);
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

/// The line role: asks for `cpu0` (device 0) or `cores1` (the policy
/// `cores(1)`), prints `waiting` once its runtime has a thread waiting
/// (it then has a place in the broker's line), `entered T cpus LIST` and
/// `leaving T`; holds `HOLD` ms, or with 0 until `STOP_FILE` exists.
/// Selected by ALLOT_LINE_ROLE=ASK:HOLD.
#[test]
fn line_role() {
    let Ok(role) = std::env::var("ALLOT_LINE_ROLE") else {
        return;
    };
    let (ask, hold) = role.split_once(':').unwrap();
    let hold: u64 = hold.parse().unwrap();
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    std::thread::spawn(move || {
        while rt.waiting() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        println!("waiting");
    });
    let req = match ask {
        "cpu0" => Need::device("cpu", 0, 1.0),
        "cores1" => Need::policy(policy::cores(1)),
        other => panic!("unknown ask {other}"),
    };
    let s = rt.enter(vec![req]).unwrap();
    println!("entered {} cpus {}", mono(), s.outcome().cpus);
    if hold > 0 {
        std::thread::sleep(Duration::from_millis(hold));
    } else {
        let stop = std::env::var("STOP_FILE").unwrap();
        let until = std::time::Instant::now() + Duration::from_secs(120);
        while !std::path::Path::new(&stop).exists() && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    println!("leaving {}", mono());
    drop(s);
}

/// The test `name` of this file run as a program, watched: selected by
/// `var`=`value`, talking to `d`'s broker.
fn watched_role(d: &Daemon, name: &str, var: &str, value: String) -> Watched {
    let argv = role(name);
    let mut c = Command::new(&argv[0]);
    c.args(&argv[1..])
        .env(var, value)
        .env("ALLOT_SOCKET", &d.socket);
    Watched::spawn(c)
}

fn in_line(d: &Daemon, ask: &str, hold_ms: u64) -> Watched {
    watched_role(
        d,
        "line_role",
        "ALLOT_LINE_ROLE",
        format!("{ask}:{hold_ms}"),
    )
}

fn printed(w: &mut Watched, what: &str, key: &str) {
    w.wait_for(what, |lines| lines.iter().any(|l| l.contains(key)));
}

/// Poli-C's waiters across processes, served in the order they asked: three
/// processes wait for CPU 0 one after another; when its holder leaves, they
/// enter in that order, each after the one before has left. (Without the
/// broker's line all three woke together and raced for it.)
#[test]
fn processes_waiting_for_a_cpu_enter_in_the_order_they_asked() {
    let d = Daemon::start("dry-run", &[]);
    let mut holder = in_line(&d, "cpu0", 0);
    printed(&mut holder, "the holder entered", "entered ");
    let mut waiters = Vec::new();
    for i in 0..3 {
        let mut w = in_line(&d, "cpu0", 100);
        printed(&mut w, &format!("waiter {i} waits"), "waiting");
        waiters.push(w);
    }
    holder.stop();
    let stamps: Vec<(f64, f64)> = waiters.into_iter().map(|w| stamps_in(w.stop())).collect();
    for pair in stamps.windows(2) {
        let ((_, left), (entered, _)) = (pair[0], pair[1]);
        assert!(
            entered >= left,
            "served out of order (entered, left): {stamps:?}\n{}",
            d.log()
        );
    }
}

/// A policy in a process that waits is told what is free: with CPU 0 held
/// by another process, `cores(1)` (which first chose CPU 0, not knowing)
/// enters at once on another CPU instead of waiting for CPU 0.
#[test]
fn a_policy_refused_its_first_choice_takes_what_the_broker_says_is_free() {
    let m = allot_topo::discover_live().unwrap();
    if m.usable().len() < 2 {
        eprintln!("skipped: needs two CPUs");
        return;
    }
    let d = Daemon::start("dry-run", &[]);
    let mut holder = in_line(&d, "cpu0", 0);
    printed(&mut holder, "the holder entered", "entered ");
    let mut b = in_line(&d, "cores1", 1);
    printed(&mut b, "cores(1) entered beside the holder", "entered ");
    let lines = b.stop();
    holder.stop();
    let cpus = lines
        .iter()
        .find_map(|l| Some(l.split_once(" cpus ")?.1.trim().to_string()))
        .unwrap();
    assert!(
        !cpus.is_empty() && cpus != "0" && !cpus.starts_with("0,") && !cpus.starts_with("0-"),
        "cores(1) got {cpus:?} while CPU 0 was held"
    );
}

/// The crowd role: `THREADS` threads each enter `fair_cores()` `ROUNDS`
/// times, holding it 5 ms, then the process prints `done`. Selected by
/// ALLOT_CROWD_ROLE=THREADS:ROUNDS.
#[test]
fn crowd_role() {
    let Ok(role) = std::env::var("ALLOT_CROWD_ROLE") else {
        return;
    };
    let (threads, rounds) = role.split_once(':').unwrap();
    let (threads, rounds): (usize, usize) = (threads.parse().unwrap(), rounds.parse().unwrap());
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    let all: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                for _ in 0..rounds {
                    let s = rt.enter(vec![Need::policy(policy::fair_cores())]).unwrap();
                    std::thread::sleep(Duration::from_millis(5));
                    drop(s);
                }
            })
        })
        .collect();
    for t in all {
        t.join().unwrap();
    }
    println!("done");
}

/// Many threads of several processes waiting in the broker's line at once
/// all get their turn: a waiter's view of what is free is its own (what
/// is free depends on its place), and a process's idle grant goes back
/// before its threads wait. (With one view per process, a thread refused
/// behind others made its process's first-in-line thread believe nothing
/// was free: every process slept with the CPUs free.)
#[test]
fn a_crowd_of_waiting_policies_in_several_processes_all_get_their_turn() {
    let d = Daemon::start("dry-run", &[]);
    let crowd: Vec<Watched> = (0..3)
        .map(|_| watched_role(&d, "crowd_role", "ALLOT_CROWD_ROLE", "6:4".into()))
        .collect();
    for mut p in crowd {
        printed(&mut p, "every thread of the process had its turns", "done");
        p.stop();
    }
}

/// The burst role: on the 64-CPU fixture machine, waits until `START` (a
/// CLOCK_MONOTONIC second), enters `POLICY` (`fair_cores` or `fair_numa`)
/// with a gathering window of `WINDOW` ms, prints `got N nodes LIST` (its
/// CPUs, and the nodes it was given whole) and holds them until
/// `STOP_FILE` exists. Selected by ALLOT_BURST_ROLE=START:WINDOW:POLICY.
#[test]
fn burst_role() {
    let Ok(role) = std::env::var("ALLOT_BURST_ROLE") else {
        return;
    };
    let mut parts = role.split(':');
    let start: f64 = parts.next().unwrap().parse().unwrap();
    let window: u64 = parts.next().unwrap().parse().unwrap();
    let policy = match parts.next().unwrap() {
        "fair_cores" => policy::fair_cores(),
        "fair_numa" => policy::fair_numa(),
        other => panic!("unknown policy {other}"),
    };
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::fixture(BURST_MACHINE).unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    rt.set_gather_window(Duration::from_millis(window));
    while mono() < start {
        std::thread::sleep(Duration::from_secs_f64((start - mono()).min(0.01)));
    }
    let s = rt.enter(vec![Need::policy(policy)]).unwrap();
    let nodes: Vec<String> = s.outcome().nodes.iter().map(|n| n.to_string()).collect();
    println!("got {} nodes {}", s.outcome().cpus.len(), nodes.join(","));
    let stop = std::env::var("STOP_FILE").unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(60);
    while !std::path::Path::new(&stop).exists() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(s);
}

/// The machine the burst test's broker plans on (64 CPUs).
const BURST_MACHINE: &str = "opteron6276-4s";

/// What a burst process got: its CPUs and the nodes given whole.
type Got = (usize, Vec<u32>);

/// `n` burst processes of `policy` released together at `start`: what
/// each got, once all have entered (within 15 s), or `None` for one that
/// never did.
fn burst(d: &Daemon, n: usize, start: f64, window_ms: u64, policy: &str) -> Vec<Option<Got>> {
    let role = format!("{start}:{window_ms}:{policy}");
    let procs: Vec<Watched> = (0..n)
        .map(|_| watched_role(d, "burst_role", "ALLOT_BURST_ROLE", role.clone()))
        .collect();
    let got = |p: &Watched| {
        p.lines().iter().find_map(|l| {
            let mut words = l[l.find("got ")? + 4..].split_whitespace();
            let cpus = words.next()?.parse::<usize>().ok()?;
            let nodes = match (words.next(), words.next()) {
                (Some("nodes"), Some(list)) => {
                    list.split(',').filter_map(|n| n.parse().ok()).collect()
                }
                _ => Vec::new(),
            };
            Some((cpus, nodes))
        })
    };
    eventually(
        Duration::from_secs(15) + Duration::from_secs_f64((start - mono()).max(0.0)),
        || procs.iter().all(|p| got(p).is_some()),
    );
    // (Dropping them stops them: their holdings go back.)
    procs.iter().map(got).collect()
}

/// Poli-C §7.2.1 across processes: requests of `fair_cores` from different
/// processes arriving together after a quiet spell (no request for ten
/// windows) divide the free CPUs, two ways and four ways, instead of the
/// first taking them all while the others wait for it to leave. The
/// broker gathers them. Four `fair_numa` requests get two whole nodes
/// each of the fixture's eight, no node twice. (The window is long, 300 ms with a 37 ms part in
/// a quiet spell, so that processes released together reach it on a busy
/// machine; what is judged is the division.)
#[test]
fn a_burst_of_fair_cores_from_several_processes_after_a_quiet_spell_divides_the_machine() {
    let sysfs = allot_topo::fixture_path(BURST_MACHINE);
    let d = Daemon::start("dry-run", &["--sysfs", sysfs.to_str().unwrap()]);
    let window_ms = 300;
    let quiet = Duration::from_millis(window_ms) * allot_require::blocks::QUIET_WINDOWS;
    // Alone, one takes every CPU a request may: the whole to divide.
    let all = burst(&d, 1, mono(), window_ms, "fair_cores")[0]
        .clone()
        .expect("a request alone enters")
        .0;
    assert!(all >= 60, "alone it got {all} of 64 CPUs\n{}", d.log());
    for n in [2, 4] {
        // Released after a quiet spell (counted from when the last ones
        // entered, a little more for their processes to start).
        let start = mono() + (quiet + Duration::from_millis(500)).as_secs_f64();
        let got = burst(&d, n, start, window_ms, "fair_cores");
        // Each chooses in turn from what is left (the last may take a
        // remainder of the division).
        assert!(
            got.iter().all(|g| g
                .as_ref()
                .is_some_and(|g| g.0 >= all / n && g.0 <= all.div_ceil(n) + 1)),
            "{n} requests arriving together after a quiet spell got {got:?} CPUs, \
             not about {} each\n{}",
            all / n,
            d.log()
        );
    }
    // fair_numa, four ways on 8 nodes of 8 CPUs: two whole nodes each,
    // no node given twice.
    let start = mono() + (quiet + Duration::from_millis(500)).as_secs_f64();
    let got = burst(&d, 4, start, window_ms, "fair_numa");
    let mut nodes: Vec<u32> = got.iter().flatten().flat_map(|g| g.1.clone()).collect();
    nodes.sort_unstable();
    assert!(
        got.iter()
            .all(|g| g.as_ref().is_some_and(|g| g.0 == 16 && g.1.len() == 2))
            && nodes == (0..8).collect::<Vec<u32>>(),
        "four fair_numa requests arriving together got {got:?}, not two whole nodes each\n{}",
        d.log()
    );
}
