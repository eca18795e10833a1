//! `-j` on a top-level `make`.
//!
//! GNU make given `-jN` on its command line starts a jobserver of its own
//! and ignores the one in `MAKEFLAGS` ("-jN forced in submake: resetting
//! jobserver mode"). So when the program `allot run` starts is make, the
//! `-j` option is taken out of its arguments and becomes the *cap* of the
//! cell's jobserver: `make -j8` in a cell runs at most 8 jobs and at most as
//! many as the cell holds CPUs. `-j` without a number means no cap beyond the
//! grant. Other programs' arguments are never changed.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// The job cap a stripped `-j` asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Jobs {
    /// No `-j` given.
    Absent,
    /// `-j` without a number: unlimited (the grant decides).
    Unlimited,
    /// `-jN`.
    Max(usize),
}

/// Whether `program` (as resolved) is GNU make.
pub fn is_make(program: &Path) -> bool {
    matches!(
        program.file_name().and_then(OsStr::to_str),
        Some("make" | "gmake")
    )
}

/// Takes the `-j` options out of make's arguments (`args` excludes the
/// program name). Recognises `-jN`, `-j N`, `-j`, `--jobs=N`, `--jobs N`,
/// `--jobs`, and `-j` inside a group of short flags (`-kj4`). Stops at `--`.
pub fn strip_jobs(args: &[OsString]) -> (Vec<OsString>, Jobs) {
    let mut out = Vec::with_capacity(args.len());
    let mut jobs = Jobs::Absent;
    let number = |s: &OsStr| {
        std::str::from_utf8(s.as_bytes())
            .ok()
            .and_then(|t| t.parse::<usize>().ok())
    };
    let mut i = 0;
    while i < args.len() {
        let a = args[i].as_bytes();
        if a == b"--" {
            out.extend(args[i..].iter().cloned());
            break;
        }
        if a == b"--jobs" || a == b"-j" {
            match args.get(i + 1).and_then(|n| number(n)) {
                Some(n) => {
                    jobs = Jobs::Max(n);
                    i += 2;
                }
                None => {
                    jobs = Jobs::Unlimited;
                    i += 1;
                }
            }
            continue;
        }
        if let Some(n) = a.strip_prefix(b"--jobs=") {
            jobs = number(OsStr::from_bytes(n)).map_or(Jobs::Unlimited, Jobs::Max);
            i += 1;
            continue;
        }
        if a.len() > 1 && a[0] == b'-' && a[1] != b'-' {
            // A group of short flags; `j` takes the rest as its number.
            if let Some(pos) = a.iter().position(|&c| c == b'j') {
                // Flags before j that take an argument (C, f, I, o, W, l)
                // would swallow the rest: leave such groups alone.
                let takes_arg = a[1..pos].iter().any(|c| b"CfIoWl".contains(c));
                if !takes_arg {
                    let rest = &a[pos + 1..];
                    let before = &a[..pos];
                    if rest.is_empty() {
                        match args.get(i + 1).and_then(|n| number(n)) {
                            Some(n) => {
                                jobs = Jobs::Max(n);
                                i += 1;
                            }
                            None => jobs = Jobs::Unlimited,
                        }
                    } else if let Some(n) = number(OsStr::from_bytes(rest)) {
                        jobs = Jobs::Max(n);
                    } else {
                        out.push(args[i].clone());
                        i += 1;
                        continue;
                    }
                    if before.len() > 1 {
                        out.push(OsStr::from_bytes(before).to_os_string());
                    }
                    i += 1;
                    continue;
                }
            }
        }
        out.push(args[i].clone());
        i += 1;
    }
    (out, jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(a: &[&str]) -> Vec<OsString> {
        a.iter().map(OsString::from).collect()
    }

    #[test]
    fn strips_every_form() {
        assert_eq!(strip_jobs(&v(&["-j8", "all"])), (v(&["all"]), Jobs::Max(8)));
        assert_eq!(
            strip_jobs(&v(&["-j", "8", "all"])),
            (v(&["all"]), Jobs::Max(8))
        );
        assert_eq!(
            strip_jobs(&v(&["-j", "all"])),
            (v(&["all"]), Jobs::Unlimited)
        );
        assert_eq!(strip_jobs(&v(&["--jobs=3"])), (v(&[]), Jobs::Max(3)));
        assert_eq!(
            strip_jobs(&v(&["--jobs", "3", "x"])),
            (v(&["x"]), Jobs::Max(3))
        );
        assert_eq!(
            strip_jobs(&v(&["-kj4", "x"])),
            (v(&["-k", "x"]), Jobs::Max(4))
        );
        assert_eq!(
            strip_jobs(&v(&["-k", "x"])),
            (v(&["-k", "x"]), Jobs::Absent)
        );
        // -C takes an argument: "-Cj" is a directory named "j", untouched.
        assert_eq!(strip_jobs(&v(&["-Cj"])), (v(&["-Cj"]), Jobs::Absent));
        assert_eq!(
            strip_jobs(&v(&["--", "-j8"])),
            (v(&["--", "-j8"]), Jobs::Absent)
        );
        assert!(is_make(Path::new("/usr/bin/make")));
        assert!(!is_make(Path::new("/usr/bin/cmake")));
    }
}
