//! Acting as another user: commands run under an unprivileged uid, and
//! files such a user can reach.
//!
//! Users are plain numeric uids (no account is created, so none is left
//! behind); `setpriv` (util-linux) switches to them. Only root can do this.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The `nobody` user, for an attacker that owns nothing.
pub const NOBODY: u32 = 65534;

/// A uid no account uses on a normal machine, for the `n`th test user.
pub fn test_uid(n: u32) -> u32 {
    420_000 + n
}

/// Whether commands can be run as another user here (root with `setpriv`).
pub fn can_switch_users() -> bool {
    crate::is_root() && Path::new("/usr/bin/setpriv").exists()
}

/// `program` run as `uid` (group `uid`, no supplementary groups), with
/// `XDG_RUNTIME_DIR`, `ALLOT_SOCKET` and `HOME` removed from its
/// environment so that it uses the per-user defaults.
pub fn as_user(uid: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("/usr/bin/setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .arg("--")
        .arg(program)
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("ALLOT_SOCKET")
        .env_remove("HOME");
    c
}

/// A copy of an executable that every user can run, in a directory of its
/// own (root's, mode 0755) removed on drop. Test binaries live under a
/// build directory other users may not enter.
pub struct SharedExe {
    dir: PathBuf,
    path: PathBuf,
}

impl SharedExe {
    /// Hard-links (or copies) `exe` into a fresh world-readable directory.
    pub fn new(exe: &Path) -> SharedExe {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!(
            "allot-test-exe-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir(&dir).expect("create a directory for the shared executable");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = dir.join(exe.file_name().expect("an executable file name"));
        if std::fs::hard_link(exe, &path).is_err() {
            std::fs::copy(exe, &path).expect("copy the executable");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        SharedExe { dir, path }
    }

    /// Path of the shared copy, which any user can execute until `self` drops.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

static SERIAL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

impl Drop for SharedExe {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A path removed (recursively) on drop, whoever owns it.
pub struct RemoveOnDrop(pub PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
        let _ = std::fs::remove_file(&self.0);
    }
}
