//! Threads' life in the trees: blocking (an allocation given back while
//! the thread cannot run) and unblocking (taken back, possibly after a
//! wait), a child sharing its parent's frames, and a thread's end.

use super::*;

impl Trees {
    /// Whether `tid` is known and blocked (not running).
    pub fn is_blocked(&self, tid: Tid) -> bool {
        self.threads.get(&tid).is_some_and(|t| !t.running)
    }

    pub(super) fn drop_if_unused(&mut self, n: NodeId) {
        let node = self.node(n);
        if node.frames > 0 || node.children > 0 {
            self.release_up(n);
            return;
        }
        // Give back, then delete, then maybe release the parent.
        let (parent, amount, own, held, unit) =
            (node.parent, node.amount, node.own, node.held, node.unit);
        if let Some(p) = parent {
            if held {
                self.give(p, amount, own);
            }
            self.node_mut(p).children -= 1;
        }
        if let Some(u) = unit
            && let Some(unit) = self.units[u].as_mut()
        {
            unit.nodes.retain(|&x| x != n);
            if unit.nodes.is_empty() {
                let nodes = std::mem::take(&mut unit.nodes);
                self.units[u] = None;
                self.free_units.push((u, nodes));
            }
        }
        self.nodes[n] = None;
        self.free_slots.push(n);
        if let Some(p) = parent.filter(|&p| !self.is_root(p)) {
            self.drop_if_unused(p);
        }
    }

    /// `tid` blocks: its active frames go dormant and give back what no
    /// running thread uses.
    pub fn block(&mut self, tid: Tid) {
        let Some(t) = self.threads.get_mut(&tid) else {
            return;
        };
        if !t.running {
            return;
        }
        t.running = false;
        let tops: Vec<NodeId> = t
            .stacks
            .values()
            .filter_map(|s| s.last())
            .filter(|f| !f.deny)
            .map(|f| f.node)
            .collect();
        for n in tops {
            self.set_active(n, -1);
            self.release_up(n);
        }
    }

    /// `tid` wants to run again: its top frames become active and take back
    /// their allocations. Refused (nothing changes) while one cannot be
    /// re-held; the caller waits and retries.
    pub fn unblock(&mut self, tid: Tid) -> Result<(), Vec<Dev>> {
        let Some(t) = self.threads.get(&tid) else {
            self.thread_start(tid);
            return Ok(());
        };
        if t.running {
            return Ok(());
        }
        let tops: Vec<NodeId> = t
            .stacks
            .values()
            .filter_map(|s| s.last())
            .filter(|f| !f.deny)
            .map(|f| f.node)
            .collect();
        let mut chains = Vec::new();
        let mut short = Vec::new();
        for &n in &tops {
            match self.hold_chain(n) {
                Ok(c) => chains.push(c),
                Err(d) => short.extend(d),
            }
        }
        if !short.is_empty() {
            return Err(short);
        }
        for c in chains {
            // A chain may already have been held by an earlier one (shared
            // ancestors): hold only what is still unheld.
            let still: Vec<NodeId> = c.into_iter().filter(|&n| !self.node(n).held).collect();
            self.hold(&still);
        }
        for n in tops {
            self.set_active(n, 1);
        }
        self.threads.get_mut(&tid).expect("present").running = true;
        Ok(())
    }

    /// A thread spawned by `parent` shares its current allocations: the
    /// child's stacks start with the parent's top frames (Private frames are
    /// skipped: the child gets the frame below). The child starts dormant
    /// and must [`Trees::unblock`] before it runs.
    pub fn spawn(&mut self, parent: Tid, child: Tid) {
        let Some(p) = self.threads.get(&parent) else {
            self.threads.entry(child).or_default();
            return;
        };
        let mut inherit: Vec<(Dev, Frame)> = Vec::new();
        for (&dev, stack) in p.stacks.iter() {
            if let Some(f) = stack
                .iter()
                .rev()
                .find(|f| f.deny || self.node(f.node).own != Ownership::Private)
            {
                inherit.push((dev, *f));
            }
        }
        let c = self.threads.entry(child).or_default();
        c.running = false;
        for (dev, f) in &inherit {
            c.stacks.at(*dev).push(*f);
        }
        for (_, f) in inherit {
            if !f.deny {
                self.node_mut(f.node).frames += 1;
            }
        }
    }

    /// The ownership of a node.
    pub fn ownership(&self, n: NodeId) -> Ownership {
        self.node(n).own
    }

    /// A thread exits: all its frames are popped.
    pub fn thread_exit(&mut self, tid: Tid) {
        self.block(tid);
        let Some(t) = self.threads.remove(&tid) else {
            return;
        };
        for (_, stack) in t.stacks.0 {
            for f in stack.into_iter().rev().filter(|f| !f.deny) {
                self.node_mut(f.node).frames -= 1;
                self.drop_if_unused(f.node);
            }
        }
    }
}
