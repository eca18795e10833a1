//! The error model of the C ABI: stable status codes, a thread-local
//! detail string, and the guard every entry point runs its body in.
//!
//! Every exported function returns an `int` status ([`Code`] as
//! `c_int`). On failure it also stores a sentence saying what went wrong and
//! what to do in a per-thread buffer that `allot_last_error` returns; like
//! `errno`, a successful call leaves the buffer alone.
//!
//! [`entry`] runs a function's body under `catch_unwind`: a Rust panic
//! becomes `ALLOT_ERR_INTERNAL` and never unwinds into C. (The exported
//! functions are also `extern "C"`, so an unwind that escaped anyway would
//! abort the process rather than be undefined behaviour.)

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char, c_int};
use std::fmt;
use std::panic::{self, AssertUnwindSafe};

/// The status codes every entry point returns, as in `allot_status` in
/// `include/allot.h` (a code, not the broker's status report). The values are
/// part of the ABI: never renumber, only append.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// The call did what it was asked; the only code that is not an error.
    Ok = 0,
    /// A null pointer or an argument out of range.
    Invalid = 1,
    /// A stale, freed, foreign or wrong-type handle.
    Handle = 2,
    /// The library was shut down with `allot_shutdown`.
    Shutdown = 3,
    /// No broker answers.
    NoBroker = 4,
    /// Admission refused for now.
    Refused = 5,
    /// The request can never be met on this machine.
    Never = 6,
    /// The broker does not let this caller do that.
    Permission = 7,
    /// A wait ended without the awaited event.
    Timeout = 8,
    /// The operating system refused a resource (threads, memory, handles).
    Os = 9,
    /// A bug in allot (or a broker of another version).
    Internal = 10,
    /// No such resource kind, device or policy.
    Unknown = 11,
    /// A suspended task was cancelled before it ran.
    Cancelled = 12,
    /// The other end of a channel is gone.
    Closed = 13,
}

/// Every status, in code order (for `allot_strerror` and tests).
pub const ALL: [Code; 14] = [
    Code::Ok,
    Code::Invalid,
    Code::Handle,
    Code::Shutdown,
    Code::NoBroker,
    Code::Refused,
    Code::Never,
    Code::Permission,
    Code::Timeout,
    Code::Os,
    Code::Internal,
    Code::Unknown,
    Code::Cancelled,
    Code::Closed,
];

impl Code {
    /// The status with code `code`, if any.
    pub fn from_code(code: c_int) -> Option<Code> {
        usize::try_from(code).ok().and_then(|i| ALL.get(i).copied())
    }

    /// The static, NUL-terminated description `allot_strerror` returns.
    pub fn description(self) -> &'static CStr {
        match self {
            Code::Ok => c"success",
            Code::Invalid => c"invalid argument (a null pointer or a value out of range)",
            Code::Handle => c"invalid handle (freed, stale, of another type, or never issued)",
            Code::Shutdown => c"the allot library was shut down (allot_shutdown)",
            Code::NoBroker => c"no allot broker answers (start one with `allot daemon`)",
            Code::Refused => c"admission refused for now: other cells hold the guarantees",
            Code::Never => c"the request can never be met on this machine",
            Code::Permission => c"permission denied by the broker",
            Code::Timeout => c"timed out",
            Code::Os => c"the operating system refused a resource",
            Code::Internal => c"internal error in allot (please report it)",
            Code::Unknown => c"no such resource kind, device or policy",
            Code::Cancelled => {
                c"the task was cancelled before it ran (its resumer was cancelled, or its pool \
                  freed, while it was suspended)"
            }
            Code::Closed => c"the other end of the channel is gone (closed, or its process exited)",
        }
    }
}

/// The description of an unknown code.
pub const UNKNOWN: &CStr = c"unknown allot status code";

/// A failure: the status the C caller sees and the detail it can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What the function returns.
    pub status: Code,
    /// What `allot_last_error` says: what happened and what to do.
    pub detail: String,
}

impl Error {
    /// A failure with `status` and `detail`.
    pub fn new(status: Code, detail: impl Into<String>) -> Error {
        Error {
            status,
            detail: detail.into(),
        }
    }

    /// `ALLOT_ERR_INVALID` with `detail`.
    pub fn invalid(detail: impl Into<String>) -> Error {
        Error::new(Code::Invalid, detail)
    }

    /// `ALLOT_ERR_SHUTDOWN`.
    pub fn shut_down() -> Error {
        Error::new(
            Code::Shutdown,
            "the library was shut down by allot_shutdown; no further calls are possible in this process",
        )
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.status, self.detail)
    }
}

/// Result of an entry point's body.
pub type Result<T> = std::result::Result<T, Error>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Stores `"{function}: {detail}"` as this thread's last error.
fn set_last_error(function: &str, detail: &str) {
    let text = format!("{function}: {detail}").replace('\0', "\u{fffd}");
    let text = CString::new(text).unwrap_or_default();
    // During thread teardown the slot may be gone: then there is no one
    // left to read it.
    let _ = LAST_ERROR.try_with(|e| *e.borrow_mut() = text);
}

/// This thread's last error: a pointer valid until the thread's next
/// failing call (or its exit); `""` if none.
pub fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|e| e.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs an entry point's body: its result as a status code, the detail of
/// a failure in the last-error buffer, a panic as `ALLOT_ERR_INTERNAL`.
pub fn entry(function: &'static str, body: impl FnOnce() -> Result<()>) -> c_int {
    match panic::catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => Code::Ok as c_int,
        Ok(Err(e)) => {
            set_last_error(function, &e.detail);
            e.status as c_int
        }
        Err(payload) => {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            set_last_error(
                function,
                &format!("internal error ({what}); the call did nothing useful; please report it"),
            );
            Code::Internal as c_int
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_dense_and_stable() {
        for (i, s) in ALL.iter().enumerate() {
            assert_eq!(*s as usize, i);
            assert_eq!(Code::from_code(i as c_int), Some(*s));
        }
        assert_eq!(Code::from_code(-1), None);
        assert_eq!(Code::from_code(12), Some(Code::Cancelled));
        assert_eq!(Code::from_code(13), Some(Code::Closed));
        assert_eq!(Code::from_code(14), None);
    }

    #[test]
    fn entry_maps_errors_and_panics() {
        assert_eq!(entry("f", || Ok(())), 0);
        assert_eq!(
            entry("f", || Err(Error::invalid("x is NULL"))),
            Code::Invalid as c_int
        );
        // SAFETY: `last_error` returns a NUL-terminated string owned by
        // this thread, read before the next call.
        let msg = unsafe { CStr::from_ptr(last_error()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(msg, "f: x is NULL");
        let rc = entry("g", || panic!("boom"));
        assert_eq!(rc, Code::Internal as c_int);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(last_error()) }
            .to_str()
            .unwrap()
            .to_owned();
        assert!(msg.starts_with("g: internal error (boom)"), "{msg}");
        // Success leaves the detail alone, like errno.
        assert_eq!(entry("h", || Ok(())), 0);
        // SAFETY: as above.
        let msg = unsafe { CStr::from_ptr(last_error()) };
        assert!(msg.to_bytes().starts_with(b"g:"));
    }
}
