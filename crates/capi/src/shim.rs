//! The OpenMP preload shim, as bytes the `allot` binary carries.
//!
//! `shim/allot_shim.c` is compiled by `build.rs` into `liballot_shim.so`;
//! [`SHIM_SO`] holds that file and [`install_shim`] writes it where the
//! dynamic loader can map it. A program started with
//! `LD_PRELOAD=<installed path>` and [`ENV_GRANT_FD`] naming an inherited
//! descriptor of its cell's grant page gets OpenMP teams no larger than the
//! grant's `threads`; without a valid page the shim is inert. The design,
//! the interposed entry points and what is not handled are in `SHIM.md`.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The shared library, as built for this crate.
pub const SHIM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/liballot_shim.so"));

/// The name [`install_shim`] gives the file: it carries a hash of
/// [`SHIM_SO`], so different builds never overwrite each other's file
/// under a running program.
pub const SHIM_FILE_NAME: &str = concat!("liballot_shim-", env!("ALLOT_SHIM_HASH"), ".so");

/// The variable naming the inherited grant-page descriptor (as in
/// `allot_proto::ENV_GRANT_FD`). Must name a descriptor without `FD_CLOEXEC`.
pub const ENV_GRANT_FD: &str = "ALLOT_GRANT_FD";

/// Set to `1` to have the shim print one line to stderr per capped region
/// (plus one at start-up saying whether it is active or why it is inert).
pub const ENV_SHIM_DEBUG: &str = "ALLOT_SHIM_DEBUG";

/// Writes the shim into `dir` (created if missing) as [`SHIM_FILE_NAME`]
/// and returns its path. A file already there is kept if its bytes are
/// [`SHIM_SO`] and replaced otherwise; the new file is written under a
/// temporary name and renamed into place, so concurrent installers and
/// programs mapping the file never see a partial one.
///
/// `dir` should belong to the user (e.g. `$XDG_RUNTIME_DIR/allot`): anyone
/// who can write there can replace the library the user's programs load. It
/// must not be on a `noexec` mount, where the loader cannot map it.
pub fn install_shim(dir: &Path) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let path = dir.join(SHIM_FILE_NAME);
    match fs::read(&path) {
        Ok(bytes) if bytes == SHIM_SO => return Ok(path),
        Ok(_) => {} // truncated or foreign: replace it
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    static SERIAL: AtomicU64 = AtomicU64::new(0);
    let tmp = dir.join(format!(
        ".{SHIM_FILE_NAME}.{}.{}.tmp",
        std::process::id(),
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let written = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(SHIM_SO)?;
            f.sync_all()
        })
        .and_then(|()| fs::rename(&tmp, &path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(path)
}

/// The `LD_PRELOAD` value that loads `shim` first, keeping whatever the
/// environment already preloads (`existing`) after it.
pub fn preload_with_shim(shim: &Path, existing: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(shim);
    if let Some(rest) = existing.filter(|e| !e.as_bytes().iter().all(u8::is_ascii_whitespace)) {
        v.push(":");
        v.push(rest);
    }
    v
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
    fn install_writes_once_and_repairs_a_damaged_file() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("a/b");
        let p = install_shim(&sub).unwrap();
        assert_eq!(p, sub.join(SHIM_FILE_NAME));
        assert_eq!(fs::read(&p).unwrap(), SHIM_SO);
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let first = ino(&p);
        assert_eq!(install_shim(&sub).unwrap(), p);
        assert_eq!(ino(&p), first, "an intact file is kept");

        fs::write(&p, &SHIM_SO[..100]).unwrap();
        assert_eq!(install_shim(&sub).unwrap(), p);
        assert_eq!(
            fs::read(&p).unwrap(),
            SHIM_SO,
            "a truncated file is replaced"
        );
        let leftovers: Vec<_> = fs::read_dir(&sub)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| n != SHIM_FILE_NAME)
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn concurrent_installs_agree() {
        let dir = tempfile::tempdir().unwrap();
        let paths: Vec<PathBuf> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| s.spawn(|| install_shim(dir.path()).unwrap()))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(paths.iter().all(|p| p == &paths[0]));
        assert_eq!(fs::read(&paths[0]).unwrap(), SHIM_SO);
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
