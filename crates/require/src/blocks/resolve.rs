//! Pure steps of entering a scope, on the locked state: turning requests
//! into absolute asks (shares of what is available, policies run on a view
//! of every device), and giving idle roots back to the broker.

use super::*;

/// Gives the broker back what idle roots got from it.
pub(super) fn give_back(st: &mut State) {
    if st.link.is_none() {
        return;
    }
    let mut items = Vec::new();
    for (dev, _) in st.trees.idle_roots() {
        if let Some(its) = st.root_items.remove(&dev) {
            items.extend(its);
            st.trees.set_root(dev, 0.0);
        }
    }
    if !items.is_empty()
        && let Some(l) = st.link.as_mut()
    {
        l.release(items);
    }
}

pub(super) fn add_kind(st: &mut State, k: Kind) {
    let id = st.kinds.len();
    // With a broker, roots of the devices it shares start empty and grow
    // with what it grants; the others are this process's own.
    for (d, dev) in k.devices.iter().enumerate() {
        let shared = st
            .link
            .as_mut()
            .and_then(|l| l.device_index(&k.name, &dev.name));
        match shared {
            Some(i) => {
                st.broker_dev.insert((id, d), i);
                st.trees.set_root((id, d), 0.0);
            }
            None => st.trees.set_root((id, d), dev.max),
        }
    }
    st.by_name.insert(k.name.clone(), id);
    st.kinds.push(k);
}

/// Adds a kind whose devices are this process's alone: roots hold each
/// device's whole amount, with or without a broker.
pub(super) fn add_kind_local(st: &mut State, mut k: Kind) {
    k.local = true;
    let id = st.kinds.len();
    for (d, dev) in k.devices.iter().enumerate() {
        st.trees.set_root((id, d), dev.max);
    }
    st.by_name.insert(k.name.clone(), id);
    st.kinds.push(k);
}

/// Resolves requests into asks: devices looked up, shares made absolute,
/// policies run. `None` when a policy fails now.
pub(super) fn resolve(
    st: &State,
    machine: &Machine,
    tid: Tid,
    reqs: &[Need],
    devs: Option<&[Option<Dev>]>,
    site: &'static Location<'static>,
    mut asks: Vec<Ask>,
) -> Result<Option<Resolved>, RequireError> {
    asks.clear();
    // Only policies report an outcome; device requests leave it empty and
    // skip moving it around on the enter path.
    let mut outcome = None;
    for (i, r) in reqs.iter().enumerate() {
        match &r.what {
            What::Device { kind, dev, amount } => {
                let (k, d) = match devs.and_then(|v| v[i]) {
                    Some(kd) => kd,
                    None => lookup(st, kind, dev, site)?,
                };
                let max = st.kinds[k].devices[d].max;
                let abs = match *amount {
                    Amount::Abs(a) => a,
                    Amount::Share(s) if (0.0..=1.0).contains(&s) => {
                        s * st.trees.available(tid, (k, d))
                    }
                    Amount::Share(s) => s * 100.0 + max + 1.0, // out of range: reported below
                };
                if !(0.0..=max + 1e-9).contains(&abs) || abs.is_nan() {
                    return Err(RequireError::BadAmount {
                        kind: kind.clone(),
                        dev: dev.clone(),
                        amount: abs,
                        max,
                        site,
                    });
                }
                if abs > 0.0
                    && let Some(why) = st.kinds[k].ops.as_ref().and_then(|o| o.unenforced(d))
                {
                    return Err(RequireError::Unenforceable {
                        kind: kind.clone(),
                        dev: dev.clone(),
                        why,
                        site,
                    });
                }
                asks.push(Ask {
                    dev: (k, d),
                    amount: abs,
                    own: r.own,
                });
            }
            What::Policy(p) => {
                let mut view = view_for(st, machine, tid, r.own);
                if !p.run(&mut view) {
                    return Ok(None);
                }
                for d in view.requests() {
                    let k = st.by_name[&d.kind];
                    asks.push(Ask {
                        dev: (k, d.index),
                        amount: d.request.unwrap_or(0.0).max(0.0),
                        own: d.ownership,
                    });
                }
                outcome = Some(Box::new(view.out));
            }
        }
    }
    Ok(Some((asks, outcome)))
}

pub(super) fn lookup(
    st: &State,
    kind: &str,
    dev: &str,
    site: &'static Location<'static>,
) -> Result<(KindId, usize), RequireError> {
    let Some(&k) = st.by_name.get(kind) else {
        return Err(RequireError::UnknownKind {
            kind: kind.into(),
            known: st
                .kinds
                .iter()
                .map(|k| k.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            site,
        });
    };
    let d = st.kinds[k]
        .device(dev)
        .ok_or_else(|| RequireError::UnknownDevice {
            kind: kind.into(),
            dev: dev.into(),
            count: st.kinds[k].devices.len(),
            site,
        })?;
    Ok((k, d))
}

/// What a policy sees. With a broker, the process's roots start empty and
/// grow with what the broker's ledger grants, so at the top level a policy
/// also sees what the root could still grow by (the device's whole amount
/// less what the root holds): it chooses, the acquisition asks the ledger
/// for what the root lacks, and the scope waits while another process
/// holds it. (The policy does not see other processes' holdings, so it may
/// pick a device held elsewhere and wait although another is free.)
/// Device `dev`'s rate of use: its kind's probe now against the sample
/// kept from an earlier view at least [`RATE_SPAN`] ago (Poli-C's get1 and
/// get2 read twice), which it replaces; the last rate in between.
fn sampled_rate(st: &State, kind: &kind::Kind, dev: Dev) -> Option<f64> {
    let ops = kind.ops.as_ref()?;
    let now = std::time::Instant::now();
    let mut samples = st.samples.borrow_mut();
    match samples.get_mut(&dev) {
        Some(s) if now.duration_since(s.at) < RATE_SPAN => s.rate,
        Some(s) => {
            let counters = ops.probe(dev.1)?;
            s.rate = Some(ops.rate(s.counters, counters, now - s.at));
            s.at = now;
            s.counters = counters;
            s.rate
        }
        None => {
            let counters = ops.probe(dev.1)?;
            samples.insert(
                dev,
                Sample {
                    at: now,
                    counters,
                    rate: None,
                },
            );
            None
        }
    }
}

fn view_for<'m>(st: &State, machine: &'m Machine, tid: Tid, own: Ownership) -> View<'m> {
    let mut devs = Vec::new();
    let coordinated = st.link.is_some();
    for (k, kind) in st.kinds.iter().enumerate() {
        for (d, dev) in kind.devices.iter().enumerate() {
            // What the root could still get from the broker: the whole
            // device less what it holds, or what the broker last said was
            // free to a waiting request of this process.
            let (growable, growable_shared) =
                if coordinated && !kind.local && st.trees.at_root(tid, (k, d)) {
                    let (held, _) = st.trees.root((k, d)).unwrap_or((0.0, 0.0));
                    let rest = (dev.max - held).max(0.0);
                    match st.broker_free.get(&tid).and_then(|f| f.get(&(k, d))) {
                        Some(&(excl, shared)) => (rest.min(excl), rest.min(shared)),
                        None => (rest, rest),
                    }
                } else {
                    (0.0, 0.0)
                };
            devs.push(DevView {
                kind: kind.name.clone(),
                index: d,
                name: dev.name.clone(),
                max: dev.max,
                available: st.trees.available(tid, (k, d)) + growable,
                shared_available: st.trees.shared_available(tid, (k, d)) + growable_shared,
                waiters: st.waiting.get(&(k, d)).copied().unwrap_or(0),
                rate: if kind.measured {
                    sampled_rate(st, kind, (k, d))
                } else {
                    None
                },
                request: None,
                ownership: own,
            });
        }
    }
    // A thread of a gathering batch also counts the batch's other
    // arrivals whose policies have not run yet: they ask now too. The
    // broker counts them across processes; a process alone, its threads.
    let arriving = if let Some(&(_, others)) = st.gathered.get(&tid) {
        others
    } else if st.gathering.iter().any(|(t, _)| *t == tid) {
        st.gathering.iter().filter(|(t, _)| *t != tid).count() as u32
    } else {
        0
    };
    View::new(
        devs,
        machine,
        st.total_waiting.max(st.broker_waiters) + arriving,
        own,
    )
}

/// Whether a policy fails even on a completely free machine.
pub(super) fn policy_impossible(st: &State, machine: &Machine, reqs: &[Need]) -> bool {
    let mut devs = Vec::new();
    for (k, kind) in st.kinds.iter().enumerate() {
        for (d, dev) in kind.devices.iter().enumerate() {
            let _ = k;
            devs.push(DevView {
                kind: kind.name.clone(),
                index: d,
                name: dev.name.clone(),
                max: dev.max,
                available: dev.max,
                shared_available: dev.max,
                waiters: 0,
                rate: None,
                request: None,
                ownership: Ownership::Default,
            });
        }
    }
    reqs.iter().any(|r| match &r.what {
        What::Policy(p) => !p.run(&mut View::new(devs.clone(), machine, 0, r.own)),
        _ => false,
    })
}
