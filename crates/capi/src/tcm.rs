//! allot's Thread Composability Manager, as bytes the `allot` binary
//! carries.
//!
//! `tcm/*.c` is compiled by `build.rs` into `libtcm.so.1`, the library
//! oneTBB and Intel's OpenMP runtime load when `TCM_ENABLE=1` to ask how
//! many threads they may run. [`install_tcm`] writes it into a directory of
//! its own, which `allot run` puts first on the program's
//! `LD_LIBRARY_PATH`; [`permit_table`] makes the memory file in which the
//! run's processes divide their cell's threads (`ALLOT_TCM_FD`). The
//! design, and where it differs from Intel's manager, is in `TCM.md`.

use allot_proto::dirs::{DirError, TrustedDir};
use rustix::fd::{AsFd, OwnedFd};
use std::io;
use std::path::PathBuf;

pub use allot_proto::env::TCM_FD as ENV_TCM_FD;

/// The library, as built for this crate.
pub const TCM_SO: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/libtcm.so.1"));

/// The directory [`install_tcm`] makes for it: named by a hash of
/// [`TCM_SO`], so different builds never overwrite each other's file
/// under a running program. (The file itself must be named as the
/// runtimes ask for it.)
pub const TCM_DIR_NAME: &str = concat!("tcm-", env!("ALLOT_TCM_HASH"));

/// The names the runtimes load: oneTBB asks for `libtcm.so.1`, Intel's
/// OpenMP for `libtcm.so`. Both are one file (a hard link), so a program
/// using both maps the library once.
pub const TCM_NAMES: [&str; 2] = ["libtcm.so.1", "libtcm.so"];

/// Bytes of the permit table (`TCM_TABLE_BYTES` in `tcm/table.h`; the
/// `c_layout` test compares them).
pub const TABLE_BYTES: u64 = 16384;

/// Writes the library into `TCM_DIR_NAME` under `dir` (under both of
/// [`TCM_NAMES`]; the directory made with permission bits `mode`: 0o700
/// for one user's programs, 0o755 for every user's) and returns that
/// directory.
pub fn install_tcm(dir: &TrustedDir, mode: u32) -> Result<PathBuf, DirError> {
    let sub = dir.create_child(TCM_DIR_NAME, mode)?;
    let io = |e: io::Error| DirError::Io {
        path: sub.path().to_path_buf(),
        source: e,
    };
    sub.install(TCM_NAMES[0], TCM_SO, 0o644).map_err(io)?;
    // The second name: a hard link made under a temporary name and renamed
    // into place, through the directory's descriptor.
    let same = |name: &str| -> io::Result<bool> {
        let flags = rustix::fs::AtFlags::SYMLINK_NOFOLLOW;
        let a = rustix::fs::statat(sub.fd(), TCM_NAMES[0], flags)?;
        match rustix::fs::statat(sub.fd(), name, flags) {
            Ok(b) => Ok(a.st_ino == b.st_ino && a.st_dev == b.st_dev),
            Err(rustix::io::Errno::NOENT) => Ok(false),
            Err(e) => Err(e.into()),
        }
    };
    if !same(TCM_NAMES[1]).map_err(io)? {
        let tmp = format!(".{}.{}.tmp", TCM_NAMES[1], std::process::id());
        let fd = sub.fd();
        let _ = rustix::fs::unlinkat(fd, tmp.as_str(), rustix::fs::AtFlags::empty());
        rustix::fs::linkat(
            fd,
            TCM_NAMES[0],
            fd,
            tmp.as_str(),
            rustix::fs::AtFlags::empty(),
        )
        .and_then(|()| rustix::fs::renameat(fd, tmp.as_str(), fd, TCM_NAMES[1]))
        .map_err(|e| io(e.into()))?;
    }
    Ok(sub.path().to_path_buf())
}

/// A new, zeroed permit table: a memory file the program inherits (the
/// descriptor is not closed on exec). Its processes map it and divide
/// their cell's threads in it.
pub fn permit_table() -> io::Result<OwnedFd> {
    let fd = rustix::fs::memfd_create("allot-tcm", rustix::fs::MemfdFlags::empty())?;
    rustix::fs::ftruncate(fd.as_fd(), TABLE_BYTES)?;
    Ok(fd)
}

/// `dir` first on the loader's path, before what `existing` holds.
pub fn library_path_with(
    dir: &std::path::Path,
    existing: Option<&std::ffi::OsStr>,
) -> std::ffi::OsString {
    crate::pathlist::put_first(dir, existing)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_exports_every_entry_point_the_runtimes_look_up() {
        assert_eq!(&TCM_SO[..4], b"\x7fELF");
        for f in [
            "tcmConnect",
            "tcmDisconnect",
            "tcmRequestPermit",
            "tcmGetPermitData",
            "tcmReleasePermit",
            "tcmIdlePermit",
            "tcmDeactivatePermit",
            "tcmActivatePermit",
            "tcmRegisterThread",
            "tcmUnregisterThread",
            "tcmGetVersionInfo",
        ] {
            assert!(
                TCM_SO
                    .windows(f.len() + 1)
                    .any(|w| &w[..f.len()] == f.as_bytes() && w[f.len()] == 0),
                "{f} is missing"
            );
        }
        assert!(
            TCM_SO.windows(11).any(|w| w == b"libtcm.so.1"),
            "the soname"
        );
    }

    #[test]
    fn install_makes_one_file_under_both_names_and_is_idempotent() {
        let t = tempfile::tempdir().unwrap();
        let dir = TrustedDir::create(t.path(), 0o700).unwrap();
        let sub = install_tcm(&dir, 0o700).unwrap();
        assert_eq!(sub, dir.join(TCM_DIR_NAME));
        let meta = |n: &str| std::fs::symlink_metadata(sub.join(n)).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(meta(TCM_NAMES[0]).ino(), meta(TCM_NAMES[1]).ino());
        assert_eq!(std::fs::read(sub.join(TCM_NAMES[1])).unwrap(), TCM_SO);
        assert_eq!(install_tcm(&dir, 0o700).unwrap(), sub);
        assert_eq!(meta(TCM_NAMES[0]).ino(), meta(TCM_NAMES[1]).ino());
    }

    #[test]
    fn the_table_is_zeroed_and_inherited() {
        let fd = permit_table().unwrap();
        let flags = rustix::io::fcntl_getfd(&fd).unwrap();
        assert!(!flags.contains(rustix::io::FdFlags::CLOEXEC));
        let f = std::fs::File::from(fd);
        assert_eq!(f.metadata().unwrap().len(), TABLE_BYTES);
    }

    #[test]
    fn the_library_path_puts_the_directory_first() {
        let d = std::path::Path::new("/x/tcm-1");
        assert_eq!(library_path_with(d, None), "/x/tcm-1");
        assert_eq!(
            library_path_with(d, Some("/a:/b".as_ref())),
            "/x/tcm-1:/a:/b"
        );
    }
}
