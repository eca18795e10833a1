//! `allot_cell_*`: cells over [`allot_client::Cell`].
//!
//! The cell table holds `Cell` values (cheap clones of one shared state).
//! A call clones the cell out of the table and works on the clone, so a
//! concurrent `allot_cell_free` never pulls the cell from under it; the
//! broker releases a registered cell when its last clone drops — at
//! `allot_cell_free`, or later at `allot_pool_free` of a pool built on it.

use super::status::{Code, Error, Result, entry};
use super::{CELLS, CGrant, CellHandle, Spec, ensure_live, need_out, write_out};
use allot_client::{Cell, ClientError, Mode, Options};
use allot_proto::CallError;
use allot_proto::msg::ErrorCode;
use allot_spec::{CellSpec, Placement, TimeContract};
use std::ffi::{CStr, c_char, c_int};
use std::io::ErrorKind;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Longest name or path accepted (the wire's string limit).
const MAX_STR: usize = 4096;

/// While waiting for a grant change, how often to check that the cell was
/// not freed and the library not shut down.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// `ALLOT_MODE_*`.
pub const MODE_REGISTERED: c_int = 0;
/// Put in a cell by `allot run`.
pub const MODE_JOINED: c_int = 1;
/// No broker: the grant is the CPUs the process may use, fixed.
pub const MODE_STANDALONE: c_int = 2;
/// Grants published by the embedding program (not reachable from C yet).
pub const MODE_MANUAL: c_int = 3;

/// A C string argument as UTF-8.
///
/// # Safety
/// `p` is null or points to a NUL-terminated string.
pub(crate) unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    // SAFETY: non-null, and NUL-terminated by the caller's contract.
    let bytes = unsafe { CStr::from_ptr(p) }.to_bytes();
    if bytes.len() > MAX_STR {
        return Err(Error::invalid(format!(
            "{what} is {} bytes long; the limit is {MAX_STR}",
            bytes.len()
        )));
    }
    std::str::from_utf8(bytes).map_err(|_| Error::invalid(format!("{what} is not valid UTF-8")))
}

/// The spec a C `allot_spec_t` asks for, with the time contract `time`.
pub(crate) fn spec_from_c(s: &Spec, time: TimeContract) -> Result<CellSpec> {
    let placement = u8::try_from(s.placement)
        .ok()
        .and_then(Placement::from_code)
        .ok_or_else(|| {
            Error::invalid(format!(
                "placement {} is unknown: use 0 (any), 1 (llc) or 2 (numa)",
                s.placement
            ))
        })?;
    let spec = CellSpec {
        min: s.min,
        max: s.max,
        weight: if s.weight == 0 { 1 } else { s.weight },
        exclusive: s.exclusive != 0,
        placement,
        time,
        goal: allot_spec::Goal::None,
        // (Memory is asked for with `allot_cell_set_memory`.)
        memory: Default::default(),
        cache: Default::default(),
    };
    spec.validate().map_err(|e| Error::invalid(e.to_string()))?;
    Ok(spec)
}

/// The status a client error maps to.
pub(crate) fn client_error(e: ClientError) -> Error {
    let status = match &e {
        ClientError::NoBroker { .. } => Code::NoBroker,
        // Another user could control the socket's directory.
        ClientError::Untrusted { .. } => Code::Permission,
        ClientError::Broker { code, .. } => match code {
            ErrorCode::Refused => Code::Refused,
            ErrorCode::Never => Code::Never,
            ErrorCode::PermissionDenied => Code::Permission,
            ErrorCode::Invalid => Code::Invalid,
            // The broker no longer knows the cell, or is going away: for
            // the caller, no broker serves this cell now.
            ErrorCode::UnknownCell | ErrorCode::ShuttingDown => Code::NoBroker,
            _ => Code::Internal,
        },
        ClientError::Call(CallError::Closed) => Code::NoBroker,
        ClientError::Call(CallError::Io(io))
            if matches!(
                io.kind(),
                ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionRefused
                    | ErrorKind::NotConnected
            ) =>
        {
            Code::NoBroker
        }
        // A reply this library cannot read: a broker of another protocol
        // version, as allot.h documents.
        ClientError::Call(CallError::Frame(_)) => Code::Internal,
        ClientError::Call(_) | ClientError::Page(_) | ClientError::Channel(_) => Code::Os,
        ClientError::Protocol(_) => Code::Internal,
        ClientError::Spec(_) => Code::Invalid,
        ClientError::NoBrokerForCell(_) => Code::NoBroker,
    };
    Error::new(status, e.to_string())
}

/// The process's automatic cell, made by the first `allot_cell_auto` (or
/// `allot_pool_new({0})`) and shared by the later ones: the broker admits a
/// process to one cell only, so a second `Cell::auto` would fall back to
/// standalone. Dropped by `allot_shutdown`.
static AUTO: Mutex<Option<Cell>> = Mutex::new(None);

/// The process's automatic cell, made now as `name` if there is none.
pub(crate) fn auto_cell(name: &str) -> Result<Cell> {
    let mut auto = AUTO.lock().unwrap_or_else(|p| p.into_inner());
    // Checked under the lock: `allot_shutdown` sets the flag, then clears
    // the slot under the lock, so no cell is made after it was cleared.
    ensure_live()?;
    Ok(auto.get_or_insert_with(|| Cell::auto(name)).clone())
}

/// Drops the automatic cell (shutdown; after `SHUT_DOWN` is set).
pub(crate) fn drop_auto_cell() {
    let cell = AUTO.lock().unwrap_or_else(|p| p.into_inner()).take();
    drop(cell);
}

pub(crate) fn insert(cell: Cell, out: *mut CellHandle) -> Result<()> {
    let id = CELLS.insert(cell)?;
    // SAFETY: the caller checked `out` with `need_out`.
    unsafe { write_out(out, CellHandle { id }) };
    Ok(())
}

/// `int allot_cell_auto(const char *name, allot_cell_t *out)`.
///
/// # Safety
/// `name` is null or a NUL-terminated string; `out` is null or valid for
/// a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_auto(name: *const c_char, out: *mut CellHandle) -> c_int {
    entry("allot_cell_auto", || {
        ensure_live()?;
        need_out(out, "out")?;
        // SAFETY: per this function's contract.
        let name = unsafe { c_str(name, "name") }?;
        insert(auto_cell(name)?, out)
    })
}

/// `int allot_cell_register(const char *name, const allot_spec_t *spec,
/// int wait, allot_cell_t *out)`.
///
/// # Safety
/// As [`allot_cell_register_at`] with a null socket.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_register(
    name: *const c_char,
    spec: *const Spec,
    wait: c_int,
    out: *mut CellHandle,
) -> c_int {
    // SAFETY: same contract.
    unsafe {
        register(
            "allot_cell_register",
            std::ptr::null(),
            name,
            spec,
            wait,
            false,
            out,
        )
    }
}

/// `int allot_cell_register_at(const char *socket, const char *name,
/// const allot_spec_t *spec, int wait, allot_cell_t *out)`.
///
/// # Safety
/// `socket` and `name` are null or NUL-terminated strings; `spec` is null
/// or valid for a read; `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_register_at(
    socket: *const c_char,
    name: *const c_char,
    spec: *const Spec,
    wait: c_int,
    out: *mut CellHandle,
) -> c_int {
    // SAFETY: same contract.
    unsafe {
        register(
            "allot_cell_register_at",
            socket,
            name,
            spec,
            wait,
            false,
            out,
        )
    }
}

/// A registration from C: `stays_put`, the registering process stays in
/// the cgroup it is in (`Options::stays_put`).
///
/// # Safety
/// As [`allot_cell_register_at`].
pub(crate) unsafe fn register(
    function: &'static str,
    socket: *const c_char,
    name: *const c_char,
    spec: *const Spec,
    wait: c_int,
    stays_put: bool,
    out: *mut CellHandle,
) -> c_int {
    entry(function, || {
        ensure_live()?;
        need_out(out, "out")?;
        // SAFETY: per the contract.
        let spec = spec_from_c(unsafe { read_spec(spec) }?, TimeContract::Space)?;
        // SAFETY: per the contract.
        unsafe { register_spec(socket, name, spec, wait, stays_put, out) }
    })
}

/// `*spec`, or the error for a null one.
///
/// # Safety
/// `spec` is null or valid for a read.
pub(crate) unsafe fn read_spec<'a>(spec: *const Spec) -> Result<&'a Spec> {
    if spec.is_null() {
        return Err(Error::invalid(
            "spec is NULL; pass an allot_spec_t (all zeros asks for a best-effort cell)",
        ));
    }
    // SAFETY: non-null, and valid for a read by the contract.
    Ok(unsafe { &*spec })
}

/// Registers `spec` as `name` at `socket` and writes the handle to `out`
/// (the body shared by every `allot_cell_register*`).
///
/// # Safety
/// `socket` and `name` are null or NUL-terminated strings; `out` is null
/// or valid for a write.
pub(crate) unsafe fn register_spec(
    socket: *const c_char,
    name: *const c_char,
    spec: CellSpec,
    wait: c_int,
    stays_put: bool,
    out: *mut CellHandle,
) -> Result<()> {
    ensure_live()?;
    need_out(out, "out")?;
    // SAFETY: per the contract.
    let name = unsafe { c_str(name, "name") }?;
    let socket = if socket.is_null() {
        None
    } else {
        // SAFETY: per the contract.
        Some(PathBuf::from(unsafe { c_str(socket, "socket") }?))
    };
    let opts = Options {
        name: name.to_owned(),
        spec,
        socket,
        wait: wait != 0,
        fallback: false,
        joins_itself: false,
        stays_put,
        watch_later: false,
    };
    let cell = Cell::register(&opts).map_err(client_error)?;
    insert(cell, out)
}

/// `int allot_cell_standalone(allot_cell_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_standalone(out: *mut CellHandle) -> c_int {
    entry("allot_cell_standalone", || {
        ensure_live()?;
        need_out(out, "out")?;
        insert(Cell::standalone(), out)
    })
}

/// `int allot_cell_grant(allot_cell_t cell, allot_grant_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_grant(cell: CellHandle, out: *mut CGrant) -> c_int {
    entry("allot_cell_grant", || {
        need_out(out, "out")?;
        let g = CELLS.with(cell.id, Cell::grant)?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, CGrant::from_client(&g)) };
        Ok(())
    })
}

/// `int allot_cell_wait_change(allot_cell_t cell, uint64_t seen,
/// int64_t timeout_ns, allot_grant_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_wait_change(
    cell: CellHandle,
    seen_generation: u64,
    timeout_ns: i64,
    out: *mut CGrant,
) -> c_int {
    entry("allot_cell_wait_change", || {
        need_out(out, "out")?;
        let c = CELLS.get(cell.id)?;
        let deadline = u64::try_from(timeout_ns)
            .ok()
            .map(|ns| Instant::now() + Duration::from_nanos(ns));
        loop {
            let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let g = c.wait_change(
                seen_generation,
                Some(left.map_or(WAIT_SLICE, |l| l.min(WAIT_SLICE))),
            );
            if g.generation != seen_generation {
                // SAFETY: checked non-null above.
                unsafe { write_out(out, CGrant::from_client(&g)) };
                return Ok(());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                // SAFETY: checked non-null above.
                unsafe { write_out(out, CGrant::from_client(&g)) };
                return Err(Error::new(
                    Code::Timeout,
                    format!(
                        "the grant stayed at generation {seen_generation} for {timeout_ns} ns; *out holds it"
                    ),
                ));
            }
            // Freed or shut down meanwhile: stop waiting and say so.
            CELLS.check(cell.id)?;
        }
    })
}

/// `int allot_cell_report(allot_cell_t cell, uint32_t busy, uint32_t
/// wanted, uint64_t progress)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_cell_report(
    cell: CellHandle,
    busy: u32,
    wanted: u32,
    progress: u64,
) -> c_int {
    entry("allot_cell_report", || {
        let c = CELLS.get(cell.id)?;
        c.report(busy, wanted, progress).map_err(client_error)
    })
}

/// `int allot_cell_mode(allot_cell_t cell, int *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_mode(cell: CellHandle, out: *mut c_int) -> c_int {
    entry("allot_cell_mode", || {
        need_out(out, "out")?;
        let mode = match CELLS.with(cell.id, Cell::mode)? {
            Mode::Registered => MODE_REGISTERED,
            Mode::Joined => MODE_JOINED,
            Mode::Standalone => MODE_STANDALONE,
            Mode::Manual => MODE_MANUAL,
        };
        // SAFETY: checked non-null above.
        unsafe { write_out(out, mode) };
        Ok(())
    })
}

/// `int allot_cell_broker_id(allot_cell_t cell, uint64_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_broker_id(cell: CellHandle, out: *mut u64) -> c_int {
    entry("allot_cell_broker_id", || {
        need_out(out, "out")?;
        let id = CELLS.with(cell.id, Cell::id)?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, id) };
        Ok(())
    })
}

/// `int allot_cell_free(allot_cell_t cell)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_cell_free(cell: CellHandle) -> c_int {
    entry("allot_cell_free", || {
        drop(CELLS.remove(cell.id)?);
        Ok(())
    })
}
