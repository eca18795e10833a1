//! Channels between threads and between processes: nothing lost, nothing
//! torn, full rings wait or fail, closed ends are seen, and memory that is
//! not a channel is refused.

use allot_channel::{Channel, Full, OpenError, RecvError, SendError};
use rustix::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A message that says who sent it and its number, and fills the rest of
/// its (varying) length with a byte derived from both, so a torn or mixed
/// message shows.
fn message(sender: u32, n: u32, max: usize) -> Vec<u8> {
    let len = 8 + (n as usize * 7 + sender as usize * 13) % (max - 8);
    let mut m = Vec::with_capacity(len);
    m.extend_from_slice(&sender.to_le_bytes());
    m.extend_from_slice(&n.to_le_bytes());
    m.resize(len, (sender as u8) ^ (n as u8));
    m
}

/// Checks a message and returns (sender, number).
fn check(m: &[u8]) -> (u32, u32) {
    assert!(m.len() >= 8, "short message {m:?}");
    let s = u32::from_le_bytes(m[0..4].try_into().unwrap());
    let n = u32::from_le_bytes(m[4..8].try_into().unwrap());
    let fill = (s as u8) ^ (n as u8);
    assert!(
        m[8..].iter().all(|b| *b == fill),
        "torn message from {s} #{n}"
    );
    (s, n)
}

#[test]
fn many_senders_one_receiver_lose_and_tear_nothing() {
    const SENDERS: u32 = 4;
    const EACH: u32 = 20_000;
    // A small ring, so senders keep finding it full and waiting.
    let ch = Channel::create(8, 200).unwrap();
    let max = ch.geometry().message_max();
    let mut rx = ch.receiver().unwrap();
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let tx = ch.sender();
            std::thread::spawn(move || {
                for n in 0..EACH {
                    tx.send(&message(s, n, max), Full::Wait).unwrap();
                }
            })
        })
        .collect();
    drop(ch);
    let mut next: HashMap<u32, u32> = HashMap::new();
    let mut buf = Vec::new();
    let mut got = 0u64;
    loop {
        match rx.recv(&mut buf, Some(Instant::now() + Duration::from_secs(60))) {
            Ok(()) => {
                let (s, n) = check(&buf);
                let want = next.entry(s).or_insert(0);
                assert_eq!(n, *want, "sender {s}'s messages out of order");
                *want += 1;
                got += 1;
            }
            Err(RecvError::Disconnected) => break,
            Err(e) => panic!("after {got} messages: {e}"),
        }
    }
    for s in senders {
        s.join().unwrap();
    }
    assert_eq!(got, u64::from(SENDERS * EACH));
    assert!((0..SENDERS).all(|s| next[&s] == EACH), "{next:?}");
}

#[test]
fn a_full_ring_fails_or_waits_as_the_sender_chose() {
    let ch = Channel::create(2, 8).unwrap();
    let tx = ch.sender();
    let mut rx = ch.receiver().unwrap();
    tx.send(b"one", Full::Fail).unwrap();
    tx.send(b"two", Full::Fail).unwrap();
    assert_eq!(tx.try_send(b"three"), Err(SendError::Full));
    assert_eq!(tx.send(b"three", Full::Fail), Err(SendError::Full));
    let t0 = Instant::now();
    assert_eq!(
        tx.send_until(b"three", Full::Wait, Some(t0 + Duration::from_millis(50))),
        Err(SendError::Full)
    );
    assert!(t0.elapsed() >= Duration::from_millis(50));
    assert_eq!(ch.len(), 2);
    // A waiting sender goes on as soon as the receiver makes room.
    let waiter = std::thread::spawn(move || tx.send(b"three", Full::Wait));
    std::thread::sleep(Duration::from_millis(20));
    let mut buf = Vec::new();
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, b"one");
    waiter.join().unwrap().unwrap();
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, b"two");
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, b"three");
    assert_eq!(rx.try_recv(&mut buf), Err(RecvError::Disconnected));
}

#[test]
fn a_message_over_the_slot_is_refused_whole() {
    let ch = Channel::create(4, 100).unwrap();
    let max = ch.geometry().message_max();
    let tx = ch.sender();
    let e = tx.send(&vec![0; max + 1], Full::Wait).unwrap_err();
    assert_eq!(e, SendError::TooLong { len: max + 1, max });
    assert!(e.to_string().contains("limit"), "{e}");
    assert!(ch.is_empty());
    tx.send(&vec![7; max], Full::Fail).unwrap();
    let mut rx = ch.receiver().unwrap();
    let mut buf = Vec::new();
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, vec![7; max]);
}

#[test]
fn closed_ends_are_seen_by_the_other_side() {
    let ch = Channel::create(2, 8).unwrap();
    let tx = ch.sender();
    let rx = ch.receiver().unwrap();
    assert!(ch.receiver().is_none(), "one receiver at a time");
    tx.send(b"a", Full::Fail).unwrap();
    tx.send(b"b", Full::Fail).unwrap();
    // A sender waiting for room learns the receiver is gone.
    let waiter = std::thread::spawn(move || tx.send(b"c", Full::Wait));
    std::thread::sleep(Duration::from_millis(20));
    drop(rx);
    assert_eq!(waiter.join().unwrap(), Err(SendError::Disconnected));
    // A new receiver may open it, and reads what was sent.
    let mut rx = ch.receiver().unwrap();
    let mut buf = Vec::new();
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, b"a");
    // A receiver waiting with no deadline wakes when the last sender goes.
    let ch2 = Channel::create(2, 8).unwrap();
    let tx = ch2.sender();
    let mut rx = ch2.receiver().unwrap();
    let waiter = std::thread::spawn(move || rx.recv(&mut Vec::new(), None));
    std::thread::sleep(Duration::from_millis(20));
    drop(tx);
    assert_eq!(waiter.join().unwrap(), Err(RecvError::Disconnected));
}

#[test]
fn a_channel_without_senders_yet_is_empty_not_closed() {
    let ch = Channel::create(2, 8).unwrap();
    let mut rx = ch.receiver().unwrap();
    let mut buf = Vec::new();
    assert_eq!(rx.try_recv(&mut buf), Err(RecvError::Empty));
    let t0 = Instant::now();
    assert_eq!(
        rx.recv(&mut buf, Some(t0 + Duration::from_millis(30))),
        Err(RecvError::Empty)
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));
}

#[test]
fn the_doorbell_can_be_polled() {
    use rustix::event::{PollFd, PollFlags, poll};
    let ch = Channel::create(4, 8).unwrap();
    let tx = ch.sender();
    let mut rx = ch.receiver().unwrap();
    assert!(rx.arm(), "nothing waits: poll");
    let readable = |rx: &allot_channel::Receiver| {
        let fd = rx.fd();
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        poll(
            &mut fds,
            Some(&rustix::time::Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            }),
        )
        .unwrap()
            == 1
    };
    assert!(!readable(&rx));
    tx.send(b"x", Full::Fail).unwrap();
    assert!(readable(&rx), "the send rang the armed doorbell");
    assert!(!rx.arm(), "a message waits: receive, do not poll");
    let mut buf = Vec::new();
    rx.try_recv(&mut buf).unwrap();
    assert!(rx.arm());
    assert!(!readable(&rx), "arming took the old ring");
}

/// Sends `EACH` messages as sender 1 into the channel whose descriptors a
/// parent process left at fds 3, 4, 5 (see the next test).
#[test]
fn child_sender() {
    let Ok(count) = std::env::var("ALLOT_CHANNEL_TEST_CHILD") else {
        return;
    };
    // SAFETY: the parent placed the three descriptors at 3, 4 and 5 for
    // this process, which owns them from here on.
    let fds = unsafe { [3, 4, 5].map(|fd| OwnedFd::from_raw_fd(fd)) };
    let [mem, data, space] = fds;
    let ch = Channel::open(mem, data, space).unwrap();
    let tx = ch.sender();
    let max = ch.geometry().message_max();
    for n in 0..count.parse::<u32>().unwrap() {
        tx.send(&message(1, n, max), Full::Wait).unwrap();
    }
}

#[test]
fn messages_cross_processes_through_inherited_descriptors() {
    const EACH: u32 = 50_000;
    let ch = Channel::create(16, 300).unwrap();
    let mut rx = ch.receiver().unwrap();
    let raw: Vec<i32> = ch.fds().iter().map(|f| f.as_raw_fd()).collect();
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_sender", "--nocapture", "--test-threads=1"])
        .env("ALLOT_CHANNEL_TEST_CHILD", EACH.to_string());
    // SAFETY: between fork and exec only async-signal-safe dup2 calls; the
    // sources are open descriptors of this process (CLOEXEC, so the
    // originals close at exec and only the copies at 3..5 survive).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(move || {
            // Move the sources out of the way first, then into place.
            let high: Vec<i32> = raw
                .iter()
                .map(|fd| libc::fcntl(*fd, libc::F_DUPFD, 100))
                .collect();
            for (i, fd) in high.iter().enumerate() {
                if *fd < 0 || libc::dup2(*fd, 3 + i as i32) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let mut child = cmd.stdout(std::process::Stdio::null()).spawn().unwrap();
    let max = ch.geometry().message_max();
    let mut buf = Vec::new();
    for n in 0..EACH {
        rx.recv(&mut buf, Some(Instant::now() + Duration::from_secs(60)))
            .unwrap_or_else(|e| panic!("message {n}: {e}"));
        assert_eq!(check(&buf), (1, n));
        assert_eq!(buf, message(1, n, max));
    }
    assert!(child.wait().unwrap().success());
    // The child's sender closed when it exited normally.
    assert_eq!(rx.try_recv(&mut buf), Err(RecvError::Disconnected));
}

#[test]
fn memory_that_is_not_a_sealed_channel_is_refused() {
    let good = Channel::create(4, 8).unwrap();
    let dup = |i: usize| good.fds()[i].try_clone_to_owned().unwrap();
    let eventfd = || {
        rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .unwrap()
    };
    // The real thing opens.
    Channel::open(dup(0), dup(1), dup(2)).unwrap();
    // An unsealed memfd.
    let loose = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&loose, 8192).unwrap();
    let e = Channel::open(loose, eventfd(), eventfd()).unwrap_err();
    assert!(e.to_string().contains("seal"), "{e}");
    // Sealed, but zeros: no header.
    let blank = rustix::fs::memfd_create(
        "x",
        rustix::fs::MemfdFlags::CLOEXEC | rustix::fs::MemfdFlags::ALLOW_SEALING,
    )
    .unwrap();
    rustix::fs::ftruncate(&blank, 8192).unwrap();
    rustix::fs::fcntl_add_seals(
        &blank,
        rustix::fs::SealFlags::SHRINK | rustix::fs::SealFlags::GROW | rustix::fs::SealFlags::SEAL,
    )
    .unwrap();
    assert!(matches!(
        Channel::open(blank, eventfd(), eventfd()),
        Err(OpenError::NotAChannel(_))
    ));
    // A pipe is not a doorbell.
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let e = Channel::open(dup(0), r, dup(2)).unwrap_err();
    assert!(e.to_string().contains("not an eventfd"), "{e}");
    // A blocking eventfd would hang a receiver's take: refused.
    let blocking = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    let e = Channel::open(dup(0), dup(1), blocking).unwrap_err();
    assert!(e.to_string().contains("non-blocking"), "{e}");
}

#[test]
fn a_slot_with_an_impossible_length_is_reported_and_skipped() {
    let ch = Channel::create(4, 8).unwrap();
    let tx = ch.sender();
    let mut rx = ch.receiver().unwrap();
    tx.send(b"first", Full::Fail).unwrap();
    tx.send(b"second", Full::Fail).unwrap();
    // A peer writes the first slot's length past the slot, as a second
    // mapping of the memory (what another process would see).
    let g = ch.geometry();
    let fd = ch.fds()[0];
    // SAFETY: a fresh shared mapping of the channel's whole memory; only
    // the first slot's length word is written, at its documented offset.
    unsafe {
        let p = rustix::mm::mmap(
            std::ptr::null_mut(),
            g.bytes(),
            rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
            rustix::mm::MapFlags::SHARED,
            fd,
            0,
        )
        .unwrap();
        let len = p.cast::<u8>().add(g.slot_offset(0) + 8).cast::<u32>();
        len.write_volatile(u32::MAX);
        rustix::mm::munmap(p, g.bytes()).unwrap();
    }
    let mut buf = Vec::new();
    assert_eq!(
        rx.try_recv(&mut buf),
        Err(RecvError::Corrupt {
            len: u32::MAX as usize,
            max: g.message_max()
        })
    );
    rx.try_recv(&mut buf).unwrap();
    assert_eq!(buf, b"second");
}
