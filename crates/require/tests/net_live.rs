//! `NetRate` (a kind written with `Blocks::register_kind` on the kernel's
//! per-interface byte counters) on this machine's interfaces: while this
//! test streams data through the loopback interface, policies see `lo`'s
//! rate in bytes per second far above another interface's, and
//! `least_busy` picks the other one.

use allot_require::net::{self, NAME};
use allot_require::policy::{self, View};
use allot_require::{Blocks, Need};
use std::io::{Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn policies_see_which_interface_is_busy_and_pick_the_idle_one() {
    let ifaces = net::interfaces();
    let other = ifaces.iter().find(|i| *i != "lo").cloned();
    if !allot_testkit::prerequisite(other.is_some(), "a network interface besides lo") {
        return;
    }
    let other = other.unwrap();
    let rt = Blocks::new(allot_topo::discover_live().unwrap(), false).into_static();
    rt.register_kind(net::net_rate()).unwrap();

    // Stream through loopback until told to stop.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let sink = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut buf = vec![0u8; 1 << 16];
        while s.read(&mut buf).is_ok_and(|n| n > 0) {}
    });
    let source = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            let buf = vec![7u8; 1 << 16];
            while !stop.load(Ordering::Relaxed) {
                s.write_all(&buf).unwrap();
            }
        })
    };

    let seen: Arc<Mutex<(Option<f64>, Option<f64>)>> = Arc::default();
    let peek = {
        let (seen, other) = (seen.clone(), other.clone());
        policy::from_fn("peek", move |v: &mut View<'_>| {
            let rate = |v: &mut View<'_>, name: &str| {
                v.devices(NAME)
                    .find(|d| d.name == name)
                    .and_then(|d| d.rate)
            };
            *seen.lock().unwrap() = (rate(v, "lo"), rate(v, &other));
            true
        })
    };
    drop(rt.enter(vec![Need::policy(peek.clone())]).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    drop(rt.enter(vec![Need::policy(peek)]).unwrap());
    let (lo, idle) = *seen.lock().unwrap();
    let pick = rt
        .enter(vec![Need::policy(net::least_busy(vec![
            "lo".into(),
            other.clone(),
        ]))])
        .unwrap();
    let picked = pick.outcome().nodes.clone();
    drop(pick);
    stop.store(true, Ordering::Relaxed);
    source.join().unwrap();
    sink.join().unwrap();

    let (lo, idle) = (lo.expect("lo measured"), idle.expect("other measured"));
    eprintln!("lo {:.0} MB/s, {other} {:.3} MB/s", lo / 1e6, idle / 1e6);
    assert!(lo > 10e6, "loopback at {lo} B/s while streaming");
    assert!(idle < lo / 10.0, "{other} at {idle} B/s, lo at {lo}");
    let other_index = ifaces.iter().position(|i| *i == other).unwrap() as u32;
    assert_eq!(
        picked,
        vec![other_index],
        "least_busy took the streaming lo"
    );
}
