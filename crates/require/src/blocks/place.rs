//! Placement of a team's threads: one device each.
//!
//! A block that holds several CPUs lets each of its threads use all of
//! them, and Linux then decides where each runs. For a team (a thread and
//! the threads it spawned sharing its allocation, such as an OpenMP team
//! made inside a block) that decision is often wrong: a worker woken by
//! its primary is put beside it, and the pair share one CPU while the other
//! granted CPU idles, until the load balancer notices — longer than one
//! parallel region. So the threads of a team are placed, one per device.
//!
//! Invariants:
//! - A thread is placed only while it is in a team (it spawned, through a
//!   spawn point, a thread that shares its allocation, or it was spawned
//!   so) and holds two or more *whole* devices of a kind whose operations
//!   spread ([`KindOps::spreads`](crate::kind::KindOps::spreads):
//!   the `cpu` kind), and nothing else of that kind is left unconstrained.
//!   A thread alone in its block keeps every CPU of it: the threads it
//!   starts without a spawn point inherit its mask, and must not inherit
//!   one CPU.
//! - A placed thread is restricted to the one device it is placed on.
//!   `State::placed_on` counts, per device, the live threads placed there.
//! - A team lasts while its leader has live threads it spawned so; a
//!   member keeps its team for its life. A leader whose team ended gets
//!   its whole allocation back the next time it applies it (at the latest
//!   when it returns from the join that saw its last member end).
//! - A placement is kept while its device stays in the thread's holdings
//!   (a resize that leaves it does not move the thread); otherwise the
//!   least-loaded device is chosen ([`choose`]).
//!
//! With more threads than devices, the counts keep the team spread
//! evenly (two per CPU for eight threads on four CPUs), and they stay even
//! as members end: when one leaves a device with two threads fewer than
//! another device its teammates hold, one thread moves over
//! ([`rebalance`]). So a team never leaves a CPU of its block idle while
//! two of its threads share another (Poli-C §2.3: the threads of a block
//! share its CPUs); placement alone would keep them apart for life.

use super::{State, ThreadRec};
use crate::tree::{Dev, IntMap, KindId, Tid};

/// The devices a thread may be placed on, from its holdings of a kind:
/// every device it holds whole, when it holds two or more and nothing of
/// the kind is left unconstrained; else `None` (no placement).
pub(super) fn whole_devices(holdings: &[Option<f64>]) -> Option<Vec<usize>> {
    let mut devs = Vec::new();
    for (i, a) in holdings.iter().enumerate() {
        match *a {
            None => return None,
            Some(x) if x >= 1.0 - 1e-9 => devs.push(i),
            Some(x) if x > 0.0 => return None, // a share of a device: time, not place
            Some(_) => {}
        }
    }
    (devs.len() >= 2).then_some(devs)
}

/// The device to place a thread on among `allowed` (non-empty): the one it
/// is on (`keep`) if still allowed, else the one with the fewest threads
/// placed (`load`), ties going to the device the thread runs on now
/// (`here`), then to the lowest index.
pub(super) fn choose(
    allowed: &[usize],
    load: impl Fn(usize) -> u32,
    keep: Option<usize>,
    here: Option<usize>,
) -> usize {
    if let Some(k) = keep.filter(|k| allowed.contains(k)) {
        return k;
    }
    *allowed
        .iter()
        .min_by_key(|&&d| (load(d), Some(d) != here, d))
        .expect("placement among no devices")
}

/// The state placement keeps: each thread's placements, and how many
/// threads are placed on each device (`State::threads`, `State::placed_on`).
pub(super) type Maps<'a> = (&'a mut IntMap<Tid, ThreadRec>, &'a mut IntMap<Dev, u32>);

/// Moves `tid`'s placement for kind `k` to `to` (or removes it), keeping
/// the counts of threads on each device.
pub(super) fn set((threads, placed_on): Maps<'_>, tid: Tid, k: KindId, to: Option<usize>) {
    let Some(t) = threads.get_mut(&tid) else {
        return;
    };
    let from = match to {
        Some(d) => t.placed.insert(k, d),
        None => t.placed.remove(&k),
    };
    if from == to {
        return;
    }
    if let Some(d) = from
        && let Some(c) = placed_on.get_mut(&(k, d))
    {
        *c -= 1;
        if *c == 0 {
            placed_on.remove(&(k, d));
        }
    }
    if let Some(d) = to {
        *placed_on.entry((k, d)).or_default() += 1;
    }
}

/// After a thread placed on device `freed` of kind `k` ended: the move
/// that evens the spread, if one is due. A thread placed on the most
/// loaded device moves, if that device has at least two threads more than
/// `freed` now and the thread holds `freed` whole (it is its teammates'
/// allocation too); ties go to the lowest thread id. Counts that differ
/// by one at most are even: nothing moves.
pub(super) fn rebalance(
    threads: &IntMap<Tid, ThreadRec>,
    placed_on: &IntMap<Dev, u32>,
    k: KindId,
    freed: usize,
) -> Option<(Tid, usize)> {
    let load = |d: usize| placed_on.get(&(k, d)).copied().unwrap_or(0);
    let here = load(freed);
    threads
        .iter()
        .filter_map(|(&tid, t)| Some((tid, *t.placed.get(&k)?, t)))
        .filter(|&(_, d, t)| {
            load(d) >= here + 2
                && t.applied
                    .get(&k)
                    .and_then(|h| h.get(freed).copied().flatten())
                    .is_some_and(|a| a >= 1.0 - 1e-9)
        })
        .max_by_key(|&(tid, d, _)| (load(d), std::cmp::Reverse(tid)))
        .map(|(tid, d, _)| (tid, d))
}

/// Forgets every placement of `tid` (the thread exits).
pub(super) fn forget(st: &mut State, tid: Tid) {
    let kinds: Vec<KindId> = match st.threads.get(&tid) {
        Some(t) => t.placed.keys().copied().collect(),
        None => return,
    };
    for k in kinds {
        set((&mut st.threads, &mut st.placed_on), tid, k, None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_two_or_more_whole_devices_with_nothing_unconstrained_are_placed() {
        let s = |x: f64| Some(x);
        assert_eq!(whole_devices(&[s(1.0), s(1.0)]), Some(vec![0, 1]));
        assert_eq!(whole_devices(&[s(1.0), s(0.0), s(1.0)]), Some(vec![0, 2]));
        assert_eq!(whole_devices(&[s(1.0), s(0.0)]), None, "one device");
        assert_eq!(whole_devices(&[s(1.0), None]), None, "unconstrained");
        assert_eq!(whole_devices(&[s(1.0), s(0.5)]), None, "a share");
        assert_eq!(whole_devices(&[]), None);
    }

    #[test]
    fn a_placement_is_kept_while_allowed_and_new_ones_go_to_the_least_loaded() {
        let load = |d: usize| [2, 1, 1, 0][d];
        assert_eq!(choose(&[0, 1, 2, 3], load, Some(0), None), 0, "kept");
        assert_eq!(choose(&[1, 2, 3], load, Some(0), None), 3, "moved");
        assert_eq!(choose(&[0, 1, 2], load, None, None), 1, "lowest index");
        assert_eq!(choose(&[0, 1, 2], load, None, Some(2)), 2, "where it runs");
        assert_eq!(choose(&[0, 1, 2], load, None, Some(0)), 1, "loaded");
    }

    #[test]
    fn a_device_left_two_threads_short_takes_one_from_the_busiest() {
        let mut st = State::new(None);
        let k = 0;
        // Six threads on CPUs 0..3, holding all three whole.
        let on = [(1, 0), (2, 0), (3, 1), (4, 1), (5, 1), (6, 2)];
        for (tid, d) in on {
            st.threads
                .entry(tid)
                .or_default()
                .applied
                .insert(k, vec![Some(1.0); 3]);
            set((&mut st.threads, &mut st.placed_on), tid, k, Some(d));
        }
        // 6 ends: CPU 2 has none, CPU 1 three: the lowest thread of CPU 1
        // moves.
        forget(&mut st, 6);
        assert_eq!(rebalance(&st.threads, &st.placed_on, k, 2), Some((3, 1)));
        set((&mut st.threads, &mut st.placed_on), 3, k, Some(2));
        // 1 ends: CPU 0 has one, the others two: even enough.
        forget(&mut st, 1);
        assert_eq!(rebalance(&st.threads, &st.placed_on, k, 0), None);
        // A thread that does not hold the freed CPU whole stays.
        forget(&mut st, 2);
        for tid in [4, 5] {
            st.threads
                .get_mut(&tid)
                .unwrap()
                .applied
                .insert(k, vec![Some(0.0), Some(1.0), Some(1.0)]);
        }
        assert_eq!(st.placed_on.get(&(k, 1)), Some(&2));
        assert_eq!(rebalance(&st.threads, &st.placed_on, k, 0), None);
    }

    #[test]
    fn counts_follow_every_move_and_exit() {
        let mut st = State::new(None);
        let k = 0;
        for tid in [1, 2, 3] {
            st.threads.entry(tid).or_default();
        }
        let place = |st: &mut State, tid, to| set((&mut st.threads, &mut st.placed_on), tid, k, to);
        place(&mut st, 1, Some(0));
        place(&mut st, 2, Some(0));
        place(&mut st, 3, Some(1));
        place(&mut st, 2, Some(1));
        assert_eq!(st.placed_on.get(&(k, 0)), Some(&1));
        assert_eq!(st.placed_on.get(&(k, 1)), Some(&2));
        place(&mut st, 2, Some(1)); // no move
        assert_eq!(st.placed_on.get(&(k, 1)), Some(&2));
        forget(&mut st, 3);
        place(&mut st, 1, None);
        assert_eq!(st.placed_on.get(&(k, 0)), None);
        assert_eq!(st.placed_on.get(&(k, 1)), Some(&1));
        forget(&mut st, 2);
        assert!(st.placed_on.is_empty());
    }
}
