//! The cell `allot run`'s program runs in, and what it loads besides
//! itself.
//!
//! The registration goes out first; the OpenMP shim and the thread
//! composability manager are installed, and the program looked at (a Go
//! program?), while the broker decides; then the answer is taken, this
//! thread moving itself into the cell. No broker to be had means no cell:
//! the program then runs unconfined, with a warning, as without allot —
//! except where the broker's or the libraries' directory could be another
//! user's, which is refused.

use super::plan::Plan;
use super::timeline::Marks;
use super::{Args, autostart, warn};
use allot_client::{Cell, ClientError, Options, Wait};
use allot_proto::EXIT_ALLOT;
use allot_proto::dirs::{DirError, Trust, TrustedDir};
use allot_proto::msg::ErrorCode;
use std::path::{Path, PathBuf};

/// The cell (if any) and what the program loads.
pub(super) struct Registered {
    /// The program's cell; `None`: it runs unconfined.
    pub cell: Option<Cell>,
    /// The shim and the manager (none without a cell).
    pub libraries: Libraries,
    /// The program is a Go program that follows its CPU set.
    pub go_follows: bool,
}

/// Registers `plan`'s cell with the broker on its socket (starting one
/// unless `--no-start`), readying the libraries meanwhile. A failure is
/// the exit code, its reason printed.
pub(super) fn register(a: &Args, plan: &Plan, marks: &mut Marks) -> Result<Registered, i32> {
    let cmd = a.command[0].to_string_lossy();
    let broker = autostart::ensure_broker(&plan.socket, !a.no_start);
    marks.mark("broker answering");
    let registering = match broker {
        Err(autostart::NoBroker::Untrusted(e)) => {
            eprintln!("allot: refusing to use the broker's directory: {e}");
            return Err(EXIT_ALLOT);
        }
        Err(autostart::NoBroker::NotASocket(e)) => {
            eprintln!("allot: {e}");
            return Err(EXIT_ALLOT);
        }
        Err(e) => {
            warn(format!("{e}; running {cmd} unconfined"));
            None
        }
        Ok(client) => {
            let mut opts = Options::new(&plan.name);
            opts.spec = plan.spec;
            opts.socket = Some(plan.socket.clone());
            opts.wait = a.wait;
            opts.fallback = false;
            // This thread moves itself into the cell where the broker
            // lets it (no kernel-wide wait); the program, forked from
            // it, starts inside.
            opts.joins_itself = true;
            // Started with the other helpers once the program has run a
            // while (`supervise`): a short one ends before it matters.
            opts.watch_later = true;
            match Cell::send_registration(client, &opts) {
                Ok(r) => Some(r),
                Err(e) => {
                    warn(format!("{e}; running {cmd} unconfined"));
                    None
                }
            }
        }
    };
    if registering.is_some() {
        marks.mark("registration sent");
    }
    let libraries = match &registering {
        Some(_) => Libraries::ready(&plan.socket, !a.no_shim, !a.no_tcm, marks)?,
        None => Libraries::default(),
    };
    let go_follows = std::fs::File::open(&plan.program)
        .ok()
        .and_then(|mut f| allot_enforce::runtimes::go_release(&mut f))
        .is_some_and(|r| r.follows_cpu_set());
    marks.mark("program looked at (a Go program?)");
    let cell = match registering {
        None => None,
        Some(r) => {
            let on_wait = |w: Wait<'_>| match w {
                Wait::Queued { position, reason } => {
                    eprintln!("allot: waiting for CPUs (position {position}): {reason}")
                }
                Wait::Paused => eprintln!("allot: paused: {}", allot_broker::core::PAUSED_WHY),
            };
            match r.finish(on_wait) {
                Ok(c) => Some(c),
                Err(ClientError::Broker {
                    code: ErrorCode::Refused | ErrorCode::Never | ErrorCode::Invalid,
                    message,
                }) => {
                    eprintln!("allot: {message}");
                    return Err(EXIT_ALLOT);
                }
                Err(e) => {
                    warn(format!("{e}; running {cmd} unconfined"));
                    None
                }
            }
        }
    };
    if let Some(c) = &cell {
        marks.mark(format!("registered as cell {}", c.id()));
    }
    // Without a cell the program runs as it would without allot.
    let libraries = if cell.is_some() {
        libraries
    } else {
        Libraries::default()
    };
    Ok(Registered {
        cell,
        libraries,
        go_follows,
    })
}

/// What the program loads besides itself: the OpenMP shim (`LD_PRELOAD`)
/// and allot's Thread Composability Manager (the directory holding
/// `libtcm.so.1`, and a new permit table). Either is `None`, with a
/// warning, where it cannot be had: OpenMP teams then keep their launch
/// size, and oneTBB and Intel OpenMP size their threads at start, as
/// without allot.
#[derive(Default)]
pub(super) struct Libraries {
    pub shim: Option<PathBuf>,
    pub tcm: Option<(PathBuf, rustix::fd::OwnedFd)>,
}

impl Libraries {
    /// Installs what is wanted in the user's library directory beside
    /// `socket` (opened once, each step of its path checked). A directory
    /// others could replace files in is refused: the exit code then.
    fn ready(socket: &Path, shim: bool, tcm: bool, marks: &mut Marks) -> Result<Libraries, i32> {
        if !shim && !tcm {
            return Ok(Libraries::default());
        }
        let dir = match shim_dir(socket) {
            Err(e) if e.is_untrusted() => {
                eprintln!("allot: refusing to install the OpenMP shim: {e}");
                return Err(EXIT_ALLOT);
            }
            d => d.map_err(|e| e.to_string()),
        };
        marks.mark("library directory checked");
        let shim = shim
            .then(|| {
                let d = dir.as_ref().map_err(|e| std::io::Error::other(e.clone()));
                d.and_then(allot_capi::install_shim).map_err(|e| {
                    warn(format!(
                        "cannot install the OpenMP shim ({e}); OpenMP teams keep their launch size"
                    ))
                })
            })
            .and_then(Result::ok);
        marks.mark("shim ready");
        let tcm = tcm
            .then(|| {
                let d = dir.as_ref().map_err(Clone::clone);
                d.and_then(|d| {
                    let lib = allot_capi::tcm::install_tcm(d, 0o700).map_err(|e| e.to_string())?;
                    let table = allot_capi::tcm::permit_table().map_err(|e| e.to_string())?;
                    Ok((lib, table))
                })
                .map_err(|e| {
                    warn(format!(
                        "cannot set up the thread composability manager ({e}); oneTBB and Intel \
                         OpenMP keep their own thread counts"
                    ))
                })
            })
            .and_then(Result::ok);
        marks.mark("thread composability manager ready");
        Ok(Libraries { shim, tcm })
    }
}

/// Where the shim library is written: a `shim` directory beside the socket
/// when that directory is the user's (a broker of their own), else in the
/// user's own runtime directory (a system broker's directory is root's).
/// Either is a [`TrustedDir`]: nobody else can replace the library between
/// its installation and the loader mapping it.
fn shim_dir(socket: &Path) -> Result<TrustedDir, DirError> {
    let beside = TrustedDir::open(allot_proto::dirs::socket_parent(socket), Trust::Owner).ok();
    match beside {
        Some(d) => d.create_child("shim", 0o700),
        None => TrustedDir::create(&allot_proto::default_state_dir().join("shim"), 0o700),
    }
}
