//! The OS effects of a thread's allocation: each kind's operations
//! restrict and throttle the calling thread to what it holds, a team
//! member to the one device it is placed on ([`super::place`]). Applied
//! when the holdings (or the placement they call for) changed since the
//! last time, so entering and leaving a block without a change costs no
//! system call. Kinds that limit the whole process are told what its
//! blocks entered after every change (`limit_process`).

use super::*;

impl Blocks {
    /// Applies `tid`'s holdings to the OS when it is the calling thread and
    /// they changed.
    pub(super) fn apply(&self, st: &mut Locked<'_>, tid: Tid) {
        if !self.apply_os {
            return;
        }
        limit_process(st);
        if tid != current_tid() {
            return;
        }
        let st = &mut **st;
        let mut holdings = std::mem::take(&mut st.scratch_holdings);
        for k in 0..st.kinds.len() {
            let Some(ops) = st.kinds[k].ops.as_ref() else {
                continue;
            };
            let n = st.kinds[k].devices.len();
            let constrained = st.trees.holdings_of_kind(tid, k, n, &mut holdings);
            let t = st.threads.entry(tid).or_default();
            let unchanged = match t.applied.get(&k) {
                Some(b) => constrained && *b == holdings,
                None => !constrained,
            };
            if !constrained {
                holdings.resize(n, None); // every device unconstrained
            }
            // Only a team member computes where it belongs (an allocation).
            let spread = if t.in_team() && ops.spreads() {
                place::whole_devices(&holdings)
            } else {
                None
            };
            if unchanged && spread.is_some() == t.placed.contains_key(&k) {
                continue;
            }
            let keep = t.placed.get(&k).copied();
            let on = spread.map(|devs| {
                let placed_on = &st.placed_on;
                let load = |d| placed_on.get(&(k, d)).copied().unwrap_or(0);
                place::choose(&devs, load, keep, ops.current_device())
            });
            place::set((&mut st.threads, &mut st.placed_on), tid, k, on);
            // Failures (e.g. memory binding on a kernel without NUMA) leave
            // the allocation accounted but not enforced.
            match on {
                Some(d) => {
                    let mut one = vec![Some(0.0); n];
                    one[d] = holdings[d];
                    let _ = ops.restrict(&one);
                }
                None => {
                    let _ = ops.restrict(&holdings);
                }
            }
            let _ = ops.throttle(tid, &holdings);
            let t = st.threads.entry(tid).or_default();
            let old = if constrained {
                t.applied.insert(k, std::mem::take(&mut holdings))
            } else {
                t.applied.remove(&k)
            };
            if let Some(v) = old {
                holdings = v; // reuse its memory next time
            }
        }
        st.scratch_holdings = holdings;
    }
}

/// Holds the process to what its blocks entered, for the kinds that limit
/// a whole process (the `memory` kind's cap): each such kind is told the
/// amounts of every device's outermost allocations. A failure is logged
/// once until one succeeds again.
fn limit_process(st: &State) {
    for (k, kind) in st.kinds.iter().enumerate() {
        let Some(ops) = kind.ops.as_ref().filter(|o| o.limits_process()) else {
            continue;
        };
        let entered: Vec<f64> = (0..kind.devices.len())
            .map(|d| st.trees.entered((k, d)))
            .collect();
        static FAILING: allot_proto::log::Once = allot_proto::log::Once::new();
        match ops.limit_process(&entered) {
            Ok(()) => FAILING.reset(),
            Err(e) if FAILING.first() => allot_proto::app_log!(
                Warn,
                "allot-require",
                "the {} kind's limit on this process was not set: {e}",
                kind.name
            ),
            Err(_) => {}
        }
    }
}
