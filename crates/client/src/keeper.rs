//! Channel ends that outlive a broker restart.
//!
//! A [`ChannelKeeper`] opens channel ends through a connection of its own
//! and keeps them open at the broker for as long as it lives. A thread
//! watches the connection; when the broker goes away (killed, restarted),
//! it reconnects — every 100 ms until a broker answers — and hands every
//! end back (`ChannelRejoin`, with the channel's descriptors), so the new
//! broker knows the channels again and again tells each side when the
//! other goes. Messages keep flowing meanwhile: the ends share the
//! channel's memory directly, the broker is not on their path.
//!
//! Protocol with the broker: the watcher only polls the connection for a
//! hang-up (never reads it), so calls made on it by the keeper's owner
//! (`sender`, `receiver`, `close`) go on undisturbed; the connection is
//! replaced under the same lock those calls take.

use crate::{ChannelEnd, Client, ClientError};
use allot_channel::{Channel, Receiver, Sender};
use rustix::event::{EventfdFlags, PollFd, PollFlags};
use rustix::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a broker that went away is looked for again.
const RECONNECT_EVERY: Duration = Duration::from_millis(100);

#[derive(Debug)]
struct Kept {
    name: String,
    end: ChannelEnd,
    channel: Channel,
}

#[derive(Debug)]
struct Inner {
    socket: PathBuf,
    conn: Mutex<Client>,
    ends: Mutex<Vec<Kept>>,
}

/// Channel ends kept open at the broker, across its restarts.
#[derive(Debug)]
pub struct ChannelKeeper {
    inner: Arc<Inner>,
    stop: Arc<OwnedFd>,
    watcher: Option<std::thread::JoinHandle<()>>,
}

impl ChannelKeeper {
    /// A keeper talking to the broker at `socket`.
    pub fn connect(socket: &Path) -> Result<ChannelKeeper, ClientError> {
        let conn = Client::connect(socket)?;
        let stop = Arc::new(
            rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
                .map_err(std::io::Error::from)
                .map_err(allot_proto::CallError::from)?,
        );
        let inner = Arc::new(Inner {
            socket: socket.to_path_buf(),
            conn: Mutex::new(conn),
            ends: Mutex::new(Vec::new()),
        });
        let (i, s) = (inner.clone(), stop.clone());
        let watcher = std::thread::Builder::new()
            .name("allot-channels".into())
            .spawn(move || watch(&i, &s))
            .map_err(allot_proto::CallError::from)?;
        Ok(ChannelKeeper {
            inner,
            stop,
            watcher: Some(watcher),
        })
    }

    /// A keeper talking to the broker at `$ALLOT_SOCKET` or the default.
    pub fn connect_default() -> Result<ChannelKeeper, ClientError> {
        Self::connect(&allot_proto::default_socket_path())
    }

    /// Opens an end (see [`Client::open_channel`]) and keeps it.
    pub fn open(
        &self,
        name: &str,
        end: ChannelEnd,
        slots: u32,
        message_max: u32,
    ) -> Result<Channel, ClientError> {
        let channel = self
            .inner
            .conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .open_channel(name, end, slots, message_max)?;
        self.inner
            .ends
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(Kept {
                name: name.into(),
                end,
                channel: channel.clone(),
            });
        Ok(channel)
    }

    /// A sending end of `name`, kept.
    pub fn sender(&self, name: &str, slots: u32, message_max: u32) -> Result<Sender, ClientError> {
        Ok(self
            .open(name, ChannelEnd::Send, slots, message_max)?
            .managed_sender())
    }

    /// The receiving end of `name`, kept.
    pub fn receiver(
        &self,
        name: &str,
        slots: u32,
        message_max: u32,
    ) -> Result<Receiver, ClientError> {
        Ok(self
            .open(name, ChannelEnd::Receive, slots, message_max)?
            .managed_receiver())
    }

    /// Closes one kept end of `name` (the other side learns it).
    pub fn close(&self, name: &str, end: ChannelEnd) -> Result<(), ClientError> {
        let mut ends = self.inner.ends.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = ends.iter().position(|k| k.name == name && k.end == end) {
            ends.remove(i);
        }
        drop(ends);
        self.inner
            .conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .close_channel(name, end)
    }
}

impl Drop for ChannelKeeper {
    fn drop(&mut self) {
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        if let Some(w) = self.watcher.take() {
            let _ = w.join();
        }
    }
}

/// Waits for the connection to hang up (or `stop`), then reconnects and
/// hands every kept end back.
fn watch(inner: &Inner, stop: &OwnedFd) {
    loop {
        let sock = {
            let c = inner.conn.lock().unwrap_or_else(|p| p.into_inner());
            match c.fd().try_clone_to_owned() {
                Ok(fd) => fd,
                Err(_) => return,
            }
        };
        let mut fds = [
            PollFd::new(&sock, PollFlags::RDHUP),
            PollFd::new(stop, PollFlags::IN),
        ];
        if rustix::event::poll(&mut fds, None).is_err() {
            continue; // EINTR
        }
        if !fds[1].revents().is_empty() {
            return;
        }
        if fds[0]
            .revents()
            .intersects(PollFlags::RDHUP | PollFlags::HUP | PollFlags::ERR)
            && !rejoin(inner, stop)
        {
            return;
        }
    }
}

/// Reconnects and hands the ends back; false if stopped meanwhile.
fn rejoin(inner: &Inner, stop: &OwnedFd) -> bool {
    loop {
        let mut fds = [PollFd::new(stop, PollFlags::IN)];
        let wait = rustix::time::Timespec::try_from(RECONNECT_EVERY).expect("100 ms");
        if rustix::event::poll(&mut fds, Some(&wait)).is_ok_and(|n| n > 0) {
            return false;
        }
        let Ok(mut conn) = Client::connect(&inner.socket) else {
            continue;
        };
        let ends = inner.ends.lock().unwrap_or_else(|p| p.into_inner());
        let back = ends.iter().all(|k| {
            let [m, d, s] = k.channel.fds();
            match conn.rejoin_channel(&k.name, k.end, [m, d, s]) {
                Ok(()) => true,
                // Refused for good (another channel took the name): the
                // end goes on without the broker.
                Err(ClientError::Broker { .. }) => true,
                Err(_) => false,
            }
        });
        drop(ends);
        if back {
            *inner.conn.lock().unwrap_or_else(|p| p.into_inner()) = conn;
            return true;
        }
    }
}
