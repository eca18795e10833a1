//! The OpenMP preload shim, as bytes the `allot` binary carries.
//!
//! `shim/allot_shim.c` is compiled by `build.rs` into `liballot_shim.so`;
//! [`SHIM_SO`] holds that file and [`install_shim`] writes it where the
//! dynamic loader can map it. A program started with
//! `LD_PRELOAD=<installed path>` and [`ENV_GRANT_FD`] naming an inherited
//! descriptor of its cell's grant page gets OpenMP teams no larger than the
//! grant's `threads`; without a valid page the shim is inert. The design,
//! the interposed entry points and what is not handled are in `SHIM.md`.

use allot_proto::dirs::TrustedDir;
use std::ffi::{OsStr, OsString};
use std::io;
use std::path::{Path, PathBuf};

pub use allot_proto::ENV_GRANT_FD;

/// The shared library, as built for this crate.
pub const SHIM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liballot_shim.so"));

/// The name [`install_shim`] gives the file: it carries a hash of
/// [`SHIM_SO`], so different builds never overwrite each other's file
/// under a running program.
pub const SHIM_FILE_NAME: &str = concat!("liballot_shim-", env!("ALLOT_SHIM_HASH"), ".so");

/// Set to `1` to have the shim print one line to stderr per capped region
/// (plus one at start-up saying whether it is active or why it is inert).
pub const ENV_SHIM_DEBUG: &str = allot_proto::env::SHIM_DEBUG;

/// Writes the shim into `dir` as [`SHIM_FILE_NAME`] and returns its path.
/// A file already there is kept if its bytes are [`SHIM_SO`] and replaced
/// otherwise, through the directory's descriptor ([`TrustedDir::install`]).
///
/// `dir` is a [`TrustedDir`]: only the user (and root) can change what it
/// holds, so the file the loader maps later is the file written and checked
/// here. It must not be on a `noexec` mount, where the loader cannot map it.
pub fn install_shim(dir: &TrustedDir) -> io::Result<PathBuf> {
    dir.install(SHIM_FILE_NAME, SHIM_SO, 0o644)
}

/// The `LD_PRELOAD` value that loads `shim` first, keeping whatever the
/// environment already preloads (`existing`) after it.
pub fn preload_with_shim(shim: &Path, existing: Option<&OsStr>) -> OsString {
    crate::pathlist::put_first(shim, existing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_is_an_elf_shared_object_that_links_no_openmp_runtime() {
        assert_eq!(&SHIM_SO[..4], b"\x7fELF");
        assert_eq!(SHIM_SO[16], 3, "ET_DYN");
        for runtime in [&b"libgomp"[..], b"libomp", b"libiomp"] {
            assert!(
                !SHIM_SO.windows(runtime.len()).any(|w| w == runtime),
                "the shim must find {} at run time, not link it",
                String::from_utf8_lossy(runtime)
            );
        }
    }

    #[test]
    fn install_writes_the_library_once() {
        let t = tempfile::tempdir().unwrap();
        let dir = TrustedDir::create(&t.path().join("a/b"), 0o700).unwrap();
        let p = install_shim(&dir).unwrap();
        assert_eq!(p, dir.join(SHIM_FILE_NAME));
        assert_eq!(std::fs::read(&p).unwrap(), SHIM_SO);
        assert_eq!(install_shim(&dir).unwrap(), p);
    }

    #[test]
    fn concurrent_installs_agree() {
        let t = tempfile::tempdir().unwrap();
        let dir = TrustedDir::create(t.path(), 0o700).unwrap();
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| install_shim(&dir).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(paths.iter().all(|p| p == &paths[0]));
        assert_eq!(std::fs::read(&paths[0]).unwrap(), SHIM_SO);
    }

    #[test]
    fn preload_puts_the_shim_first() {
        let shim = Path::new("/x/liballot_shim-1.so");
        assert_eq!(preload_with_shim(shim, None), "/x/liballot_shim-1.so");
        assert_eq!(
            preload_with_shim(shim, Some(OsStr::new(" "))),
            "/x/liballot_shim-1.so"
        );
        assert_eq!(
            preload_with_shim(shim, Some(OsStr::new("libfoo.so"))),
            "/x/liballot_shim-1.so:libfoo.so"
        );
    }
}
