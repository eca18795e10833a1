//! The link to the broker's ledger: growing the process's roots when
//! they lack what a scope needs, and watching the ledger so threads that
//! wait on other processes' holdings wake up when those change.
//!
//! A blocking acquisition that the broker refuses keeps a place in the
//! broker's line under a number of this process's ([`State::next_place`]):
//! the broker serves the requests of all processes in the order they
//! asked. The refusal says what is free to the request
//! ([`State::broker_free`], per thread: it depends on the request's place);
//! its policy chooses from that until the thread waits or the acquisition
//! ends (then it assumes the whole device again, and a refusal says
//! afresh). The watcher's wake-ups name the places that could take
//! something ([`State::ledger_due`]); a refused place asks again only once
//! one names it (`acquire.rs`, `asks_again`).
//!
//! A request gathered at the broker (`wait.rs`) tells it when its policy
//! has chosen ([`Blocks::chose`]), so the next of its batch may choose.

use super::*;

/// What asking the broker for the roots' shortfall came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Grown {
    /// Granted: the roots grew.
    Yes,
    /// Refused, holding no place (a try, or no broker to ask).
    No,
    /// Refused; the request keeps its place in the broker's line, and
    /// [`State::broker_free`] says what is free to it.
    InLine,
}

impl Blocks {
    /// Asks the broker for what the roots lack, as `how` says (for a
    /// waiting request's place, or a try). A broker that went
    /// away leaves the process standalone: every root gets its whole
    /// device. A request the broker can never grant as asked is an error
    /// naming a device of it.
    pub(super) fn grow_from_broker(
        &self,
        st: &mut Locked<'_>,
        tid: Tid,
        short: &[(Dev, f64, bool)],
        how: ledger::Asking,
    ) -> Result<Grown, (Dev, String)> {
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
            return Ok(Grown::No);
        };
        let asked = items.iter().map(|(_, i)| i.clone()).collect();
        match link.acquire(asked, how) {
            Ok(()) => {
                for (dev, it) in items {
                    let (amount, _) = st.trees.root(dev).unwrap_or((0.0, 0.0));
                    st.trees.set_root(dev, amount + it.amount);
                    st.root_items.entry(dev).or_default().push(it);
                }
                // What the broker said was free stays until the acquisition
                // ends: the policy, run again, must choose what was granted.
                Ok(Grown::Yes)
            }
            Err(Denied::NotNow(_)) => Ok(Grown::No),
            Err(Denied::InLine { free, .. }) => {
                self.note_free(st, tid, &items, &free);
                Ok(Grown::InLine)
            }
            Err(Denied::Never(why)) => Err((items[0].0, why)),
            Err(Denied::Gone(_)) => {
                st.link = None;
                st.gatherer = None;
                for k in 0..st.kinds.len() {
                    for d in 0..st.kinds[k].devices.len() {
                        let max = st.kinds[k].devices[d].max;
                        st.trees.set_root((k, d), max);
                    }
                }
                st.root_items.clear();
                st.broker_free.clear();
                Ok(Grown::Yes)
            }
        }
    }

    /// Records what the broker says is free to `tid`'s acquisition on every
    /// device of the kinds of `asked` (a device it does not list has
    /// nothing free).
    fn note_free(
        &self,
        st: &mut Locked<'_>,
        tid: Tid,
        asked: &[(Dev, LedgerItem)],
        free: &[LedgerItem],
    ) {
        let kinds: Vec<KindId> = asked.iter().map(|(dev, _)| dev.0).collect();
        self.note_free_of_kinds(st, tid, &kinds, free);
    }

    /// Records what the broker says is free to `tid`'s acquisition on every
    /// device of `kinds` (a device it does not list has nothing free).
    pub(super) fn note_free_of_kinds(
        &self,
        st: &mut Locked<'_>,
        tid: Tid,
        kinds: &[KindId],
        free: &[LedgerItem],
    ) {
        let mut kinds = kinds.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        for k in kinds {
            for d in 0..st.kinds[k].devices.len() {
                let index = st.broker_dev.get(&(k, d)).copied().unwrap_or(d as u32);
                let name = &st.kinds[k].name;
                let amount = |shared: bool| {
                    free.iter()
                        .find(|f| f.kind == *name && f.dev == index && f.shared == shared)
                        .map_or(0.0, |f| f.amount)
                };
                let got = (amount(false), amount(true));
                st.broker_free.entry(tid).or_default().insert((k, d), got);
            }
        }
    }

    /// The policy of `tid`'s gathered arrival has chosen (what it chose is
    /// held, or it waits): the broker may answer the next of its batch.
    pub(super) fn chose(&self, st: &mut Locked<'_>, tid: Tid) {
        if let Some((arrival, _)) = st.gathered.remove(&tid)
            && let Some(g) = st.gatherer.as_mut()
        {
            g.chosen(arrival);
        }
    }

    /// The waiting request `place` stopped waiting: its place in the
    /// broker's line is given up.
    pub(super) fn leave_line(&self, st: &mut Locked<'_>, place: u64) {
        if let Some(link) = st.link.as_mut() {
            link.leave(place);
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
                let mut watch = ledger::Watch::new(&socket);
                loop {
                    let (epoch, waiting) = {
                        let mut st = me.lock();
                        if st.total_waiting == 0 || st.link.is_none() {
                            st.watching = false;
                            return;
                        }
                        (st.ledger_epoch, st.total_waiting)
                    };
                    let got = watch.wait(epoch, waiting);
                    let mut st = me.lock();
                    match got {
                        Some((e, w, due)) => {
                            st.ledger_epoch = e;
                            st.broker_waiters = w;
                            st.ledger_wakes += 1;
                            st.ledger_due = due;
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
