//! Cost of a grant change on the hot path, per backend, on this machine:
//! rewriting an open `cpuset.cpus` (cgroup v1) against `sched_setaffinity`
//! on every thread (affinity backend), with a process of 8 threads in the
//! cell, alternating between two CPU sets. Also the one-time cost of moving
//! a process into a cell, for contrast.
//!
//! Run: `cargo bench -p allot-enforce --bench apply` (root for cgroup v1).

use allot_enforce::cgroupfs::KernelFs;
use allot_enforce::os::RealOs;
use allot_enforce::{Affinity, Applied, Cgroup1, Enforcer};
use allot_topo::CpuSet;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROUNDS: usize = 2000;

fn threaded() -> std::process::Child {
    Command::new("/usr/bin/python3")
        .args(["-c", "import threading,time\n[threading.Thread(target=time.sleep,args=(60,),daemon=True).start() for _ in range(7)]\ntime.sleep(60)"])
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

fn time_apply(b: &mut dyn Enforcer, cell: u64, sets: [CpuSet; 2]) -> (Duration, Duration) {
    let mut v = Vec::with_capacity(ROUNDS);
    for i in 0..ROUNDS {
        let t = Instant::now();
        b.apply(
            cell,
            &Applied {
                cpus: sets[i % 2],
                weight: 1,
                bandwidth: None,
            },
        )
        .unwrap();
        v.push(t.elapsed());
    }
    v.sort();
    (v[v.len() / 2], v[v.len() * 99 / 100])
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let all = allot_topo::allowed_cpus().unwrap();
    if all.len() < 2 {
        println!("needs two CPUs");
        return;
    }
    let sets = [all.take_first(1), all.take_first(2)];
    println!(
        "grant change cost, {ROUNDS} changes alternating {} / {}, process with 8 threads in the cell",
        sets[0], sets[1]
    );
    println!(
        "{:<10} {:>14} {:>14} {:>22}",
        "backend", "median", "p99", "one-time attach"
    );

    let mut child = threaded();
    std::thread::sleep(Duration::from_millis(300));
    let mut aff = Affinity::new(Arc::new(RealOs));
    aff.create(1).unwrap();
    let t = Instant::now();
    aff.attach(1, child.id()).unwrap();
    let attach = t.elapsed();
    let (m, p99) = time_apply(&mut aff, 1, sets);
    println!(
        "{:<10} {:>11.2} µs {:>11.2} µs {:>19.2} µs",
        "affinity",
        m.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        attach.as_secs_f64() * 1e6
    );

    let mounts = allot_enforce::detect::Mounts::read();
    if let (true, Some(v1)) = (rustix::process::getuid().is_root(), mounts.v1()) {
        let name = format!("allot-bench-{}", std::process::id());
        let mut cg = Cgroup1::new(Arc::new(KernelFs), &v1, &name, all).unwrap();
        cg.create(1).unwrap();
        let t = Instant::now();
        cg.attach(1, child.id()).unwrap();
        let attach = t.elapsed();
        let (m, p99) = time_apply(&mut cg, 1, sets);
        println!(
            "{:<10} {:>11.2} µs {:>11.2} µs {:>19.2} µs",
            "cgroup1",
            m.as_secs_f64() * 1e6,
            p99.as_secs_f64() * 1e6,
            attach.as_secs_f64() * 1e6
        );
        let _ = child.kill();
        let _ = child.wait();
        for _ in 0..100 {
            if cg.remove(1).is_ok() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = cg.cleanup();
    } else {
        let _ = child.kill();
        let _ = child.wait();
        println!("cgroup1    (skipped: needs root and a v1 cpuset hierarchy)");
    }
}
