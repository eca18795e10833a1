//! Registration: how a process gets a cell of its own from the broker
//! ([`Cell::register`] and its [`Options`]), the cell `allot run` gave it
//! ([`Cell::from_env`]), or none ([`Cell::standalone`]); [`Cell::auto`]
//! tries them in that order.
//!
//! A registrant either is moved into its cell by the broker, moves itself
//! with the join files the broker hands it (`Options::joins_itself`,
//! cgroup v1), or stays where it is (`Options::stays_put`, for a
//! launcher whose processes live in cgroups of its own).

use super::{Cell, Grant, Link, Mode, Wait, local_page};
use crate::conn::{Client, ClientError};
use allot_proto::PageMap;
use allot_spec::CellSpec;
use rustix::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

/// Options for [`Cell::register`].
#[derive(Debug, Clone)]
pub struct Options {
    /// Cell name shown by `allot status`.
    pub name: String,
    /// What to ask for.
    pub spec: CellSpec,
    /// Broker socket (default: `$ALLOT_SOCKET` or the per-user path).
    pub socket: Option<PathBuf>,
    /// Queue if admission says "not now".
    pub wait: bool,
    /// Without a broker, run standalone instead of failing.
    pub fallback: bool,
    /// The registering thread moves *itself* into the cell, with the join
    /// files the broker sends (cgroup v1), instead of the broker moving
    /// this process: a move by pid waits in the kernel for an RCU grace
    /// period after a quiet spell (milliseconds), a thread moving itself
    /// does not. Only the calling thread moves, so the processes it
    /// starts afterwards begin inside the cell, its other threads stay
    /// where they are: for a launcher (`allot run`) about to start its
    /// program. Where the broker sends no join files (another backend, a
    /// peer it does not trust with them) it moves the process itself, as
    /// without this option.
    pub joins_itself: bool,
    /// This process stays in the cgroup it is in: the broker watches it
    /// without moving it (on the cgroup2 backend; others move it as
    /// usual). For a launcher whose processes live in cgroups of its own
    /// (Slurm's `task/cgroup` on cgroup v2), which then gives the cell
    /// those cgroups with [`crate::include_group`].
    pub stays_put: bool,
    /// The thread that rejoins a restarted broker starts only when
    /// [`Cell::watch`] is called, not at registration: for a launcher
    /// whose program may end before it would matter (its start, and its
    /// end, cost the launch time).
    pub watch_later: bool,
}

impl Options {
    /// Defaults: best effort, no waiting, standalone fallback on.
    pub fn new(name: impl Into<String>) -> Options {
        Options {
            name: name.into(),
            spec: CellSpec::default(),
            socket: None,
            wait: false,
            fallback: true,
            joins_itself: false,
            stays_put: false,
            watch_later: false,
        }
    }
}

impl Cell {
    /// Registers this process as a cell with the broker. Without a broker
    /// and with `opts.fallback`, returns a standalone cell (see
    /// [`Cell::fallback_reason`]); admission refusals are errors.
    pub fn register(opts: &Options) -> Result<Cell, ClientError> {
        Cell::register_with(opts, |_| {})
    }

    /// [`Cell::register`], telling `on_wait` what the cell waits for as it
    /// happens: each place in the queue while the broker keeps the request
    /// waiting (with `opts.wait`), and, once admitted, whether it starts
    /// paused.
    pub fn register_with(
        opts: &Options,
        on_wait: impl FnMut(Wait<'_>),
    ) -> Result<Cell, ClientError> {
        let socket = opts
            .socket
            .clone()
            .unwrap_or_else(allot_proto::default_socket_path);
        let client = match Client::connect(&socket) {
            Ok(c) => c,
            Err(e) if opts.fallback => return Ok(Cell::standalone_because(e.to_string())),
            Err(e) => return Err(e),
        };
        Cell::register_over(client, opts, on_wait)
    }

    /// [`Cell::register_with`] over a connection the caller already opened
    /// (to the socket of `opts`, or the default one).
    pub fn register_over(
        client: Client,
        opts: &Options,
        on_wait: impl FnMut(Wait<'_>),
    ) -> Result<Cell, ClientError> {
        Cell::send_registration(client, opts)?.finish(on_wait)
    }

    /// The first half of [`Cell::register_over`]: sends the request and
    /// returns at once, so the caller can prepare what it needs while the
    /// broker decides; [`Registering::finish`] takes the answer.
    pub fn send_registration(
        mut client: Client,
        opts: &Options,
    ) -> Result<Registering, ClientError> {
        // Staying put is joining itself without joining: the broker (v2)
        // sends the cell's directory and moves nothing.
        client.send_register(
            &opts.name,
            opts.spec,
            &[],
            opts.wait,
            opts.joins_itself || opts.stays_put,
        )?;
        Ok(Registering {
            client,
            opts: opts.clone(),
        })
    }
}

/// A registration sent and not yet answered ([`Cell::send_registration`]).
#[derive(Debug)]
pub struct Registering {
    client: Client,
    opts: Options,
}

impl Registering {
    /// Waits for the broker's answer and makes the cell, as
    /// [`Cell::register_over`] does.
    pub fn finish(self, mut on_wait: impl FnMut(Wait<'_>)) -> Result<Cell, ClientError> {
        let Registering { mut client, opts } = self;
        let opts = &opts;
        let socket = client.socket().to_path_buf();
        let reg = client
            .await_registration(|position, reason| on_wait(Wait::Queued { position, reason }))?;
        let (dirs, files) = directories_or_files(reg.join_files);
        // Only a cgroup1 broker hands over `tasks` files.
        let in_v1_cpuset = !files.is_empty();
        let files = if opts.stays_put {
            if in_v1_cpuset {
                // A v1 broker hands over its tasks files: it moves
                // nothing there either, so the process is moved as usual.
                client.add_member(reg.cell, std::process::id())?;
            }
            Vec::new()
        } else {
            files
        };
        // Told before this process joins: a paused cell stops it there,
        // and a broker that adopts the cell after a restart thaws it.
        if reg.page.page().read().cpus.is_empty() {
            on_wait(Wait::Paused);
        }
        if !files.is_empty() && !join_self(&files) {
            // Not every hierarchy took this thread: the broker moves the
            // whole process instead.
            client.add_member(reg.cell, std::process::id())?;
        }
        let cell = Cell::from_parts(
            Mode::Registered,
            Arc::new(reg.page),
            Link {
                id: reg.cell,
                token: reg.token,
                socket: Some(socket),
                conn: Some(client),
            },
            Some(opts),
            None,
        );
        *cell
            .inner
            .spawn_cgroup
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = dirs.into_iter().next();
        cell.inner
            .in_v1_cpuset
            .store(in_v1_cpuset, std::sync::atomic::Ordering::Relaxed);
        Ok(cell)
    }
}

impl Cell {
    /// The cell `allot run` put this process in, from `ALLOT_CELL` and
    /// `ALLOT_GRANT_FD`; `None` outside `allot run`.
    pub fn from_env() -> Option<Result<Cell, ClientError>> {
        let id: u64 = std::env::var(allot_proto::ENV_CELL).ok()?.parse().ok()?;
        let fd: i32 = std::env::var(allot_proto::ENV_GRANT_FD)
            .ok()?
            .parse()
            .ok()?;
        // Duplicate the inherited descriptor so the caller's fd stays theirs.
        // SAFETY: `fd` is only borrowed for the duration of the dup call; if
        // it is not open, fcntl fails and we report it.
        let borrowed = unsafe { rustix::fd::BorrowedFd::borrow_raw(fd) };
        let dup = match rustix::io::fcntl_dupfd_cloexec(borrowed, 0) {
            Ok(d) => d,
            Err(e) => return Some(Err(ClientError::Call(allot_proto::CallError::Io(e.into())))),
        };
        let page = match PageMap::open(dup) {
            Ok(p) => p,
            Err(e) => return Some(Err(e.into())),
        };
        let socket = std::env::var_os(allot_proto::ENV_SOCKET).map(PathBuf::from);
        Some(Ok(Cell::from_parts(
            Mode::Joined,
            Arc::new(page),
            Link {
                id,
                socket,
                ..Link::default()
            },
            None,
            None,
        )))
    }

    /// `from_env`, else `register`, else standalone: what a library that
    /// just wants "the CPUs I should use" calls.
    pub fn auto(name: &str) -> Cell {
        if let Some(Ok(c)) = Cell::from_env() {
            return c;
        }
        Cell::register(&Options::new(name))
            .unwrap_or_else(|e| Cell::standalone_because(e.to_string()))
    }

    /// A cell without a broker: the CPUs this process may use, fixed.
    pub fn standalone() -> Cell {
        Cell::standalone_because("requested".into())
    }

    fn standalone_because(reason: String) -> Cell {
        let g = Grant::allowed();
        match local_page(&g) {
            Ok(p) => Cell::from_parts(Mode::Standalone, p, Link::default(), None, Some(reason)),
            Err(e) => panic!("cannot create a local grant page (memfd_create failed: {e})"),
        }
    }
}

/// Whether `fd` is a directory (a cgroup v2 join file) rather than a v1
/// `tasks` file.
fn is_directory(fd: &OwnedFd) -> bool {
    rustix::fs::fstat(fd).is_ok_and(|st| {
        rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Directory
    })
}

/// The join files as (v2 directories, v1 `tasks` files). A broker sends
/// one kind: the cell's directory, or each hierarchy's `tasks` file; so
/// the first says which (one `fstat`, not one a file).
fn directories_or_files(join_files: Vec<OwnedFd>) -> (Vec<OwnedFd>, Vec<OwnedFd>) {
    match join_files.first() {
        Some(f) if is_directory(f) => (join_files, Vec::new()),
        _ => (Vec::new(), join_files),
    }
}

/// Moves the calling thread into the cell through its join files (each
/// hierarchy's `tasks`: `0` is the writer itself). Returns whether every
/// one took it.
fn join_self(files: &[OwnedFd]) -> bool {
    files
        .iter()
        .all(|f| rustix::io::write(f, b"0").is_ok_and(|n| n == 1))
}
