//! Calls over a pair of channels: a caller sends a request and gets the
//! server's answer, synchronously or later (the cross-partition calls of
//! the Nautilus hybrid runtime, between an ordinary thread and a worker
//! that owns its CPU).
//!
//! A [`pair`] is two channels, requests and answers. Each request carries
//! a call number (8 bytes, little-endian) before its bytes; the server
//! answers with the same number, in the order the requests came (one
//! server, one ring each way), so an answer always matches the oldest call
//! still open. A [`Caller`] may have as many calls open as the answer ring
//! holds.
//!
//! Waiting for an answer spins for a while ([`Caller::spin`]) and then
//! sleeps on the answer ring's doorbell; a server that polls
//! ([`Server::serve_polling`]) never sleeps, so a call to it costs two
//! cache-line transfers each way and no system call.

use crate::{Channel, Full, OpenError, Receiver, RecvError, SendError, Sender};
use std::time::{Duration, Instant};

/// Bytes of the call number before each request and answer.
pub const CALL_HEADER: usize = 8;

/// Why a call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    /// The request could not be sent.
    #[error("sending the request: {0}")]
    Send(#[from] SendError),
    /// The answer did not come.
    #[error("waiting for the answer: {0}")]
    Recv(#[from] RecvError),
    /// An answer came for another call than the oldest open one: the server
    /// does not follow the protocol.
    #[error("the server answered call {got} while call {want} was the oldest open")]
    OutOfOrder {
        /// The call number expected.
        want: u64,
        /// The one that came.
        got: u64,
    },
    /// No call is open.
    #[error("no call is open")]
    NoneOpen,
    /// A synchronous call while asynchronous ones are open: their answers
    /// come first.
    #[error("{open} started call(s) are open: finish them before a synchronous call")]
    Pending {
        /// How many started calls are not finished yet (`Caller::finish` takes them in order).
        open: u64,
    },
}

/// Two channels for calls: requests (caller → server) and answers.
pub fn pair(slots: usize, message_max: usize) -> Result<(Channel, Channel), OpenError> {
    Ok((
        Channel::create(slots, message_max + CALL_HEADER)?,
        Channel::create(slots, message_max + CALL_HEADER)?,
    ))
}

/// The calling side.
#[derive(Debug)]
pub struct Caller {
    requests: Sender,
    answers: Receiver,
    next: u64,
    oldest_open: u64,
    spin: Duration,
    buf: Vec<u8>,
}

impl Caller {
    /// A caller over `requests` (a sender) and `answers` (the receiver).
    pub fn new(requests: Sender, answers: Receiver) -> Caller {
        Caller {
            requests,
            answers,
            next: 0,
            oldest_open: 0,
            spin: Duration::from_micros(50),
            buf: Vec::new(),
        }
    }

    /// How long a wait for an answer spins before it sleeps (default 50 µs).
    pub fn spin(mut self, d: Duration) -> Caller {
        self.spin = d;
        self
    }

    /// Calls synchronously: sends `request`, waits for its answer and
    /// returns it (valid until the next call).
    pub fn call(&mut self, request: &[u8]) -> Result<&[u8], CallError> {
        if self.open() > 0 {
            // Answers to earlier asynchronous calls come first.
            return Err(CallError::Pending { open: self.open() });
        }
        self.start(request)?;
        self.finish(None)
    }

    /// Starts a call and returns its number; its answer is taken, in
    /// order, with [`Caller::finish`].
    pub fn start(&mut self, request: &[u8]) -> Result<u64, CallError> {
        let n = self.next;
        let mut msg = Vec::with_capacity(CALL_HEADER + request.len());
        msg.extend_from_slice(&n.to_le_bytes());
        msg.extend_from_slice(request);
        self.requests.send(&msg, Full::Wait)?;
        self.next += 1;
        Ok(n)
    }

    /// Calls open (started, not finished).
    pub fn open(&self) -> u64 {
        self.next - self.oldest_open
    }

    /// Waits (until `deadline`, if given) for the answer to the oldest open
    /// call and returns it (valid until the next call).
    pub fn finish(&mut self, deadline: Option<Instant>) -> Result<&[u8], CallError> {
        if self.open() == 0 {
            return Err(CallError::NoneOpen);
        }
        let spin_until = Instant::now() + self.spin;
        loop {
            match self.answers.try_recv(&mut self.buf) {
                Ok(()) => break,
                Err(RecvError::Empty) if Instant::now() < spin_until => std::hint::spin_loop(),
                Err(RecvError::Empty) => {
                    self.answers.recv(&mut self.buf, deadline)?;
                    break;
                }
                Err(e) => return Err(e.into()),
            }
        }
        let got = self.buf.get(..CALL_HEADER).map_or(u64::MAX, |h| {
            u64::from_le_bytes(h.try_into().expect("8 bytes"))
        });
        if got != self.oldest_open {
            return Err(CallError::OutOfOrder {
                want: self.oldest_open,
                got,
            });
        }
        self.oldest_open += 1;
        Ok(&self.buf[CALL_HEADER..])
    }
}

/// The serving side.
#[derive(Debug)]
pub struct Server {
    requests: Receiver,
    answers: Sender,
    answer: Vec<u8>,
}

impl Server {
    /// A server over `requests` (the receiver) and `answers` (a sender).
    pub fn new(requests: Receiver, answers: Sender) -> Server {
        Server {
            requests,
            answers,
            answer: Vec::new(),
        }
    }

    /// Serves one request if one is waiting: `handler` gets the request's
    /// bytes and writes the answer's. Returns whether it served one.
    pub fn serve_one(
        &mut self,
        handler: &mut impl FnMut(&[u8], &mut Vec<u8>),
    ) -> Result<bool, CallError> {
        let answer = &mut self.answer;
        let got = self.requests.try_recv_with(|msg| {
            answer.clear();
            let (head, body) = msg.split_at(CALL_HEADER.min(msg.len()));
            answer.extend_from_slice(head);
            handler(body, answer);
        });
        match got {
            Ok(()) => {
                if self.answer.len() >= CALL_HEADER {
                    self.answers.send(&self.answer, Full::Wait)?;
                }
                Ok(true)
            }
            Err(RecvError::Empty) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Serves requests, polling the ring without ever sleeping, until
    /// `stop` returns true (checked between requests and while idle) or
    /// every caller is gone. For a worker that owns its CPU.
    pub fn serve_polling(
        &mut self,
        mut handler: impl FnMut(&[u8], &mut Vec<u8>),
        stop: impl Fn() -> bool,
    ) -> Result<(), CallError> {
        while !stop() {
            match self.serve_one(&mut handler) {
                Ok(true) => {}
                Ok(false) => std::hint::spin_loop(),
                Err(CallError::Recv(RecvError::Disconnected)) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Serves requests, sleeping on the doorbell while none waits, until
    /// every caller is gone (or `deadline`).
    pub fn serve_blocking(
        &mut self,
        mut handler: impl FnMut(&[u8], &mut Vec<u8>),
        deadline: Option<Instant>,
    ) -> Result<(), CallError> {
        loop {
            match self.serve_one(&mut handler) {
                Ok(true) => continue,
                Ok(false) => {}
                Err(CallError::Recv(RecvError::Disconnected)) => return Ok(()),
                Err(e) => return Err(e),
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(());
            }
            self.requests.wait_ready(deadline);
        }
    }
}
