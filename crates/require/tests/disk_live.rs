//! `DiskRate` (a kind written with `Blocks::register_kind` on the
//! kernel's per-device byte counters) on real block devices: two loop devices this
//! test attaches to files it makes, one written by a thread of its own.
//! Policies see the written device's rate in bytes per second and the
//! other's near zero, and `least_busy` picks the idle one. Everything is
//! removed afterwards, also when an assertion fails. Skipped, with a
//! note, without root or `losetup`; fails
//! there instead under `ALLOT_STRICT_TESTS=1`.

use allot_require::disk::{self, NAME};
use allot_require::policy::{self, View};
use allot_require::{Blocks, Need};
use allot_testkit::loopdev::{LoopDevice, losetup_available};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn policies_see_which_disk_is_busy_and_pick_the_idle_one() {
    let root = rustix::process::geteuid().is_root();
    if !allot_testkit::prerequisite(root && losetup_available(), "root and losetup") {
        return;
    }
    let loops: Vec<LoopDevice> = (0..2)
        .map(|i| {
            let file = std::env::temp_dir()
                .join(format!("allot-disk-test-{}-{i}.img", std::process::id()));
            LoopDevice::attach(file, 32 << 20, 0).unwrap()
        })
        .collect();
    let devs: Vec<String> = loops.iter().map(|l| l.path().to_string()).collect();
    let ids: Vec<String> = loops.iter().map(LoopDevice::majmin).collect();

    let rt = Blocks::new(allot_topo::discover_live().unwrap(), true).into_static();
    rt.register_kind(disk::disk_rate()).unwrap();

    // A writer on the first device, O_DIRECT so the bytes reach it.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, dev) = (stop.clone(), devs[0].clone());
        std::thread::spawn(move || {
            let f = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&dev)
                .unwrap();
            let layout = std::alloc::Layout::from_size_align(1 << 16, 4096).unwrap();
            // SAFETY: non-zero size; freed below with the same layout.
            let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
            // SAFETY: `ptr` points at `layout.size()` zeroed bytes we own.
            let buf = unsafe { std::slice::from_raw_parts(ptr, layout.size()) };
            let mut off = 0u64;
            while !stop.load(Ordering::Relaxed) {
                f.write_all_at(buf, off).unwrap();
                off = (off + buf.len() as u64) % (32 << 20);
            }
            // SAFETY: allocated above with this layout.
            unsafe { std::alloc::dealloc(ptr, layout) };
        })
    };

    let seen: Arc<Mutex<Vec<Option<f64>>>> = Arc::default();
    let peek = {
        let (seen, ids) = (seen.clone(), ids.clone());
        policy::from_fn("peek", move |v: &mut View<'_>| {
            let rates = ids
                .iter()
                .map(|id| v.devices(NAME).find(|d| &d.name == id).and_then(|d| d.rate))
                .collect();
            *seen.lock().unwrap() = rates;
            true
        })
    };
    drop(rt.enter(vec![Need::policy(peek.clone())]).unwrap());
    std::thread::sleep(Duration::from_millis(500));
    drop(rt.enter(vec![Need::policy(peek)]).unwrap());
    let rates = seen.lock().unwrap().clone();
    let pick = rt
        .enter(vec![Need::policy(disk::least_busy(ids.clone()))])
        .unwrap();
    let picked = pick.outcome().nodes.clone();
    drop(pick);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();

    eprintln!("rates (B/s): written {:?}, idle {:?}", rates[0], rates[1]);
    let busy = rates[0].expect("the written device has a rate");
    let idle = rates[1].expect("the idle device has a rate");
    assert!(busy > 1e6, "the written device reads {busy} B/s");
    assert!(idle < busy / 100.0, "the idle device reads {idle} B/s");
    // The outcome names the device index within the kind: the idle one's.
    let kind_devs: Vec<String> = disk::disk_rate()
        .devices
        .iter()
        .map(|d| d.name.clone())
        .collect();
    let idle_index = kind_devs.iter().position(|n| n == &ids[1]).unwrap() as u32;
    assert_eq!(picked, vec![idle_index], "least_busy picked {picked:?}");
    drop(loops);
}
