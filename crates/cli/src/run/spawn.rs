//! Starting the program directly inside a cgroup v2 cell:
//! `clone3(CLONE_INTO_CGROUP)` with the cell's directory, then `execve`.
//!
//! A process the broker moves into a cgroup by pid waits, in the kernel,
//! for an RCU grace period whenever no move happened in the last few
//! milliseconds; a child created inside the cgroup does not move at all.
//! This is the v2 half of `allot run` joining its cell by itself (on v1 its
//! thread writes `0` to the cell's `tasks` files instead; see
//! `allot_client::Options::joins_itself`).
//!
//! Invariants: between `clone3` and `execve` the child only calls
//! `sigprocmask`, `signal`, `execve`, `write` and `_exit`
//! (async-signal-safe; the parent has threads), on
//! memory prepared before the clone; an `execve` failure comes back to the
//! parent as its errno through a close-on-exec pipe, and the child is
//! reaped, so `spawn_into` either returns a running program's pid or an
//! error with no child left behind.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

/// `CLONE_INTO_CGROUP` (Linux 5.7; not in every libc's headers).
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `struct clone_args` as of Linux 5.7 (`CLONE_ARGS_SIZE_VER2`).
#[repr(C)]
#[derive(Default)]
struct CloneArgs {
    flags: u64,
    pidfd: u64,
    child_tid: u64,
    parent_tid: u64,
    exit_signal: u64,
    stack: u64,
    stack_size: u64,
    tls: u64,
    set_tid: u64,
    set_tid_size: u64,
    cgroup: u64,
}

fn cstring(s: &OsStr) -> std::io::Result<CString> {
    CString::new(s.as_bytes()).map_err(|_| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{s:?} contains a NUL byte"),
        )
    })
}

/// What went wrong.
#[derive(Debug)]
pub enum SpawnError {
    /// The kernel would not create a child in that cgroup (too old a
    /// kernel, no permission): nothing was started.
    Clone(std::io::Error),
    /// The child was created but could not run the program (`execve`
    /// failed); it has exited.
    Exec(std::io::Error),
}

/// Starts `program` (argv `arg0`, `args`; environment exactly `env`)
/// inside the cgroup whose directory is `cgroup`. Returns its pid.
pub fn spawn_into(
    cgroup: BorrowedFd<'_>,
    program: &Path,
    arg0: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
) -> Result<u32, SpawnError> {
    let prep = |e| SpawnError::Clone(e);
    let path = cstring(program.as_os_str()).map_err(prep)?;
    let argv: Vec<CString> = std::iter::once(arg0)
        .chain(args.iter().map(|a| a.as_os_str()))
        .map(cstring)
        .collect::<Result<_, _>>()
        .map_err(prep)?;
    let envp: Vec<CString> = env
        .iter()
        .map(|(k, v)| {
            let mut kv = k.clone();
            kv.push("=");
            kv.push(v);
            cstring(&kv)
        })
        .collect::<Result<_, _>>()
        .map_err(prep)?;
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|s| s.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|s| s.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    let (r, w) =
        rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).map_err(|e| prep(e.into()))?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let wfd = w.as_raw_fd();
    // SAFETY: sigemptyset initialises the set it is given.
    let empty = unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    };
    // SAFETY: clone3 without CLONE_VM gives the child a copy of this
    // address space; in the child only async-signal-safe calls follow
    // (execve, write, _exit), on memory prepared above.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const CloneArgs,
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if pid == 0 {
        // The child. As `std::process::Command` leaves it: no signal
        // blocked, SIGPIPE back to its default (Rust ignores it, and an
        // ignored signal stays ignored across execve).
        // SAFETY: async-signal-safe calls only, on memory prepared before
        // the clone (the module's invariant); the child never returns.
        unsafe {
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
            libc::execve(path.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr());
            let errno = *libc::__errno_location();
            let b = errno.to_ne_bytes();
            libc::write(wfd, b.as_ptr().cast(), b.len());
            libc::_exit(127);
        }
    }
    if pid < 0 {
        return Err(SpawnError::Clone(std::io::Error::last_os_error()));
    }
    drop(w);
    let pid = pid as u32;
    let mut b = [0u8; 4];
    let n = loop {
        match rustix::io::read(&r, &mut b) {
            Err(rustix::io::Errno::INTR) => continue,
            other => break other.unwrap_or(0),
        }
    };
    if n == 4 {
        let _ = wait(pid);
        return Err(SpawnError::Exec(std::io::Error::from_raw_os_error(
            i32::from_ne_bytes(b),
        )));
    }
    Ok(pid)
}

/// Waits for child `pid` to end (retrying on signals).
pub fn wait(pid: u32) -> std::io::Result<ExitStatus> {
    let mut status = 0;
    loop {
        // SAFETY: waitpid writes only `status`.
        let r = unsafe { libc::waitpid(pid as i32, &mut status, 0) };
        if r == pid as i32 {
            return Ok(ExitStatus::from_raw(status));
        }
        let e = std::io::Error::last_os_error();
        if e.kind() != std::io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cgroup2 group of this test under the machine's cgroup2 mount,
    /// removed on drop; `None` where there is no writable one.
    fn group() -> Option<(allot_testkit::CgroupDirs, std::path::PathBuf)> {
        let mount = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|m| m.join("cgroup.controllers").exists() && m.join("cgroup.procs").exists())?;
        let dir = mount.join(allot_testkit::unique("spawn-into"));
        std::fs::create_dir(&dir).ok()?;
        Some((allot_testkit::CgroupDirs(vec![dir.clone()]), dir))
    }

    #[test]
    fn the_program_starts_inside_the_cgroup() {
        let g = group();
        if !allot_testkit::prerequisite(g.is_some(), "root and a writable cgroup2 mount") {
            return;
        }
        let (_guard, dir) = g.expect("checked");
        let fd = std::fs::File::open(&dir).unwrap();
        let out = tempfile::NamedTempFile::new().unwrap();
        let script = format!(
            "cat /proc/self/cgroup /proc/self/status > {}",
            out.path().display()
        );
        let pid = spawn_into(
            std::os::fd::AsFd::as_fd(&fd),
            Path::new("/bin/sh"),
            OsStr::new("sh"),
            &["-c".into(), script.into()],
            &[("PATH".into(), "/usr/bin:/bin".into())],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        assert!(wait(pid).unwrap().success());
        let text = std::fs::read_to_string(out.path()).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            text.lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&format!("/{name}"))),
            "{text}"
        );
        // SIGPIPE (bit 13) neither ignored nor blocked, as `Command` leaves it.
        for field in ["SigIgn:", "SigBlk:"] {
            let mask = text
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
                .unwrap_or_else(|| panic!("{field} in {text}"));
            assert_eq!(mask & (1 << (libc::SIGPIPE - 1)), 0, "{field} {mask:x}");
        }
    }

    #[test]
    fn a_program_that_cannot_run_is_an_exec_error_and_leaves_no_child() {
        let g = group();
        if !allot_testkit::prerequisite(g.is_some(), "root and a writable cgroup2 mount") {
            return;
        }
        let (_guard, dir) = g.expect("checked");
        let fd = std::fs::File::open(&dir).unwrap();
        let e = spawn_into(
            std::os::fd::AsFd::as_fd(&fd),
            Path::new("/no/such/program"),
            OsStr::new("x"),
            &[],
            &[],
        )
        .unwrap_err();
        match e {
            SpawnError::Exec(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        // Nothing left in the group.
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap();
        assert!(procs.trim().is_empty(), "{procs}");
    }
}
