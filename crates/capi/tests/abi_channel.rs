//! `allot_channel_*` against a real broker (in this process, dry-run
//! backend, on a private socket named by ALLOT_SOCKET): a C sender and a C
//! receiver, the doorbell through poll(2), full and empty rings, a message
//! longer than the buffer, the other end closing, and bad arguments.

use allot_broker::{Broker, Config};
use allot_capi::abi::channel::*;
use allot_capi::abi::status::Code;
use std::ffi::{c_int, c_void};
use std::time::Duration;

fn status(code: c_int) -> Code {
    Code::from_code(code).unwrap_or_else(|| panic!("unknown status {code}"))
}

fn open(name: &std::ffi::CStr, end: c_int, slots: u32) -> ChannelHandle {
    let mut h = ChannelHandle::default();
    // SAFETY: a NUL-terminated name and a valid out-pointer.
    let rc = unsafe { allot_channel_open(name.as_ptr(), end, slots, 64, &mut h) };
    assert_eq!(status(rc), Code::Ok, "open {name:?}");
    h
}

fn send(h: ChannelHandle, msg: &[u8], flags: c_int) -> Code {
    // SAFETY: `msg` is valid for its length.
    status(unsafe { allot_channel_send(h, msg.as_ptr().cast::<c_void>(), msg.len(), flags) })
}

fn recv(h: ChannelHandle, cap: usize, timeout_ns: i64) -> (Code, Vec<u8>) {
    let mut buf = vec![0u8; cap];
    let mut len = 0usize;
    // SAFETY: `buf` is valid for `cap` bytes, `len` for a write.
    let rc = unsafe {
        allot_channel_recv(
            h,
            buf.as_mut_ptr().cast::<c_void>(),
            cap,
            &mut len,
            timeout_ns,
        )
    };
    buf.truncate(len.min(cap));
    (status(rc), if rc == 0 { buf } else { vec![len as u8] })
}

#[test]
fn channels_from_c() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("allot.sock");
    let mut cfg = Config::new(socket.clone());
    cfg.backend = allot_enforce::BackendKind::DryRun;
    let broker = Broker::start(cfg).unwrap();
    let stop = broker.stop_handle();
    let thread = std::thread::spawn(move || broker.run().unwrap());
    // SAFETY: the only test of this binary; no other thread reads the
    // environment while it is set.
    unsafe { std::env::set_var("ALLOT_SOCKET", &socket) };

    let rx = open(c"c.jobs", 1, 2);
    let tx = open(c"c.jobs", 0, 0);
    // Nothing waits: receiving at once times out; arming says poll.
    assert_eq!(recv(rx, 64, 0).0, Code::Timeout);
    assert_eq!(allot_channel_arm(rx), 1);
    let fd = allot_channel_fd(rx);
    assert!(fd >= 0);
    assert_eq!(send(tx, b"hello", 0), Code::Ok);
    // SAFETY: the channel's doorbell, open while `rx` is.
    let bell = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
    let mut p = [rustix::event::PollFd::new(
        &bell,
        rustix::event::PollFlags::IN,
    )];
    let five = rustix::time::Timespec {
        tv_sec: 5,
        tv_nsec: 0,
    };
    assert_eq!(
        rustix::event::poll(&mut p, Some(&five)).unwrap(),
        1,
        "the doorbell rang"
    );
    assert_eq!(allot_channel_arm(rx), 0, "a message waits");
    assert_eq!(recv(rx, 64, -1), (Code::Ok, b"hello".to_vec()));
    // A full ring (two slots) fails at once with NOWAIT.
    assert_eq!(send(tx, b"a", 0), Code::Ok);
    assert_eq!(send(tx, b"bb", 0), Code::Ok);
    assert_eq!(send(tx, b"c", 1), Code::Timeout);
    // A message longer than the buffer stays, and its length is given.
    assert_eq!(recv(rx, 0, 0), (Code::Invalid, vec![1]));
    assert_eq!(recv(rx, 1, 0), (Code::Ok, b"a".to_vec()));
    assert_eq!(recv(rx, 1, 0), (Code::Invalid, vec![2]));
    assert_eq!(recv(rx, 2, 0), (Code::Ok, b"bb".to_vec()));
    // Wrong ends and bad arguments.
    assert_eq!(send(rx, b"x", 0), Code::Invalid);
    assert_eq!(recv(tx, 8, 0).0, Code::Invalid);
    assert_eq!(allot_channel_fd(tx), -1);
    let mut h = ChannelHandle::default();
    // SAFETY: valid pointers; the name is bad on purpose.
    let rc = unsafe { allot_channel_open(c"../x".as_ptr(), 0, 0, 0, &mut h) };
    assert_eq!(status(rc), Code::Invalid);
    // SAFETY: as above; the end is bad on purpose.
    let rc = unsafe { allot_channel_open(c"ok".as_ptr(), 7, 0, 0, &mut h) };
    assert_eq!(status(rc), Code::Invalid);
    // SAFETY: as above; nothing was passed by `allot run`.
    let rc = unsafe { allot_channel_inherited(c"none".as_ptr(), 1, &mut h) };
    assert_eq!(status(rc), Code::Invalid);
    // The sender closes: the receiver, once the ring is empty, is told.
    assert_eq!(status(allot_channel_close(tx)), Code::Ok);
    let mut closed = false;
    for _ in 0..100 {
        match recv(rx, 8, 50_000_000).0 {
            Code::Closed => {
                closed = true;
                break;
            }
            Code::Timeout => std::thread::sleep(Duration::from_millis(10)),
            s => panic!("{s:?}"),
        }
    }
    assert!(closed, "the receiver learned the sender closed");
    assert_eq!(
        status(allot_channel_close(tx)),
        Code::Handle,
        "closed twice"
    );
    assert_eq!(status(allot_channel_close(rx)), Code::Ok);
    stop.stop();
    thread.join().unwrap();
}
