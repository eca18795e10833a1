//! Channels against what a program would use without them.
//!
//! `cargo bench -p allot-channel --bench channel`
//!
//! - `throughput`: one sender thread streams 20 000 messages of 64 B or
//!   4 KiB to the benchmark thread; per message. Against a UNIX seqpacket
//!   socket pair and a pipe (whose writes of up to 4 KiB are atomic).
//! - `roundtrip`: the benchmark thread sends 8 bytes, an echo thread sends
//!   them back; per round trip. The channel's echo either spins on its ring
//!   (a polling worker: what a partition's worker does) or sleeps on the
//!   doorbell; against a UNIX socket, a pipe pair, an eventfd pair and a
//!   Mutex + Condvar pair.
//!
//! Each sample of `roundtrip` stops its echo thread, so a spinning echo
//! burns no CPU outside its own benchmark.

use allot_channel::{Channel, Full};
use divan::{Bencher, black_box, counter::ItemsCount};
use rustix::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};

fn main() {
    divan::main();
}

const MESSAGES: usize = 20_000;

mod throughput {
    use super::*;

    #[divan::bench(args = [64, 4096], sample_count = 20)]
    fn channel(b: Bencher, size: usize) {
        b.counter(ItemsCount::new(MESSAGES)).bench(|| {
            let ch = Channel::create(256, size).unwrap();
            let mut rx = ch.receiver().unwrap();
            let tx = ch.sender();
            let t = std::thread::spawn(move || {
                let msg = vec![1u8; size];
                for _ in 0..MESSAGES {
                    tx.send(&msg, Full::Wait).unwrap();
                }
            });
            let mut got = 0;
            while got < MESSAGES {
                if rx
                    .try_recv_with(|m| black_box(m.len()))
                    .or_else(|_| {
                        let mut buf = Vec::new();
                        rx.recv(&mut buf, None).map(|()| buf.len())
                    })
                    .is_ok()
                {
                    got += 1;
                }
            }
            t.join().unwrap();
        });
    }

    #[divan::bench(args = [64, 4096], sample_count = 20)]
    fn unix_seqpacket(b: Bencher, size: usize) {
        b.counter(ItemsCount::new(MESSAGES)).bench(|| {
            let (a, z) = seqpacket_pair();
            let t = std::thread::spawn(move || {
                let msg = vec![1u8; size];
                for _ in 0..MESSAGES {
                    rustix::net::send(&a, &msg, rustix::net::SendFlags::empty()).unwrap();
                }
            });
            let mut buf = vec![0u8; size];
            for _ in 0..MESSAGES {
                black_box(
                    rustix::net::recv(&z, &mut buf, rustix::net::RecvFlags::empty()).unwrap(),
                );
            }
            t.join().unwrap();
        });
    }

    #[divan::bench(args = [64, 4096], sample_count = 20)]
    fn pipe(b: Bencher, size: usize) {
        b.counter(ItemsCount::new(MESSAGES)).bench(|| {
            let (r, w) = rustix::pipe::pipe().unwrap();
            let t = std::thread::spawn(move || {
                let msg = vec![1u8; size];
                for _ in 0..MESSAGES {
                    rustix::io::write(&w, &msg).unwrap();
                }
            });
            let mut buf = vec![0u8; size];
            for _ in 0..MESSAGES {
                // A reader must read whole messages: writes of at most
                // PIPE_BUF bytes are never interleaved, but may be split
                // across reads.
                let mut at = 0;
                while at < size {
                    at += rustix::io::read(&r, &mut buf[at..]).unwrap();
                }
            }
            t.join().unwrap();
        });
    }
}

fn seqpacket_pair() -> (OwnedFd, OwnedFd) {
    rustix::net::socketpair(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )
    .unwrap()
}

mod roundtrip {
    use super::*;

    /// Runs `echo` on a thread for the duration of `bench`; `stop` is set
    /// after it, and `wake` must make a blocked echo see it.
    fn with_echo(
        b: Bencher,
        stop: Arc<AtomicBool>,
        echo: impl FnOnce() + Send + 'static,
        wake: impl FnOnce(),
        bench: impl FnMut(),
    ) {
        let t = std::thread::spawn(echo);
        b.bench_local(bench);
        stop.store(true, Ordering::SeqCst);
        wake();
        t.join().unwrap();
    }

    fn channel_pair() -> (Channel, Channel) {
        (
            Channel::create(4, 8).unwrap(),
            Channel::create(4, 8).unwrap(),
        )
    }

    #[divan::bench]
    fn channel_polling_echo(b: Bencher) {
        let (req, rep) = channel_pair();
        let (mut req_rx, rep_tx) = (req.receiver().unwrap(), rep.sender());
        let (req_tx, mut rep_rx) = (req.sender(), rep.receiver().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        with_echo(
            b,
            stop,
            move || {
                while !s.load(Ordering::Relaxed) {
                    let _ = req_rx.try_recv_with(|m| rep_tx.send(m, Full::Wait).unwrap());
                }
            },
            || {},
            || {
                req_tx.send(&[1; 8], Full::Wait).unwrap();
                while rep_rx.try_recv_with(|m| black_box(m[0])).is_err() {}
            },
        );
    }

    #[divan::bench]
    fn channel_sleeping_echo(b: Bencher) {
        let (req, rep) = channel_pair();
        let (mut req_rx, rep_tx) = (req.receiver().unwrap(), rep.sender());
        let (req_tx, mut rep_rx) = (req.sender(), rep.receiver().unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let wake_tx = req.sender();
        with_echo(
            b,
            stop,
            move || {
                let mut buf = Vec::new();
                while req_rx.recv(&mut buf, None).is_ok() && !s.load(Ordering::Relaxed) {
                    rep_tx.send(&buf, Full::Wait).unwrap();
                }
            },
            move || wake_tx.send(b"stop", Full::Wait).unwrap(),
            || {
                let mut buf = Vec::new();
                req_tx.send(&[1; 8], Full::Wait).unwrap();
                rep_rx.recv(&mut buf, None).unwrap();
            },
        );
    }

    #[divan::bench]
    fn unix_seqpacket(b: Bencher) {
        let (a, z) = seqpacket_pair();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let z = Arc::new(z);
        let z2 = z.clone();
        let a = Arc::new(a);
        let a2 = a.clone();
        with_echo(
            b,
            stop,
            move || {
                let mut buf = [0u8; 8];
                while !s.load(Ordering::Relaxed) {
                    let n = rustix::net::recv(&*z2, &mut buf, rustix::net::RecvFlags::empty())
                        .unwrap()
                        .0;
                    rustix::net::send(&*z2, &buf[..n], rustix::net::SendFlags::empty()).unwrap();
                }
            },
            move || {
                rustix::net::send(&*a2, b"stop", rustix::net::SendFlags::empty()).unwrap();
            },
            || {
                let mut buf = [0u8; 8];
                rustix::net::send(&*a, &[1; 8], rustix::net::SendFlags::empty()).unwrap();
                black_box(
                    rustix::net::recv(&*a, &mut buf, rustix::net::RecvFlags::empty()).unwrap(),
                );
            },
        );
        drop(z);
    }

    #[divan::bench]
    fn pipe_pair(b: Bencher) {
        let (req_r, req_w) = rustix::pipe::pipe().unwrap();
        let (rep_r, rep_w) = rustix::pipe::pipe().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let req_w = Arc::new(req_w);
        let w2 = req_w.clone();
        with_echo(
            b,
            stop,
            move || {
                let mut buf = [0u8; 8];
                while !s.load(Ordering::Relaxed) {
                    let n = rustix::io::read(&req_r, &mut buf).unwrap();
                    rustix::io::write(&rep_w, &buf[..n]).unwrap();
                }
            },
            move || {
                rustix::io::write(&*w2, b"stop").unwrap();
            },
            || {
                let mut buf = [0u8; 8];
                rustix::io::write(&*req_w, &[1; 8]).unwrap();
                black_box(rustix::io::read(&rep_r, &mut buf).unwrap());
            },
        );
    }

    #[divan::bench]
    fn eventfd_pair(b: Bencher) {
        let ev = || rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
        let (req, rep) = (Arc::new(ev()), Arc::new(ev()));
        let (req2, rep2) = (req.clone(), rep.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let req3 = req.clone();
        with_echo(
            b,
            stop,
            move || {
                let mut buf = [0u8; 8];
                while !s.load(Ordering::Relaxed) {
                    rustix::io::read(&*req2, &mut buf).unwrap();
                    rustix::io::write(&*rep2, &1u64.to_ne_bytes()).unwrap();
                }
            },
            move || {
                rustix::io::write(&*req3, &1u64.to_ne_bytes()).unwrap();
            },
            || {
                let mut buf = [0u8; 8];
                rustix::io::write(&*req, &1u64.to_ne_bytes()).unwrap();
                rustix::io::read(&*rep, &mut buf).unwrap();
            },
        );
    }

    #[divan::bench]
    fn mutex_condvar(b: Bencher) {
        // (requests asked, requests answered)
        let pair = Arc::new((Mutex::new((0u64, 0u64)), Condvar::new()));
        let p2 = pair.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let p3 = pair.clone();
        with_echo(
            b,
            stop,
            move || {
                let (m, cv) = &*p2;
                let mut g = m.lock().unwrap();
                loop {
                    while g.0 == g.1 && !s.load(Ordering::Relaxed) {
                        g = cv.wait(g).unwrap();
                    }
                    if s.load(Ordering::Relaxed) {
                        return;
                    }
                    g.1 = g.0;
                    cv.notify_all();
                }
            },
            move || {
                let _g = p3.0.lock().unwrap();
                p3.1.notify_all();
            },
            || {
                let (m, cv) = &*pair;
                let mut g = m.lock().unwrap();
                g.0 += 1;
                let want = g.0;
                cv.notify_all();
                while g.1 != want {
                    g = cv.wait(g).unwrap();
                }
            },
        );
    }
}
