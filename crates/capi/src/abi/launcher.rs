//! What launchers other than `allot run` (the Slurm plugin, a batch
//! system's prolog, a container runtime hook) need: the environment of a
//! program started in a cell, and tickets to share one cell between
//! processes started at different times (`allot_client::Ticket`).
//!
//! `allot_cell_environment`'s variables are
//! [`crate::environ::variables`]'s, the ones `allot run` sets, so every
//! launcher hands a program the same contract: thread counts, `ALLOT_SOCKET` / `ALLOT_CELL` / `ALLOT_GRANT_FD` and, given a
//! shim, `LD_PRELOAD`. The grant page descriptor is opened here, without
//! close-on-exec, and stays open in the caller so the children it starts
//! inherit it; the caller may close it once they are started.

use super::cell::{c_str, client_error, insert};
use super::status::{Error, Result, entry};
use super::{CELLS, CellHandle, ensure_live, need_out};
use crate::environ::{CellEnv, launch_threads, variables};
use allot_client::{Cell, Ticket};
use std::ffi::{CStr, CString, OsString, c_char, c_int, c_void};
use std::os::fd::IntoRawFd;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// The longest ticket text with its NUL (`ALLOT_TICKET_MAX`): two
/// 20-digit numbers, a colon and the NUL.
pub const TICKET_MAX: usize = 42;

/// `void (*set)(const char *name, const char *value, void *arg)`.
pub type SetFn = unsafe extern "C" fn(*const c_char, *const c_char, *mut c_void);

/// `int allot_cell_environment(allot_cell_t cell, const char *shim,
/// const char *preload, allot_env_set_fn set, void *arg)`.
///
/// # Safety
/// `shim` and `preload` are null or NUL-terminated strings; `set` is a
/// function safe to call with two NUL-terminated strings and `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_environment(
    cell: CellHandle,
    shim: *const c_char,
    preload: *const c_char,
    set: Option<SetFn>,
    arg: *mut c_void,
) -> c_int {
    entry("allot_cell_environment", || {
        let set = set.ok_or_else(|| Error::invalid("set is NULL; pass a function to call"))?;
        // SAFETY: per the contract.
        let shim = unsafe { optional(shim, "shim") }?.map(PathBuf::from);
        // SAFETY: per the contract.
        let preload = unsafe { optional(preload, "preload") }?;
        ensure_live()?;
        let vars = CELLS.with(cell.id, |c| cell_variables(c, shim, preload))??;
        for (name, value) in vars {
            let name = CString::new(name).map_err(|_| Error::invalid("a NUL in a name"))?;
            let value = CString::new(value.into_vec())
                .map_err(|_| Error::invalid("a NUL in shim or preload"))?;
            // SAFETY: two NUL-terminated strings that outlive the call, and
            // `arg`, per the contract.
            unsafe { set(name.as_ptr(), value.as_ptr(), arg) };
        }
        Ok(())
    })
}

/// `int allot_cell_tcm_environment(allot_cell_t cell, const char *tcm_dir,
/// const char *library_path, allot_env_set_fn set, void *arg)`: allot's
/// Thread Composability Manager for the programs a launcher starts in
/// `cell` (see `allot.h`).
///
/// # Safety
/// `tcm_dir` is a NUL-terminated string, `library_path` null or one; `set`
/// is a function safe to call with two NUL-terminated strings and `arg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_tcm_environment(
    cell: CellHandle,
    tcm_dir: *const c_char,
    library_path: *const c_char,
    set: Option<SetFn>,
    arg: *mut c_void,
) -> c_int {
    entry("allot_cell_tcm_environment", || {
        let set = set.ok_or_else(|| Error::invalid("set is NULL; pass a function to call"))?;
        // SAFETY: per the contract.
        let dir = unsafe { optional(tcm_dir, "tcm_dir") }?
            .map(PathBuf::from)
            .ok_or_else(|| {
                Error::invalid(
                    "tcm_dir is NULL; pass the directory `allot shim --out` wrote the manager into",
                )
            })?;
        // SAFETY: per the contract.
        let library_path = unsafe { optional(library_path, "library_path") }?;
        if !dir.join(crate::tcm::TCM_NAMES[0]).is_file() {
            return Err(Error::invalid(format!(
                "{} holds no {}; write it with `allot shim --out DIR` (DIR/tcm)",
                dir.display(),
                crate::tcm::TCM_NAMES[0]
            )));
        }
        ensure_live()?;
        CELLS.with(cell.id, |_| ())?;
        let fd = crate::tcm::permit_table()
            .map_err(|e| {
                Error::new(
                    super::status::Code::Os,
                    format!("cannot make the permit table: {e}"),
                )
            })?
            .into_raw_fd();
        let current = |name: &str| match name {
            "LD_LIBRARY_PATH" => library_path.clone(),
            _ => None,
        };
        for (name, value) in crate::environ::tcm_variables(&dir, fd, &current) {
            let name = CString::new(name).map_err(|_| Error::invalid("a NUL in a name"))?;
            let value = CString::new(value.into_vec())
                .map_err(|_| Error::invalid("a NUL in tcm_dir or library_path"))?;
            // SAFETY: two NUL-terminated strings that outlive the call, and
            // `arg`, per the contract.
            unsafe { set(name.as_ptr(), value.as_ptr(), arg) };
        }
        Ok(())
    })
}

/// The variables for a program in `c` (opening the inheritable page
/// descriptor they name).
fn cell_variables(
    c: &Cell,
    shim: Option<PathBuf>,
    preload: Option<OsString>,
) -> Result<Vec<(String, OsString)>> {
    let grant = c.grant();
    // The most the cell could ever hold: the broker's CPUs for cells.
    // Not this process's CPUs: a registrant is confined to its first
    // grant already, which may be one CPU of a busy machine.
    let machine = broker_cpus(c)
        .or_else(|| allot_topo::allowed_cpus().ok().map(|s| s.len() as u32))
        .unwrap_or(grant.threads);
    let max = match c.spec().max {
        0 => machine,
        m => m.min(machine.max(1)),
    };
    let launch = if c.id() == 0 {
        grant.threads
    } else {
        launch_threads(grant.share_milli, max)
    };
    let page = match (c.id(), c.socket()) {
        (0, _) | (_, None) => None,
        (id, Some(socket)) => {
            let fd = c.inheritable_page_fd().map_err(client_error)?.into_raw_fd();
            Some((socket.to_path_buf(), id, fd))
        }
    };
    let env = CellEnv {
        launch,
        max,
        go_follows: false,
        cell: page,
        jobserver: None,
        make_jobs: false,
        shim,
        // A launcher asks for the manager apart
        // (`allot_cell_tcm_environment`).
        tcm: None,
    };
    let current = |name: &str| match name {
        "LD_PRELOAD" => preload.clone(),
        _ => None,
    };
    Ok(variables(&env, &current))
}

/// The CPUs the broker of `c` gives cells (its `Welcome`), `None` for a
/// cell without one or a broker that does not answer.
fn broker_cpus(c: &Cell) -> Option<u32> {
    let mut client = allot_client::Client::connect(c.socket()?).ok()?;
    client.hello("liballot").ok().map(|w| w.cpus)
}

/// The string `p` points to, or `None` for null.
///
/// # Safety
/// `p` is null or a NUL-terminated string.
unsafe fn optional(p: *const c_char, what: &str) -> Result<Option<OsString>> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null and NUL-terminated per the contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.is_empty() {
        return Err(Error::invalid(format!(
            "{what} is empty; pass NULL for none"
        )));
    }
    Ok(Some(std::ffi::OsStr::from_bytes(bytes).to_os_string()))
}

/// `int allot_cell_ticket(allot_cell_t cell, char *buf, size_t len)`.
///
/// # Safety
/// `buf` is null or valid for `len` bytes of writes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_ticket(
    cell: CellHandle,
    buf: *mut c_char,
    len: usize,
) -> c_int {
    entry("allot_cell_ticket", || {
        ensure_live()?;
        if buf.is_null() {
            return Err(Error::invalid("buf is NULL"));
        }
        let ticket = CELLS.with(cell.id, Cell::ticket)?.ok_or_else(|| {
            Error::invalid("the cell has no ticket: only a cell this process registered has one")
        })?;
        let text = CString::new(ticket.to_string()).expect("digits and a colon");
        let bytes = text.as_bytes_with_nul();
        if bytes.len() > len {
            return Err(Error::invalid(format!(
                "buf holds {len} bytes; a ticket needs up to {TICKET_MAX} (ALLOT_TICKET_MAX)"
            )));
        }
        // SAFETY: `buf` is valid for `len >= bytes.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr().cast(), buf, bytes.len()) };
        Ok(())
    })
}

/// `int allot_cell_attach_at(const char *socket, const char *ticket,
/// allot_cell_t *out)`.
///
/// # Safety
/// `socket` is null or a NUL-terminated string; `ticket` is null or a
/// NUL-terminated string; `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_attach_at(
    socket: *const c_char,
    ticket: *const c_char,
    out: *mut CellHandle,
) -> c_int {
    entry("allot_cell_attach_at", || {
        ensure_live()?;
        need_out(out, "out")?;
        // SAFETY: per the contract.
        let (socket, ticket) = unsafe { (socket_or_default(socket)?, read_ticket(ticket)?) };
        let cell = Cell::attach(&socket, ticket).map_err(client_error)?;
        insert(cell, out)
    })
}

/// The broker socket a launcher names (null: the default one).
///
/// # Safety
/// `socket` is null or a NUL-terminated string.
unsafe fn socket_or_default(socket: *const c_char) -> Result<PathBuf> {
    if socket.is_null() {
        return Ok(allot_proto::default_socket_path());
    }
    // SAFETY: per the contract.
    Ok(PathBuf::from(unsafe { c_str(socket, "socket") }?))
}

/// The ticket a launcher passes.
///
/// # Safety
/// `ticket` is null or a NUL-terminated string.
unsafe fn read_ticket(ticket: *const c_char) -> Result<Ticket> {
    // SAFETY: per the contract.
    unsafe { c_str(ticket, "ticket") }?
        .parse()
        .map_err(Error::invalid)
}

/// `int allot_cell_register_in_place_at(const char *socket, const char
/// *name, const allot_spec_t *spec, int wait, allot_cell_t *out)`.
///
/// # Safety
/// As `allot_cell_register_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_register_in_place_at(
    socket: *const c_char,
    name: *const c_char,
    spec: *const super::Spec,
    wait: c_int,
    out: *mut CellHandle,
) -> c_int {
    // SAFETY: same contract.
    unsafe {
        super::cell::register(
            "allot_cell_register_in_place_at",
            socket,
            name,
            spec,
            wait,
            true,
            out,
        )
    }
}

/// `int allot_cell_attach_in_place_at(const char *socket, const char
/// *ticket, allot_cell_t *out)`.
///
/// # Safety
/// As `allot_cell_attach_at`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_attach_in_place_at(
    socket: *const c_char,
    ticket: *const c_char,
    out: *mut CellHandle,
) -> c_int {
    entry("allot_cell_attach_in_place_at", || {
        ensure_live()?;
        need_out(out, "out")?;
        // SAFETY: per the contract.
        let (socket, ticket) = unsafe { (socket_or_default(socket)?, read_ticket(ticket)?) };
        let cell = Cell::attach_in_place(&socket, ticket).map_err(client_error)?;
        insert(cell, out)
    })
}

/// `int allot_cell_include_group_at(const char *socket, const char
/// *ticket, const char *dir)`.
///
/// # Safety
/// `socket` is null or a NUL-terminated string; `ticket` and `dir` are
/// null or NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_include_group_at(
    socket: *const c_char,
    ticket: *const c_char,
    dir: *const c_char,
) -> c_int {
    entry("allot_cell_include_group_at", || {
        ensure_live()?;
        // SAFETY: per the contract.
        let (socket, ticket, dir) = unsafe {
            (
                socket_or_default(socket)?,
                read_ticket(ticket)?,
                c_str(dir, "dir")?,
            )
        };
        allot_client::include_group(&socket, ticket, Path::new(dir)).map_err(client_error)
    })
}
