//! A connection to the broker: typed requests, typed errors.

use allot_proto::msg::ErrorCode;
use allot_proto::{CallError, Conn, PageMap, Reply, Request};
use allot_spec::{CellSpec, Goal};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why a broker call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No broker listens on the socket. (The reason is part of the
    /// message, not a separate source, so a printed chain says it once.)
    #[error("no broker answers on {path}: {reason}")]
    NoBroker {
        /// Path of the socket the connection was tried on.
        path: PathBuf,
        /// The connect error (`NotFound` or `ConnectionRefused` when no broker runs).
        reason: std::io::Error,
    },
    /// The socket's directory could be controlled by another user.
    #[error("refusing the broker socket {path}: {reason}")]
    Untrusted {
        /// Path of the socket that was refused.
        path: PathBuf,
        /// What is wrong with its directory.
        reason: allot_proto::dirs::DirError,
    },
    /// The connection failed mid-call.
    #[error(transparent)]
    Call(#[from] CallError),
    /// The broker answered with an error.
    #[error("{message}")]
    Broker {
        /// The broker's error code, stable across versions (match on it, not on the text).
        code: ErrorCode,
        /// What happened and what to do.
        message: String,
    },
    /// The broker answered something unexpected.
    #[error("unexpected reply from the broker: {0}")]
    Protocol(String),
    /// The request itself is malformed (checked before it is sent).
    #[error(transparent)]
    Spec(#[from] allot_spec::SpecError),
    /// The cell has no broker to ask (a standalone cell, or one whose
    /// broker's socket is unknown).
    #[error("this cell runs without a broker ({0}): there is nobody to ask")]
    NoBrokerForCell(&'static str),
    /// The grant page could not be mapped.
    #[error("cannot map the grant page: {0}")]
    Page(#[from] allot_proto::ShmError),
    /// The channel the broker handed over could not be mapped.
    #[error("cannot map the channel: {0}")]
    Channel(#[from] allot_channel::OpenError),
}

impl ClientError {
    /// The broker's error code, if it answered with one.
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            ClientError::Broker { code, .. } => Some(*code),
            _ => None,
        }
    }
}

impl From<std::io::Error> for ClientError {
    fn from(e: std::io::Error) -> Self {
        ClientError::Call(CallError::Io(e))
    }
}

fn broker_err(reply: Reply) -> ClientError {
    match reply {
        Reply::Error { code, message, .. } => ClientError::Broker { code, message },
        other => ClientError::Protocol(format!("{other:?}")),
    }
}

/// What the broker says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The broker's process id, in its own pid namespace.
    pub broker_pid: u32,
    /// Broker run id (changes on restart).
    pub instance: u64,
    /// The enforcement backend in use (`cgroup2`, `cgroup1`, `affinity`, `dry-run`).
    pub backend: String,
    /// One line such as "16 CPUs, 8 cores, 2 LLC domains, 2 NUMA nodes".
    pub machine: String,
    /// CPUs available to cells.
    pub cpus: u32,
}

/// An admitted cell: its id, the secret to rejoin it, and its grant page.
#[derive(Debug)]
pub struct Registration {
    /// The broker's id of the cell, for every later request about it.
    pub cell: u64,
    /// The secret that `Rejoin` takes to reattach after the connection or the broker
    /// went away.
    pub token: u64,
    /// The grant page.
    pub page: PageMap,
    /// The cell's join files, when the registration asked to join itself
    /// and the broker granted it (see `Options::joins_itself`); empty
    /// when the broker put the members in the cell itself.
    pub join_files: Vec<OwnedFd>,
}

/// A connection to the broker.
#[derive(Debug)]
pub struct Client {
    conn: Conn,
    socket: PathBuf,
    /// Replies owed to pipelined requests, read and dropped before the next
    /// reply is taken.
    pending: u32,
}

impl Client {
    /// Connects to the broker at `socket`.
    pub fn connect(socket: &Path) -> Result<Client, ClientError> {
        let conn = Conn::connect(socket).map_err(|source| {
            match source
                .get_ref()
                .and_then(|e| e.downcast_ref::<allot_proto::dirs::DirError>())
            {
                Some(_) => ClientError::Untrusted {
                    path: socket.to_path_buf(),
                    reason: *source
                        .into_inner()
                        .and_then(|e| e.downcast().ok())
                        .expect("checked above"),
                },
                None => ClientError::NoBroker {
                    path: socket.to_path_buf(),
                    reason: source,
                },
            }
        })?;
        Ok(Client {
            conn,
            socket: socket.to_path_buf(),
            pending: 0,
        })
    }

    /// Connects to the default socket (`$ALLOT_SOCKET` or the per-user path).
    pub fn connect_default() -> Result<Client, ClientError> {
        Self::connect(&allot_proto::default_socket_path())
    }

    /// The socket this client is connected to.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The raw connection (to poll it).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.conn.fd()
    }

    /// Bounds how long a call waits for its reply.
    pub fn set_timeout(&self, t: Option<Duration>) -> Result<(), ClientError> {
        self.conn.set_timeout(t)?;
        Ok(())
    }

    fn call(&mut self, req: &Request) -> Result<Reply, ClientError> {
        self.conn.send(req)?;
        Ok(self.recv()?.0)
    }

    /// The next reply that answers a request the caller waits for: replies
    /// to pipelined requests come first, in order, and are dropped.
    fn recv(&mut self) -> Result<(Reply, Option<rustix::fd::OwnedFd>), ClientError> {
        let (reply, fds) = self.recv_fds()?;
        Ok((reply, fds.into_iter().next()))
    }

    /// [`Client::recv`] with every descriptor that came with the reply.
    fn recv_fds(&mut self) -> Result<(Reply, Vec<rustix::fd::OwnedFd>), ClientError> {
        while self.pending > 0 {
            self.conn.recv()?;
            self.pending -= 1;
        }
        Ok(self.conn.recv_fds()?)
    }

    /// Sends `req` without waiting for its reply, which the next call reads
    /// and drops. For requests whose failure the caller can do nothing
    /// about and whose latency it cannot afford (`allot run` adding its
    /// program as a member).
    fn pipeline(&mut self, req: &Request) -> Result<(), ClientError> {
        debug_assert!(req.expects_reply(), "one-way requests get no reply to skip");
        self.conn.send(req)?;
        self.pending += 1;
        Ok(())
    }

    fn ok(&mut self, req: &Request) -> Result<(), ClientError> {
        match self.call(req)? {
            Reply::Ok => Ok(()),
            other => Err(broker_err(other)),
        }
    }

    /// Introduces the client; returns the broker's description of itself.
    pub fn hello(&mut self, client: &str) -> Result<Welcome, ClientError> {
        match self.call(&Request::Hello {
            client: client.into(),
        })? {
            Reply::Welcome {
                broker_pid,
                instance,
                backend,
                machine,
                cpus,
            } => Ok(Welcome {
                broker_pid,
                instance,
                backend,
                machine,
                cpus,
            }),
            other => Err(broker_err(other)),
        }
    }

    /// Registers a cell for `members` (empty: this process). With `wait`,
    /// blocks in the broker's queue until admitted, calling `on_queued` with
    /// the position and reason first. With `joins_itself`, the broker may
    /// leave moving this process to it ([`Registration::join_files`]).
    pub fn register(
        &mut self,
        name: &str,
        spec: CellSpec,
        members: &[u32],
        wait: bool,
        joins_itself: bool,
        on_queued: impl FnMut(u32, &str),
    ) -> Result<Registration, ClientError> {
        self.send_register(name, spec, members, wait, joins_itself)?;
        self.await_registration(on_queued)
    }

    /// The first half of [`Client::register`]: sends the request and
    /// returns at once, so the caller can do other work while the broker
    /// decides; [`Client::await_registration`] takes the answer.
    pub fn send_register(
        &mut self,
        name: &str,
        spec: CellSpec,
        members: &[u32],
        wait: bool,
        joins_itself: bool,
    ) -> Result<(), ClientError> {
        self.conn.send(&Request::Register {
            name: name.into(),
            spec,
            wait,
            members: members.to_vec(),
            joins_itself,
        })?;
        Ok(())
    }

    /// The second half of [`Client::register`]: the broker's answer to the
    /// request [`Client::send_register`] sent (each place in the queue
    /// first, to `on_queued`, while it waits there).
    pub fn await_registration(
        &mut self,
        mut on_queued: impl FnMut(u32, &str),
    ) -> Result<Registration, ClientError> {
        loop {
            let (reply, fds) = self.recv_fds()?;
            match reply {
                Reply::Registered { cell, token, .. } => {
                    let mut fds = fds.into_iter();
                    let fd = fds.next().ok_or_else(|| {
                        ClientError::Protocol("Registered without a grant page".into())
                    })?;
                    return Ok(Registration {
                        cell,
                        token,
                        page: PageMap::open(fd)?,
                        join_files: fds.collect(),
                    });
                }
                Reply::Queued {
                    position, reason, ..
                } => on_queued(position, &reason),
                other => return Err(broker_err(other)),
            }
        }
    }

    /// Reattaches to `cell` after a broker restart, handing back the page
    /// the client holds so every process of the cell keeps reading the same
    /// page. Returns the page to use from now on.
    pub fn rejoin(
        &mut self,
        cell: u64,
        token: u64,
        page: Option<&PageMap>,
    ) -> Result<PageMap, ClientError> {
        let req = Request::Rejoin { cell, token };
        match page {
            Some(p) => self.conn.send_with_fd(&req, p.fd().as_fd())?,
            None => self.conn.send(&req)?,
        }
        let (reply, fd) = self.recv()?;
        match reply {
            Reply::Registered { .. } => {
                let fd = fd.ok_or_else(|| {
                    ClientError::Protocol("Registered without a grant page".into())
                })?;
                Ok(PageMap::open(fd)?)
            }
            other => Err(broker_err(other)),
        }
    }

    /// Adds process `pid` to `cell`.
    pub fn add_member(&mut self, cell: u64, pid: u32) -> Result<(), ClientError> {
        self.ok(&Request::AddMember { cell, pid })
    }

    /// Asks for process `pid` to be added to `cell` without waiting for the
    /// answer (which the next call on this connection skips).
    pub fn add_member_nowait(&mut self, cell: u64, pid: u32) -> Result<(), ClientError> {
        self.pipeline(&Request::AddMember { cell, pid })
    }

    /// Sends a progress report (no reply).
    pub fn report(
        &mut self,
        cell: u64,
        busy: u32,
        wanted: u32,
        progress: u64,
    ) -> Result<(), ClientError> {
        self.conn.send(&Request::Report {
            cell,
            busy,
            wanted,
            progress,
        })?;
        Ok(())
    }

    /// Sends a runtime pool's statistics (no reply).
    pub fn pool_stats(
        &mut self,
        cell: u64,
        stats: allot_proto::PoolStatsWire,
    ) -> Result<(), ClientError> {
        self.conn.send(&Request::PoolStats { cell, stats })?;
        Ok(())
    }

    /// Changes `cell`'s request.
    pub fn update_spec(&mut self, cell: u64, spec: CellSpec) -> Result<(), ClientError> {
        self.ok(&Request::UpdateSpec { cell, spec })
    }

    /// Changes `cell`'s goal alone.
    pub fn set_goal(&mut self, cell: u64, goal: Goal) -> Result<(), ClientError> {
        self.ok(&Request::SetGoal { cell, goal })
    }

    /// Changes cell `cell`'s memory guarantee and limit alone.
    pub fn set_memory(&mut self, cell: u64, memory: allot_spec::Memory) -> Result<(), ClientError> {
        self.ok(&Request::SetMemory { cell, memory })
    }

    /// Changes cell `cell`'s L3 ways and bandwidth ceiling alone.
    pub fn set_cache(&mut self, cell: u64, cache: allot_spec::Cache) -> Result<(), ClientError> {
        self.ok(&Request::SetCache { cell, cache })
    }

    /// Makes `cell` also confine `dir`, a launcher's cgroup v2 directory
    /// (`IncludeGroup`; root only, with the cell's `token`).
    pub fn include_group(&mut self, cell: u64, token: u64, dir: &str) -> Result<(), ClientError> {
        self.ok(&Request::IncludeGroup {
            cell,
            token,
            dir: dir.into(),
        })
    }

    /// Ends `cell`.
    pub fn release(&mut self, cell: u64) -> Result<(), ClientError> {
        self.ok(&Request::Release { cell })
    }

    /// The broker's status document.
    pub fn status(&mut self) -> Result<allot_proto::status::Status, ClientError> {
        let json = self.status_json()?;
        allot_proto::status::Status::from_json(&json).map_err(|e| {
            ClientError::Protocol(format!(
                "the broker sent a status document this client cannot read: {e}"
            ))
        })
    }

    /// The broker's status document as the JSON text it sent.
    pub fn status_json(&mut self) -> Result<String, ClientError> {
        self.conn.send(&Request::Status)?;
        let mut json = String::new();
        loop {
            match self.recv()?.0 {
                Reply::Status { more, json: part } => {
                    json.push_str(&part);
                    if !more {
                        return Ok(json);
                    }
                }
                other => return Err(broker_err(other)),
            }
        }
    }

    /// Asks the broker to exit.
    pub fn shutdown(&mut self) -> Result<(), ClientError> {
        self.ok(&Request::Shutdown)
    }

    /// Opens one end of the named channel `name` (creating it, with at
    /// least `slots` slots of messages up to `message_max` bytes, if it
    /// does not exist; 0 for the broker's defaults or an existing
    /// channel's sizes). The broker counts the end open until
    /// [`Client::close_channel`] or until this connection closes (also
    /// when the process dies); then the other side sees it gone.
    pub fn open_channel(
        &mut self,
        name: &str,
        end: ChannelEnd,
        slots: u32,
        message_max: u32,
    ) -> Result<allot_channel::Channel, ClientError> {
        self.conn.send(&Request::ChannelOpen {
            name: name.into(),
            send: end == ChannelEnd::Send,
            slots,
            message_max,
        })?;
        match self.recv_fds()? {
            (Reply::Channel { .. }, fds) if fds.len() == 3 => {
                let [mem, data, space]: [rustix::fd::OwnedFd; 3] =
                    fds.try_into().expect("three descriptors");
                Ok(allot_channel::Channel::open(mem, data, space)?)
            }
            (Reply::Channel { .. }, fds) => Err(ClientError::Protocol(format!(
                "the broker sent a channel with {} descriptors, not 3",
                fds.len()
            ))),
            (other, _) => Err(broker_err(other)),
        }
    }

    /// The sending end of channel `name` (see [`Client::open_channel`]).
    pub fn channel_sender(
        &mut self,
        name: &str,
        slots: u32,
        message_max: u32,
    ) -> Result<allot_channel::Sender, ClientError> {
        Ok(self
            .open_channel(name, ChannelEnd::Send, slots, message_max)?
            .managed_sender())
    }

    /// The receiving end of channel `name` (see [`Client::open_channel`]).
    pub fn channel_receiver(
        &mut self,
        name: &str,
        slots: u32,
        message_max: u32,
    ) -> Result<allot_channel::Receiver, ClientError> {
        Ok(self
            .open_channel(name, ChannelEnd::Receive, slots, message_max)?
            .managed_receiver())
    }

    /// Hands an end of channel `name` back to a broker that restarted
    /// (`ChannelRejoin`): `fds` are the channel's memory, data doorbell and
    /// space doorbell. The broker counts the end for this connection again.
    pub fn rejoin_channel(
        &mut self,
        name: &str,
        end: ChannelEnd,
        fds: [BorrowedFd<'_>; 3],
    ) -> Result<(), ClientError> {
        let req = Request::ChannelRejoin {
            name: name.into(),
            send: end == ChannelEnd::Send,
        };
        allot_proto::transport::send_fds(self.conn.fd(), &req.encode(), &fds)
            .map_err(CallError::from)?;
        match self.recv()?.0 {
            Reply::Ok => Ok(()),
            other => Err(broker_err(other)),
        }
    }

    /// Closes an end this connection opened of channel `name` (one-way:
    /// the broker does not answer).
    pub fn close_channel(&mut self, name: &str, end: ChannelEnd) -> Result<(), ClientError> {
        self.conn.send(&Request::ChannelClose {
            name: name.into(),
            send: end == ChannelEnd::Send,
        })?;
        Ok(())
    }
}

/// Which end of a channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelEnd {
    /// A sending end (any number).
    Send,
    /// The receiving end (one at a time).
    Receive,
}
