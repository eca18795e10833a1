//! NUMA, live: the machine model read from the kernel's sysfs on a machine
//! with two nodes, the work-stealing runtime's `nearest` victim order over
//! it, the broker's placement of cells that fit one node (kept on one,
//! and apart) and of a cell that cannot (spanning both), and `require`'s
//! `fair_numa` dividing the nodes among requests that arrive together.
//!
//! This VM has one node, so these run in the guest lane
//! (`scripts/test-guest.sh numa` boots 8 CPUs in two nodes and sets
//! `ALLOT_GUEST_NUMA`); there a machine without two nodes fails the test.
//! Elsewhere they run on any machine with two nodes or more and say why they
//! skip where not. Decisions only, never speed.

mod common;

use allot_topo::{CpuSet, Machine};
use common::*;
use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Child, Stdio};
use std::time::Duration;

/// The machine, when it has two NUMA nodes with CPUs or more.
fn numa_machine() -> Option<Machine> {
    let m = allot_topo::discover_live().expect("the machine's topology");
    let with_cpus = m.nodes().iter().filter(|n| !n.cpus.is_empty()).count();
    if with_cpus >= 2 {
        return Some(m);
    }
    if std::env::var_os("ALLOT_GUEST_NUMA").is_some() {
        panic!("the NUMA guest lane sees {}", m.summary());
    }
    eprintln!(
        "skipped: needs two NUMA nodes ({}); scripts/test-guest.sh numa runs this",
        m.summary()
    );
    None
}

/// The node whose CPUs include all of `cpus`, if one does.
fn node_of(m: &Machine, cpus: &CpuSet) -> Option<u32> {
    m.nodes()
        .iter()
        .find(|n| cpus.intersection(&n.cpus) == *cpus)
        .map(|n| n.id)
}

#[test]
fn the_kernels_nodes_are_read_with_their_cpus_and_distances() {
    let Some(m) = numa_machine() else { return };
    let nodes: Vec<_> = m.nodes().iter().filter(|n| !n.cpus.is_empty()).collect();
    // The nodes split the usable CPUs between them, each node its own.
    let mut all = CpuSet::new();
    for n in &nodes {
        assert!(all.intersection(&n.cpus).is_empty(), "{}", m.summary());
        all = all.union(&n.cpus);
        assert!(n.mem_total_kib > 0, "node {} has no memory", n.id);
        // Local is nearest (the kernel's 10); every other node is farther.
        for (i, d) in n.distances.iter().enumerate() {
            if i == n.index {
                assert_eq!(*d, 10, "{:?}", n.distances);
            } else {
                assert!(*d > 10, "{:?}", n.distances);
            }
        }
    }
    assert_eq!(all, *m.usable(), "{}", m.summary());
    // `allot topology` reports the same nodes.
    let out = std::process::Command::new(ALLOT)
        .args(["topology", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = json["nodes"].as_array().expect("a nodes list").len();
    assert_eq!(listed, m.nodes().len(), "{json}");
}

#[test]
fn an_idle_worker_steals_on_its_own_node_first() {
    let Some(m) = numa_machine() else { return };
    let cpus: Vec<Option<usize>> = m.usable().iter().map(Some).collect();
    let node = |cpu: usize| {
        m.nodes()
            .iter()
            .find(|n| n.cpus.contains(cpu))
            .map(|n| n.id)
    };
    for here in 0..cpus.len() {
        let order = allot_runtime::policy::victims::by_distance(&m, &cpus, here);
        let mine = node(cpus[here].unwrap());
        let near = cpus.iter().filter(|c| node(c.unwrap()) == mine).count() - 1;
        // Every worker of its own node comes before any of another node.
        let first: Vec<_> = order[..near]
            .iter()
            .map(|&(_, w)| node(cpus[w].unwrap()))
            .collect();
        assert!(first.iter().all(|n| *n == mine), "{here}: {order:?}");
        assert!(
            order[near..]
                .iter()
                .all(|&(_, w)| node(cpus[w].unwrap()) != mine),
            "{here}: {order:?}"
        );
    }
}

/// A program in a process group of its own under `allot run ARGS`, which
/// prints its CPUs and waits; killed whole on drop.
struct Placed {
    child: Child,
    cpus: CpuSet,
}

impl Drop for Placed {
    fn drop(&mut self) {
        if let Some(p) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process_group(p, rustix::process::Signal::KILL);
        }
        let _ = self.child.wait();
    }
}

fn placed(d: &Daemon, name: &str, args: &[&str]) -> Placed {
    let mut full = vec!["--name", name];
    full.extend_from_slice(args);
    full.extend_from_slice(&[
        "--",
        "sh",
        "-c",
        "grep Cpus_allowed_list /proc/self/status; exec sleep 60",
    ]);
    let mut child = allot_run(d, &full)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("allot run");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let list = line.split(':').nth(1).unwrap_or("").trim().to_string();
    let cpus = CpuSet::parse_list(&list).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    Placed { child, cpus }
}

#[test]
fn cells_that_fit_a_node_stay_on_one_and_a_larger_one_spans_both() {
    let Some(m) = numa_machine() else { return };
    let per_node = m.nodes().iter().map(|n| n.cpus.len()).min().unwrap();
    if !prerequisite(per_node >= 2, "two CPUs per node") {
        return;
    }
    // Placement is the broker's decision whatever enforces it: the
    // affinity backend leaves no cgroup behind.
    let d = Daemon::start("affinity", &[]);
    let n = per_node.to_string();
    let a = placed(&d, "a", &["--min", &n, "--max", &n, "--place", "numa"]);
    let b = placed(&d, "b", &["--min", &n, "--max", &n, "--place", "numa"]);
    let (na, nb) = (node_of(&m, &a.cpus), node_of(&m, &b.cpus));
    assert!(na.is_some(), "a on {} spans nodes\n{}", a.cpus, d.log());
    assert!(nb.is_some(), "b on {} spans nodes\n{}", b.cpus, d.log());
    assert_ne!(na, nb, "a and b share a node\n{}", d.log());
    drop((a, b));
    assert!(eventually(Duration::from_secs(30), || d
        .status()
        .cells
        .is_empty()));
    // More CPUs than a node has: the grant spans nodes.
    let wide = (per_node + 1).to_string();
    let c = placed(&d, "wide", &["--min", &wide, "--max", &wide]);
    assert_eq!(c.cpus.len(), per_node + 1, "{}", d.log());
    assert!(node_of(&m, &c.cpus).is_none(), "{}", c.cpus);
}

/// Poli-C's `fair_numa`, on the kernel's own nodes: as many requests as
/// there are nodes, arriving together, each get one whole node, a
/// different one each, and the runtime confines each thread to its node's
/// CPUs (the affinity the thread reads back from the kernel).
#[test]
fn fair_numa_gives_requests_arriving_together_a_whole_node_each() {
    use allot_require::{Blocks, Need, policy};
    let Some(m) = numa_machine() else { return };
    let nodes: Vec<CpuSet> = m
        .nodes()
        .iter()
        .filter(|n| !n.cpus.is_empty())
        .map(|n| n.cpus)
        .collect();
    let rt = Blocks::new(m.clone(), true).into_static();
    // Long enough that a slow emulated machine starts every thread in it:
    // what is judged is the division, not the time.
    rt.set_gather_window(Duration::from_millis(1000));
    let n = nodes.len();
    let start = std::sync::Arc::new(std::sync::Barrier::new(n));
    let all_in = std::sync::Arc::new(std::sync::Barrier::new(n));
    let got: Vec<(CpuSet, Vec<u32>, CpuSet)> = (0..n)
        .map(|_| {
            let (start, all_in) = (start.clone(), all_in.clone());
            std::thread::spawn(move || {
                start.wait();
                let s = rt.enter(vec![Need::policy(policy::fair_numa())]).unwrap();
                let o = s.outcome().clone();
                let mask = rustix::thread::sched_getaffinity(None).unwrap();
                let mask: CpuSet = (0..1024).filter(|&c| mask.is_set(c)).collect();
                // Every one holds its node until all have entered.
                all_in.wait();
                (o.cpus, o.nodes, mask)
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let mut seen = Vec::new();
    for (cpus, ids, mask) in &got {
        assert_eq!(ids.len(), 1, "one whole node each: {got:?}");
        assert!(nodes.contains(cpus), "{cpus} is not a node's CPUs: {got:?}");
        assert_eq!(mask, cpus, "the thread runs on its node's CPUs: {got:?}");
        assert!(!seen.contains(&ids[0]), "node {} twice: {got:?}", ids[0]);
        seen.push(ids[0]);
    }
}
