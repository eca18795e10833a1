//! A team's placement with real threads on this machine: one CPU per
//! thread of a team made inside a block, the spread kept as members end,
//! and a waiting member's CPU lent to a teammate (Poli-C §2.3;
//! `crates/require/src/blocks/place.rs`). Judged on the masks the runtime
//! set, never on how long anything took.

mod common;

use allot_require::policy;
use allot_require::{Blocks, Need};
use common::{affinity, live_runtime};

/// A team made inside a block (spawn points called as the
/// `pthread_create` hooks call them) is placed one thread per granted CPU,
/// while a thread alone in its block keeps every CPU of it; the masks are
/// whole again once the block is left.
#[test]
fn a_team_in_a_block_gets_one_cpu_per_thread_and_a_lone_thread_keeps_all() {
    let cpus = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(cpus.len() >= 2, "needs two CPUs") {
        return;
    }
    let rt = live_runtime();
    std::thread::spawn(move || {
        let block = rt.enter(vec![Need::policy(policy::cores(2))]).unwrap();
        assert_eq!(affinity().len(), 2, "alone in its block: both CPUs");
        let granted = affinity();
        let team = spawn_team(rt, 3);
        let mut masks = vec![affinity()];
        masks.extend(team.iter().map(|m| m.mask.clone()));
        // Four threads on two CPUs: one CPU each, two on each CPU.
        for m in &masks {
            assert!(m.len() == 1 && granted.contains(&m[0]), "{masks:?}");
        }
        for c in &granted {
            let on = masks.iter().filter(|m| m[0] == *c).count();
            assert_eq!(on, 2, "threads on CPU {c}: {masks:?}");
        }
        rt.block_current();
        for m in team {
            m.end();
        }
        rt.unblock_current();
        assert_eq!(affinity(), granted, "the team ended: the whole block");
        drop(block);
        assert_eq!(affinity().len(), cpus.len(), "the block left: every CPU");
    })
    .join()
    .unwrap();
}

/// Poli-C §2.3: the threads of a block share its CPUs. A team of four on
/// two CPUs is placed two per CPU; when both threads of one CPU end, one
/// of the two left on the other CPU moves over, so the team does not keep
/// a CPU of its block idle while two of its threads share the other.
/// Judged on the placement the runtime made (each thread's mask), not on
/// how long anything took.
#[test]
fn when_members_end_the_team_spreads_again_over_the_cpus_they_left() {
    let cpus = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(cpus.len() >= 2, "needs two CPUs") {
        return;
    }
    let rt = live_runtime();
    std::thread::spawn(move || {
        let block = rt.enter(vec![Need::policy(policy::cores(2))]).unwrap();
        let granted = affinity();
        let team = spawn_team(rt, 3);
        let mine = affinity();
        assert_eq!(mine.len(), 1, "{mine:?}");
        let other = *granted.iter().find(|&&c| c != mine[0]).unwrap();
        // The two children on the CPU the leader is not on end.
        let (leaving, staying): (Vec<Member>, Vec<Member>) =
            team.into_iter().partition(|m| m.mask == [other]);
        assert_eq!((leaving.len(), staying.len()), (2, 1));
        for m in leaving {
            m.end();
        }
        // The leader and the child left share one CPU no more: one of them
        // was moved onto the CPU the others left.
        let masks = [affinity(), affinity_of(staying[0].tid)];
        assert!(masks.iter().all(|m| m.len() == 1), "{masks:?}");
        assert_ne!(masks[0], masks[1], "spread over both CPUs again: {masks:?}");
        for m in staying {
            m.end();
        }
        drop(block);
    })
    .join()
    .unwrap();
}

/// What a commanded team member is told to do.
enum Do {
    /// Wait (give back, as a blocking call does), then say its mask.
    Block,
    /// Continue (retake), then say its mask.
    Unblock,
}

/// Poli-C §2.3: the threads of a block share its CPUs, also while one of
/// them waits. A team of three on two CPUs: the thread alone on its CPU
/// blocks, and one of the two threads on the other CPU moves onto the CPU
/// it left for the wait; when the member continues it is placed again on
/// one granted CPU. (A member whose wait would let nobody gain keeps its
/// place: `place::rebalance` finds no move.) Judged on the placement the runtime made (each
/// thread's mask), not on how long anything took.
#[test]
fn a_waiting_members_cpu_is_used_by_a_teammate_meanwhile() {
    let cpus = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(cpus.len() >= 2, "needs two CPUs") {
        return;
    }
    let rt = live_runtime();
    std::thread::spawn(move || {
        let block = rt.enter(vec![Need::policy(policy::cores(2))]).unwrap();
        let granted = affinity();
        // Two members that block and continue on command.
        let (said, hear) = std::sync::mpsc::channel::<(usize, u32, Vec<usize>)>();
        let mut members = Vec::new();
        for i in 0..2 {
            let ctx = rt.spawn_prepare().unwrap();
            let said = said.clone();
            let (tell, told) = std::sync::mpsc::channel::<Do>();
            let h = std::thread::spawn(move || {
                let _g = rt.child_start(ctx);
                let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
                said.send((i, tid, affinity())).unwrap();
                for d in told {
                    match d {
                        Do::Block => rt.block_current(),
                        Do::Unblock => rt.unblock_current(),
                    }
                    said.send((i, tid, affinity())).unwrap();
                }
            });
            rt.spawn_done();
            members.push((tell, h));
        }
        let mut seen: Vec<(usize, u32, Vec<usize>)> =
            (0..2).map(|_| hear.recv().unwrap()).collect();
        seen.sort();
        let me = rustix::thread::gettid().as_raw_nonzero().get() as u32;
        // (thread id, mask) of the three: the two members, then the leader.
        let team: Vec<(u32, Vec<usize>)> = seen
            .iter()
            .map(|s| (s.1, s.2.clone()))
            .chain([(me, affinity())])
            .collect();
        assert!(team.iter().all(|t| t.1.len() == 1), "{team:?}");
        // The thread alone on its CPU (a member or the leader) waits.
        let alone = (0..3)
            .find(|&i| team.iter().filter(|t| t.1 == team[i].1).count() == 1)
            .expect("three threads on two CPUs: one is alone");
        let its_cpu = team[alone].1.clone();
        if alone < 2 {
            members[alone].0.send(Do::Block).unwrap();
            let _ = hear.recv().unwrap();
        } else {
            rt.block_current();
        }
        // A teammate from the other CPU is on it now, and the two that run
        // share no CPU.
        let now: Vec<Vec<usize>> = (0..3)
            .filter(|&i| i != alone)
            .map(|i| {
                if i == 2 {
                    affinity()
                } else {
                    affinity_of(team[i].0)
                }
            })
            .collect();
        assert!(
            now.contains(&its_cpu),
            "nobody took CPU {its_cpu:?} while {} waited: {now:?}",
            team[alone].0
        );
        assert!(
            now.iter().all(|m| m.len() == 1 && granted.contains(&m[0])),
            "{now:?}"
        );
        assert_ne!(now[0], now[1], "the two running share no CPU: {now:?}");
        // It continues: placed again on one granted CPU.
        let back = if alone < 2 {
            members[alone].0.send(Do::Unblock).unwrap();
            hear.recv().unwrap().2
        } else {
            rt.unblock_current();
            affinity()
        };
        assert!(back.len() == 1 && granted.contains(&back[0]), "{back:?}");
        rt.block_current();
        for (tell, h) in members {
            drop(tell);
            h.join().unwrap();
        }
        rt.unblock_current();
        assert_eq!(affinity(), granted, "the team ended: the whole block");
        drop(block);
    })
    .join()
    .unwrap();
}

/// A leader alone on its CPU waits (a join, say), a teammate moves onto
/// that CPU, and the whole team ends while it waits: when it continues it
/// has its whole block again, not the one CPU it was on before the wait
/// (its mask was never changed for the wait, so retaking must set it).
/// (A team of four on two CPUs whose members beside the leader end; where
/// that leaves fewer than two on the other CPU, the placement of threads
/// on tied CPUs being the machine's choice, the team is made again.)
#[test]
fn a_leader_whose_team_ended_while_it_waited_gets_its_whole_block_back() {
    let cpus = allot_topo::allowed_cpus().unwrap();
    if !allot_testkit::prerequisite(cpus.len() >= 2, "needs two CPUs") {
        return;
    }
    let rt = live_runtime();
    std::thread::spawn(move || {
        for _ in 0..200 {
            let block = rt.enter(vec![Need::policy(policy::cores(2))]).unwrap();
            let granted = affinity();
            // Four on two CPUs, then the members on the leader's CPU end:
            // the leader is alone on its CPU, the two others share theirs.
            let (with_me, team): (Vec<Member>, Vec<Member>) = spawn_team(rt, 3)
                .into_iter()
                .partition(|m| m.mask == affinity());
            for m in with_me {
                m.end();
            }
            let mine = affinity();
            if team.len() < 2 || team.iter().any(|m| m.mask == mine) {
                for m in team {
                    m.end();
                }
                drop(block);
                continue;
            }
            rt.block_current();
            // A member took the leader's CPU for the wait.
            let now: Vec<Vec<usize>> = team.iter().map(|m| affinity_of(m.tid)).collect();
            assert!(now.contains(&mine), "nobody took {mine:?}: {now:?}");
            for m in team {
                m.end();
            }
            rt.unblock_current();
            assert_eq!(
                affinity(),
                granted,
                "the team ended while it waited: the whole block"
            );
            drop(block);
            return;
        }
        panic!("in 200 teams the leader was never alone on its CPU");
    })
    .join()
    .unwrap();
}

/// A thread spawned into its creator's block: its id, the CPUs it saw on
/// starting, and how to end it.
struct Member {
    tid: u32,
    mask: Vec<usize>,
    end: std::sync::mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

impl Member {
    /// Ends the thread and waits for it.
    fn end(self) {
        drop(self.end);
        self.handle.join().unwrap();
    }
}

/// `n` threads spawned by the caller through `rt`'s spawn point (so they
/// share the caller's block), each started and placed, in spawn order.
fn spawn_team(rt: &'static Blocks, n: usize) -> Vec<Member> {
    let (seen_tx, seen_rx) = std::sync::mpsc::channel();
    let mut started = Vec::new();
    for i in 0..n {
        let ctx = rt.spawn_prepare().unwrap();
        let seen_tx = seen_tx.clone();
        let (end, end_rx) = std::sync::mpsc::channel::<()>();
        let handle = std::thread::spawn(move || {
            let _g = rt.child_start(ctx);
            let tid = rustix::thread::gettid().as_raw_nonzero().get() as u32;
            seen_tx.send((i, tid, affinity())).unwrap();
            let _ = end_rx.recv();
        });
        rt.spawn_done();
        started.push((end, handle));
    }
    let mut seen: Vec<(usize, u32, Vec<usize>)> = (0..n).map(|_| seen_rx.recv().unwrap()).collect();
    seen.sort(); // by spawn order
    seen.into_iter()
        .zip(started)
        .map(|((_, tid, mask), (end, handle))| Member {
            tid,
            mask,
            end,
            handle,
        })
        .collect()
}

/// A thread's CPUs, by thread id (any thread of this process).
fn affinity_of(tid: u32) -> Vec<usize> {
    let pid = rustix::process::Pid::from_raw(tid as i32).unwrap();
    let set = rustix::thread::sched_getaffinity(Some(pid)).unwrap();
    (0..rustix::thread::CpuSet::MAX_CPU)
        .filter(|&c| set.is_set(c))
        .collect()
}
