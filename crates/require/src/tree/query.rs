//! Read-only questions about the trees: what a thread holds, what is
//! available to it, and the invariant check the tests run after every
//! step.

use super::*;

impl Trees {
    /// Writes what `tid` holds on every device of kind `kind` into `out`
    /// (`n` devices; `None`: unconstrained), reusing its memory. Returns
    /// false, leaving `out` empty, when the thread has no frame on the kind.
    pub fn holdings_of_kind(
        &self,
        tid: Tid,
        kind: KindId,
        n: usize,
        out: &mut Vec<Option<f64>>,
    ) -> bool {
        out.clear();
        let Some(t) = self.threads.get(&tid) else {
            return false;
        };
        for (dev, stack) in t.stacks.iter() {
            let (Some(f), true) = (stack.last(), dev.0 == kind) else {
                continue;
            };
            if out.is_empty() {
                out.resize(n, None);
            }
            if let Some(slot) = out.get_mut(dev.1) {
                *slot = Some(if f.deny {
                    0.0
                } else {
                    self.node(f.node).amount
                });
            }
        }
        !out.is_empty()
    }

    /// What the outermost allocations of `dev` that exist ask for in all:
    /// the amounts of the root's children, held or not (a waiting
    /// thread's allocation counts: what it did with it is still there).
    /// A scan of every node, for the kinds that limit a whole process
    /// ([`crate::kind::KindOps::limits_process`]).
    pub fn entered(&self, dev: Dev) -> f64 {
        let Some(&root) = self.roots.get(&dev) else {
            return 0.0;
        };
        self.nodes
            .iter()
            .flatten()
            .filter(|n| n.parent == Some(root))
            .map(|n| n.amount)
            .sum()
    }

    /// What `tid` holds on `dev` now.
    pub fn holding(&self, tid: Tid, dev: Dev) -> Holding {
        match self.top_frame(tid, dev) {
            Some(f) if f.deny => Holding::Amount(0.0),
            Some(f) => Holding::Amount(self.node(f.node).amount),
            None => Holding::Unconstrained,
        }
    }

    /// The amount available to a new request by `tid` on `dev`: the
    /// context's exclusive free amount (the policy view's `available`).
    pub fn available(&self, tid: Tid, dev: Dev) -> f64 {
        self.usable_context(tid, dev)
            .map_or(0.0, |n| self.excl_free(n).max(0.0))
    }

    /// The amount available to a new *shared* request by `tid` on `dev`.
    pub fn shared_available(&self, tid: Tid, dev: Dev) -> f64 {
        self.usable_context(tid, dev)
            .map_or(0.0, |n| self.node(n).free.max(0.0))
    }

    pub(super) fn usable_context(&self, tid: Tid, dev: Dev) -> Option<NodeId> {
        if self.top_frame(tid, dev).is_some_and(|f| f.deny) {
            return None;
        }
        self.top(tid, dev)
            .filter(|&n| self.is_root(n) || (self.node(n).held && self.node(n).active <= 1))
    }

    /// The amount of the context `tid` would request `dev` from.
    pub fn context_amount(&self, tid: Tid, dev: Dev) -> f64 {
        self.top(tid, dev).map_or(0.0, |n| self.node(n).amount)
    }

    /// Threads with a record.
    pub fn thread_count(&self) -> usize {
        self.threads.len()
    }

    /// Whether the thread has a frame on any device.
    pub fn holds_any(&self, tid: Tid) -> bool {
        self.threads
            .get(&tid)
            .is_some_and(|t| t.stacks.values().any(|s| !s.is_empty()))
    }

    /// Devices the thread has frames on.
    pub fn devices_of(&self, tid: Tid) -> Vec<Dev> {
        self.threads
            .get(&tid)
            .map(|t| {
                t.stacks
                    .iter()
                    .filter(|(_, s)| !s.is_empty())
                    .map(|(d, _)| *d)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Checks the invariants of the module docs.
    pub fn check(&self) -> Result<(), String> {
        for (i, n) in self.nodes.iter().enumerate() {
            let Some(n) = n else { continue };
            let held_excl: f64 = self
                .nodes
                .iter()
                .flatten()
                .filter(|c| c.parent == Some(i) && c.held && c.own != Ownership::Shared)
                .map(|c| c.amount)
                .sum();
            if (n.amount - held_excl - n.free).abs() > 1e-6 {
                return Err(format!(
                    "node {i}: amount {} − held {} ≠ free {}",
                    n.amount, held_excl, n.free
                ));
            }
            let peak = n.shared.iter().copied().fold(0.0, f64::max);
            if n.free + 1e-6 < peak {
                return Err(format!(
                    "node {i}: free {} below shared peak {peak}",
                    n.free
                ));
            }
            if n.held {
                if let Some(p) = n.parent
                    && !self.node(p).held
                {
                    return Err(format!("node {i} held under unheld parent {p}"));
                }
            } else if n.parent.is_none() {
                return Err(format!("root {i} not held"));
            }
            let kids = self
                .nodes
                .iter()
                .flatten()
                .filter(|c| c.parent == Some(i))
                .count() as u32;
            if kids != n.children {
                return Err(format!("node {i}: {kids} children counted {}", n.children));
            }
            if n.parent.is_some() && n.frames == 0 && n.children == 0 {
                return Err(format!("node {i} survives unused"));
            }
        }
        Ok(())
    }
}
