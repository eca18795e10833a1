//! In which order an idle worker visits the others to steal from them
//! (Sting's *migration*).
//!
//! - `random`: from a random worker on, once around;
//! - `round-robin`: successive searches start at successive workers;
//! - `nearest`: the workers on the CPUs nearest to the thief's first (the
//!   same core, then the same last-level cache, the same NUMA node, then
//!   the other nodes by their distance), and among equally near ones the
//!   most loaded first: a stolen task finds its data in a cache it shares,
//!   and the thief relieves the worker with the longest queue;
//! - `most-loaded`: the longest queues first, wherever they are.
//!
//! Distances come from the machine model ([`allot_topo::Machine`]): the
//! pool's own (`Builder::machine`, how tests use fixture machines) or the
//! machine this process runs on, read once. Where a worker serves a CPU
//! the model does not know, or there is no model, it ranks after every
//! known one, in turn.
//!
//! Invariants: a search visits every other worker exactly once and never
//! the thief itself; [`by_distance`] and [`nearest_then_loaded`] are pure.
//! The distance order is cached per worker and recomputed when a worker
//! moved (the roster's epoch); loads are read at each search.

use super::levels::Cursors;
use super::{Here, PoolInfo, Roster, WorkerLocal};
use allot_topo::Machine;
use std::cell::RefCell;
use std::sync::{Arc, OnceLock};

/// In which order an idle worker visits the others to steal (migration).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
pub enum Victims {
    /// From a random worker on, once around.
    #[default]
    Random,
    /// From the worker after the one visited first last time, once around:
    /// successive searches start at successive workers.
    RoundRobin,
    /// Nearest CPUs first; among equally near workers, the most loaded.
    Nearest,
    /// The longest queues first.
    MostLoaded,
}

impl Victims {
    /// Names as parsed, in the order of [`Victims::ALL`].
    pub const NAMES: [&'static str; 4] = ["random", "round-robin", "nearest", "most-loaded"];

    /// Every order.
    pub const ALL: [Victims; 4] = [
        Victims::Random,
        Victims::RoundRobin,
        Victims::Nearest,
        Victims::MostLoaded,
    ];

    /// Its name as parsed and shown, one of `NAMES`.
    pub fn name(self) -> &'static str {
        match self {
            Victims::Random => "random",
            Victims::RoundRobin => "round-robin",
            Victims::Nearest => "nearest",
            Victims::MostLoaded => "most-loaded",
        }
    }
}

/// The other workers of `cpus` (the CPU each slot serves) by their
/// distance from `here`'s CPU, nearest first; equal distances in turn
/// from the worker after `here`. Workers on CPUs the machine does not know
/// (or `here` on none) come last, at distance `u32::MAX`.
pub fn by_distance(machine: &Machine, cpus: &[Option<usize>], here: usize) -> Vec<(u32, usize)> {
    let n = cpus.len();
    let mut out: Vec<(u32, usize)> = (1..n)
        .map(|k| (here + k) % n)
        .map(|v| {
            let d = match (cpus.get(here).copied().flatten(), cpus[v]) {
                (Some(a), Some(b)) => machine.cpu_distance(a, b),
                _ => u32::MAX,
            };
            (d, v)
        })
        .collect();
    // Stable: ties keep the turn order.
    out.sort_by_key(|&(d, _)| d);
    out
}

/// `near` (from [`by_distance`]) with each run of equal distance ordered by
/// `load`, largest first (ties keep their order), into `out`.
pub fn nearest_then_loaded(
    near: &[(u32, usize)],
    load: impl Fn(usize) -> usize,
    out: &mut Vec<usize>,
) {
    out.clear();
    out.extend(near.iter().map(|&(_, v)| v));
    let mut start = 0;
    while start < near.len() {
        let d = near[start].0;
        let end = start + near[start..].iter().take_while(|x| x.0 == d).count();
        out[start..end].sort_by_key(|&v| std::cmp::Reverse(load(v)));
        start = end;
    }
}

/// A worker's cached distance order and its scratch list.
#[derive(Debug, Default)]
struct Scratch {
    /// The roster epoch `near` was computed at (`u64::MAX`: never).
    epoch: u64,
    near: Vec<(u32, usize)>,
    order: Vec<usize>,
}

/// The victim order of one policy instance.
#[derive(Debug)]
pub struct VictimOrder {
    victims: Victims,
    cursors: Cursors,
    roster: crate::loom::sync::Arc<Roster>,
    machine: Option<Arc<Machine>>,
    scratch: WorkerLocal<RefCell<Scratch>>,
}

impl VictimOrder {
    /// The order `victims` for the pool `info` describes.
    pub fn new(info: &PoolInfo, victims: Victims) -> VictimOrder {
        let machine = match victims {
            Victims::Nearest => info.machine.clone().or_else(this_machine),
            _ => None,
        };
        VictimOrder {
            victims,
            cursors: Cursors::new(info),
            roster: info.roster.clone(),
            machine,
            scratch: WorkerLocal::new(info, |_| {
                RefCell::new(Scratch {
                    epoch: u64::MAX,
                    ..Scratch::default()
                })
            }),
        }
    }

    /// Calls `visit` with each other worker in this search's order, until
    /// it returns something; `load(v)` is worker `v`'s queue length.
    #[inline]
    pub fn visit<T>(
        &self,
        here: &Here,
        load: impl Fn(usize) -> usize,
        visit: impl FnMut(usize) -> Option<T>,
    ) -> Option<T> {
        let n = self.roster.slots();
        let turn = |start: usize| (0..n).map(move |k| (start + k) % n);
        let me = here.index();
        match self.victims {
            Victims::Random => {
                let start = (here.random() % n.max(1) as u64) as usize;
                turn(start).filter(|&v| v != me).find_map(visit)
            }
            Victims::RoundRobin => {
                let start = self.cursors.next(here, n);
                turn(start).filter(|&v| v != me).find_map(visit)
            }
            Victims::Nearest | Victims::MostLoaded => {
                let mut s = self.scratch.get(here).borrow_mut();
                let s = &mut *s;
                if self.victims == Victims::Nearest {
                    let epoch = self.roster.epoch();
                    if s.epoch != epoch {
                        s.near = self.distances(me);
                        s.epoch = epoch;
                    }
                } else if s.near.len() + 1 != n {
                    // One distance for all: the load alone orders.
                    s.near = (1..n).map(|k| (0, (me + k) % n)).collect();
                }
                nearest_then_loaded(&s.near, load, &mut s.order);
                s.order.iter().copied().find_map(visit)
            }
        }
    }

    fn distances(&self, me: usize) -> Vec<(u32, usize)> {
        let n = self.roster.slots();
        let cpus: Vec<Option<usize>> = (0..n).map(|i| self.roster.cpu_of(i)).collect();
        match &self.machine {
            Some(m) => by_distance(m, &cpus, me),
            None => (1..n).map(|k| (u32::MAX, (me + k) % n)).collect(),
        }
    }
}

/// The machine this process runs on, read once (`None` where it cannot be
/// read: the nearest order is then the round-robin one, loads first).
fn this_machine() -> Option<Arc<Machine>> {
    static M: OnceLock<Option<Arc<Machine>>> = OnceLock::new();
    M.get_or_init(|| allot_topo::discover_live().ok().map(Arc::new))
        .clone()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn fixture(name: &str) -> Machine {
        allot_topo::fixture(name).expect("fixture machine")
    }

    #[test]
    fn on_the_opteron_the_same_cache_comes_first_then_the_node_then_nearer_nodes() {
        // 4 sockets × 2 nodes × 2 LLCs of 4 CPUs: one worker per CPU.
        let m = fixture("opteron6276-4s");
        let cpus: Vec<Option<usize>> = (0..64).map(Some).collect();
        let near = by_distance(&m, &cpus, 0);
        assert_eq!(near.len(), 63, "every other worker once");
        let d = |v: usize| m.cpu_distance(0, v);
        // Sorted by distance, and each distance class complete.
        assert!(near.windows(2).all(|w| w[0].0 <= w[1].0));
        let same_llc: Vec<usize> = near.iter().take_while(|x| x.0 == 2).map(|x| x.1).collect();
        let llc = m.cpu(0).unwrap().llc;
        let expect: Vec<usize> = (1..64).filter(|&v| m.cpu(v).unwrap().llc == llc).collect();
        assert_eq!(same_llc, expect, "the LLC siblings first, in turn");
        assert!(near.iter().all(|&(dist, v)| dist == d(v)));
        // The last ones are on the farthest node.
        let far = near.last().unwrap().1;
        assert!((1..64).all(|v| d(v) <= d(far)));
    }

    #[test]
    fn on_the_xeon_phi_smt_siblings_then_the_tile_then_the_rest_in_turn() {
        // 68 cores × 4 threads, an L2 per tile of two cores.
        let m = fixture("xeonphi7250");
        let cpus: Vec<Option<usize>> = (0..272).map(Some).collect();
        let here = 5;
        let near = by_distance(&m, &cpus, here);
        assert_eq!(near.len(), 271);
        let me = m.cpu(here).unwrap();
        let siblings = near.iter().take_while(|x| x.0 == 1).count();
        assert_eq!(
            siblings,
            (0..272)
                .filter(|&v| v != here && m.cpu(v).unwrap().core == me.core)
                .count()
        );
        let tile = near.iter().filter(|x| x.0 == 2).count();
        assert!(tile > 0, "the tile's other core shares the L2");
        // Beyond the tile: one node, so one distance, visited in turn from
        // the worker after `here`.
        let rest: Vec<usize> = near.iter().filter(|x| x.0 == 3).map(|x| x.1).collect();
        let mut turned = rest.clone();
        turned.sort_by_key(|&v| (v + 272 - here) % 272);
        assert_eq!(rest, turned);
    }

    #[test]
    fn workers_without_a_known_cpu_come_last_and_loads_order_each_distance() {
        let m = fixture("xeon-x5550-2s");
        // Slot 0 on CPU 0, slot 1 on its SMT sibling, slot 2 on the other
        // socket, slot 3 retired, slot 4 on the same socket.
        let sibling = (1..16)
            .find(|&c| m.cpu(c).unwrap().core == m.cpu(0).unwrap().core)
            .unwrap();
        let other = (1..16)
            .find(|&c| m.cpu(c).unwrap().node != m.cpu(0).unwrap().node)
            .unwrap();
        let same = (1..16)
            .find(|&c| {
                let (a, b) = (m.cpu(c).unwrap(), m.cpu(0).unwrap());
                a.node == b.node && a.core != b.core
            })
            .unwrap();
        let cpus = [Some(0), Some(sibling), Some(other), None, Some(same)];
        let near = by_distance(&m, &cpus, 0);
        let order: Vec<usize> = near.iter().map(|x| x.1).collect();
        assert_eq!(order, vec![1, 4, 2, 3]);
        // Equal distances: the most loaded first.
        let flat = [(0, 1), (0, 2), (0, 3), (5, 4)];
        let mut out = Vec::new();
        nearest_then_loaded(&flat, |v| [0, 1, 7, 3, 9][v], &mut out);
        assert_eq!(out, vec![2, 3, 1, 4], "loads order within a distance only");
    }

    #[test]
    fn a_pool_s_nearest_order_follows_its_workers_when_they_move() {
        let m = fixture("xeon-x5550-2s");
        let node_of = |c: usize| m.cpu(c).unwrap().node;
        let near = (1..16).find(|&c| node_of(c) == node_of(0)).unwrap();
        let far = (1..16).find(|&c| node_of(c) != node_of(0)).unwrap();
        let mut info = PoolInfo::new(3);
        info.machine = Some(Arc::new(m));
        let order = VictimOrder::new(&info, Victims::Nearest);
        let here = Here::new(0, info.id);
        let visited = || {
            let mut seen = Vec::new();
            order.visit(
                &here,
                |_| 0,
                |v| {
                    seen.push(v);
                    None::<()>
                },
            );
            seen
        };
        info.roster.serve(0, Some(0));
        info.roster.serve(1, Some(far));
        info.roster.serve(2, Some(near));
        assert_eq!(visited(), vec![2, 1], "the same socket first");
        // Workers 1 and 2 trade places: the cached order is recomputed.
        info.roster.serve(1, Some(near));
        info.roster.serve(2, Some(far));
        assert_eq!(visited(), vec![1, 2]);
        // Equally near, the most loaded first.
        info.roster.serve(2, Some(near));
        let mut seen = Vec::new();
        order.visit(
            &here,
            |v| [0, 1, 5][v],
            |v| {
                seen.push(v);
                None::<()>
            },
        );
        assert_eq!(seen, vec![2, 1]);
    }
}
