//! What `allot run`'s launch asks of the broker, against a stand-in broker
//! that records every request: one registration whose answer it waits for,
//! the program added as a member without waiting, and nothing else — no
//! probe before, no status, no release after (the cell ends with its last
//! member). What the launch does, not how fast a shared machine let it.

mod common;

use allot_proto::msg::{Reply, Request};
use allot_proto::transport;
use common::ALLOT;
use rustix::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The requests one connection sent, with the connecting process's pid.
struct Seen {
    peer: u32,
    requests: Vec<Request>,
}

/// Serves one connection on `socket` as a broker would for a launch:
/// `Registered` with a grant page for a registration, `Ok` for anything
/// else; returns what it was asked once the client hangs up.
fn stand_in_broker(socket: &Path) -> std::thread::JoinHandle<Seen> {
    let listener = transport::listen(socket).unwrap();
    std::thread::spawn(move || {
        let sock = accept_within(&listener, Duration::from_secs(30));
        let peer = rustix::net::sockopt::socket_peercred(&sock)
            .unwrap()
            .pid
            .as_raw_nonzero()
            .get() as u32;
        let mut buf = vec![0u8; allot_proto::msg::MAX_MESSAGE];
        let mut requests = Vec::new();
        // Kept until the client is gone: the page the reply handed over.
        let mut pages = Vec::new();
        while let Ok(Some(d)) = transport::recv(sock.as_fd(), &mut buf, false) {
            let req = Request::decode(&buf[..d.len]).unwrap();
            match &req {
                Request::Register { .. } => {
                    let page = allot_proto::PageMap::create(7, 1).unwrap();
                    let cpus = allot_topo::allowed_cpus().unwrap();
                    page.page().publish(&allot_proto::Grant {
                        cell: 7,
                        generation: 1,
                        instance: 1,
                        threads: cpus.len() as u32,
                        entitled: cpus.len() as u32,
                        share_milli: 1000 * cpus.len() as u32,
                        cpus,
                        ..Default::default()
                    });
                    let reply = Reply::Registered {
                        cell: 7,
                        token: 9,
                        generation: 1,
                    };
                    transport::send_fds(sock.as_fd(), &reply.encode(), &[page.fd()]).unwrap();
                    pages.push(page);
                }
                // `allot run` adds its program without waiting for the
                // answer, and may have exited (a program that ends at once)
                // before it is written: a broker ignores that too.
                _ => {
                    let _ = transport::send(sock.as_fd(), &Reply::Ok.encode(), None);
                }
            }
            requests.push(req);
        }
        Seen { peer, requests }
    })
}

fn accept_within(listener: &OwnedFd, limit: Duration) -> OwnedFd {
    let until = Instant::now() + limit;
    loop {
        match rustix::net::accept_with(listener, rustix::net::SocketFlags::CLOEXEC) {
            Ok(s) => return s,
            Err(rustix::io::Errno::AGAIN) if Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("no connection: {e}"),
        }
    }
}

/// A program that ends at once and one that runs on past the moment the
/// helper threads start: each launch sends its registration, moving
/// itself in (`joins_itself`), then adds the program it started, and
/// nothing more.
#[test]
fn a_launch_registers_once_and_adds_its_program_without_asking_more() {
    for program in [&["true"][..], &["sh", "-c", "sleep 0.2; echo $$"]] {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("b.sock");
        let broker = stand_in_broker(&socket);
        let out = Command::new(ALLOT)
            .args(["run", "--no-start", "--socket"])
            .arg(&socket)
            .arg("--")
            .args(program)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{program:?}: {err}");
        assert!(!err.contains("unconfined"), "{program:?}: {err}");
        let seen = broker.join().unwrap();
        let kinds: Vec<&str> = seen
            .requests
            .iter()
            .map(|r| match r {
                Request::Register { .. } => "Register",
                Request::AddMember { .. } => "AddMember",
                _ => "other",
            })
            .collect();
        assert_eq!(
            kinds,
            ["Register", "AddMember"],
            "{program:?}: {:?}",
            seen.requests
        );
        let Request::Register {
            members,
            joins_itself,
            wait,
            ..
        } = &seen.requests[0]
        else {
            unreachable!()
        };
        assert!(members.is_empty(), "the connecting process itself");
        assert!(*joins_itself && !*wait);
        let Request::AddMember { cell, pid } = seen.requests[1] else {
            unreachable!()
        };
        assert_eq!(cell, 7);
        assert_ne!(pid, seen.peer, "the program, not allot run");
        if program[0] == "sh" {
            let printed: u32 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
            assert_eq!(pid, printed, "the program's own pid");
        }
    }
}
