//! Finding the program to run, as `env` and the shell do.
//!
//! A name with a `/` is a path; otherwise each `$PATH` entry is tried in
//! order. The first entry naming an executable file wins; if a file exists
//! but none is executable, the result is "permission denied" (exit 126),
//! if nothing exists "not found" (exit 127) — the codes shells use.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Why a command cannot be run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unrunnable {
    /// No such file (exit 127).
    NotFound,
    /// A file exists but is not an executable regular file (exit 126).
    NotExecutable(PathBuf),
}

impl Unrunnable {
    /// The exit code shells use.
    pub fn exit_code(&self) -> i32 {
        match self {
            Unrunnable::NotFound => 127,
            Unrunnable::NotExecutable(_) => 126,
        }
    }
}

fn executable(p: &Path) -> bool {
    use rustix::fs::{Access, access};
    p.is_file() && access(p, Access::EXEC_OK).is_ok()
}

/// Resolves `cmd` against `path` (the value of `$PATH`).
pub fn resolve(cmd: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, Unrunnable> {
    if cmd.is_empty() {
        return Err(Unrunnable::NotFound);
    }
    if cmd.as_bytes().contains(&b'/') {
        let p = PathBuf::from(cmd);
        return if executable(&p) {
            Ok(p)
        } else if p.exists() {
            Err(Unrunnable::NotExecutable(p))
        } else {
            Err(Unrunnable::NotFound)
        };
    }
    let default = OsStr::new("/usr/local/bin:/usr/bin:/bin");
    let mut denied = None;
    for dir in std::env::split_paths(path.unwrap_or(default)) {
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let p = dir.join(cmd);
        if executable(&p) {
            return Ok(p);
        }
        if p.exists() && denied.is_none() {
            denied = Some(p);
        }
    }
    Err(denied.map_or(Unrunnable::NotFound, Unrunnable::NotExecutable))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_sh_and_reports_missing() {
        let p = resolve(
            OsStr::new("sh"),
            Some(OsStr::new("/nonexistent:/bin:/usr/bin")),
        )
        .unwrap();
        assert!(p.ends_with("sh"));
        assert_eq!(
            resolve(OsStr::new("no-such-cmd-xyz"), None),
            Err(Unrunnable::NotFound)
        );
        assert_eq!(
            resolve(OsStr::new("/no/such"), None)
                .unwrap_err()
                .exit_code(),
            127
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("plain");
        std::fs::write(&f, "x").unwrap();
        let e = resolve(f.as_os_str(), None).unwrap_err();
        assert_eq!(e.exit_code(), 126);
        let e = resolve(OsStr::new("plain"), Some(dir.path().as_os_str())).unwrap_err();
        assert_eq!(e, Unrunnable::NotExecutable(f));
    }
}
