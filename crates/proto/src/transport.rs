//! The control socket: `AF_UNIX` `SOCK_SEQPACKET`, one message per datagram,
//! file descriptors passed with `SCM_RIGHTS`.
//!
//! Seqpacket keeps message boundaries (no framing layer) and reports the
//! peer's credentials (`SO_PEERCRED`), which the broker uses for permission
//! checks.

use crate::msg::{MAX_MESSAGE, Reply, Request};
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags, SocketAddrUnix, SocketFlags, SocketType,
};
use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::path::Path;

/// One received datagram.
#[derive(Debug)]
pub struct Datagram {
    /// Bytes received (at most the buffer's length).
    pub len: usize,
    /// The datagram was longer than the buffer and was cut.
    pub truncated: bool,
    /// The file descriptors that came with it (at most [`MAX_FDS`]; the
    /// kernel closes any beyond).
    pub fds: Vec<OwnedFd>,
}

/// The most file descriptors one datagram carries (a grant page and a
/// cell's join files, one per cgroup v1 hierarchy).
pub const MAX_FDS: usize = 8;

/// Sends `bytes` as one datagram, with `fd` attached if given.
pub fn send(sock: BorrowedFd<'_>, bytes: &[u8], fd: Option<BorrowedFd<'_>>) -> std::io::Result<()> {
    match fd {
        Some(fd) => send_fds(sock, bytes, &[fd]),
        None => send_fds(sock, bytes, &[]),
    }
}

/// Sends `bytes` as one datagram with `fds` (at most [`MAX_FDS`]) attached.
pub fn send_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> std::io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(std::io::Error::other(format!(
            "{} descriptors in one message, over {MAX_FDS}",
            fds.len()
        )));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() {
        control.push(SendAncillaryMessage::ScmRights(fds));
    }
    let n = loop {
        match rustix::net::sendmsg(
            sock,
            &[IoSlice::new(bytes)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    if n != bytes.len() {
        return Err(std::io::Error::other(format!(
            "short send: {n} of {} bytes",
            bytes.len()
        )));
    }
    Ok(())
}

/// Receives one datagram into `buf`; `Ok(None)` at end of stream (peer gone).
pub fn recv(
    sock: BorrowedFd<'_>,
    buf: &mut [u8],
    nonblocking: bool,
) -> std::io::Result<Option<Datagram>> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::TRUNC;
    if nonblocking {
        flags |= RecvFlags::DONTWAIT;
    }
    let msg = loop {
        match rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, flags) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other?,
        }
    };
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(got) = m {
            // Keep the first MAX_FDS, close any others by dropping them.
            for f in got {
                if fds.len() < MAX_FDS {
                    fds.push(f);
                }
            }
        }
    }
    if msg.bytes == 0 && fds.is_empty() {
        return Ok(None);
    }
    Ok(Some(Datagram {
        len: msg.bytes.min(buf.len()),
        truncated: msg.bytes > buf.len(),
        fds,
    }))
}

/// Creates a listening socket at `path` (removing a stale socket file first).
pub fn listen(path: &Path) -> std::io::Result<OwnedFd> {
    let sock = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    let addr = SocketAddrUnix::new(path)?;
    rustix::net::bind(&sock, &addr)?;
    rustix::net::listen(&sock, 128)?;
    Ok(sock)
}

/// A receive buffer of [`MAX_MESSAGE`] bytes in an anonymous mapping: the
/// kernel gives each page, zeroed, when a message first lands in it, so a
/// connection whose messages are small touches one page. A zeroed heap
/// buffer of the same size is written whole when made: sixteen page
/// faults on every connection (a launch makes two).
#[derive(Debug)]
pub struct RecvBuf {
    ptr: std::ptr::NonNull<u8>,
}

// SAFETY: the mapping is owned by this value alone (no other pointer to it
// exists) and freed only by its drop.
unsafe impl Send for RecvBuf {}
// SAFETY: shared access only reads through `&[u8]`.
unsafe impl Sync for RecvBuf {}

impl RecvBuf {
    /// A new buffer; it fails only where the kernel refuses the mapping
    /// (no address space left).
    pub fn new() -> std::io::Result<RecvBuf> {
        use rustix::mm::{MapFlags, ProtFlags, mmap_anonymous};
        // SAFETY: a fresh private anonymous mapping aliases nothing.
        let p = unsafe {
            mmap_anonymous(
                std::ptr::null_mut(),
                MAX_MESSAGE,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        }?;
        Ok(RecvBuf {
            ptr: std::ptr::NonNull::new(p.cast()).ok_or_else(|| std::io::Error::other("mmap"))?,
        })
    }
}

impl std::ops::Deref for RecvBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: the mapping is MAX_MESSAGE bytes, readable, and zero
        // filled by the kernel, so every byte is initialized.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), MAX_MESSAGE) }
    }
}

impl std::ops::DerefMut for RecvBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as for `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), MAX_MESSAGE) }
    }
}

impl Drop for RecvBuf {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), MAX_MESSAGE) };
    }
}

/// A client's connection to the broker.
#[derive(Debug)]
pub struct Conn {
    sock: OwnedFd,
    buf: RecvBuf,
}

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The socket failed.
    #[error("broker connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The broker closed the connection.
    #[error("the broker closed the connection")]
    Closed,
    /// The reply did not decode.
    #[error("the broker sent an unreadable reply: {0}")]
    Frame(#[from] crate::msg::FrameError),
}

impl Conn {
    /// Connects to the broker's socket at `path`, after checking that the
    /// socket's directory is the caller's or root's and writable by nobody
    /// else ([`crate::dirs::socket_dir`]): a socket another user could
    /// plant is never talked to. That refusal is a `PermissionDenied` error
    /// whose inner error is the [`crate::dirs::DirError`].
    pub fn connect(path: &Path) -> std::io::Result<Conn> {
        match crate::dirs::socket_dir(path) {
            Err(e) if e.is_untrusted() => {
                return Err(std::io::Error::new(std::io::ErrorKind::PermissionDenied, e));
            }
            // A missing directory: the connect below says "not found".
            _ => {}
        }
        let sock = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC,
            None,
        )?;
        let addr = SocketAddrUnix::new(path)?;
        loop {
            match rustix::net::connect(&sock, &addr) {
                Err(rustix::io::Errno::INTR) => continue,
                other => break other?,
            }
        }
        Ok(Conn {
            sock,
            buf: RecvBuf::new()?,
        })
    }

    /// Wraps an already connected socket (tests, socketpairs).
    pub fn from_fd(sock: OwnedFd) -> Conn {
        Conn {
            sock,
            buf: RecvBuf::new().expect("address space for a receive buffer"),
        }
    }

    /// A second handle on the same connection (its own receive buffer):
    /// one thread may send on it while another waits to receive.
    pub fn try_clone(&self) -> std::io::Result<Conn> {
        let sock = rustix::io::fcntl_dupfd_cloexec(&self.sock, 0)?;
        Ok(Conn {
            sock,
            buf: RecvBuf::new()?,
        })
    }

    /// The socket, for polling.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }

    /// Sends a request.
    pub fn send(&self, req: &Request) -> std::io::Result<()> {
        send(self.sock.as_fd(), &req.encode(), None)
    }

    /// Sends a request with a file descriptor attached.
    pub fn send_with_fd(&self, req: &Request, fd: BorrowedFd<'_>) -> std::io::Result<()> {
        send(self.sock.as_fd(), &req.encode(), Some(fd))
    }

    /// Sends raw bytes (for tests of the broker's decoder).
    pub fn send_raw(&self, bytes: &[u8]) -> std::io::Result<()> {
        send(self.sock.as_fd(), bytes, None)
    }

    /// Receives one reply (blocking), with the first file descriptor
    /// attached (others are closed).
    pub fn recv(&mut self) -> Result<(Reply, Option<OwnedFd>), CallError> {
        let (reply, fds) = self.recv_fds()?;
        Ok((reply, fds.into_iter().next()))
    }

    /// Receives one reply (blocking), with every file descriptor attached.
    pub fn recv_fds(&mut self) -> Result<(Reply, Vec<OwnedFd>), CallError> {
        let d = recv(self.sock.as_fd(), &mut self.buf, false)?.ok_or(CallError::Closed)?;
        let reply = Reply::decode(&self.buf[..d.len])?;
        Ok((reply, d.fds))
    }

    /// Receives one reply if one has come (`Ok(None)`: none yet), without
    /// blocking; descriptors that came with it are closed.
    pub fn try_recv(&mut self) -> Result<Option<Reply>, CallError> {
        match recv(self.sock.as_fd(), &mut self.buf, true) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e.into()),
            Ok(None) => Err(CallError::Closed),
            Ok(Some(d)) => Ok(Some(Reply::decode(&self.buf[..d.len])?)),
        }
    }

    /// Sends `req` and waits for its reply.
    pub fn call(&mut self, req: &Request) -> Result<(Reply, Option<OwnedFd>), CallError> {
        self.send(req)?;
        self.recv()
    }

    /// Sets a receive timeout (`None`: block forever).
    pub fn set_timeout(&self, t: Option<std::time::Duration>) -> std::io::Result<()> {
        rustix::net::sockopt::set_socket_timeout(
            &self.sock,
            rustix::net::sockopt::Timeout::Recv,
            t,
        )?;
        Ok(())
    }
}
