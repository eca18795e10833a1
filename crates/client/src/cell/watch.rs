//! Rejoining a restarted broker: the watcher thread of a registered cell.
//!
//! The thread polls a duplicate of the cell's socket (so reports are never
//! blocked behind it) for the broker hanging up. Then it marks the broker
//! down, keeps the last grant page readable, and reconnects with a doubling
//! back-off: it rejoins the cell with its token, handing the page it holds
//! back so every process that mapped it keeps reading the same page, or
//! registers the cell again (with its current spec, goal included) when the
//! new broker lost it. A cell's drop stops the thread through an eventfd,
//! joins it, and releases the cell unless it leaves at exit.

use super::{Inner, Mode};
use crate::conn::Client;
use allot_proto::log::Once;
use allot_proto::msg::ErrorCode;
use rustix::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The watcher of a registered cell: its thread, stopped and joined (and
/// the cell released, unless it leaves at exit) when the cell's last
/// handle drops.
#[derive(Debug)]
pub(super) struct Watcher {
    inner: Arc<Inner>,
    handle: Mutex<Option<JoinHandle<()>>>,
    /// Whether the thread was started ([`Watcher::start`]).
    started: AtomicBool,
}

impl Watcher {
    /// The watcher of `inner`'s cell, its thread not started yet.
    pub(super) fn new(inner: &Arc<Inner>) -> Watcher {
        Watcher {
            inner: inner.clone(),
            handle: Mutex::new(None),
            started: AtomicBool::new(false),
        }
    }

    /// Starts the thread, once.
    pub(super) fn start(&self) {
        if self.started.swap(true, Ordering::AcqRel) {
            return;
        }
        let i = self.inner.clone();
        let h = std::thread::Builder::new()
            .name("allot-watch".into())
            .spawn(move || watch(i))
            .ok();
        *self.handle.lock().unwrap_or_else(|p| p.into_inner()) = h;
    }
}

impl Watcher {
    /// Tells the thread to stop and leaves it to end by itself: the drop
    /// then does not wait for it. For the cell's last handle in a process
    /// about to exit, which ends the thread anyway.
    pub(super) fn stop_unjoined(&self) {
        self.stop();
        drop(self.handle.lock().unwrap_or_else(|p| p.into_inner()).take());
    }

    fn stop(&self) {
        self.inner.stop.store(true, Ordering::Release);
        if let Some(fd) = &self.inner.stop_fd {
            let _ = rustix::io::write(fd, &1u64.to_ne_bytes());
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop();
        if let Some(h) = self.handle.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = h.join();
        }
        if self.inner.mode == Mode::Registered && self.inner.release_on_drop.load(Ordering::Acquire)
        {
            let id = self.inner.id.load(Ordering::Acquire);
            if let Some(c) = self
                .inner
                .conn
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_mut()
            {
                let _ = c.set_timeout(Some(Duration::from_secs(2)));
                let _ = c.release(id);
            }
        }
    }
}

/// Poll period of the watcher while the broker is up.
pub(super) const WATCH_PERIOD: Duration = Duration::from_millis(200);
/// Reconnection back-off bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(20);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// The watcher thread of a registered cell: waits for the broker to hang
/// up (polling a duplicate of the socket, so reports are never blocked),
/// then reconnects.
fn watch(inner: Arc<Inner>) {
    while !inner.stop.load(Ordering::Acquire) {
        let fd = inner
            .conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .and_then(|c| rustix::io::fcntl_dupfd_cloexec(c.fd(), 0).ok());
        let gone = match fd {
            None => true,
            Some(fd) => hung_up(&fd, inner.stop_fd.as_ref(), WATCH_PERIOD),
        };
        if gone && !inner.stop.load(Ordering::Acquire) {
            inner.broker_up.store(false, Ordering::Release);
            *inner.conn.lock().unwrap_or_else(|p| p.into_inner()) = None;
            reconnect(&inner);
        }
    }
}

/// Waits up to `wait` for the peer to hang up, or for `stop` to become
/// readable (then returns false: the caller checks its stop flag).
fn hung_up(fd: &OwnedFd, stop: Option<&OwnedFd>, wait: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags};
    let mut fds = vec![PollFd::new(fd, PollFlags::RDHUP | PollFlags::HUP)];
    if let Some(s) = stop {
        fds.push(PollFd::new(s, PollFlags::IN));
    }
    let ts = rustix::time::Timespec {
        tv_sec: wait.as_secs() as i64,
        tv_nsec: wait.subsec_nanos() as _,
    };
    match rustix::event::poll(&mut fds, Some(&ts)) {
        Ok(0) | Err(_) => false,
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR),
    }
}

/// Reconnects after the broker went away, with a doubling back-off, until
/// it rejoins the cell (or registers it again if the new broker lost it).
/// The outage is logged once when it starts, each kind of failure once
/// (with what to do), and the recovery once.
fn reconnect(inner: &Arc<Inner>) {
    let Some(socket) = inner.socket.clone() else {
        return;
    };
    const WHO: &str = "allot-client";
    let cell = inner.id.load(Ordering::Acquire);
    allot_proto::app_log!(
        Warn,
        WHO,
        "lost the broker at {}; cell {cell} keeps its last CPUs while this process \
         reconnects (start the broker again if it does not come back: `allot daemon`)",
        socket.display()
    );
    let (connect, rejoin, register) = (Once::new(), Once::new(), Once::new());
    let mut backoff = BACKOFF_MIN;
    while !inner.stop.load(Ordering::Acquire) {
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(BACKOFF_MAX);
        let mut client = match Client::connect(&socket) {
            Ok(c) => c,
            Err(e) => {
                if connect.first() {
                    allot_proto::app_log!(
                        Info,
                        WHO,
                        "cannot reach the broker yet ({e}); retrying every {BACKOFF_MAX:?} at most"
                    );
                }
                continue;
            }
        };
        let id = inner.id.load(Ordering::Acquire);
        let token = inner.token.load(Ordering::Acquire);
        let held = inner.current_map();
        match client.rejoin(id, token, held.as_deref()) {
            Ok(page) => {
                inner.switch_to(Arc::new(page));
            }
            Err(e) if e.code() == Some(ErrorCode::UnknownCell) => {
                // The new broker lost the cell: ask again.
                let spec = *inner.spec.lock().unwrap_or_else(|p| p.into_inner());
                match client.register(&inner.name, spec, &[], true, false, |_, _| {}) {
                    Ok(reg) => {
                        inner.id.store(reg.cell, Ordering::Release);
                        inner.token.store(reg.token, Ordering::Release);
                        inner.switch_to(Arc::new(reg.page));
                    }
                    Err(e) => {
                        if register.first() {
                            allot_proto::app_log!(
                                Warn,
                                WHO,
                                "the restarted broker does not know cell {id} and refused it \
                                 again: {e}; retrying (see `allot status`)"
                            );
                        }
                        continue;
                    }
                }
            }
            Err(e) => {
                if rejoin.first() {
                    allot_proto::app_log!(
                        Warn,
                        WHO,
                        "the broker refused to let this process rejoin cell {id}: {e}; retrying"
                    );
                }
                continue;
            }
        }
        let now = inner.id.load(Ordering::Acquire);
        allot_proto::app_log!(Info, WHO, "back with the broker; cell {now}");
        *inner.conn.lock().unwrap_or_else(|p| p.into_inner()) = Some(client);
        inner.broker_up.store(true, Ordering::Release);
        return;
    }
}
