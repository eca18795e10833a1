//! The link to the broker's ledger: growing the process's roots when
//! they lack what a scope needs, and watching the ledger so threads that
//! wait on other processes' holdings wake up when those change.

use super::*;

impl Blocks {
    /// Asks the broker for what the roots lack; true if granted (the roots
    /// grew), false if it must wait. A broker that went away leaves the
    /// process standalone: every root gets its whole device. A request the
    /// broker can never grant as asked is an error naming a device of it.
    pub(super) fn grow_from_broker(
        &self,
        st: &mut Locked<'_>,
        short: &[(Dev, f64, bool)],
    ) -> Result<bool, (Dev, String)> {
        let items: Vec<(Dev, LedgerItem)> = short
            .iter()
            .map(|&(dev, amount, shared)| {
                let kind = st.kinds[dev.0].name.clone();
                (
                    dev,
                    LedgerItem {
                        kind,
                        dev: st.broker_dev.get(&dev).copied().unwrap_or(dev.1 as u32),
                        amount,
                        shared,
                    },
                )
            })
            .collect();
        let Some(link) = st.link.as_mut() else {
            return Ok(false);
        };
        match link.acquire(items.iter().map(|(_, i)| i.clone()).collect()) {
            Ok(()) => {
                for (dev, it) in items {
                    let (amount, _) = st.trees.root(dev).unwrap_or((0.0, 0.0));
                    st.trees.set_root(dev, amount + it.amount);
                    st.root_items.entry(dev).or_default().push(it);
                }
                Ok(true)
            }
            Err(Denied::NotNow(_)) => Ok(false),
            Err(Denied::Never(why)) => Err((items[0].0, why)),
            Err(Denied::Gone(_)) => {
                st.link = None;
                for k in 0..st.kinds.len() {
                    for d in 0..st.kinds[k].devices.len() {
                        let max = st.kinds[k].devices[d].max;
                        st.trees.set_root((k, d), max);
                    }
                }
                st.root_items.clear();
                Ok(true)
            }
        }
    }

    /// Starts the watcher thread (if not running) that turns ledger changes
    /// into wake-ups of this process's waiting threads.
    pub(super) fn watch_ledger(&self, st: &mut Locked<'_>) {
        if st.watching {
            return;
        }
        let Some(socket) = st.link.as_ref().map(|l| l.socket().to_path_buf()) else {
            return;
        };
        let Some(me) = self.as_static() else { return };
        st.watching = true;
        let _ = std::thread::Builder::new()
            .name("allot-ledger".into())
            .spawn(move || {
                loop {
                    let (epoch, waiting) = {
                        let mut st = me.lock();
                        if st.total_waiting == 0 || st.link.is_none() {
                            st.watching = false;
                            return;
                        }
                        (st.ledger_epoch, st.total_waiting)
                    };
                    let got = ledger::watch(&socket, epoch, waiting);
                    let mut st = me.lock();
                    match got {
                        Some((e, w)) => {
                            st.ledger_epoch = e;
                            st.broker_waiters = w;
                        }
                        None => st.watching = false,
                    }
                    st.epoch += 1;
                    if st.sleepers > 0 {
                        me.cond.notify_all();
                    }
                    if !st.watching {
                        return;
                    }
                }
            });
    }

    /// `self` as `'static`, if it was made so (see [`Blocks::into_static`]).
    pub(super) fn as_static(&self) -> Option<&'static Blocks> {
        self.this.get().copied()
    }
}
