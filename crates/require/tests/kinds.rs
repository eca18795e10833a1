//! Kinds of the program's own (`Blocks::register_kind`, Poli-C's
//! `register_resource`): registration errors, rates from the kind's probe
//! in policy views, exclusive per-device requests, and the kind's
//! `restrict` called with each thread's holdings. The operations here are
//! a counter the test drives; `disk_live.rs` runs `DiskRate` on a real
//! device.

use allot_require::kind::{Device, Kind, KindOps};
use allot_require::policy::{self, View};
use allot_require::{Blocks, Need, RequireError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Default)]
struct Counter {
    bytes: AtomicU64,
    restricted: Mutex<Vec<Vec<Option<f64>>>>,
}

impl KindOps for Counter {
    fn probe(&self, dev: usize) -> Option<(u64, u64)> {
        (dev == 0).then(|| (self.bytes.load(Ordering::Relaxed), 0))
    }
    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()> {
        self.restricted.lock().unwrap().push(amounts.to_vec());
        Ok(())
    }
}

/// The rates a policy saw on devices "a" and "b".
type Rates = (Option<f64>, Option<f64>);

fn devs() -> Vec<Device> {
    ["a", "b"]
        .iter()
        .map(|n| Device {
            name: n.to_string(),
            min: 0.0,
            max: 1.0,
        })
        .collect()
}

fn runtime() -> &'static Blocks {
    let m = allot_topo::discover_live().unwrap();
    Blocks::new(m, true).into_static()
}

#[test]
fn registration_refuses_what_cannot_work() {
    let rt = runtime();
    let ops = Arc::new(Counter::default());
    rt.register_kind(Kind::with_ops("Wire", devs(), ops.clone()))
        .unwrap();
    assert!(matches!(
        rt.register_kind(Kind::with_ops("Wire", devs(), ops.clone())),
        Err(RequireError::KindExists(_))
    ));
    assert!(matches!(
        rt.register_kind(Kind::with_ops("cpu", devs(), ops.clone())),
        Err(RequireError::KindExists(_))
    ));
    assert!(matches!(
        rt.register_kind(Kind::with_ops("Empty", vec![], ops.clone())),
        Err(RequireError::BadKind(..))
    ));
    let mut bad = devs();
    bad[1].max = f64::INFINITY;
    assert!(matches!(
        rt.register_kind(Kind::with_ops("Inf", bad, ops.clone())),
        Err(RequireError::BadKind(..))
    ));
    let mut virt = Kind::with_ops("NoOps", devs(), ops);
    virt.ops = None;
    assert!(matches!(
        rt.register_kind(virt),
        Err(RequireError::BadKind(..))
    ));
    assert!(rt.kinds().contains(&"Wire".to_string()));
}

#[test]
fn policies_see_the_rate_the_probe_measures_and_requests_use_the_devices() {
    let rt = runtime();
    let ops = Arc::new(Counter::default());
    rt.register_kind(Kind::with_ops("Link", devs(), ops.clone()))
        .unwrap();
    let seen: Arc<Mutex<Vec<Rates>>> = Arc::default();
    let peek = {
        let seen = seen.clone();
        policy::from_fn("peek", move |v: &mut View<'_>| {
            let r: Vec<Option<f64>> = v.devices("Link").map(|d| d.rate).collect();
            seen.lock().unwrap().push((r[0], r[1]));
            true
        })
    };
    // First look: a sample, no rate yet; the device without a probe never
    // has one. Each look is bracketed by clock reads: its probe ran
    // somewhere between them.
    let a = Instant::now();
    drop(rt.enter(vec![Need::policy(peek.clone())]).unwrap());
    let b = Instant::now();
    // 5 MB over about 100 ms.
    ops.bytes.fetch_add(5_000_000, Ordering::Relaxed);
    std::thread::sleep(Duration::from_millis(100));
    let c = Instant::now();
    drop(rt.enter(vec![Need::policy(peek.clone())]).unwrap());
    let d = Instant::now();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0], (None, None));
    let rate = seen[1].0.expect("a rate on the second look");
    // 5 MB over the time between the probes, which lies between c - b and
    // d - a, however long the machine kept the thread waiting.
    let (least, most) = (
        5e6 / (d - a).as_secs_f64() * 0.999,
        5e6 / (c - b).as_secs_f64() * 1.001,
    );
    assert!(
        (least..=most).contains(&rate),
        "5 MB between the looks read as {rate} B/s, not in {least}..{most}"
    );
    assert_eq!(seen[1].1, None);

    // A per-device request is exclusive and reaches the kind's restrict.
    let held = rt.enter(vec![Need::device("Link", "a", 1.0)]).unwrap();
    assert!(
        ops.restricted
            .lock()
            .unwrap()
            .iter()
            .any(|a| a.first() == Some(&Some(1.0))),
        "restrict got the holding"
    );
    // Another thread cannot take it while it is held, and can after.
    let try_take = move || {
        std::thread::spawn(move || {
            let tid = allot_require::blocks::current_tid();
            let req = vec![Need::device("Link", "a", 1.0)];
            let got = rt
                .enter_as(tid, req, false, std::panic::Location::caller())
                .unwrap();
            got.is_some()
        })
        .join()
        .unwrap()
    };
    assert!(!try_take(), "taken twice at once");
    drop(held);
    assert!(try_take(), "free again once the holder left");
}

/// Poli-C's `res_iter`: a policy walks every resource kind (built-in and
/// registered, in registration order, each once) and, through
/// `dev_iter`, every device of each; here it takes the least busy device
/// of every kind of the program's own.
#[test]
fn a_policy_walks_every_kind_and_its_devices() {
    let rt = runtime();
    rt.register_kind(Kind::with_ops("Walk", devs(), Arc::new(Counter::default())))
        .unwrap();
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let walk = {
        let seen = seen.clone();
        policy::from_fn("walk", move |v: &mut View<'_>| {
            let kinds: Vec<String> = v.kinds().iter().map(|k| k.to_string()).collect();
            for k in &kinds {
                assert_eq!(
                    v.devices(k).count(),
                    v.dev_count(k),
                    "dev_iter sees every device of {k}"
                );
            }
            *seen.lock().unwrap() = kinds;
            let Some(i) = v.min_waiters_dev("Walk") else {
                return false;
            };
            v.devices("Walk").nth(i).expect("an index of Walk").request = Some(1.0);
            true
        })
    };
    let held = rt.enter(vec![Need::policy(walk)]).unwrap();
    let kinds = seen.lock().unwrap().clone();
    assert_eq!(kinds.first().map(String::as_str), Some("cpu"), "{kinds:?}");
    assert!(kinds.contains(&"Walk".to_string()), "{kinds:?}");
    let mut once = kinds.clone();
    once.dedup();
    assert_eq!(once, kinds, "each kind once: {kinds:?}");
    let registered: Vec<String> = rt
        .kinds()
        .into_iter()
        .filter(|k| kinds.contains(k))
        .collect();
    assert_eq!(kinds, registered, "the registration order");
    drop(held);
}
