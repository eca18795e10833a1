//! The HTTP side of the metrics: one thread serving `GET /metrics`, which
//! asks the event loop for a fresh snapshot and waits up to
//! [`FRESH_WAIT`] for it (else serves the last one; 503 before the first).

use super::{FRESH_WAIT, Snapshot, render};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// State shared by the exporter thread and the event loop.
#[derive(Debug)]
struct Shared {
    /// The last rendered text and the request serial it answers.
    text: Mutex<(u64, String)>,
    fresh: Condvar,
    /// Serial of the latest scrape asking for a fresh snapshot.
    asked: AtomicU64,
    stop: AtomicBool,
}

/// The HTTP side of the metrics: a thread serving `/metrics`.
#[derive(Debug)]
pub struct Exporter {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// The event loop polls this; a byte means "render now".
    wake_r: rustix::fd::OwnedFd,
    thread: Option<JoinHandle<()>>,
}

/// Largest request head read.
const MAX_REQUEST: usize = 8192;
/// A client gets this long to send its request and read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

impl Exporter {
    /// Binds `addr` and starts serving.
    pub fn start(addr: SocketAddr) -> std::io::Result<Exporter> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let (wake_r, wake_w) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )?;
        let shared = Arc::new(Shared {
            text: Mutex::new((0, String::new())),
            fresh: Condvar::new(),
            asked: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("allot-metrics".into())
            .spawn(move || serve(listener, s, wake_w))?;
        Ok(Exporter {
            shared,
            addr,
            wake_r,
            thread: Some(thread),
        })
    }

    /// The address served (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The descriptor the event loop polls for scrapes.
    pub fn wake_fd(&self) -> &rustix::fd::OwnedFd {
        &self.wake_r
    }

    /// Whether a scrape waits for a snapshot (drains the wake pipe).
    pub fn wanted(&self) -> bool {
        let mut b = [0u8; 64];
        let mut any = false;
        while matches!(rustix::io::read(&self.wake_r, &mut b), Ok(n) if n > 0) {
            any = true;
        }
        any
    }

    /// Hands the exporter a fresh snapshot.
    pub fn publish(&self, s: &Snapshot) {
        // Read before rendering: a scrape that asks later is not answered
        // with a snapshot taken before it asked.
        let serial = self.shared.asked.load(Ordering::Acquire);
        let text = render(s);
        let mut t = self.shared.text.lock().unwrap_or_else(|e| e.into_inner());
        *t = (serial, text);
        self.shared.fresh.notify_all();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // The thread sees the flag within ACCEPT_POLL, or once the
        // connection it serves reaches its deadline (CLIENT_TIMEOUT).
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often the (non-blocking) listener is looked at when idle.
const ACCEPT_POLL: Duration = Duration::from_millis(100);

fn serve(listener: TcpListener, shared: Arc<Shared>, wake_w: rustix::fd::OwnedFd) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((conn, _)) => {
                let _ = conn.set_nonblocking(false);
                let _ = answer(conn, &shared, &wake_w);
            }
            // Nothing waiting, out of descriptors, a reset connection: do
            // not spin.
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// The request line's method and path, once the head is complete.
pub(super) fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let line = text.lines().next()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

fn answer(
    mut conn: TcpStream,
    shared: &Shared,
    wake_w: &rustix::fd::OwnedFd,
) -> std::io::Result<()> {
    // One deadline for the whole request, not per read: a client sending
    // a byte at a time cannot hold the (single) exporter thread.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST {
            return reply(
                &mut conn,
                "431 Request Header Fields Too Large",
                "too long\n",
                true,
            );
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        conn.set_read_timeout(Some(left))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let Some((method, path)) = request_line(&head) else {
        return reply(&mut conn, "400 Bad Request", "bad request\n", true);
    };
    let body_wanted = method == "GET";
    if method != "GET" && method != "HEAD" {
        return reply(&mut conn, "405 Method Not Allowed", "GET /metrics\n", true);
    }
    match path {
        "/metrics" => match fresh_text(shared, wake_w) {
            Some(text) => reply(&mut conn, "200 OK", &text, body_wanted),
            None => reply(
                &mut conn,
                "503 Service Unavailable",
                "the broker has not answered yet; try again\n",
                body_wanted,
            ),
        },
        "/" => reply(
            &mut conn,
            "200 OK",
            "allot broker: metrics at /metrics\n",
            body_wanted,
        ),
        _ => reply(
            &mut conn,
            "404 Not Found",
            "not found; try /metrics\n",
            body_wanted,
        ),
    }
}

/// Asks the event loop for a snapshot and waits up to [`FRESH_WAIT`];
/// the last one published if none comes in time, `None` if none ever did.
fn fresh_text(shared: &Shared, wake_w: &rustix::fd::OwnedFd) -> Option<String> {
    let want = shared.asked.fetch_add(1, Ordering::AcqRel) + 1;
    let _ = rustix::io::write(wake_w, &[1]);
    let guard = shared.text.lock().unwrap_or_else(|e| e.into_inner());
    let (guard, _) = shared
        .fresh
        .wait_timeout_while(guard, FRESH_WAIT, |(serial, _)| *serial < want)
        .unwrap_or_else(|e| e.into_inner());
    (guard.0 > 0).then(|| guard.1.clone())
}

fn reply(conn: &mut TcpStream, status: &str, body: &str, with_body: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if with_body {
        conn.write_all(body.as_bytes())?;
    }
    conn.flush()
}
