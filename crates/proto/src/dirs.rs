//! Directories allot trusts: the per-user runtime directory that holds the
//! socket, the journal, the broker's log and the libraries and programs
//! allot installs and then loads or executes.
//!
//! # Threat
//!
//! The per-user default lives in `/tmp` when `$XDG_RUNTIME_DIR` is unset, a
//! place every user can write. Whoever controls a directory on the path to a
//! file controls the file: another user who created `/tmp/allot-1000` first
//! (or made it writable) can replace the OpenMP shim between the moment
//! `allot run` checks it and the moment the dynamic loader maps it, plant a
//! socket that impersonates the broker, or point `broker.log` at a file of
//! the victim's.
//!
//! # Rule
//!
//! A directory is trusted when nobody but its user and root can change what
//! any of its path components names:
//!
//! 1. every ancestor is a real directory (no symbolic link is followed while
//!    walking) owned by root or by the user, and is not writable by group or
//!    others unless it is sticky (like `/tmp`: others may add entries there
//!    but never rename or remove ours);
//! 2. the directory itself is owned by the user (or, for a socket another
//!    user serves, by root: [`Trust::OwnerOrRoot`]) and is writable by
//!    nobody else.
//!
//! The walk opens every component with `O_NOFOLLOW` starting from `/`, and
//! the checks are made with `fstat` on the descriptors it opened, so what is
//! checked is what is used: there is no window between the check and the
//! use in which a path could be swapped. Files inside are created through
//! the directory's descriptor ([`TrustedDir::install`]); once a directory
//! passes, its paths are stable for the user, because nobody else can
//! change any component of them.
//!
//! A directory that fails is refused with an error that names it, its owner
//! and mode, and says what to do; nothing is repaired silently, since a
//! planted directory is evidence worth seeing.

use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Who may own the last directory of a trusted path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Only the calling user (effective uid): anything the caller writes,
    /// loads or executes.
    Owner,
    /// The calling user or root: a socket served by the system broker.
    OwnerOrRoot,
}

/// Why a directory is not trusted.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// The directory (or an ancestor) belongs to someone else.
    #[error(
        "{path} belongs to uid {owner}, not to you (uid {uid}): another user may control what it holds; \
         remove it (as root or its owner) or set XDG_RUNTIME_DIR to a private directory"
    )]
    NotOwned {
        /// Absolute path of the offending directory: the target or one of its ancestors.
        path: PathBuf,
        /// The directory's owner uid, from `fstat`.
        owner: u32,
        /// The caller's effective uid.
        uid: u32,
    },
    /// The directory (or a non-sticky ancestor) can be written by others.
    #[error(
        "{path} is writable by other users (mode {mode:04o}): they could replace what allot keeps there; {}",
        writable_fix(.path, *.mode)
    )]
    WritableByOthers {
        /// Absolute path of the offending directory: the target or one of its ancestors.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A component is a symbolic link or not a directory.
    #[error("{path} is not a directory (or is a symbolic link, which allot does not follow here)")]
    NotDirectory {
        /// Path up to and including the component that is not a directory.
        path: PathBuf,
    },
    /// A system call failed.
    #[error("{path}: {source}")]
    Io {
        /// Path of the component whose call failed, or the path as given if resolving it failed.
        path: PathBuf,
        /// The failed call's error; `NotFound` when the component does not exist.
        source: std::io::Error,
    },
}

/// What to do about a directory others can write. A sticky one (`/tmp`,
/// `/var/tmp`) is shared on purpose, and taking the others' write
/// permission away would break the machine: use a private directory
/// instead. Any other is the user's own to fix.
fn writable_fix(path: &Path, mode: u32) -> String {
    if mode & 0o1000 != 0 {
        "it is a directory every user shares: use a private one instead \
         (`mkdir -m 700 ~/.allot` and `--socket ~/.allot/allot.sock`, or set XDG_RUNTIME_DIR)"
            .to_string()
    } else {
        format!(
            "run `chmod go-w {}` or use a private directory",
            path.display()
        )
    }
}

impl DirError {
    /// Whether the directory exists but someone else could control it (as
    /// opposed to an I/O failure).
    pub fn is_untrusted(&self) -> bool {
        matches!(
            self,
            DirError::NotOwned { .. }
                | DirError::WritableByOthers { .. }
                | DirError::NotDirectory { .. }
        )
    }
}

/// The socket path: `$ALLOT_SOCKET`, else `$XDG_RUNTIME_DIR/allot/allot.sock`,
/// else `/run/allot/allot.sock` for root, else `/tmp/allot-$UID/allot.sock`.
pub fn default_socket_path() -> PathBuf {
    if let Some(p) = std::env::var_os(crate::ENV_SOCKET).filter(|p| !p.is_empty()) {
        return p.into();
    }
    default_state_dir().join("allot.sock")
}

/// The directory for the socket and journal of the default broker, and for
/// what allot installs for the user: `$XDG_RUNTIME_DIR/allot`, else
/// `/run/allot` for root, else `/tmp/allot-$UID`. Check it with
/// [`TrustedDir`] before use.
pub fn default_state_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return Path::new(&d).join("allot");
    }
    let uid = rustix::process::geteuid().as_raw();
    if uid == 0 {
        "/run/allot".into()
    } else {
        format!("/tmp/allot-{uid}").into()
    }
}

/// Checks what sits at `socket` before a broker listens there: nothing,
/// or a socket of this user's (a stopped broker's, which the broker then
/// replaces if nobody answers on it). Anything else — a regular file, a
/// directory, a link, another user's socket — is not allot's to remove:
/// the error says what is there and what to do, and nothing is touched.
/// Returns whether a socket of the user's is there.
pub fn check_socket_path(socket: &Path) -> Result<bool, String> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let m = match std::fs::symlink_metadata(socket) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(format!("cannot look at {}: {e}", socket.display())),
    };
    let t = m.file_type();
    let what = if t.is_socket() {
        None
    } else if t.is_file() {
        Some("a regular file")
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_symlink() {
        Some("a symbolic link")
    } else {
        Some("not a socket")
    };
    if let Some(what) = what {
        return Err(format!(
            "{} is {what}, not a broker's socket: allot will not replace it; name a path \
             that does not exist yet (for example {}) or remove it yourself",
            socket.display(),
            default_state_dir().join("allot.sock").display()
        ));
    }
    let me = rustix::process::geteuid().as_raw();
    if m.uid() != me {
        return Err(format!(
            "{} is a socket of user {}, not of this user ({me}): allot will not replace \
             it; name a socket path of your own",
            socket.display(),
            m.uid()
        ));
    }
    Ok(true)
}

/// The directory a socket path names (`.` for a bare file name).
pub fn socket_parent(socket: &Path) -> &Path {
    match socket.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The directory of the broker socket `socket`, checked for a client: it
/// must exist and be owned by the caller or root ([`Trust::OwnerOrRoot`]).
pub fn socket_dir(socket: &Path) -> Result<TrustedDir, DirError> {
    TrustedDir::open(socket_parent(socket), Trust::OwnerOrRoot)
}

/// A directory that passed the rule above, held open.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(rustix::io::Errno) -> DirError + '_ {
    move |e| DirError::Io {
        path: path.to_path_buf(),
        source: e.into(),
    }
}

/// The permission bits that let others than the owner change entries.
const OTHERS_WRITE: u32 = 0o022;
const STICKY: u32 = 0o1000;

fn check(fd: BorrowedFd<'_>, path: &Path, last: Option<Trust>) -> Result<(), DirError> {
    let st = rustix::fs::fstat(fd).map_err(io(path))?;
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory {
        return Err(DirError::NotDirectory {
            path: path.to_path_buf(),
        });
    }
    let uid = rustix::process::geteuid().as_raw();
    let owner = st.st_uid;
    let mode = st.st_mode & 0o7777;
    let owner_ok = match last {
        Some(Trust::Owner) => owner == uid,
        Some(Trust::OwnerOrRoot) | None => owner == uid || owner == 0,
    };
    if !owner_ok {
        return Err(DirError::NotOwned {
            path: path.to_path_buf(),
            owner,
            uid,
        });
    }
    let sticky_ok = last.is_none() && mode & STICKY != 0;
    if mode & OTHERS_WRITE != 0 && !sticky_ok {
        return Err(DirError::WritableByOthers {
            path: path.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

fn open_dir(at: BorrowedFd<'_>, name: &OsStr, path: &Path) -> Result<OwnedFd, DirError> {
    rustix::fs::openat(
        at,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => DirError::NotDirectory {
            path: path.to_path_buf(),
        },
        e => io(path)(e),
    })
}

/// Opens directory `name` in `at` (`path` names it in errors), making it
/// with permission bits `create` first where it is missing and `create`
/// is given.
fn open_or_make(
    at: BorrowedFd<'_>,
    name: &OsStr,
    path: &Path,
    create: Option<u32>,
) -> Result<OwnedFd, DirError> {
    match (open_dir(at, name, path), create) {
        (Err(DirError::Io { source, .. }), Some(mode))
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            match rustix::fs::mkdirat(at, name, Mode::from_raw_mode(mode)) {
                Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                Err(e) => return Err(io(path)(e)),
            }
            open_dir(at, name, path)
        }
        (opened, _) => opened,
    }
}

/// `path` made absolute and free of `.`/`..` (resolved against the
/// canonical form of its longest existing prefix, so symbolic links the
/// user chose, such as a `/tmp` that is a link, still work; the walk then
/// refuses any link swapped in afterwards).
fn normalize(path: &Path) -> Result<PathBuf, DirError> {
    let abs = std::path::absolute(path).map_err(|source| DirError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut existing = abs.clone();
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = std::fs::canonicalize(&existing) {
            let mut out = c;
            for r in rest.iter().rev() {
                out.push(r);
            }
            return Ok(out);
        }
        match (existing.file_name(), existing.parent()) {
            (Some(n), Some(p)) => {
                rest.push(n.to_os_string());
                existing = p.to_path_buf();
            }
            _ => return Ok(abs),
        }
    }
}

impl TrustedDir {
    /// Opens `path`, creating it and any missing parents with `mode` (of
    /// which group and other write bits are ignored), and checks it with
    /// [`Trust::Owner`]. For what the caller writes, loads or executes.
    pub fn create(path: &Path, mode: u32) -> Result<TrustedDir, DirError> {
        Self::walk(path, Some(mode & !OTHERS_WRITE), Trust::Owner)
    }

    /// Opens an existing `path` and checks it with `trust`.
    pub fn open(path: &Path, trust: Trust) -> Result<TrustedDir, DirError> {
        Self::walk(path, None, trust)
    }

    fn walk(path: &Path, create: Option<u32>, trust: Trust) -> Result<TrustedDir, DirError> {
        let norm = normalize(path)?;
        let root = Path::new("/");
        let mut fd = open_dir(rustix::fs::CWD, OsStr::new("/"), root)?;
        let mut at = PathBuf::from("/");
        let names: Vec<&OsStr> = norm
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                _ => None,
            })
            .collect();
        check(
            fd.as_fd(),
            &at,
            if names.is_empty() { Some(trust) } else { None },
        )?;
        for (i, name) in names.iter().enumerate() {
            let last = i + 1 == names.len();
            at.push(name);
            let next = open_or_make(fd.as_fd(), name, &at, create)?;
            check(next.as_fd(), &at, last.then_some(trust))?;
            fd = next;
        }
        Ok(TrustedDir { fd, path: norm })
    }

    /// Opens `name`, a directory inside this one, creating it with `mode`
    /// (of which group and other write bits are ignored) if missing, and
    /// checks it with [`Trust::Owner`]. The same rule as [`TrustedDir::create`]
    /// on the joined path, without walking from `/` again: this directory
    /// passed it, and its descriptor is what `name` is opened from.
    pub fn create_child(&self, name: &str, mode: u32) -> Result<TrustedDir, DirError> {
        let path = self.join(name);
        let mut parts = Path::new(name).components();
        if !matches!(
            (parts.next(), parts.next()),
            (Some(Component::Normal(_)), None)
        ) {
            return Err(DirError::Io {
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "not a single file name",
                ),
            });
        }
        let fd = open_or_make(
            self.fd.as_fd(),
            OsStr::new(name),
            &path,
            Some(mode & !OTHERS_WRITE),
        )?;
        check(fd.as_fd(), &path, Some(Trust::Owner))?;
        Ok(TrustedDir { fd, path })
    }

    /// The directory's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The directory's (normalized) path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name` inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }

    /// Opens (creating with mode 0600) `name` for appending, without
    /// following a symbolic link.
    pub fn append(&self, name: &str) -> std::io::Result<std::fs::File> {
        let fd = rustix::fs::openat(
            self.fd.as_fd(),
            name,
            OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        Ok(std::fs::File::from(fd))
    }

    /// Makes sure `name` holds exactly `bytes` with permission bits `mode`,
    /// and returns its path. An intact file is kept; anything else (a
    /// truncated file, other bytes, a link) is replaced by a file written
    /// under a temporary name and renamed into place, so concurrent
    /// installers and programs mapping the file never see a partial one.
    /// Every step goes through the directory's descriptor.
    pub fn install(&self, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<PathBuf> {
        if self.holds(name, bytes)? {
            return Ok(self.join(name));
        }
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let tmp = format!(
            ".{name}.{}.{}.tmp",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let written = (|| -> std::io::Result<()> {
            let fd = rustix::fs::openat(
                self.fd.as_fd(),
                tmp.as_str(),
                OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                Mode::from_raw_mode(mode & !OTHERS_WRITE),
            )?;
            let mut f = std::fs::File::from(fd);
            f.write_all(bytes)?;
            f.sync_all()?;
            rustix::fs::renameat(self.fd.as_fd(), tmp.as_str(), self.fd.as_fd(), name)?;
            Ok(())
        })();
        if let Err(e) = written {
            let _ =
                rustix::fs::unlinkat(self.fd.as_fd(), tmp.as_str(), rustix::fs::AtFlags::empty());
            return Err(e);
        }
        Ok(self.join(name))
    }

    /// Whether `name` is a regular file (not a link) holding `bytes`.
    fn holds(&self, name: &str, bytes: &[u8]) -> std::io::Result<bool> {
        let fd = match rustix::fs::openat(
            self.fd.as_fd(),
            name,
            OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::NOENT | rustix::io::Errno::LOOP) => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let st = rustix::fs::fstat(&fd)?;
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
            || st.st_size as usize != bytes.len()
        {
            return Ok(false);
        }
        if bytes.is_empty() {
            return Ok(true);
        }
        // Compared where the page cache holds it (a mapping) rather than
        // read into fresh memory: the shim and the manager's library are
        // checked on every launch, and a copy costs a page fault a page.
        // SAFETY: a private read-only mapping of `st_size` bytes of a
        // regular file, unmapped below; a file truncated meanwhile makes
        // the comparison fault, which only a writer of this user's own
        // directory could cause.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                bytes.len(),
                rustix::mm::ProtFlags::READ,
                rustix::mm::MapFlags::PRIVATE,
                &fd,
                0,
            )
        }?;
        // SAFETY: the mapping above, `bytes.len()` readable bytes.
        let same = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), bytes.len()) } == bytes;
        // SAFETY: unmapped once, nothing borrows it any more.
        let _ = unsafe { rustix::mm::munmap(p, bytes.len()) };
        Ok(same)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn only_a_free_path_or_a_socket_of_ours_may_become_a_socket() {
        let t = tempfile::tempdir().unwrap();
        assert_eq!(check_socket_path(&t.path().join("none")), Ok(false));
        let file = t.path().join("notes.txt");
        std::fs::write(&file, "important data\n").unwrap();
        let e = check_socket_path(&file).unwrap_err();
        assert!(
            e.contains("is a regular file") && e.contains("will not replace"),
            "{e}"
        );
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "important data\n");
        let e = check_socket_path(t.path()).unwrap_err();
        assert!(e.contains("is a directory"), "{e}");
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let e = check_socket_path(&link).unwrap_err();
        assert!(e.contains("symbolic link"), "{e}");
        let sock = t.path().join("s.sock");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        assert_eq!(check_socket_path(&sock), Ok(true));
    }

    #[test]
    fn creates_a_private_directory_and_reopens_it() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("a/b");
        let d = TrustedDir::create(&p, 0o700).unwrap();
        assert_eq!(d.path(), std::fs::canonicalize(&p).unwrap());
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        TrustedDir::open(&p, Trust::Owner).unwrap();
    }

    #[test]
    fn a_child_is_made_private_and_held_to_the_same_rule() {
        let t = tempfile::tempdir().unwrap();
        let d = TrustedDir::create(&t.path().join("a"), 0o700).unwrap();
        let c = d.create_child("shim", 0o777).unwrap();
        assert_eq!(c.path(), d.join("shim"));
        let mode = std::fs::metadata(c.path()).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode & 0o022,
            0,
            "group and other write bits are dropped: {mode:o}"
        );
        // Opened again, not made again; the same files are seen.
        std::fs::write(c.join("f"), "x").unwrap();
        let again = d.create_child("shim", 0o700).unwrap();
        assert_eq!(std::fs::read_to_string(again.join("f")).unwrap(), "x");
        // A child others can write, or a link in its place, is refused.
        chmod(c.path(), 0o777);
        let e = d.create_child("shim", 0o700).unwrap_err();
        assert!(matches!(e, DirError::WritableByOthers { .. }), "{e}");
        std::os::unix::fs::symlink(t.path(), d.join("link")).unwrap();
        let e = d.create_child("link", 0o700).unwrap_err();
        assert!(matches!(e, DirError::NotDirectory { .. }), "{e}");
        // Only a name inside it: no way out through `..` or a path.
        for bad in ["..", "a/b", "/etc", ""] {
            let e = d.create_child(bad, 0o700).unwrap_err();
            assert!(!e.is_untrusted(), "{bad}: {e}");
        }
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("allot-x");
        std::fs::create_dir(&p).unwrap();
        chmod(&p, 0o777);
        let e = TrustedDir::create(&p, 0o700).unwrap_err();
        assert!(
            matches!(e, DirError::WritableByOthers { mode: 0o777, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("chmod go-w"), "{e}");
        // Sticky does not help the last directory: others could add files.
        // A shared directory like /tmp is not the user's to fix: the advice
        // is a private directory, never `chmod go-w`.
        chmod(&p, 0o1777);
        let e = TrustedDir::create(&p, 0o700).unwrap_err();
        let text = e.to_string();
        assert!(!text.contains("chmod"), "{text}");
        assert!(text.contains("private one"), "{text}");
        // A non-sticky writable ancestor is refused too.
        chmod(&p, 0o777);
        assert!(matches!(
            TrustedDir::create(&p.join("inner"), 0o700).unwrap_err(),
            DirError::WritableByOthers { .. }
        ));
    }

    #[test]
    fn a_symbolic_link_is_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let real = t.path().join("real");
        std::fs::create_dir(&real).unwrap();
        chmod(&real, 0o700);
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        // The user's own link resolves (normalized before the walk)...
        let d = TrustedDir::open(&link, Trust::Owner).unwrap();
        assert_eq!(d.path(), std::fs::canonicalize(&real).unwrap());
        // ...but a link inside the trusted directory is never installed over.
        let target = t.path().join("victim");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, real.join("lib.so")).unwrap();
        d.install("lib.so", b"new", 0o644).unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
        assert_eq!(std::fs::read(real.join("lib.so")).unwrap(), b"new");
        assert!(
            !std::fs::symlink_metadata(real.join("lib.so"))
                .unwrap()
                .file_type()
                .is_symlink()
        );
    }

    #[test]
    fn a_directory_of_another_user_is_refused() {
        if !allot_testkit::prerequisite(allot_testkit::is_root(), "changing ownership needs root") {
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("allot-1000");
        std::fs::create_dir(&p).unwrap();
        chmod(&p, 0o700);
        rustix::fs::chown(
            &p,
            Some(rustix::process::Uid::from_raw(65534)),
            Some(rustix::process::Gid::from_raw(65534)),
        )
        .unwrap();
        let e = TrustedDir::create(&p, 0o700).unwrap_err();
        assert!(matches!(e, DirError::NotOwned { owner: 65534, .. }), "{e}");
        assert!(e.is_untrusted());
        // A socket directory of root's is fine for a client, not another user's.
        assert!(TrustedDir::open(&p, Trust::OwnerOrRoot).is_err());
    }

    #[test]
    fn install_writes_once_and_repairs() {
        let t = tempfile::tempdir().unwrap();
        let d = TrustedDir::create(&t.path().join("d"), 0o700).unwrap();
        let p = d.install("x.so", b"hello", 0o755).unwrap();
        let ino = |p: &Path| std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap());
        let first = ino(&p);
        assert_eq!(d.install("x.so", b"hello", 0o755).unwrap(), p);
        assert_eq!(ino(&p), first, "an intact file is kept");
        std::fs::write(&p, b"he").unwrap();
        d.install("x.so", b"hello", 0o755).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o755);
        let names: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, vec![std::ffi::OsString::from("x.so")]);
    }
}
