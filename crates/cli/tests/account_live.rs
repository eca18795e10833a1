//! The one account, live: a CPU a process holds exclusively through
//! `require` leaves every other cell's grant and cpuset, inside a cell or
//! outside every cell, and comes back when it is given back.

mod common;

use allot_require::{Blocks, Need};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

/// The child role: holds the first CPU it may run on through
/// `require(cpu(N, 1.0))`, prints "held N", and keeps it until killed.
/// Selected by ALLOT_ACCOUNT_CHILD=1.
#[test]
fn child_role() {
    if std::env::var("ALLOT_ACCOUNT_CHILD").is_err() {
        return;
    }
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let mine = rustix::thread::sched_getaffinity(None).unwrap();
    let cpu = (0..1024).find(|&c| mine.is_set(c)).unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    let _s = rt.enter(vec![Need::device("cpu", cpu, 1.0)]).unwrap();
    println!("held {cpu}");
    println!("holder {}", std::process::id());
    std::thread::sleep(Duration::from_secs(30));
}

/// What the broker granted cell `name`, when its cgroup v1 cpuset says the
/// same (with the cgroup1 backend); `None` before the cell exists, and
/// while the two differ (a status read just before a change reaches the
/// kernel, or just after: callers wait for agreement).
fn cpus_of(d: &Daemon, name: &str) -> Option<String> {
    let st = d.status();
    let c = st.cells.iter().find(|c| c.name == name)?;
    if d.backend == "cgroup1" {
        let p = format!(
            "/sys/fs/cgroup/cpuset/{}/cell-{}/cpuset.cpus",
            d.cgroup, c.id
        );
        let set = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"));
        if set.trim() != c.cpus {
            return None;
        }
    }
    Some(c.cpus.clone())
}

fn wait_for(d: &Daemon, name: &str, want: &str) {
    assert!(
        eventually(Duration::from_secs(5), || cpus_of(d, name).as_deref()
            == Some(want)),
        "cell {name} runs on {:?} (None: its cpuset is not its grant), not {want}\n{}",
        cpus_of(d, name),
        d.log()
    );
}

#[test]
fn a_cpu_held_outside_every_cell_leaves_the_cells_cpuset() {
    if !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let _k = Killed(&d, vec![cell(&d, "spin", &[], SPIN2)]);
    wait_for(&d, "spin", "0-1");
    // This test process runs outside every cell.
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(&d.socket)).into_static();
    assert!(rt.coordinated());
    let s = rt.enter(vec![Need::device("cpu", 1, 1.0)]).unwrap();
    wait_for(&d, "spin", "0");
    assert_eq!(d.status().machine.held_outside, "1");
    drop(s);
    wait_for(&d, "spin", "0-1");
    assert_eq!(d.status().machine.held_outside, "");
}

#[test]
fn a_cpu_held_in_a_cell_stays_its_own_and_no_other_cell_runs_there() {
    if !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let mut k = Killed(&d, vec![cell(&d, "b", &[], SPIN)]);
    wait_for(&d, "b", "0-1");
    let mut holder = allot_run(&d, &["--name", "a", "--"]);
    holder
        .args(role("child_role"))
        .env("ALLOT_ACCOUNT_CHILD", "1")
        .env("ALLOT_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut holder = {
        use std::os::unix::process::CommandExt;
        holder.process_group(0).spawn().expect("allot run")
    };
    let out = BufReader::new(holder.stdout.take().unwrap());
    k.1.push(holder);
    // Read through the holder's last line ("holder PID"): a reader
    // dropped earlier would break its pipe and end it.
    let mut held = None;
    for l in out.lines().map_while(Result::ok) {
        if let Some(i) = l.find("held ") {
            held = Some(l[i + 5..].trim().to_string());
        }
        if l.contains("holder ") {
            break;
        }
    }
    let held = held.unwrap_or_else(|| panic!("the holder never held a CPU\n{}", d.log()));
    let other = if held == "0" { "1" } else { "0" };
    wait_for(&d, "a", &held);
    wait_for(&d, "b", other);
    // Two more best-effort cells: four on two CPUs would share a pool;
    // a keeps the CPU its process holds, the others share the rest.
    k.1.push(cell(&d, "c", &[], SPIN));
    k.1.push(cell(&d, "e", &[], SPIN));
    for name in ["b", "c", "e"] {
        wait_for(&d, name, other);
    }
    wait_for(&d, "a", &held);
    let st = d.status();
    let a = st.cells.iter().find(|c| c.name == "a").unwrap();
    assert_eq!(a.held, held);
    assert!(!a.stacked);
}

/// The I/O child role: holds `io(ALLOT_IO_DEV, 700)` through the broker and
/// prints "held", or prints "never: …" when the broker refuses it as never.
#[test]
fn io_child_role() {
    let Ok(dev) = std::env::var("ALLOT_IO_DEV") else {
        return;
    };
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated(), "no broker at {socket}");
    match rt.enter(vec![Need::device("io", &dev, 700.0)]) {
        Ok(_s) => {
            println!("held");
            std::thread::sleep(Duration::from_secs(30));
        }
        Err(e) => println!("never: {e}"),
    }
}

/// A cell's process holding an I/O weight gives the cell that weight: its
/// blkio group (cgroup v1, BFQ on a loop device the test attaches) says so;
/// on a device scheduled by mq-deadline the request is an error.
#[test]
fn an_io_weight_held_in_a_cell_reaches_the_cells_blkio_group() {
    if backend() != "cgroup1"
        || !prerequisite(
            std::path::Path::new("/sys/fs/cgroup/blkio/cgroup.procs").exists(),
            "a cgroup v1 blkio hierarchy",
        )
        || !prerequisite(
            allot_testkit::loopdev::losetup_available(),
            "losetup and loop devices",
        )
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dev = allot_testkit::loopdev::LoopDevice::attach(tmp.path().join("disk"), 8 << 20, 0)
        .expect("a loop device");
    if !prerequisite(dev.set_scheduler("bfq").is_ok(), "BFQ") {
        return;
    }
    // The broker lists the block devices when it starts.
    let d = Daemon::start("cgroup1", &[]);
    let run = |name: &str| {
        let mut c = allot_run(&d, &["--name", name, "--"]);
        c.args(role("io_child_role"))
            .env("ALLOT_IO_DEV", dev.majmin())
            .env("ALLOT_SOCKET", &d.socket)
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        use std::os::unix::process::CommandExt;
        c.process_group(0).spawn().expect("allot run")
    };
    let mut holder = run("io");
    let out = BufReader::new(holder.stdout.take().unwrap());
    let _k = Killed(&d, vec![holder]);
    let said = out
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("held") || l.contains("never"))
        .unwrap_or_default();
    assert!(said.contains("held"), "{said}\n{}", d.log());
    let st = d.status();
    let c = st.cells.iter().find(|c| c.name == "io").expect("the cell");
    let group = format!("/sys/fs/cgroup/blkio/{}/cell-{}", d.cgroup, c.id);
    let weights = std::fs::read_to_string(format!("{group}/blkio.bfq.weight_device")).unwrap();
    assert!(
        weights.contains(&format!("{} 700", dev.majmin())),
        "{weights}\n{}",
        d.log()
    );
    let procs = std::fs::read_to_string(format!("{group}/cgroup.procs")).unwrap();
    assert!(
        c.pids.iter().all(|p| procs.contains(&p.to_string())),
        "{procs} lacks {:?}",
        c.pids
    );
    // Another cell asks on a device whose scheduler ignores weights.
    dev.set_scheduler("mq-deadline").unwrap();
    let mut refused = run("io2");
    // (Read to the end: the child's test harness prints after it.)
    let said = BufReader::new(refused.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains("held") || l.contains("never"))
        .collect::<Vec<_>>()
        .join("\n");
    let _ = refused.wait();
    assert!(
        said.contains("never") && said.contains("BFQ"),
        "{said}\n{}",
        d.log()
    );
}

/// Inside one cell, a process that never asked keeps off the CPU another
/// process of the cell holds: its threads' affinity is the grant minus it.
#[test]
fn the_cells_other_processes_keep_off_a_cpu_one_of_them_holds() {
    if !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    // A spinner, then the holder (the cell's registered process) in its
    // place: both in cell a.
    let mut run = allot_run(&d, &["--name", "a", "--", "sh", "-c"]);
    run.arg("while :; do :; done & echo spinner $!; exec \"$0\" \"$@\"")
        .args(role("child_role"))
        .env("ALLOT_ACCOUNT_CHILD", "1")
        .env("ALLOT_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = {
        use std::os::unix::process::CommandExt;
        run.process_group(0).spawn().expect("allot run")
    };
    let out = BufReader::new(child.stdout.take().unwrap());
    let _k = Killed(&d, vec![child]);
    let (mut spinner, mut held) = (None, None);
    for l in out.lines().map_while(Result::ok) {
        let word = |key: &str| l.find(key).map(|i| l[i + key.len()..].trim().to_string());
        spinner = spinner.or_else(|| word("spinner ").and_then(|p| p.parse::<u32>().ok()));
        held = held.or_else(|| word("held "));
        if l.contains("holder ") {
            break;
        }
    }
    let (spinner, held) = (
        spinner.expect("the spinner's pid"),
        held.expect("a held CPU"),
    );
    let mut grant = None;
    assert!(
        eventually(Duration::from_secs(5), || {
            grant = cpus_of(&d, "a");
            grant.is_some()
        }),
        "cell a, its cpuset its grant"
    );
    let grant = grant.unwrap();
    let rest: String = allot_topo::CpuSet::parse_list(&grant)
        .unwrap()
        .difference(&allot_topo::CpuSet::parse_list(&held).unwrap())
        .to_string();
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = thread_masks(spinner);
            !m.is_empty() && m.iter().all(|x| *x == rest)
        }),
        "the spinner runs on {:?}, not {rest} (grant {grant}, held {held})\n{}",
        thread_masks(spinner),
        d.log()
    );
}

/// A kind of the program's own with operations (they do nothing here).
#[derive(Debug)]
struct NoOps;

impl allot_require::kind::KindOps for NoOps {
    fn restrict(&self, _amounts: &[Option<f64>]) -> std::io::Result<()> {
        Ok(())
    }
}

/// `Link`: two devices of 1.0, registered with operations.
fn register_link(rt: &Blocks) {
    use allot_require::kind::{Device, Kind};
    let dev = |name: &str| Device {
        name: name.into(),
        min: 0.0,
        max: 1.0,
    };
    rt.register_kind(Kind::with_ops(
        "Link",
        vec![dev("a"), dev("b")],
        std::sync::Arc::new(NoOps),
    ))
    .unwrap();
}

/// The child role of the test below: registers `Link`, says it asks, takes
/// device `a` whole, says it got it. Selected by ALLOT_KIND_CHILD=1.
#[test]
fn kind_child_role() {
    if std::env::var("ALLOT_KIND_CHILD").is_err() {
        return;
    }
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    register_link(rt);
    println!("asking");
    let _s = rt.enter(vec![Need::device("Link", 0, 1.0)]).unwrap();
    println!("got");
}

/// Poli-C §4.2.3: a kind registered with operations is the machine's, as
/// its kinds are registered through policd. Two processes register the same
/// `Link`; while one holds device `a` whole, the other's request for it
/// waits, and gets it once the first lets go. (Before, each process had
/// its own `a`, and both held it "exclusively" at once.)
#[test]
fn a_kind_with_operations_is_exclusive_across_processes() {
    let d = Daemon::start(backend(), &[]);
    let m = allot_topo::discover_live().unwrap();
    let rt = Blocks::with_broker(m, false, Some(&d.socket)).into_static();
    register_link(rt);
    let held = rt.enter(vec![Need::device("Link", 0, 1.0)]).unwrap();
    let argv = role("kind_child_role");
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("ALLOT_KIND_CHILD", "1")
        .env("ALLOT_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for l in out.lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    let said = |want: &str, within: Duration| {
        let until = std::time::Instant::now() + within;
        while let Some(left) = until.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(l) if l.contains(want) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    };
    assert!(said("asking", Duration::from_secs(20)), "{}", d.log());
    // Asking, it must not get `a` while this process holds it.
    assert!(
        !said("got", Duration::from_millis(300)),
        "the other process took a device held here"
    );
    drop(held);
    assert!(said("got", Duration::from_secs(10)), "{}", d.log());
    assert!(child.wait().unwrap().success());
}
