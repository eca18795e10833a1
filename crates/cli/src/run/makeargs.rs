//! `-j` on a top-level `make` or `ninja`, and the jobserver style each
//! reads.
//!
//! GNU make given `-jN` on its command line starts a jobserver of its own
//! and ignores the one in `MAKEFLAGS` ("-jN forced in submake: resetting
//! jobserver mode"); ninja 1.13 given `-jN` ignores the jobserver too. So
//! when the program `allot run` starts is make or ninja, the `-j` option is
//! taken out of its arguments and becomes the *cap* of the cell's
//! jobserver: `make -j8` in a cell runs at most 8 jobs and at most as many
//! as the cell holds CPUs. `-j` without a number (make) or `-j0` (ninja)
//! means no cap beyond the grant. Other programs' arguments are never
//! changed.
//!
//! Styles ([`default_style`]): make 4.3 reads only the pipe style
//! (`--jobserver-auth=R,W`) and stops with an error on a fifo; ninja 1.13
//! reads only the fifo style (Kitware's build, the one on PyPI, reads
//! both). So a ninja gets the fifo style unless a make older than 4.4 is on
//! `PATH` to run under it.

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

/// The job count a `MAKEFLAGS` value asks for: `-jN` / `--jobs=N`, `-j` /
/// `--jobs` alone (unlimited), or none (`Absent`: make runs serially).
/// A `--jobserver-auth` alone says nothing of the user's wish (an outer
/// make's, or an earlier allot's).
pub fn makeflags_jobs(flags: &str) -> Jobs {
    let mut jobs = Jobs::Absent;
    for f in flags.split_whitespace() {
        let n = if let Some(n) = f.strip_prefix("--jobs") {
            n.strip_prefix('=').unwrap_or(n)
        } else if let Some(n) = f.strip_prefix("-j") {
            n
        } else {
            continue;
        };
        jobs = match n.parse() {
            Ok(n) => Jobs::Max(n),
            Err(_) if n.is_empty() => Jobs::Unlimited,
            Err(_) => jobs,
        };
    }
    jobs
}

/// What a run's program is given for parallel jobs ([`plan_jobs`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MakeJobs {
    /// Its arguments, a top make's or ninja's `-j` taken out.
    pub args: Vec<OsString>,
    /// The most jobs the cell's jobserver hands out (`None`: the grant).
    pub cap: Option<usize>,
    /// Whether `MAKEFLAGS` names the jobserver: only where the user asked
    /// make for parallel jobs, so that a serial build stays serial.
    pub make_jobs: bool,
}

/// The jobs for `program` run with `args` (`jobserver_on`: not
/// `--jobserver off`) under the user's `makeflags`. A top make's or
/// ninja's `-jN` becomes the cap ([`strip_jobs`]); make without one takes
/// the user's `MAKEFLAGS` `-jN` as its cap, and without either stays
/// serial. ninja is parallel by default and always gets the jobserver.
/// Any other program (a shell running make, cargo) passes the jobserver
/// to a make below it only where `makeflags` asked for parallel jobs,
/// capped as they asked. Pure.
pub fn plan_jobs(
    program: &Path,
    args: Vec<OsString>,
    jobserver_on: bool,
    makeflags: Option<&str>,
) -> MakeJobs {
    let asked = makeflags.map_or(Jobs::Absent, makeflags_jobs);
    let ninja = is_ninja(program);
    if !(jobserver_on && (ninja || is_make(program))) {
        return MakeJobs {
            args,
            cap: match asked {
                Jobs::Max(n) => Some(n.max(1)),
                _ => None,
            },
            make_jobs: asked != Jobs::Absent,
        };
    }
    let flags = if ninja {
        NINJA_ARG_FLAGS
    } else {
        MAKE_ARG_FLAGS
    };
    let (args, mut jobs) = strip_jobs(&args, flags);
    // make's own -j wins; without one, the user's MAKEFLAGS says how many
    // jobs they want (its -j would otherwise be replaced).
    if jobs == Jobs::Absent && !ninja {
        jobs = asked;
    }
    MakeJobs {
        args,
        cap: match jobs {
            // ninja's -j0: no limit.
            Jobs::Max(0) if ninja => None,
            Jobs::Max(n) => Some(n.max(1)),
            _ => None,
        },
        make_jobs: ninja || jobs != Jobs::Absent,
    }
}

/// The short flags of each program that take an argument: a group with
/// one of them before `j` (`-C dir`, make's `-f file`, ninja's `-k N`) is
/// that flag's argument, not a `-j`.
pub const MAKE_ARG_FLAGS: &[u8] = b"CfIoWl";
/// See [`MAKE_ARG_FLAGS`].
pub const NINJA_ARG_FLAGS: &[u8] = b"dfkltwC";

/// Whether `program` (as resolved) is ninja.
pub fn is_ninja(program: &Path) -> bool {
    matches!(
        program.file_name().and_then(OsStr::to_str),
        Some("ninja" | "ninja-build")
    )
}

/// The jobserver style for `program` when the user named none: fifo for
/// ninja, unless `make_version` (of the make on `PATH`, as `make
/// --version` reports it; `None`: no make) is older than 4.4; pipe for
/// everything else.
pub fn default_style(program: &Path, make_version: Option<(u32, u32)>) -> super::jobserver::Style {
    use super::jobserver::Style;
    if is_ninja(program) && make_version.is_none_or(|v| v >= (4, 4)) {
        Style::Fifo
    } else {
        Style::Pipe
    }
}

/// The version in `make --version`'s first line (`GNU Make 4.3`).
pub fn make_version(text: &str) -> Option<(u32, u32)> {
    let v = text.lines().next()?.strip_prefix("GNU Make ")?;
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next().map_or(Some(0), |m| m.parse().ok())?;
    Some((major, minor))
}

/// Whether `program` (as resolved) is GNU make.
pub fn is_make(program: &Path) -> bool {
    matches!(
        program.file_name().and_then(OsStr::to_str),
        Some("make" | "gmake")
    )
}

/// Takes the `-j` options out of make's or ninja's arguments (`args`
/// excludes the program name; `arg_flags`: [`MAKE_ARG_FLAGS`] or
/// [`NINJA_ARG_FLAGS`]). Recognises `-jN`, `-j N`, `-j`, `--jobs=N`,
/// `--jobs N`, `--jobs`, and `-j` inside a group of short flags (`-kj4`).
/// Stops at `--`.
pub fn strip_jobs(args: &[OsString], arg_flags: &[u8]) -> (Vec<OsString>, Jobs) {
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
                // Flags before j that take an argument would swallow the
                // rest: leave such groups alone.
                let takes_arg = a[1..pos].iter().any(|c| arg_flags.contains(c));
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
    fn a_serial_make_stays_serial_and_the_users_jobs_are_a_cap() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let make = Path::new("/usr/bin/make");
        let plan = |args: &[&str], flags: Option<&str>| plan_jobs(make, os(args), true, flags);
        let p = plan(&["-C", "src"], None);
        assert_eq!((p.cap, p.make_jobs), (None, false), "serial");
        assert_eq!(p.args, os(&["-C", "src"]));
        let p = plan(&["-j8", "all"], None);
        assert_eq!((p.cap, p.make_jobs), (Some(8), true));
        assert_eq!(p.args, os(&["all"]));
        let p = plan(&[], Some("-k -j3"));
        assert_eq!(
            (p.cap, p.make_jobs),
            (Some(3), true),
            "the user's MAKEFLAGS"
        );
        let p = plan(&["-j2"], Some("-j3"));
        assert_eq!(p.cap, Some(2), "make's own -j wins");
        let ninja = plan_jobs(Path::new("ninja"), vec![], true, None);
        assert_eq!(
            (ninja.cap, ninja.make_jobs),
            (None, true),
            "ninja is parallel"
        );
        let sh = plan_jobs(Path::new("/bin/sh"), os(&["-c", "make -j9"]), true, None);
        assert_eq!((sh.cap, sh.make_jobs), (None, false));
        assert_eq!(
            sh.args,
            os(&["-c", "make -j9"]),
            "other programs' arguments are kept"
        );
        let sh = plan_jobs(Path::new("/bin/sh"), vec![], true, Some("-j"));
        assert_eq!((sh.cap, sh.make_jobs), (None, true));
        let off = plan_jobs(make, os(&["-j8"]), false, None);
        assert_eq!(off.args, os(&["-j8"]), "--jobserver off changes nothing");
    }

    #[test]
    fn makeflags_say_how_many_jobs_the_user_asked_for() {
        assert_eq!(makeflags_jobs(""), Jobs::Absent);
        assert_eq!(makeflags_jobs("-k"), Jobs::Absent);
        assert_eq!(makeflags_jobs("--jobserver-auth=3,4"), Jobs::Absent);
        assert_eq!(makeflags_jobs("-j3"), Jobs::Max(3));
        assert_eq!(makeflags_jobs("k -j3 --jobserver-auth=3,4"), Jobs::Max(3));
        assert_eq!(makeflags_jobs("-j"), Jobs::Unlimited);
        assert_eq!(makeflags_jobs("--jobs=5"), Jobs::Max(5));
        assert_eq!(makeflags_jobs("--jobs"), Jobs::Unlimited);
    }

    #[test]
    fn ninja_groups_respect_its_own_flags_with_arguments() {
        assert_eq!(
            strip_jobs(&v(&["-C", "build", "-j4"]), NINJA_ARG_FLAGS),
            (v(&["-C", "build"]), Jobs::Max(4))
        );
        assert_eq!(
            strip_jobs(&v(&["-k0j4"]), NINJA_ARG_FLAGS),
            (v(&["-k0j4"]), Jobs::Absent),
            "k's argument is 0j4"
        );
    }

    #[test]
    fn ninja_reads_fifos_unless_an_old_make_runs_under_it() {
        use crate::run::jobserver::Style;
        let ninja = Path::new("/usr/bin/ninja");
        assert_eq!(default_style(ninja, None), Style::Fifo);
        assert_eq!(default_style(ninja, Some((4, 4))), Style::Fifo);
        assert_eq!(default_style(ninja, Some((4, 3))), Style::Pipe);
        assert_eq!(
            default_style(Path::new("/usr/bin/make"), Some((4, 4))),
            Style::Pipe
        );
        assert_eq!(make_version("GNU Make 4.3\nBuilt for x86_64"), Some((4, 3)));
        assert_eq!(make_version("GNU Make 4.4.1\n"), Some((4, 4)));
        assert_eq!(make_version("bmake 2024"), None);
    }

    #[test]
    fn strips_every_form() {
        assert_eq!(
            strip_jobs(&v(&["-j8", "all"]), MAKE_ARG_FLAGS),
            (v(&["all"]), Jobs::Max(8))
        );
        assert_eq!(
            strip_jobs(&v(&["-j", "8", "all"]), MAKE_ARG_FLAGS),
            (v(&["all"]), Jobs::Max(8))
        );
        assert_eq!(
            strip_jobs(&v(&["-j", "all"]), MAKE_ARG_FLAGS),
            (v(&["all"]), Jobs::Unlimited)
        );
        assert_eq!(
            strip_jobs(&v(&["--jobs=3"]), MAKE_ARG_FLAGS),
            (v(&[]), Jobs::Max(3))
        );
        assert_eq!(
            strip_jobs(&v(&["--jobs", "3", "x"]), MAKE_ARG_FLAGS),
            (v(&["x"]), Jobs::Max(3))
        );
        assert_eq!(
            strip_jobs(&v(&["-kj4", "x"]), MAKE_ARG_FLAGS),
            (v(&["-k", "x"]), Jobs::Max(4))
        );
        assert_eq!(
            strip_jobs(&v(&["-k", "x"]), MAKE_ARG_FLAGS),
            (v(&["-k", "x"]), Jobs::Absent)
        );
        // -C takes an argument: "-Cj" is a directory named "j", untouched.
        assert_eq!(
            strip_jobs(&v(&["-Cj"]), MAKE_ARG_FLAGS),
            (v(&["-Cj"]), Jobs::Absent)
        );
        assert_eq!(
            strip_jobs(&v(&["--", "-j8"]), MAKE_ARG_FLAGS),
            (v(&["--", "-j8"]), Jobs::Absent)
        );
        assert!(is_make(Path::new("/usr/bin/make")));
        assert!(!is_make(Path::new("/usr/bin/cmake")));
    }
}
