//! The kernels for allot's runtime: the shared object built by
//! [`compile`](crate::compile), loaded into this process and bound to
//! [`par_for`](crate::par_for).
//!
//! Loading goes through `dlopen` on the path of the cache's file (the
//! cache is a [`TrustedDir`], so nobody else can replace it in between),
//! then checks the object's binding version, hands it `par_for` and
//! `par_workers` (`c/par_bind.c`: `wl_bind`), and looks up every kernel's
//! entry point. The object is never unloaded: its functions may be
//! called for as long as the process lives, and a second load of the same
//! file is the same object (the loader counts references).

use crate::Kernel;
use crate::compile::{self, Product};
use crate::par::{par_for, par_workers};
use allot_proto::dirs::TrustedDir;
use std::ffi::{CStr, CString, c_int, c_long, c_void};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// A kernel's entry point, `int wl_<name>(double scale, uint64_t *answer)`:
/// runs the whole workload and returns a `WL_*` status (`c/wl.h`).
pub(crate) type Entry = unsafe extern "C" fn(f64, *mut u64) -> c_int;

/// What `wl_bind` receives (`struct par_ops` in `c/par_bind.c`).
#[repr(C)]
struct ParOps {
    par_for: unsafe extern "C" fn(c_long, c_long, Option<crate::ParBody>, *mut c_void),
    par_workers: extern "C" fn() -> c_int,
}

/// `WL_BIND_VERSION` in `c/par_bind.c`.
const BIND_VERSION: c_int = 1;

/// The loaded kernels.
#[derive(Debug, Clone)]
pub struct KernelLib {
    entries: [Entry; Kernel::ALL.len()],
    path: PathBuf,
}

impl KernelLib {
    /// Builds the kernels into the cache `dir` if it does not hold them
    /// yet ([`compile::ensure`]), loads them and binds them to allot's
    /// runtime.
    ///
    /// # Errors
    /// What [`compile::ensure`] reports, or why the object could not be
    /// loaded or is not the one this crate expects.
    pub fn load(dir: &TrustedDir) -> io::Result<KernelLib> {
        let path = compile::ensure(dir, Product::KernelLib)?;
        Self::load_file(&path)
    }

    fn load_file(path: &Path) -> io::Result<KernelLib> {
        let bad = |what: String| io::Error::other(format!("{}: {what}", path.display()));
        let c_path = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| bad("a path with a NUL byte".into()))?;
        // SAFETY: a NUL-terminated path; dlopen runs the object's
        // initialisers, which are the C library's and the kernels' own
        // (none of them has side effects beyond its own statics).
        let handle = unsafe { libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(bad(format!("cannot load: {}", dl_error())));
        }
        let symbol = |name: &str| -> io::Result<*mut c_void> {
            let c_name = CString::new(name).expect("symbol names have no NUL");
            // SAFETY: `handle` is a live handle (never closed) and the name
            // is NUL-terminated.
            let p = unsafe { libc::dlsym(handle, c_name.as_ptr()) };
            if p.is_null() {
                Err(bad(format!("has no symbol {name}: {}", dl_error())))
            } else {
                Ok(p)
            }
        };
        // SAFETY: `wl_bind_version` is `int (void)` in c/par_bind.c.
        let version: extern "C" fn() -> c_int =
            unsafe { std::mem::transmute(symbol("wl_bind_version")?) };
        if version() != BIND_VERSION {
            return Err(bad(format!(
                "binding version {}, expected {BIND_VERSION} (a stale build; remove it)",
                version()
            )));
        }
        // SAFETY: `wl_bind` is `void (const struct par_ops *)`, and
        // `ParOps` has that struct's layout (checked by the version above).
        let bind: extern "C" fn(*const ParOps) = unsafe { std::mem::transmute(symbol("wl_bind")?) };
        bind(&ParOps {
            par_for,
            par_workers,
        });
        let mut entries: [Option<Entry>; Kernel::ALL.len()] = [None; Kernel::ALL.len()];
        for (slot, k) in entries.iter_mut().zip(Kernel::ALL) {
            let p = symbol(&format!("wl_{}", k.name()))?;
            // SAFETY: every `wl_<name>` is `int (double, uint64_t *)` (c/wl.h).
            *slot = Some(unsafe { std::mem::transmute::<*mut c_void, Entry>(p) });
        }
        Ok(KernelLib {
            entries: entries.map(|e| e.expect("every kernel was looked up")),
            path: path.to_path_buf(),
        })
    }

    /// Where the object was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `kernel`'s entry point.
    pub(crate) fn entry(&self, kernel: Kernel) -> Entry {
        let i = Kernel::ALL
            .iter()
            .position(|&k| k == kernel)
            .expect("every kernel is in ALL");
        self.entries[i]
    }
}

/// The loader's last error message.
fn dl_error() -> String {
    // SAFETY: dlerror returns null or a NUL-terminated string owned by the
    // C library, valid until the next dl* call on this thread; it is
    // copied before returning.
    let p = unsafe { libc::dlerror() };
    if p.is_null() {
        "unknown error".into()
    } else {
        // SAFETY: as above.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_that_is_not_the_kernels_is_refused_with_its_reason() {
        let t = tempfile::tempdir().unwrap();
        let junk = t.path().join("junk.so");
        std::fs::write(&junk, b"not an ELF object").unwrap();
        let e = KernelLib::load_file(&junk).unwrap_err().to_string();
        assert!(e.contains("cannot load"), "{e}");
        // A real shared object without the kernels' symbols.
        let libc_so = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
        if libc_so.exists() {
            let e = KernelLib::load_file(libc_so).unwrap_err().to_string();
            assert!(e.contains("no symbol wl_bind_version"), "{e}");
        }
    }
}
