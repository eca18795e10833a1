//! Named channels through a real broker: ends opened by name from two
//! connections and from `allot channel`, the broker's accounting in its
//! status, and the other side told when an end's process is killed.

mod common;

use allot_client::ChannelEnd;
use allot_client::channel::{Full, RecvError, SendError};
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn soon() -> Option<Instant> {
    Some(Instant::now() + Duration::from_secs(20))
}

#[test]
fn two_connections_share_a_named_channel_and_see_each_other_go() {
    let d = Daemon::start("dry-run", &[]);
    let mut a = d.client();
    let mut b = d.client();
    let mut rx = a.channel_receiver("jobs", 8, 100).unwrap();
    // The second opener takes the channel as it is (0, 0), and a size
    // larger than the creator's is refused with the sizes it has.
    let e = b.channel_sender("jobs", 0, 1000).unwrap_err();
    assert!(e.to_string().contains("exists with 8 slots"), "{e}");
    let tx = b.channel_sender("jobs", 0, 0).unwrap();
    let st = d.status();
    assert_eq!(st.channels.len(), 1, "{:?}", st.channels);
    let c = &st.channels[0];
    assert_eq!(
        (c.name.as_str(), c.slots, c.senders, c.receiver),
        ("jobs", 8, 1, true)
    );
    let sender = std::thread::spawn(move || {
        for i in 0..10_000u32 {
            tx.send(&i.to_le_bytes(), Full::Wait).unwrap();
        }
        tx
    });
    let mut buf = Vec::new();
    for i in 0..10_000u32 {
        rx.recv(&mut buf, soon()).unwrap();
        assert_eq!(buf, i.to_le_bytes());
    }
    let tx = sender.join().unwrap();
    // The sender's connection closes: the receiver learns it.
    drop(b);
    assert_eq!(rx.recv(&mut buf, soon()), Err(RecvError::Disconnected));
    // The receiver closes its end by request: a sender learns that.
    // Nothing holds it then and nothing waits in it: the broker drops it.
    a.close_channel("jobs", ChannelEnd::Receive).unwrap();
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .channels
        .is_empty()));
    assert_eq!(tx.try_send(b"x"), Err(SendError::Disconnected));
}

#[test]
fn allot_channel_carries_lines_and_a_killed_sender_is_seen() {
    let d = Daemon::start("dry-run", &[]);
    let sock = d.socket.to_str().unwrap();
    let recv = Command::new(ALLOT)
        .args(["channel", "--socket", sock, "recv", "lines"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(10), || d
        .status()
        .channels
        .iter()
        .any(|c| c.name == "lines" && c.receiver)));
    // A sender that is killed (SIGKILL: it closes nothing itself) after
    // its lines went out.
    let mut send = Command::new(ALLOT)
        .args(["channel", "--socket", sock, "send", "lines"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = send.stdin.take().unwrap();
    writeln!(input, "first line\nsecond line").unwrap();
    input.flush().unwrap();
    // The sender is killed only once the receiver printed both lines: a
    // sender that is registered has not necessarily read its input yet.
    let mut recv = recv;
    let lines = lines_of(recv.stdout.take().unwrap());
    for want in ["first line", "second line"] {
        let got = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("the receiver printed no {want:?}: {e}"));
        assert_eq!(got, want);
    }
    send.kill().unwrap();
    send.wait().unwrap();
    // The receiver ends, printing nothing more: every sender is gone.
    let out = recv.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(lines.recv_timeout(Duration::from_secs(5)).is_err());
    drop(input);
}

/// The lines a child prints, read on a thread so a test can wait for
/// each with a deadline; the channel closes when the child's end does.
fn lines_of(out: std::process::ChildStdout) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

#[test]
fn bad_names_and_sizes_get_clear_errors() {
    let d = Daemon::start("dry-run", &[]);
    let mut c = d.client();
    let e = c.channel_sender("../etc", 0, 0).unwrap_err();
    assert!(e.to_string().contains("letters, digits"), "{e}");
    let e = c.channel_sender("big", 4, 64 << 20).unwrap_err();
    assert!(e.to_string().contains("over the largest slot"), "{e}");
    let out = Command::new(ALLOT)
        .args([
            "channel",
            "--socket",
            d.socket.to_str().unwrap(),
            "send",
            "a b",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot open channel a b to send"), "{err}");
    // Nothing was made.
    assert!(d.status().channels.is_empty());
}

#[test]
fn allot_run_passes_channel_ends_to_its_program() {
    let d = Daemon::start("dry-run", &[]);
    let sock = d.socket.to_str().unwrap();
    // The receiver is a program under `allot run` that takes the end it
    // inherited; the sender, another.
    let recv = allot_run(
        &d,
        &[
            "--channel",
            "pipe.1:recv",
            "--",
            ALLOT,
            "channel",
            "recv",
            "pipe.1",
            "--inherited",
            "--count",
            "3",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut send = allot_run(
        &d,
        &[
            "--channel",
            "pipe.1:send",
            "--",
            ALLOT,
            "channel",
            "send",
            "pipe.1",
            "--inherited",
        ],
    )
    .stdin(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let mut input = send.stdin.take().unwrap();
    writeln!(input, "a\nb\nc").unwrap();
    drop(input);
    let sent = send.wait_with_output().unwrap();
    assert!(
        sent.status.success(),
        "{}",
        String::from_utf8_lossy(&sent.stderr)
    );
    let out = recv.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "a\nb\nc\n");
    // Both programs exited, so did their `allot run`s: no end is held.
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .channels
        .is_empty()));
    // A program run without the end it asks for is told how to get it.
    let out = Command::new(ALLOT)
        .args(["channel", "--socket", sock, "recv", "pipe.1", "--inherited"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("allot run --channel pipe.1:recv"), "{err}");
}

/// A message-triggered cell on the cgroup v1 backend: suspended (frozen,
/// holding no CPU) while no message comes, woken with its grant by each
/// message, and its program sees every message.
#[test]
fn a_message_triggered_program_sleeps_until_a_message_wakes_it() {
    if !cgroup1_here() {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let recv = allot_run(
        &d,
        &[
            "--name",
            "msg",
            "--message-idle",
            "300ms",
            "--channel",
            "act:recv",
            "--",
            ALLOT,
            "channel",
            "recv",
            "act",
            "--inherited",
            "--latency",
            "--count",
            "3",
        ],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let asleep = || {
        d.status()
            .cells
            .iter()
            .find(|c| c.name == "msg")
            .is_some_and(|c| c.waiting_for_message)
    };
    assert!(eventually(Duration::from_secs(10), asleep), "{}", d.log());
    let id = d
        .status()
        .cells
        .iter()
        .find(|c| c.name == "msg")
        .unwrap()
        .id;
    let state = format!(
        "/sys/fs/cgroup/freezer/{}/cell-{id}/freezer.state",
        d.cgroup
    );
    assert!(
        eventually(Duration::from_secs(5), || std::fs::read_to_string(&state)
            .is_ok_and(|s| s.trim() == "FROZEN")),
        "{state}"
    );
    // Three messages a second apart: each wakes it; between them it
    // sleeps again.
    let out = Command::new(ALLOT)
        .args([
            "channel",
            "--socket",
            d.socket.to_str().unwrap(),
            "ping",
            "act",
            "--count",
            "3",
            "--every",
            "1000",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = recv.wait_with_output().unwrap();
    assert!(
        got.status.success(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let lat: Vec<f64> = String::from_utf8_lossy(&got.stdout)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    eprintln!("send → seen by the woken program, µs: {lat:?}");
    assert_eq!(lat.len(), 3);
    // (Loose bounds: this checks that it wakes, not how fast; the
    // benchmark measures that, scripts/bench-activation.sh.)
    assert!(lat.iter().all(|&us| us < 2_000_000.0), "{lat:?}");
    assert!(
        d.log().matches("activated (a message arrived)").count() >= 2,
        "it slept between messages: {}",
        d.log()
    );
}

/// `allot channel recv NAME` (its output captured) and `allot channel send
/// NAME` against `d`, with the sender's standard input.
fn receiver_and_sender(d: &Daemon, name: &str) -> (Child, Child, ChildStdin) {
    let sock = d.socket.to_str().unwrap();
    let recv = Command::new(ALLOT)
        .args(["channel", "--socket", sock, "recv", name])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut send = Command::new(ALLOT)
        .args(["channel", "--socket", sock, "send", name])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let input = send.stdin.take().unwrap();
    (recv, send, input)
}

/// The broker is killed and restarted under two `allot channel` ends:
/// they hand their channel back, messages keep flowing, the new broker
/// lists the channel again and still tells the receiver when the sender
/// is killed.
#[test]
fn channels_survive_a_broker_restart() {
    let mut d = Daemon::start("dry-run", &[]);
    let (recv, mut send, mut input) = receiver_and_sender(&d, "kept");
    writeln!(input, "before").unwrap();
    input.flush().unwrap();
    let both = |d: &Daemon| {
        d.status()
            .channels
            .iter()
            .any(|c| c.name == "kept" && c.senders == 1 && c.receiver)
    };
    assert!(eventually(Duration::from_secs(10), || both(&d)));
    d.kill9();
    d.spawn();
    assert!(
        eventually(Duration::from_secs(10), || both(&d)),
        "the ends came back: {:?}\n{}",
        d.status().channels,
        d.log()
    );
    writeln!(input, "after").unwrap();
    input.flush().unwrap();
    // Past the rejoin grace the counts are the ends that came back: both.
    std::thread::sleep(Duration::from_millis(2500));
    assert!(both(&d), "{:?}", d.status().channels);
    send.kill().unwrap();
    send.wait().unwrap();
    let out = recv.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "before\nafter\n");
    drop(input);
}

/// A sender killed while no broker runs never comes back: once the new
/// broker's rejoin grace is over, the receiver is told it is gone.
#[test]
fn an_end_that_died_with_the_broker_down_is_settled_after_the_restart() {
    let mut d = Daemon::start("dry-run", &[]);
    let (mut recv, mut send, mut input) = receiver_and_sender(&d, "orphan");
    writeln!(input, "only").unwrap();
    input.flush().unwrap();
    // The message arrived: both ends are connected (on a busy machine the
    // receiver may connect well after the sender).
    let mut out = BufReader::new(recv.stdout.take().unwrap());
    let mut first = String::new();
    out.read_line(&mut first).unwrap();
    assert_eq!(first, "only\n");
    d.kill9();
    send.kill().unwrap();
    send.wait().unwrap();
    d.spawn();
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    let status = recv.wait_with_output().unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    assert_eq!(rest, "", "nothing after the sender died");
    drop(input);
}
