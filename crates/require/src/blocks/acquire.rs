//! Acquiring a scope's requests as one unit (see the module notes of
//! [`super`], "Entering a scope"): resolve them, take them from the
//! allocation trees, ask the broker for what the roots lack (keeping a
//! place in its line while refused, `broker.rs`), and wait until they can
//! be met.

use super::broker::Grown;
use super::*;
use allot_proto::DuePlace;

impl Blocks {
    /// Resolves and acquires `reqs` for `tid` as one unit, waiting (when
    /// `block`) until they can be met. Takes and returns the lock guard,
    /// which waiting hands to the condition variable.
    #[allow(clippy::type_complexity)]
    pub(super) fn acquire<'s>(
        &'s self,
        mut st: Locked<'s>,
        tid: Tid,
        reqs: &[Need],
        devs: Option<&[Option<Dev>]>,
        block: bool,
        site: &'static Location<'static>,
    ) -> (Locked<'s>, Result<Option<Acquired>, RequireError>) {
        if reqs.is_empty() {
            return (st, Ok(Some((Vec::new(), None))));
        }
        let has_policy = reqs.iter().any(|r| matches!(r.what, What::Policy(_)));
        let gathers = block
            && reqs
                .iter()
                .any(|r| matches!(&r.what, What::Policy(p) if p.gathers()));
        if gathers {
            st = self.gather(st, tid);
        }
        // This acquisition's place in the broker's line (0: none taken),
        // whether the broker keeps it now, and whether the policy has been
        // run again with what the broker said is free since the last wake.
        let mut place = 0;
        let mut in_line = false;
        let mut hinted = false;
        // The broker's wake-up count when it last refused the place, and
        // whether the policy chooses again from what the refusal said is
        // free (that choice is asked for at once).
        let mut refused_at: Option<u64> = None;
        let mut rechoosing = false;
        // The kinds it last asked the broker for.
        let mut asked_kinds: Vec<KindId> = Vec::new();
        let result = loop {
            let buf = std::mem::take(&mut st.scratch_asks);
            let resolved = resolve(&st, &self.machine, tid, reqs, devs, site, buf);
            // Its policy has run: it no longer counts as arriving (it now
            // holds, or waits and counts as a waiter).
            if gathers {
                st.gathering.retain(|(t, _)| *t != tid);
            }
            let resolved = match resolved {
                Ok(r) => r,
                Err(e) => break Err(e),
            };
            let failure = match resolved {
                Some((asks, outcome)) => {
                    let mut nodes = std::mem::take(&mut st.scratch_nodes);
                    let got =
                        st.trees
                            .acquire_into(tid, &asks, has_policy || asks.len() > 1, &mut nodes);
                    if got.is_ok() {
                        let mut frames = st
                            .threads
                            .get_mut(&tid)
                            .and_then(|t| t.spare.pop())
                            .unwrap_or_default();
                        frames.extend(asks.iter().map(|a| a.dev).zip(nodes.iter().copied()));
                        st.scratch_nodes = nodes;
                        st.scratch_asks = asks;
                        // A nested acquisition moves this thread off its
                        // enclosing allocations (and denials stop its use of
                        // others): a sibling waiting to carve from them may
                        // proceed now.
                        if st.sleepers > 0 {
                            st.epoch += 1;
                            self.cond.notify_all();
                        }
                        break Ok(Some((frames, outcome)));
                    }
                    st.scratch_nodes = nodes;
                    match got.map(|_| ()) {
                        Ok(()) => unreachable!("handled above"),
                        Err(Refusal::TooLarge {
                            dev,
                            asked,
                            enclosing,
                        }) => {
                            let (kind, dev) = st.names(dev);
                            break Err(RequireError::TooLarge {
                                kind,
                                dev,
                                asked,
                                enclosing,
                                site,
                            });
                        }
                        Err(Refusal::Wait { devs, root_short }) => {
                            // A refused place asks again only once a wake-up
                            // since names it: the broker would refuse the
                            // others, each a round trip under the lock while
                            // the freed CPU waits for the named one.
                            let named = std::mem::take(&mut rechoosing)
                                || asks_again(refused_at, st.ledger_wakes, &st.ledger_due, place);
                            if !root_short.is_empty() && st.link.is_some() && named {
                                if block && place == 0 {
                                    place = st.next_place;
                                    st.next_place += 1;
                                }
                                asked_kinds.clear();
                                asked_kinds.extend(root_short.iter().map(|(dev, _, _)| dev.0));
                                let how = ledger::Asking {
                                    place,
                                    holding: st.trees.holds_any(tid),
                                    any_device: has_policy,
                                };
                                match self.grow_from_broker(&mut st, tid, &root_short, how) {
                                    Ok(Grown::Yes) => {
                                        in_line = false;
                                        refused_at = None;
                                        continue; // the roots grew: try again at once
                                    }
                                    Ok(Grown::InLine) => {
                                        in_line = true;
                                        refused_at = Some(st.ledger_wakes);
                                        if !hinted {
                                            // Choose again from what is free.
                                            hinted = true;
                                            rechoosing = true;
                                            continue;
                                        }
                                    }
                                    Ok(Grown::No) => {}
                                    Err((dev, why)) => {
                                        let (kind, dev) = st.names(dev);
                                        break Err(RequireError::Unenforceable {
                                            kind,
                                            dev,
                                            why,
                                            site,
                                        });
                                    }
                                }
                            }
                            devs
                        }
                    }
                }
                None => Vec::new(),
            };
            if !block {
                break Ok(None);
            }
            if has_policy && policy_impossible(&st, &self.machine, reqs) {
                let name = reqs
                    .iter()
                    .find_map(|r| {
                        if let What::Policy(p) = &r.what {
                            Some(p.name().to_string())
                        } else {
                            None
                        }
                    })
                    .unwrap_or_default();
                break Err(RequireError::Impossible { policy: name, site });
            }
            // What the roots were granted and nothing uses goes back before
            // the wait: held idle, it could keep the broker's line from
            // ever reaching this very request.
            give_back(&mut st);
            // Its policy chose and it waits: the next arrival of its
            // batch at the broker may choose.
            self.chose(&mut st, tid);
            st = self.wait(st, tid, &failure);
            // Woken: the ledger changed. A place a wake-up since its refusal
            // names chooses from what that says is free to it; any other
            // from the whole device again.
            st.broker_free.remove(&tid);
            let named = refused_at
                .filter(|&at| at != st.ledger_wakes)
                .and_then(|_| st.ledger_due.iter().find(|d| d.place == place))
                .map(|d| d.free.clone());
            if let Some(free) = named {
                self.note_free_of_kinds(&mut st, tid, &asked_kinds, &free);
            }
            hinted = false;
            rechoosing = false;
        };
        if in_line {
            self.leave_line(&mut st, place);
        }
        self.chose(&mut st, tid);
        st.broker_free.remove(&tid);
        (st, result)
    }
}

/// Whether a waiting request asks the broker again: always while the
/// broker has not refused its `place` (`refused_at`: the wake-up count
/// then), and after a refusal only once a wake-up since (`wakes` counts
/// them) named the place among those that could take something (`due`,
/// the last wake-up's). The broker wakes the process again whenever the
/// ledger moves in a way that may let one of its places through, so a
/// place not named keeps waiting without asking.
fn asks_again(refused_at: Option<u64>, wakes: u64, due: &[DuePlace], place: u64) -> bool {
    refused_at.is_none_or(|at| wakes != at && due.iter().any(|d| d.place == place))
}

#[cfg(test)]
mod tests {
    use super::{DuePlace, asks_again};

    fn due(places: &[u64]) -> Vec<DuePlace> {
        places
            .iter()
            .map(|&place| DuePlace {
                place,
                free: vec![],
            })
            .collect()
    }

    #[test]
    fn a_refused_place_asks_again_only_once_a_wake_up_names_it() {
        assert!(asks_again(None, 0, &[], 1), "never refused: it asks");
        assert!(
            asks_again(None, 5, &[], 3),
            "its first ask, whatever woke before"
        );
        assert!(
            !asks_again(Some(2), 2, &due(&[1]), 1),
            "no wake-up since its refusal"
        );
        assert!(
            !asks_again(Some(2), 3, &due(&[4]), 1),
            "woken for another place"
        );
        assert!(
            !asks_again(Some(2), 3, &[], 1),
            "woken for threads without a place"
        );
        assert!(asks_again(Some(2), 3, &due(&[4, 1]), 1), "named");
        assert!(
            asks_again(Some(2), 7, &due(&[1]), 1),
            "named by a later wake-up"
        );
    }
}
