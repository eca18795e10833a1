//! The broker on this machine, through its real socket, with real processes.

mod common;

use allot_client::Client;
use allot_proto::msg::{ErrorCode, HEADER_LEN, MAGIC, PROTOCOL_VERSION};
use allot_proto::{Conn, Reply, Request};
use allot_spec::CellSpec;
use allot_topo::CpuSet;
use common::*;
use std::time::{Duration, Instant};

fn backends() -> Vec<&'static str> {
    let mut b = vec!["affinity"];
    if prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        b.insert(0, "cgroup1");
    }
    b
}

fn register(c: &mut Client, name: &str, pid: u32) -> allot_client::Registration {
    c.register(name, CellSpec::default(), &[pid], false, false, |_, _| {})
        .expect("register")
}

#[test]
fn two_cells_share_the_cpus_and_a_killed_cell_is_reclaimed() {
    let all = allot_topo::allowed_cpus().unwrap();
    if !prerequisite(all.len() >= 2, "needs two CPUs") {
        return;
    }
    for backend in backends() {
        let d = Daemon::start(backend, &[]);
        let mut a = spinner();
        let b = spinner();
        let mut c = d.client();
        let ra = register(&mut c, "a", a.pid());
        let rb = register(&mut c, "b", b.pid());
        let (ga, gb) = (ra.page.page().read(), rb.page.page().read());
        assert_eq!(ga.cpus.len(), 1, "{backend}");
        assert_eq!(gb.cpus.len(), 1, "{backend}");
        assert!(
            !ga.cpus.intersects(&gb.cpus),
            "{backend}: {} and {}",
            ga.cpus,
            gb.cpus
        );
        assert_eq!(ga.cpus.union(&gb.cpus), all.take_first(2));
        // The kernel enforces it on every thread.
        assert!(
            thread_masks(a.pid())
                .iter()
                .all(|m| *m == ga.cpus.to_string()),
            "{backend}"
        );
        assert!(
            thread_masks(b.pid())
                .iter()
                .all(|m| *m == gb.cpus.to_string()),
            "{backend}"
        );
        let status = d.status();
        assert_eq!(status.cells.len(), 2);
        assert_eq!(status.broker.backend, backend);

        // SIGKILL a: b's page shows both CPUs.
        let seen = rb.page.page().futex_word();
        let t0 = Instant::now();
        a.kill9();
        let mut word = seen;
        let deadline = t0 + Duration::from_secs(5);
        while rb.page.page().read().cpus.len() < 2 && Instant::now() < deadline {
            rb.page.page().wait(word, Some(Duration::from_millis(100)));
            word = rb.page.page().futex_word();
        }
        let took = t0.elapsed();
        let g = rb.page.page().read();
        assert_eq!(
            g.cpus,
            all.take_first(2),
            "{backend}: survivor did not get both CPUs\n{}",
            d.log()
        );
        assert!(g.lent.is_empty());
        assert!(g.generation > gb.generation);
        assert!(eventually(Duration::from_secs(2), || thread_masks(b.pid())
            .iter()
            .all(|m| *m == g.cpus.to_string())));
        eprintln!("{backend}: reclaim took {took:?}");
        assert!(ra.page.page().read().released());
        drop(b);
    }
}

#[test]
fn broker_killed_and_restarted_moves_nothing() {
    for backend in backends() {
        let mut d = Daemon::start(backend, &[]);
        let a = spinner();
        let b = spinner();
        let mut c = d.client();
        let ra = register(&mut c, "a", a.pid());
        let rb = register(&mut c, "b", b.pid());
        let before = (ra.page.page().read(), rb.page.page().read());
        let masks = (thread_masks(a.pid()), thread_masks(b.pid()));
        drop(c);

        d.kill9();
        // Nothing moves while the broker is down; programs run on.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!((thread_masks(a.pid()), thread_masks(b.pid())), masks);
        d.spawn();
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(
            (thread_masks(a.pid()), thread_masks(b.pid())),
            masks,
            "{backend}: restart moved CPUs\n{}",
            d.log()
        );
        let status = d.status();
        let cells = &status.cells;
        assert_eq!(cells.len(), 2, "{status:?}");
        for (reg, g) in [(&ra, before.0), (&rb, before.1)] {
            let cell = cells
                .iter()
                .find(|x| x.id == reg.cell)
                .expect("cell adopted");
            assert_eq!(cell.cpus, g.cpus.to_string());
            assert_eq!(
                cell.generation, g.generation,
                "{backend}: generation changed on restart"
            );
        }
        // Clients rejoin with their page and keep reading it.
        let mut c2 = d.client();
        let again = c2
            .rejoin(ra.cell, ra.token, Some(&ra.page))
            .expect("rejoin");
        assert_eq!(again.page().read().cpus, before.0.cpus);
        c2.rejoin(rb.cell, rb.token, Some(&rb.page))
            .expect("rejoin");
        assert_ne!(
            ra.page.page().read().instance,
            before.0.instance,
            "the new broker writes the old page"
        );
        // And reclaim still works for adopted cells.
        drop(a);
        assert!(
            eventually(Duration::from_secs(5), || rb.page.page().read().cpus.len()
                == 2),
            "{}",
            d.log()
        );
        drop(b);
        assert!(eventually(Duration::from_secs(5), || d
            .status()
            .cells
            .is_empty()));
    }
}

fn raw(conn: &mut Conn, bytes: &[u8]) -> Reply {
    conn.send_raw(bytes).unwrap();
    conn.recv().unwrap().0
}

fn header(version: u16, kind: u16, len: u32) -> Vec<u8> {
    let mut m = Vec::new();
    m.extend_from_slice(&MAGIC.to_le_bytes());
    m.extend_from_slice(&version.to_le_bytes());
    m.extend_from_slice(&kind.to_le_bytes());
    m.extend_from_slice(&0u16.to_le_bytes());
    m.extend_from_slice(&len.to_le_bytes());
    m
}

#[test]
fn malformed_messages_get_errors_and_the_broker_keeps_serving() {
    let d = Daemon::start("dry-run", &[]);
    let mut conn = Conn::connect(&d.socket).unwrap();
    conn.set_timeout(Some(Duration::from_secs(5))).unwrap();
    let code = |r: Reply| match r {
        Reply::Error { code, .. } => code,
        other => panic!("expected an error, got {other:?}"),
    };
    assert_eq!(code(raw(&mut conn, b"garbage")), ErrorCode::Malformed);
    assert_eq!(
        code(raw(&mut conn, &header(PROTOCOL_VERSION + 1, 0x08, 0))),
        ErrorCode::UnsupportedVersion
    );
    assert_eq!(
        code(raw(&mut conn, &header(PROTOCOL_VERSION, 0x7f, 0))),
        ErrorCode::UnknownKind
    );
    // Truncated Release (needs 8 body bytes).
    let mut t = header(PROTOCOL_VERSION, 0x07, 3);
    t.extend_from_slice(&[1, 2, 3]);
    assert_eq!(code(raw(&mut conn, &t)), ErrorCode::Malformed);
    // Length field lying.
    assert_eq!(
        code(raw(&mut conn, &header(PROTOCOL_VERSION, 0x08, 100))),
        ErrorCode::Malformed
    );
    // Oversized datagram.
    let mut big = header(PROTOCOL_VERSION, 0x01, (100_000 - HEADER_LEN) as u32);
    big.resize(100_000, b'a');
    assert_eq!(code(raw(&mut conn, &big)), ErrorCode::Oversized);
    // One-way kinds (Report 0x05, KindRelease 0x0D, PoolStats 0x0F) are
    // never answered, whatever is wrong with the rest of the datagram:
    // the next call reads its own reply.
    for bad in [
        header(PROTOCOL_VERSION + 1, 0x05, 0),
        header(PROTOCOL_VERSION, 0x05, 100),
        header(PROTOCOL_VERSION, 0x0D, 3),
        {
            let mut m = header(PROTOCOL_VERSION, 0x0F, 0);
            m[6] = 1; // reserved flags
            m
        },
        {
            let mut m = header(PROTOCOL_VERSION, 0x05, (100_000 - HEADER_LEN) as u32);
            m.resize(100_000, 0);
            m
        },
    ] {
        conn.send_raw(&bad).unwrap();
    }
    assert!(matches!(
        conn.call(&Request::Hello { client: "t".into() }).unwrap().0,
        Reply::Welcome { .. }
    ));
    // The same connection still works.
    assert!(matches!(
        conn.call(&Request::Hello { client: "t".into() }).unwrap().0,
        Reply::Welcome { .. }
    ));
}

#[test]
fn flooding_one_connection_does_not_starve_others() {
    let d = Daemon::start("dry-run", &[]);
    let flood = Conn::connect(&d.socket).unwrap();
    // Fill the socket with requests and never read the replies.
    let sock = d.socket.clone();
    let flooder = std::thread::spawn(move || {
        let _keep = &sock;
        let msg = Request::Status.encode();
        let mut sent = 0u32;
        while sent < 20_000 {
            if flood.send_raw(&msg).is_err() {
                break;
            }
            sent += 1;
        }
        sent
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut worst = Duration::ZERO;
    for _ in 0..20 {
        let mut c = d.client();
        c.set_timeout(Some(Duration::from_secs(5))).unwrap();
        let t = Instant::now();
        c.hello("victim")
            .expect("served while another client floods");
        worst = worst.max(t.elapsed());
    }
    let sent = flooder.join().unwrap();
    eprintln!("flooder sent {sent} requests; worst hello latency {worst:?}");
    assert!(worst < Duration::from_secs(1));
    assert!(d.log().contains("not reading its replies") || sent < 20_000);
}

/// A raw protocol client in Python, run as another user.
const PY_CLIENT: &str = r#"
import socket, struct, sys
path, cell, version = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
s.connect(path)
body = struct.pack('<Q', cell)
s.send(struct.pack('<HHHHI', 0xA110, version, 0x07, 0, len(body)) + body)
reply = s.recv(65536)
magic, ver, kind, flags, n = struct.unpack('<HHHHI', reply[:12])
code, req, mlen = struct.unpack('<HHH', reply[12:18])
print(kind, code, reply[18:18 + mlen].decode())
"#;

#[test]
fn another_user_cannot_release_a_cell() {
    if !prerequisite(
        allot_testkit::user::can_switch_users(),
        "needs root and setpriv to act as another user",
    ) {
        return;
    }
    let d = Daemon::start("dry-run", &[]);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let p = sleeper();
    let mut c = d.client();
    let r = register(&mut c, "root's", p.pid());
    let out = std::process::Command::new("/usr/bin/setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            allot_testkit::PYTHON,
            "-c",
            PY_CLIENT,
        ])
        .arg(&d.socket)
        .arg(r.cell.to_string())
        .arg(PROTOCOL_VERSION.to_string())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(&format!("133 {} ", ErrorCode::PermissionDenied as u16)),
        "{text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("uid 65534 may not act on it"), "{text}");
    assert_eq!(d.status().cells.len(), 1, "the cell survived");
    let _ = CpuSet::new();
}

#[test]
fn stopping_the_broker_removes_its_cgroups() {
    if !prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        return;
    }
    let mut d = Daemon::start("cgroup1", &[]);
    {
        let p = sleeper();
        let mut c = d.client();
        let _r = register(&mut c, "x", p.pid());
        assert!(d.cgroup_dirs()[0].exists());
    }
    // Its process is gone, so the cell ends; then the broker stops clean.
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .cells
        .is_empty()));
    assert_eq!(d.stop(), Some(0));
    for dir in d.cgroup_dirs() {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

#[test]
fn the_event_loop_runs_at_real_time_priority_and_what_it_starts_does_not() {
    if !prerequisite(
        rustix::process::geteuid().is_root(),
        "root (CAP_SYS_NICE for the real-time class)",
    ) {
        return;
    }
    const SCHED_OTHER: u32 = 0;
    const SCHED_FIFO: u32 = 1;
    let d = Daemon::start("affinity", &[]);
    // A cell whose runtimes a status reads starts the mappings reader
    // thread, which the loop creates after taking its class.
    let s = spinner();
    let mut c = d.client();
    let _r = register(&mut c, "a", s.pid());
    assert!(!d.status().cells.is_empty());
    if !prerequisite(
        !d.log().contains("real-time priority refused"),
        "the real-time class (the kernel refused it here)",
    ) {
        return;
    }
    let pid = d.pid().expect("the broker runs");
    let threads = allot_testkit::thread_classes(pid);
    let main = threads.iter().find(|t| t.0 == pid).unwrap();
    // It holds the class, unless it gave it up, busy, and said so (a
    // loaded machine can make a debug build's start that dear).
    let gave_up = d.log().contains("back to SCHED_OTHER");
    if !gave_up {
        assert_eq!((main.2, main.3), (SCHED_FIFO, 1), "{threads:?}");
    }
    assert!(
        threads.iter().any(|t| t.1 == "allot-maps"),
        "the reader thread started: {threads:?}"
    );
    for t in threads.iter().filter(|t| t.0 != pid) {
        assert_eq!(t.2, SCHED_OTHER, "{t:?} is ordinary: {threads:?}");
    }
    assert!(d.log().contains("event loop: SCHED_FIFO 1"), "{}", d.log());
    drop(d);
    // `realtime = false` keeps the loop ordinary.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("allotd.toml");
    std::fs::write(&cfg, "realtime = false\n").unwrap();
    let d = Daemon::start("affinity", &["--config", cfg.to_str().unwrap()]);
    // The socket listens before the loop starts and says its class.
    assert!(
        eventually(Duration::from_secs(5), || d
            .log()
            .contains("realtime = false")),
        "{}",
        d.log()
    );
    let pid = d.pid().expect("the broker runs");
    let threads = allot_testkit::thread_classes(pid);
    let main = threads.iter().find(|t| t.0 == pid).unwrap();
    assert_eq!(main.2, SCHED_OTHER, "{threads:?}");
}
