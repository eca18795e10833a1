//! Work outside the cells, live (cgroup v1): the cells weigh against it
//! as their programs' threads would, in the kernel's cpu hierarchy, as
//! cells come and go (and as one process with `--weigh group`); and a
//! best-effort cell beside a busy process this test starts outside every
//! cell is told to run a team that leaves that process its CPU, and the
//! whole team again once it ends. The decisions are judged against the
//! broker's own readings, which also see any other work this machine
//! runs meanwhile (the tests must pass beside a busy neighbour).

mod common;

use common::*;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `cpu.shares` of `rel` below the test broker's cpu directory.
fn shares(d: &Daemon, rel: &str) -> Option<u64> {
    let p = Path::new("/sys/fs/cgroup/cpu").join(&d.cgroup).join(rel);
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

fn cell_id(d: &Daemon, name: &str) -> Option<u64> {
    d.status()
        .cells
        .iter()
        .find(|c| c.name == name && !c.pids.is_empty())
        .map(|c| c.id)
}

#[test]
fn the_cells_weigh_as_their_threads_in_the_cpu_hierarchy() {
    if !cgroup1_here() {
        return;
    }
    let cpus = allot_testkit::cpus() as u64;
    let d = Daemon::start("cgroup1", &[]);
    let a = cell_for(&d, "a", &[], "sleep 30", 40);
    let mut k = Killed(&d, vec![a]);
    assert!(eventually(Duration::from_secs(10), || cell_id(&d, "a").is_some()));
    let a = cell_id(&d, "a").unwrap();
    // Alone, a team of every CPU: it weighs that many threads (1024
    // shares each), and so do the cells together.
    let all = cpus * 1024;
    assert!(
        eventually(Duration::from_secs(5), || shares(&d, "cpu.shares")
            == Some(all)),
        "{:?} {}",
        shares(&d, "cpu.shares"),
        d.log()
    );
    assert_eq!(shares(&d, &format!("cell-{a}/cpu.shares")), Some(all));
    // A second cell: CPUs split, each weighs its team; together the same.
    k.1.push(cell_for(&d, "b", &[], "sleep 30", 40));
    assert!(eventually(Duration::from_secs(10), || cell_id(&d, "b").is_some()));
    let b = cell_id(&d, "b").unwrap();
    let st = d.status();
    let team = |id: u64| st.cells.iter().find(|c| c.id == id).unwrap().threads as u64;
    assert!(eventually(Duration::from_secs(5), || {
        shares(&d, &format!("cell-{a}/cpu.shares")) == Some(team(a) * 1024)
            && shares(&d, &format!("cell-{b}/cpu.shares")) == Some(team(b) * 1024)
    }));
    assert_eq!(team(a) + team(b), cpus);
    assert_eq!(shares(&d, "cpu.shares"), Some(all));
    assert_eq!(st.broker.weigh, "threads");
    assert_eq!(st.broker.together_weight, Some(cpus as u32 * 100));
    // Both end: the directory weighs one process again.
    drop(k);
    assert!(
        eventually(Duration::from_secs(10), || shares(&d, "cpu.shares")
            == Some(1024)),
        "{:?}",
        shares(&d, "cpu.shares")
    );
}

#[test]
fn weighed_as_a_group_the_cells_weigh_one_process_together() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &["--weigh", "group"]);
    let a = cell_for(&d, "a", &[], "sleep 30", 40);
    let _k = Killed(&d, vec![a]);
    assert!(eventually(Duration::from_secs(10), || cell_id(&d, "a").is_some()));
    let a = cell_id(&d, "a").unwrap();
    assert!(eventually(Duration::from_secs(5), || shares(
        &d,
        &format!("cell-{a}/cpu.shares")
    ) == Some(1024)));
    assert_eq!(shares(&d, "cpu.shares"), Some(1024));
    assert_eq!(d.status().broker.weigh, "group");
}

/// A process outside every cell that keeps a CPU busy until dropped (at
/// most a minute), in a process group of its own, killed whole.
struct Busy(Child);
impl Busy {
    fn start() -> Busy {
        Busy(
            Command::new("timeout")
                .args(["60", "sh", "-c", SPIN])
                .process_group(0)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        )
    }
}
impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(group) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process_group(group, rustix::process::Signal::KILL);
        }
        let _ = self.0.wait();
    }
}

#[test]
fn a_team_leaves_a_busy_process_outside_its_cpu_and_grows_back_when_it_ends() {
    if !cgroup1_here() {
        return;
    }
    let cpus = allot_testkit::cpus() as u32;
    let d = Daemon::start("cgroup1", &[]);
    // A cell of every CPU that keeps each of them busy (a program that
    // ignores its team size: what matters is what the broker tells it).
    let spinners = (0..cpus).map(|_| format!("({SPIN}) &")).collect::<String>();
    let c = cell_for(&d, "team", &[], &format!("{spinners} wait"), 40);
    let _k = Killed(&d, vec![c]);
    assert!(eventually(Duration::from_secs(10), || cell_id(&d, "team").is_some()));
    let shown = || {
        let st = d.status();
        let c = st.cells.into_iter().find(|c| c.name == "team").unwrap();
        (c.threads, c.outside)
    };
    // Whatever the broker sees outside, the team is every CPU less what
    // it counts as outside work's.
    let consistent = |(threads, o): (u32, Option<allot_proto::status::OutsideStatus>)| {
        o.is_some_and(|o| threads == cpus - o.taken)
    };
    let busy = Busy::start();
    let mut last = shown();
    assert!(
        eventually(Duration::from_secs(10), || {
            last = shown();
            last.1.is_some_and(|o| o.taken >= 1) && consistent(last)
        }),
        "the team never left the busy process a CPU: {last:?}\n{}",
        d.log()
    );
    drop(busy);
    // Once the broker reads no outside work on the cell's CPUs, the team
    // is whole again at that tick. Where other work keeps a CPU of this
    // machine busy meanwhile, the broker counts that instead: then the
    // team must match what it counts, and the machine's own reading
    // (the whole machine's busy time less the cells') must show work
    // outside the cells too.
    let mut quiet = false;
    let grew = eventually(Duration::from_secs(10), || {
        last = shown();
        quiet = last.1.is_some_and(|o| o.used < 0.4);
        quiet && last.0 == cpus
    });
    if !grew {
        let elsewhere = d
            .status()
            .load
            .and_then(|l| l.unmanaged)
            .is_some_and(|u| u >= 0.4);
        assert!(
            !quiet && elsewhere && consistent(last),
            "after the busy process ended: {last:?}\n{}",
            d.log()
        );
        eprintln!(
            "note: other work kept part of a CPU busy after ours ended ({last:?}); \
             the team matched the broker's count of it"
        );
    }
}
