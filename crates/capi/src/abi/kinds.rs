//! `allot_kind_register`: a resource kind of the C program's own, with
//! operations liballot calls (Poli-C's `register_resource`), used by
//! policies and per-device requests exactly like the built-in kinds
//! (`allot_require::Blocks::register_kind`).
//!
//! The operations are C function pointers and an argument, copied at
//! registration and called for as long as the process lives: `probe` when
//! a policy view is built (at most every 50 ms per device, so a policy
//! sees `allot_dev_rate`), `restrict_thread` and `throttle_thread` on the
//! thread whose holdings changed, with one amount per device (NaN: not
//! constrained). They run under the require runtime's lock: they must not
//! enter or leave a `require` block, and should return quickly.

use super::site::Busy;
use super::status::{Code, Error, entry};
use allot_require::kind::{Device, Kind, KindOps};
use allot_require::{Blocks, RequireError};
use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;

/// `allot_kind_dev_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KindDevC {
    /// Device name (NUL-terminated; NULL: its index).
    pub name: *const c_char,
    /// Amount left to threads that asked for nothing.
    pub min: f64,
    /// Largest allocation the device supports, in the kind's unit.
    pub max: f64,
}

/// `int (*probe)(void *arg, size_t dev, uint64_t *get1, uint64_t *get2)`.
pub type ProbeFn = unsafe extern "C" fn(*mut c_void, usize, *mut u64, *mut u64) -> c_int;
/// `int (*restrict_thread)(void *arg, const double *amounts, size_t n)`.
pub type RestrictFn = unsafe extern "C" fn(*mut c_void, *const f64, usize) -> c_int;
/// `int (*throttle_thread)(void *arg, uint64_t tid, const double *amounts, size_t n)`.
pub type ThrottleFn = unsafe extern "C" fn(*mut c_void, u64, *const f64, usize) -> c_int;

/// `allot_kind_ops_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KindOpsC {
    /// Cumulative counters of a device; NULL: not measured.
    pub probe: Option<ProbeFn>,
    /// Make the OS honour the calling thread's holdings; NULL: nothing.
    pub restrict_thread: Option<RestrictFn>,
    /// Limit the calling thread's rate; NULL: nothing.
    pub throttle_thread: Option<ThrottleFn>,
    /// Passed to each.
    pub arg: *mut c_void,
}

/// The C operations as a [`KindOps`].
#[derive(Debug)]
struct COps(KindOpsC);

// SAFETY: the C contract (allot/require.h): the functions may be called
// from any thread, with `arg`, for the life of the process.
unsafe impl Send for COps {}
// SAFETY: as above.
unsafe impl Sync for COps {}

/// NaN for "not constrained", the amount otherwise.
fn amounts_c(amounts: &[Option<f64>]) -> Vec<f64> {
    amounts.iter().map(|a| a.unwrap_or(f64::NAN)).collect()
}

fn os_result(rc: c_int, what: &str) -> std::io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::other(format!("{what} returned {rc}")))
    }
}

impl KindOps for COps {
    fn probe(&self, dev: usize) -> Option<(u64, u64)> {
        let f = self.0.probe?;
        let (mut a, mut b) = (0u64, 0u64);
        // SAFETY: the C contract; two valid out-pointers.
        let rc = unsafe { f(self.0.arg, dev, &mut a, &mut b) };
        (rc == 0).then_some((a, b))
    }

    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()> {
        let Some(f) = self.0.restrict_thread else {
            return Ok(());
        };
        let v = amounts_c(amounts);
        // SAFETY: the C contract; `v` holds `v.len()` doubles.
        os_result(
            unsafe { f(self.0.arg, v.as_ptr(), v.len()) },
            "restrict_thread",
        )
    }

    fn throttle(&self, tid: u64, amounts: &[Option<f64>]) -> std::io::Result<()> {
        let Some(f) = self.0.throttle_thread else {
            return Ok(());
        };
        let v = amounts_c(amounts);
        // SAFETY: the C contract; `v` holds `v.len()` doubles.
        os_result(
            unsafe { f(self.0.arg, tid, v.as_ptr(), v.len()) },
            "throttle_thread",
        )
    }
}

/// `int allot_kind_register(const char *name, const allot_kind_dev_t *devs,
/// size_t n, const allot_kind_ops_t *ops)`.
///
/// # Safety
/// `name` is NULL or NUL-terminated; `devs` is NULL or valid for `n`
/// reads, each name NULL or NUL-terminated; `ops` is NULL or valid for a
/// read, its functions callable as declared for the life of the process.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_kind_register(
    name: *const c_char,
    devs: *const KindDevC,
    n: usize,
    ops: *const KindOpsC,
) -> c_int {
    entry("allot_kind_register", || {
        // SAFETY: the contract.
        let name = unsafe { super::cell::c_str(name, "name") }?;
        if devs.is_null() || n == 0 || n > 65536 {
            return Err(Error::invalid(format!(
                "kind {name:?}: give 1 to 65536 devices (devs {}, n {n})",
                if devs.is_null() { "NULL" } else { "set" }
            )));
        }
        if ops.is_null() {
            return Err(Error::invalid(format!(
                "kind {name:?}: ops is NULL (a kind that only counts is allot_kind_define's)"
            )));
        }
        // SAFETY: the contract: `devs` valid for `n` reads, `ops` for one.
        let (devs, ops) = unsafe { (std::slice::from_raw_parts(devs, n), *ops) };
        let mut devices = Vec::with_capacity(n);
        for (i, d) in devs.iter().enumerate() {
            let dev_name = if d.name.is_null() {
                i.to_string()
            } else {
                // SAFETY: the contract: NUL-terminated.
                unsafe { CStr::from_ptr(d.name) }
                    .to_str()
                    .map_err(|_| {
                        Error::invalid(format!("kind {name:?}: device {i}'s name is not UTF-8"))
                    })?
                    .to_string()
            };
            devices.push(Device {
                name: dev_name,
                min: d.min,
                max: d.max,
            });
        }
        let mut kind = Kind::with_ops(name, devices, Arc::new(COps(ops)));
        kind.measured = ops.probe.is_some();
        let rt = Blocks::global();
        let _busy = Busy::new();
        rt.register_kind(kind).map_err(|e| match e {
            RequireError::KindExists(_) => {
                Error::invalid(format!("resource kind {name:?} already exists"))
            }
            refused @ RequireError::KindRefused(..) => {
                Error::new(Code::Refused, refused.to_string())
            }
            other => Error::invalid(other.to_string()),
        })
    })
}
