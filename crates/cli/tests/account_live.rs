//! The one account, live: a CPU a process holds exclusively through
//! `require` leaves every other cell's grant and cpuset, inside a cell or
//! outside every cell, and comes back when it is given back.

mod common;

use allot_client::require::{Request, Runtime};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

/// The child role: holds the first CPU it may run on through
/// `require(cpu(N, 1.0))`, prints "held N", and keeps it until killed.
/// Selected by ALLOT_ACCOUNT_CHILD=1.
#[test]
fn child_role() {
    if std::env::var("ALLOT_ACCOUNT_CHILD").is_err() {
        return;
    }
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let mine = rustix::thread::sched_getaffinity(None).unwrap();
    let cpu = (0..1024).find(|&c| mine.is_set(c)).unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Runtime::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    let _s = rt.enter(vec![Request::device("cpu", cpu, 1.0)]).unwrap();
    println!("held {cpu}");
    std::thread::sleep(Duration::from_secs(30));
}

/// What the broker granted cell `name` (`None` before it exists), and
/// what its cgroup v1 cpuset says (the same, when the backend is cgroup1).
fn cpus_of(d: &Daemon, name: &str) -> Option<String> {
    let st = d.status();
    let c = st.cells.iter().find(|c| c.name == name)?;
    if d.backend == "cgroup1" {
        let p = format!(
            "/sys/fs/cgroup/cpuset/{}/cell-{}/cpuset.cpus",
            d.cgroup, c.id
        );
        let set = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert_eq!(set.trim(), c.cpus, "the cpuset of {name} is not its grant");
    }
    Some(c.cpus.clone())
}

fn wait_for(d: &Daemon, name: &str, want: &str) {
    assert!(
        eventually(Duration::from_secs(5), || cpus_of(d, name).as_deref()
            == Some(want)),
        "cell {name} runs on {:?}, not {want}\n{}",
        cpus_of(d, name),
        d.log()
    );
}

#[test]
fn a_cpu_held_outside_every_cell_leaves_the_cells_cpuset() {
    if !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let _k = Killed(&d, vec![cell(&d, "spin", &[], SPIN2)]);
    wait_for(&d, "spin", "0-1");
    // This test process runs outside every cell.
    let m = allot_topo::discover_live().unwrap();
    let rt = Runtime::with_broker(m, false, Some(&d.socket)).into_static();
    assert!(rt.coordinated());
    let s = rt.enter(vec![Request::device("cpu", 1, 1.0)]).unwrap();
    wait_for(&d, "spin", "0");
    assert_eq!(d.status().machine.held_outside, "1");
    drop(s);
    wait_for(&d, "spin", "0-1");
    assert_eq!(d.status().machine.held_outside, "");
}

#[test]
fn a_cpu_held_in_a_cell_stays_its_own_and_no_other_cell_runs_there() {
    if !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let mut k = Killed(&d, vec![cell(&d, "b", &[], SPIN)]);
    wait_for(&d, "b", "0-1");
    let exe = std::env::current_exe().unwrap();
    let mut holder = allot_run(&d, &["--name", "a", "--"]);
    holder
        .arg(exe)
        .args([
            "--exact",
            "child_role",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("ALLOT_ACCOUNT_CHILD", "1")
        .env("ALLOT_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut holder = {
        use std::os::unix::process::CommandExt;
        holder.process_group(0).spawn().expect("allot run")
    };
    let out = BufReader::new(holder.stdout.take().unwrap());
    k.1.push(holder);
    let held = out
        .lines()
        .map_while(Result::ok)
        .find_map(|l| Some(l[l.find("held ")? + 5..].trim().to_string()))
        .unwrap_or_else(|| panic!("the holder never held a CPU\n{}", d.log()));
    let other = if held == "0" { "1" } else { "0" };
    wait_for(&d, "a", &held);
    wait_for(&d, "b", other);
    // Two more best-effort cells: four on two CPUs would share a pool;
    // a keeps the CPU its process holds, the others share the rest.
    k.1.push(cell(&d, "c", &[], SPIN));
    k.1.push(cell(&d, "e", &[], SPIN));
    for name in ["b", "c", "e"] {
        wait_for(&d, name, other);
    }
    wait_for(&d, "a", &held);
    let st = d.status();
    let a = st.cells.iter().find(|c| c.name == "a").unwrap();
    assert_eq!(a.held, held);
    assert!(!a.stacked);
}
