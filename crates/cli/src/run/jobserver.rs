//! A GNU-make-compatible jobserver whose tokens follow the cell's grant.
//!
//! # The protocol
//!
//! A jobserver is a pipe holding one byte per *extra* job slot: every client
//! (make, cargo, gcc's LTO driver) has one implicit slot, reads a byte before
//! starting each further job and writes it back when that job ends. Total
//! concurrency across a tree of clients is therefore `1 + tokens`. Clients
//! find the pipe in `MAKEFLAGS`: `--jobserver-auth=R,W` (inherited file
//! descriptors; the only form GNU make 4.3 understands) or
//! `--jobserver-auth=fifo:PATH` (make 4.4+).
//!
//! # Following the grant
//!
//! `allot run` owns the pipe. With `slots` = the cell's recommended thread
//! count (capped by a `-jN` it took from make's arguments), it keeps
//! `slots - 1` tokens in circulation: more are written as soon as the grant
//! grows; when it shrinks, tokens are *withheld* as they come back (read by
//! allot through its own non-blocking description of the pipe, so clients
//! keep their blocking reads). Jobs already running are never interrupted.
//!
//! # Lost tokens
//!
//! A client that dies while holding tokens (a `make` killed by SIGKILL)
//! never returns them; the classic jobserver leaks them for the rest of the
//! build. allot knows how many tokens are out (`circulating − in pipe`) and
//! how many the live clients can hold: a client holds one token per child
//! beyond its first (make keeps one token per running job except the one
//! on its implicit slot). Clients are the cell's processes that have the
//! pipe open. When more tokens are out than the clients can hold, on two
//! checks in a row (so a client between reading a token and forking is not
//! mistaken for a leak), the excess is written back.

use allot_enforce::os::{Os, process_tree};
use rustix::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;

/// How clients are told about the pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// `--jobserver-auth=R,W` with inherited descriptors (make 4.3+, cargo).
    Pipe,
    /// `--jobserver-auth=fifo:PATH` (make 4.4+).
    Fifo,
}

impl std::str::FromStr for Style {
    type Err = String;
    fn from_str(s: &str) -> Result<Style, String> {
        match s {
            "pipe" => Ok(Style::Pipe),
            "fifo" => Ok(Style::Fifo),
            other => Err(format!(
                "unknown jobserver style {other:?}: expected pipe or fifo"
            )),
        }
    }
}

/// The jobserver of one cell.
#[derive(Debug)]
pub struct Jobserver {
    style: Style,
    /// Descriptors children inherit (pipe style) — kept open for our lifetime.
    child_r: OwnedFd,
    child_w: OwnedFd,
    /// Our own non-blocking read description, for withholding.
    own_r: OwnedFd,
    fifo: Option<(tempfile::TempDir, PathBuf)>,
    ino: u64,
    circulating: usize,
    target: usize,
    suspect: Option<usize>,
    restored: usize,
}

fn io(e: rustix::io::Errno) -> std::io::Error {
    e.into()
}

impl Jobserver {
    /// Creates a jobserver with `slots` job slots.
    pub fn new(style: Style, slots: usize) -> std::io::Result<Jobserver> {
        use rustix::fs::{Mode, OFlags};
        let (child_r, child_w, own_r, fifo) = match style {
            Style::Pipe => {
                let (r, w) =
                    rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(io)?;
                // A second open file description of the same pipe, so our
                // O_NONBLOCK does not leak into the clients' description.
                let own = rustix::fs::open(
                    format!("/proc/self/fd/{}", r.as_raw_fd()),
                    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                (r, w, own, None)
            }
            Style::Fifo => {
                let dir = tempfile::Builder::new()
                    .prefix("allot-jobserver-")
                    .tempdir()?;
                let path = dir.path().join("fifo");
                rustix::fs::mknodat(
                    rustix::fs::CWD,
                    &path,
                    rustix::fs::FileType::Fifo,
                    Mode::from_raw_mode(0o600),
                    0,
                )
                .map_err(io)?;
                let own = rustix::fs::open(
                    &path,
                    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                let w = rustix::fs::open(&path, OFlags::WRONLY | OFlags::CLOEXEC, Mode::empty())
                    .map_err(io)?;
                let r = rustix::fs::open(
                    &path,
                    OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
                    Mode::empty(),
                )
                .map_err(io)?;
                (r, w, own, Some((dir, path)))
            }
        };
        let ino = rustix::fs::fstat(&own_r).map_err(io)?.st_ino;
        let mut js = Jobserver {
            style,
            child_r,
            child_w,
            own_r,
            fifo,
            ino,
            circulating: 0,
            target: 0,
            suspect: None,
            restored: 0,
        };
        js.set_slots(slots)?;
        Ok(js)
    }

    /// Makes the pipe descriptors inheritable (pipe style) and returns the
    /// `MAKEFLAGS` fragment announcing them, with `-jN` for tools that print it.
    pub fn prepare_for_children(&self, max_slots: usize) -> std::io::Result<String> {
        let auth = match (&self.style, &self.fifo) {
            (Style::Fifo, Some((_, path))) => format!("fifo:{}", path.display()),
            _ => {
                for fd in [&self.child_r, &self.child_w] {
                    rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty()).map_err(io)?;
                }
                format!("{},{}", self.child_r.as_raw_fd(), self.child_w.as_raw_fd())
            }
        };
        Ok(format!("-j{} --jobserver-auth={auth}", max_slots.max(1)))
    }

    /// Tokens in circulation (issued, not withheld).
    #[cfg(test)]
    pub fn circulating(&self) -> usize {
        self.circulating
    }

    /// Tokens restored after leaks so far.
    #[cfg(test)]
    pub fn restored(&self) -> usize {
        self.restored
    }

    /// Tokens sitting in the pipe now.
    pub fn in_pipe(&self) -> usize {
        rustix::io::ioctl_fionread(&self.own_r)
            .map(|n| n as usize)
            .unwrap_or(0)
    }

    /// Sets the number of job slots: grows at once, shrinks as tokens return.
    pub fn set_slots(&mut self, slots: usize) -> std::io::Result<()> {
        self.target = slots.saturating_sub(1);
        if self.target > self.circulating {
            let n = self.target - self.circulating;
            self.write_tokens(n)?;
            self.circulating += n;
        }
        self.withhold();
        Ok(())
    }

    fn write_tokens(&self, n: usize) -> std::io::Result<()> {
        let buf = vec![b'+'; n];
        let mut done = 0;
        while done < n {
            match rustix::io::write(&self.child_w, &buf[done..]) {
                Ok(k) => done += k,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Whether tokens are being withheld (more circulate than allowed).
    pub fn withholding(&self) -> bool {
        self.circulating > self.target
    }

    /// Waits up to `timeout` for a token to come back to the pipe.
    pub fn wait_returned(&self, timeout: std::time::Duration) {
        use rustix::event::{PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.own_r, PollFlags::IN)];
        let ts = rustix::time::Timespec {
            tv_sec: timeout.as_secs() as i64,
            tv_nsec: timeout.subsec_nanos() as _,
        };
        let _ = rustix::event::poll(&mut fds, Some(&ts));
    }

    /// Takes back tokens that have returned, while more circulate than the
    /// grant allows. Never blocks.
    pub fn withhold(&mut self) {
        while self.circulating > self.target {
            let mut buf = [0u8; 64];
            let want = (self.circulating - self.target).min(buf.len());
            match rustix::io::read(&self.own_r, &mut buf[..want]) {
                Ok(0) => break,
                Ok(k) => self.circulating -= k,
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => break,
            }
        }
    }

    /// Checks for tokens lost with dead clients among `root`'s process tree
    /// and restores them; returns how many were restored now.
    pub fn check_leaks(&mut self, os: &dyn Os, root: u32) -> usize {
        let held = self.circulating.saturating_sub(self.in_pipe());
        let mut can_hold = 0usize;
        for pid in process_tree(os, &[root]) {
            // make holds a token per child beyond its first; ninja at
            // times one per running job, its first included.
            if self.has_pipe_open(pid) {
                let jobs = os.children(pid).len();
                can_hold += if is_ninja(pid) {
                    jobs
                } else {
                    jobs.saturating_sub(1)
                };
            }
        }
        let excess = held.saturating_sub(can_hold);
        if excess == 0 {
            self.suspect = None;
            return 0;
        }
        match self.suspect.replace(excess) {
            Some(prev) => {
                let lost = prev.min(excess);
                if self.write_tokens(lost).is_ok() {
                    self.restored += lost;
                    self.suspect = None;
                    lost
                } else {
                    0
                }
            }
            None => 0,
        }
    }

    fn has_pipe_open(&self, pid: u32) -> bool {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            return false;
        };
        let pipe = format!("pipe:[{}]", self.ino);
        rd.flatten().any(|e| match std::fs::read_link(e.path()) {
            Ok(target) => {
                target.as_os_str() == pipe.as_str()
                    || self.fifo.as_ref().is_some_and(|(_, p)| target == *p)
            }
            Err(_) => false,
        })
    }
}

/// Whether process `pid` is ninja (its command name).
fn is_ninja(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| matches!(c.trim_end(), "ninja" | "ninja-build"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(js: &Jobserver, n: usize) -> usize {
        // Act as a client: read through the child's descriptor.
        let mut buf = vec![0u8; n];
        rustix::io::read(&js.child_r, &mut buf).unwrap()
    }

    fn give(js: &Jobserver, n: usize) {
        rustix::io::write(&js.child_w, &vec![b'+'; n]).unwrap();
    }

    #[test]
    fn tokens_follow_slots() {
        for style in [Style::Pipe, Style::Fifo] {
            let mut js = Jobserver::new(style, 4).unwrap();
            assert_eq!(js.in_pipe(), 3);
            js.set_slots(2).unwrap();
            assert_eq!(
                js.in_pipe(),
                1,
                "{style:?}: idle tokens are withheld at once"
            );
            assert_eq!(js.circulating(), 1);
            // A client holds the token; shrinking to one slot waits for it.
            assert_eq!(take(&js, 1), 1);
            js.set_slots(1).unwrap();
            assert_eq!(js.circulating(), 1);
            give(&js, 1);
            js.withhold();
            assert_eq!(js.circulating(), 0);
            assert_eq!(js.in_pipe(), 0);
            js.set_slots(3).unwrap();
            assert_eq!(js.in_pipe(), 2);
        }
    }

    #[test]
    fn makeflags_name_the_pipe() {
        let js = Jobserver::new(Style::Pipe, 2).unwrap();
        let f = js.prepare_for_children(8).unwrap();
        assert!(f.starts_with("-j8 --jobserver-auth="), "{f}");
        let js = Jobserver::new(Style::Fifo, 2).unwrap();
        assert!(js.prepare_for_children(2).unwrap().contains("fifo:/"));
    }

    #[test]
    fn leaked_tokens_are_restored_after_two_checks() {
        use allot_enforce::os::FakeOs;
        let mut js = Jobserver::new(Style::Pipe, 3).unwrap();
        assert_eq!(take(&js, 2), 2);
        // Nobody in the (empty) tree can hold them: leaked.
        let os = FakeOs::new();
        assert_eq!(js.check_leaks(&os, 999), 0, "first sighting only suspects");
        assert_eq!(js.check_leaks(&os, 999), 2);
        assert_eq!(js.in_pipe(), 2);
        assert_eq!(js.restored(), 2);
        assert_eq!(js.check_leaks(&os, 999), 0);
    }
}
