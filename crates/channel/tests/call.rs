//! Calls over channel pairs: synchronous and asynchronous, to a polling
//! server and to one that sleeps, in order, and ends that go away.

use allot_channel::call::{CallError, Caller, Server, pair};
use allot_channel::{RecvError, SendError};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Answers with the request reversed and its length appended.
fn reverse(req: &[u8], out: &mut Vec<u8>) {
    out.extend(req.iter().rev());
    out.push(req.len() as u8);
}

fn ends(slots: usize) -> (Caller, Server) {
    let (req, ans) = pair(slots, 64).unwrap();
    (
        Caller::new(req.sender(), ans.receiver().unwrap()),
        Server::new(req.receiver().unwrap(), ans.sender()),
    )
}

#[test]
fn synchronous_calls_to_a_polling_server() {
    let (mut caller, mut server) = ends(4);
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let t = std::thread::spawn(move || {
        server
            .serve_polling(reverse, || s.load(Ordering::Relaxed))
            .unwrap()
    });
    for i in 0..10_000u32 {
        let req = i.to_le_bytes();
        let got = caller.call(&req).unwrap();
        let mut want: Vec<u8> = req.iter().rev().copied().collect();
        want.push(4);
        assert_eq!(got, want.as_slice(), "call {i}");
    }
    stop.store(true, Ordering::Relaxed);
    t.join().unwrap();
}

#[test]
fn asynchronous_calls_finish_in_order_to_a_sleeping_server() {
    let (mut caller, mut server) = ends(8);
    let t = std::thread::spawn(move || server.serve_blocking(reverse, None).unwrap());
    for round in 0..200u8 {
        let started: Vec<u64> = (0..8u8)
            .map(|k| caller.start(&[round, k]).unwrap())
            .collect();
        assert_eq!(caller.open(), 8);
        assert_eq!(
            caller.call(b"x"),
            Err(CallError::Pending { open: 8 }),
            "a synchronous call waits for the open ones"
        );
        for (k, _) in started.iter().enumerate() {
            let got = caller
                .finish(Some(Instant::now() + Duration::from_secs(20)))
                .unwrap();
            assert_eq!(got, &[k as u8, round, 2]);
        }
    }
    assert_eq!(caller.finish(None), Err(CallError::NoneOpen));
    // The caller goes: the server's loop ends.
    drop(caller);
    t.join().unwrap();
}

#[test]
fn a_caller_learns_when_the_server_is_gone() {
    let (mut caller, server) = ends(2);
    drop(server);
    assert_eq!(
        caller.call(b"hi"),
        Err(CallError::Send(SendError::Disconnected))
    );
    let (mut caller, server) = ends(2);
    // The request went out before the server went away unanswered.
    caller.start(b"hi").unwrap();
    drop(server);
    assert_eq!(
        caller.finish(Some(Instant::now() + Duration::from_secs(5))),
        Err(CallError::Recv(RecvError::Disconnected))
    );
}
