//! Starting the program from a raw clone and `execve`, in two places:
//!
//! - **inside a cgroup v2 cell** (`spawn_into`): `clone3` with
//!   `CLONE_INTO_CGROUP` and the cell's directory. A process the broker
//!   moves into a cgroup by pid waits, in the kernel, for an RCU grace
//!   period whenever no move happened in the last few milliseconds; a
//!   child created inside the cgroup does not move at all. This is the v2
//!   half of `allot run` joining its cell by itself (on v1 its thread
//!   writes `0` to the cell's `tasks` files instead; see
//!   `allot_client::Options::joins_itself`).
//! - **on this CPU** (`spawn_here`), where `allot run` has moved itself
//!   into a cgroup v1 cell (see `on_this_cpu`). The kernel places a new
//!   process when it is created, before it has run, by the CPUs' loads,
//!   and a process that has just started (`allot run`) counts as fully
//!   loaded: so beside one CPU kept busy outside allot the child was put
//!   on that CPU, and in a cgroup the broker has just made it then waited
//!   for the busy program's time slice to end (up to a scheduler tick, 4
//!   ms here) before it could start, while the CPU `allot run` was on
//!   fell idle (a scheduler trace of 200 launches beside one busy loop:
//!   97 programs waited more than 0.5 ms for their first run before, none
//!   after; docs/benchmarks.md, "Launch"). `allot run` sleeps as soon as
//!   the program runs, so its CPU is the one about to be free: the
//!   calling thread narrows its CPU mask to that CPU around the clone,
//!   the child is created there, and the child widens its mask again
//!   before `execve`, where the kernel balances it. The child shares this
//!   memory until then (`CLONE_VM | CLONE_VFORK`, as `posix_spawn` does:
//!   no page tables copied), with every signal blocked until it has put
//!   the handlers back.
//!
//! **Widened to every CPU, not back to the old mask.** Since Linux 6.2
//! the kernel keeps the mask a thread last asked for with
//! `sched_setaffinity` and limits every later cpuset change to it, and
//! a child inherits it: a program whose mask was "put back" to its
//! cell's CPUs at launch would never grow with its cell. Asking for
//! every CPU leaves the cpuset alone in charge, as if no mask had been
//! set. That is right only where the cpuset is all that limits the
//! thread: a cgroup v1 cell joined by a process that started with every
//! online CPU (no `taskset` around it). Elsewhere (the affinity
//! backend, whose grant is the mask itself; a narrower start; no
//! broker, where nothing waits a tick) `allot run` starts the program
//! with `std::process::Command`, which leaves masks alone.
//!
//! Invariants: between the clone and `execve` the child only calls
//! `sigaction`, `signal`, `sched_setaffinity`, `sigprocmask`, `execve`,
//! `write` and `_exit` (async-signal-safe; the parent has threads), on
//! memory prepared before the clone; the program's signal dispositions
//! are what `std::process::Command` would give it (none blocked;
//! SIGPIPE at its default); the caller's signal mask is put back before
//! `spawn_here` returns, and its CPU mask, like the program's, is every
//! CPU again (or untouched, where it could not be narrowed); an
//! `execve` failure comes back to the parent as its errno, and the
//! child is reaped, so a spawn either returns a running program's pid
//! or an error with no child left behind.

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

/// The program's `execve` arguments, made before the clone (the child
/// allocates nothing).
struct Exec {
    path: CString,
    // Owners of the strings the pointer arrays point into.
    _argv: Vec<CString>,
    _envp: Vec<CString>,
    argv_p: Vec<*const libc::c_char>,
    envp_p: Vec<*const libc::c_char>,
}

impl Exec {
    fn new(
        program: &Path,
        arg0: &OsStr,
        args: &[OsString],
        env: &[(OsString, OsString)],
    ) -> std::io::Result<Exec> {
        let path = cstring(program.as_os_str())?;
        let argv: Vec<CString> = std::iter::once(arg0)
            .chain(args.iter().map(|a| a.as_os_str()))
            .map(cstring)
            .collect::<Result<_, _>>()?;
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| {
                let mut kv = k.clone();
                kv.push("=");
                kv.push(v);
                cstring(&kv)
            })
            .collect::<Result<_, _>>()?;
        let pointers = |v: &[CString]| -> Vec<*const libc::c_char> {
            v.iter()
                .map(|s| s.as_ptr())
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        };
        Ok(Exec {
            path,
            argv_p: pointers(&argv),
            envp_p: pointers(&envp),
            _argv: argv,
            _envp: envp,
        })
    }

    /// Runs the program in this (child) process; returns only if `execve`
    /// failed, with its errno. Async-signal-safe.
    fn exec(&self) -> i32 {
        // SAFETY: the pointers are into strings `self` owns, each array
        // ends with a null pointer.
        unsafe {
            libc::execve(
                self.path.as_ptr(),
                self.argv_p.as_ptr(),
                self.envp_p.as_ptr(),
            );
            *libc::__errno_location()
        }
    }
}

/// The empty signal set.
fn no_signals() -> libc::sigset_t {
    // SAFETY: sigemptyset initialises the set it is given.
    unsafe {
        let mut set = std::mem::MaybeUninit::<libc::sigset_t>::uninit();
        libc::sigemptyset(set.as_mut_ptr());
        set.assume_init()
    }
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
    let exec = Exec::new(program, arg0, args, env).map_err(SpawnError::Clone)?;
    let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
        .map_err(|e| SpawnError::Clone(e.into()))?;
    let args = CloneArgs {
        flags: CLONE_INTO_CGROUP,
        exit_signal: libc::SIGCHLD as u64,
        cgroup: cgroup.as_raw_fd() as u64,
        ..CloneArgs::default()
    };
    let wfd = w.as_raw_fd();
    let empty = no_signals();
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
            let b = exec.exec().to_ne_bytes();
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

/// What the child of [`spawn_here`] works from: everything made before
/// the clone, in memory it shares with the suspended parent.
struct HereChild<'a> {
    exec: &'a Exec,
    /// Every CPU, to widen the mask to (`None`: it was not narrowed).
    widen: Option<rustix::thread::CpuSet>,
    empty: libc::sigset_t,
    /// The highest signal number.
    last_signal: libc::c_int,
    /// `execve`'s errno, should it fail (read once the child has exited).
    errno: i32,
}

/// The child of [`spawn_here`]: runs on its own stack, in the parent's
/// memory, until `execve`.
extern "C" fn here_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the parent's `HereChild`, alive while the parent is
    // suspended (CLONE_VFORK); only async-signal-safe calls follow.
    unsafe {
        let c = &mut *arg.cast::<HereChild<'_>>();
        // The parent's handlers would run here, in its memory: every
        // handled signal goes back to its default before any is unblocked
        // (an ignored one stays ignored, as `Command` leaves it), and
        // SIGPIPE, which Rust ignores, to its default.
        for sig in 1..=c.last_signal {
            let mut old = std::mem::zeroed::<libc::sigaction>();
            if libc::sigaction(sig, std::ptr::null(), &mut old) == 0
                && old.sa_sigaction != libc::SIG_DFL
                && (old.sa_sigaction != libc::SIG_IGN || sig == libc::SIGPIPE)
            {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if let Some(every) = &c.widen {
            set_mask(every);
        }
        libc::sigprocmask(libc::SIG_SETMASK, &c.empty, std::ptr::null_mut());
        c.errno = c.exec.exec();
        libc::_exit(127);
    }
}

/// Whether `allot run` creates its program with [`spawn_here`]: only where
/// the cell's cpuset alone limits it (the module's "widened to every CPU"):
/// it joined a cgroup v1 cell itself, and it started with every online
/// CPU (`launch_cpus` of `online`, asked only then), so no mask of its own
/// narrows it.
pub fn on_this_cpu(
    in_v1_cpuset: bool,
    launch_cpus: Option<usize>,
    online: impl FnOnce() -> Option<usize>,
) -> bool {
    in_v1_cpuset && launch_cpus.is_some() && launch_cpus == online()
}

/// Starts `program` like [`spawn_into`], in this process's cgroups,
/// created on the CPU the calling thread runs on, its mask and the
/// caller's widened to every CPU afterwards (the module's second case:
/// only where a cpuset alone limits the calling thread). The child shares
/// this memory until it runs the program (as `posix_spawn` does: no copy
/// of the page tables). Returns its pid.
pub fn spawn_here(
    program: &Path,
    arg0: &OsStr,
    args: &[OsString],
    env: &[(OsString, OsString)],
) -> Result<u32, SpawnError> {
    let exec = Exec::new(program, arg0, args, env).map_err(SpawnError::Clone)?;
    // The child's stack; glibc's own posix_spawn uses far less.
    let mut stack = vec![0u8; 64 * 1024];
    let mut child = HereChild {
        exec: &exec,
        widen: None,
        empty: no_signals(),
        last_signal: libc::SIGRTMAX(),
        errno: 0,
    };
    // No signal may reach the child before it has put the handlers back.
    let mut saved = no_signals();
    // SAFETY: sigfillset initialises the set; pthread_sigmask reads one
    // set and writes the other.
    unsafe {
        let mut all = no_signals();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut saved);
    }
    if pin_to_this_cpu() {
        child.widen = Some(every_cpu());
    }
    // SAFETY: the child runs `here_child` on its own stack (the top of
    // `stack`, 16-byte aligned) in this memory; CLONE_VFORK suspends this
    // thread until it has run the program or exited, so `child`, `exec`
    // and `stack` outlive its use of them.
    let pid = unsafe {
        let top = stack.as_mut_ptr().add(stack.len());
        let top = top.sub(top as usize % 16);
        libc::clone(
            here_child,
            top.cast(),
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw mut child).cast(),
        )
    };
    let clone_error = std::io::Error::last_os_error();
    if let Some(every) = &child.widen {
        set_mask(every);
    }
    // SAFETY: puts back the mask read above.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, &saved, std::ptr::null_mut());
    }
    if pid < 0 {
        return Err(SpawnError::Clone(clone_error));
    }
    let pid = pid as u32;
    // SAFETY: the child has exec'd or exited (CLONE_VFORK); a volatile
    // read, since it wrote the field behind the compiler's back.
    let errno = unsafe { std::ptr::read_volatile(&child.errno) };
    if errno != 0 {
        let _ = wait(pid);
        return Err(SpawnError::Exec(std::io::Error::from_raw_os_error(errno)));
    }
    Ok(pid)
}

/// Narrows the calling thread's CPU mask to the CPU it runs on now;
/// `false` where that cannot be done (the mask is then unchanged, and the
/// child placed as the kernel likes).
fn pin_to_this_cpu() -> bool {
    let cpu = rustix::thread::sched_getcpu();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return false;
    }
    let mut one = rustix::thread::CpuSet::new();
    one.set(cpu);
    set_mask(&one)
}

/// A set of every CPU: as a thread's mask, whatever its cpuset allows.
fn every_cpu() -> rustix::thread::CpuSet {
    let mut every = rustix::thread::CpuSet::new();
    for cpu in 0..rustix::thread::CpuSet::MAX_CPU {
        every.set(cpu);
    }
    every
}

/// Sets the calling thread's CPU mask (one system call, async-signal-safe).
fn set_mask(mask: &rustix::thread::CpuSet) -> bool {
    rustix::thread::sched_setaffinity(None, mask).is_ok()
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
        assert_eq!(
            signal_set(&text, "SigIgn:") & bit(libc::SIGPIPE),
            0,
            "{text}"
        );
        assert_eq!(signal_set(&text, "SigBlk:"), 0, "{text}");
    }

    /// A signal set of `/proc/PID/status` (`SigIgn:`, `SigBlk:`).
    fn signal_set(status: &str, field: &str) -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field))
            .map(|m| u64::from_str_radix(m.trim(), 16).unwrap())
            .unwrap_or_else(|| panic!("{field} in {status}"))
    }

    fn bit(sig: libc::c_int) -> u64 {
        1 << (sig - 1)
    }

    /// A field of the calling thread's `/proc` status.
    fn own(field: &str) -> String {
        let text = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(field))
            .unwrap_or_else(|| panic!("{field} in {text}"))
            .trim()
            .to_owned()
    }

    /// Blocks or unblocks `sig` in the calling thread.
    fn block(sig: libc::c_int, on: bool) {
        let mut set = no_signals();
        // SAFETY: sigaddset and pthread_sigmask on a set made here.
        unsafe {
            libc::sigaddset(&mut set, sig);
            let how = if on {
                libc::SIG_BLOCK
            } else {
                libc::SIG_UNBLOCK
            };
            libc::pthread_sigmask(how, &set, std::ptr::null_mut());
        }
    }

    #[test]
    fn only_a_v1_cell_joined_with_every_online_cpu_creates_its_program_here() {
        let online = |n| move || n;
        assert!(on_this_cpu(true, Some(16), online(Some(16))));
        // The affinity backend (no v1 cpuset), or a v2 cell, or no cell:
        // the online CPUs are not even read.
        assert!(!on_this_cpu(false, Some(16), || -> Option<usize> {
            unreachable!()
        }));
        // Started narrower (taskset, a parent cpuset): a mask of its own
        // may limit it, which widening would lose.
        assert!(!on_this_cpu(true, Some(8), online(Some(16))));
        // Unknown either way.
        assert!(!on_this_cpu(true, None, online(Some(16))));
        assert!(!on_this_cpu(true, Some(16), online(None)));
        assert!(!on_this_cpu(true, None, online(None)));
    }

    /// The CPUs in a `Cpus_allowed_list` value.
    fn cpus_of(list: &str) -> allot_topo::CpuSet {
        list.parse().unwrap_or_else(|e| panic!("{list}: {e}"))
    }

    #[test]
    fn a_program_created_here_has_at_least_the_callers_cpus_and_signals_as_command_leaves_them() {
        // The caller's mask is narrowed for the clone only: the program
        // and the caller end with at least what the caller had.
        let before = cpus_of(&own("Cpus_allowed_list:"));
        // A signal the caller blocks is not blocked in the program, and
        // stays blocked in the caller.
        block(libc::SIGUSR2, true);
        let out = tempfile::NamedTempFile::new().unwrap();
        let script = format!("cat /proc/self/status > {}", out.path().display());
        let pid = spawn_here(
            Path::new("/bin/sh"),
            OsStr::new("sh"),
            &["-c".into(), script.into()],
            &[("PATH".into(), "/usr/bin:/bin".into())],
        )
        .unwrap_or_else(|e| panic!("{e:?}"));
        let after = (cpus_of(&own("Cpus_allowed_list:")), own("SigBlk:"));
        block(libc::SIGUSR2, false);
        assert!(wait(pid).unwrap().success());
        let text = std::fs::read_to_string(out.path()).unwrap();
        let program = cpus_of(field(&text, "Cpus_allowed_list:"));
        assert!(before.is_subset(&program), "{before} then {program}");
        assert!(
            before.is_subset(&after.0),
            "the caller: {before} then {}",
            after.0
        );
        let caller_blocked = u64::from_str_radix(&after.1, 16).unwrap();
        assert_ne!(caller_blocked & bit(libc::SIGUSR2), 0, "{caller_blocked:x}");
        assert_eq!(
            signal_set(&text, "SigIgn:") & bit(libc::SIGPIPE),
            0,
            "{text}"
        );
        assert_eq!(signal_set(&text, "SigBlk:"), 0, "{text}");
    }

    fn field<'a>(status: &'a str, name: &str) -> &'a str {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("{name} in {status}"))
            .trim()
    }

    /// The v1 cpuset directory this process is in.
    fn own_cpuset() -> Option<std::path::PathBuf> {
        let text = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let rel = text.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "cpuset")
                .then_some(path)
        })?;
        Some(Path::new("/sys/fs/cgroup/cpuset").join(rel.trim_start_matches('/')))
    }

    #[test]
    fn a_program_created_on_this_cpu_grows_with_its_v1_cpuset() {
        // The kernel (6.2 and later) keeps the mask a thread asked for and
        // limits later cpuset changes to it: the program created on this
        // CPU must not be left with one, or it would never grow with its
        // cell. A thread of this test joins a v1 cpuset of one CPU, starts
        // a program on its CPU, and the cpuset grows to two before the
        // program reads its mask.
        let allowed: Vec<usize> = own("Cpus_allowed_list:")
            .parse::<allot_topo::CpuSet>()
            .map(|s| s.iter().collect())
            .unwrap_or_default();
        if !Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists() {
            // A machine without a v1 cpuset hierarchy (pure cgroup v2) has
            // no v1 cell, so `allot run` never creates a program this way.
            eprintln!("not applicable: no cgroup v1 cpuset hierarchy");
            return;
        }
        let parent = own_cpuset();
        if !allot_testkit::prerequisite(
            allot_testkit::is_root() && allowed.len() >= 2 && parent.is_some(),
            "root and two CPUs",
        ) {
            return;
        }
        let parent = parent.expect("checked");
        let dir = parent.join(allot_testkit::unique("spawn-here"));
        std::fs::create_dir(&dir).unwrap();
        let _guard = allot_testkit::CgroupDirs(vec![dir.clone()]);
        let mems = std::fs::read_to_string(parent.join("cpuset.effective_mems")).unwrap();
        std::fs::write(dir.join("cpuset.mems"), mems.trim()).unwrap();
        std::fs::write(dir.join("cpuset.cpus"), allowed[0].to_string()).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let (go, out) = (tmp.path().join("go"), tmp.path().join("out"));
        let script = format!(
            "while [ ! -e {} ]; do sleep 0.01; done; cat /proc/self/status > {}",
            go.display(),
            out.display()
        );
        let (dir2, parent2) = (dir.clone(), parent.clone());
        let (pid, caller) = std::thread::spawn(move || {
            // This thread alone joins the cpuset, and leaves it before it ends.
            std::fs::write(dir2.join("tasks"), "0").unwrap();
            let pid = spawn_here(
                Path::new("/bin/sh"),
                OsStr::new("sh"),
                &["-c".into(), script.into()],
                &[("PATH".into(), "/usr/bin:/bin".into())],
            );
            let both = format!("{},{}", allowed[0], allowed[1]);
            std::fs::write(dir2.join("cpuset.cpus"), &both).unwrap();
            let caller = own("Cpus_allowed_list:");
            std::fs::write(parent2.join("tasks"), "0").unwrap();
            (pid, caller)
        })
        .join()
        .unwrap();
        let pid = pid.unwrap_or_else(|e| panic!("{e:?}"));
        std::fs::write(&go, "").unwrap();
        assert!(wait(pid).unwrap().success());
        let text = std::fs::read_to_string(&out).unwrap();
        let two: allot_topo::CpuSet = field(&text, "Cpus_allowed_list:").parse().unwrap();
        assert_eq!(
            two.len(),
            2,
            "the program did not grow with its cpuset: {text}"
        );
        let caller: allot_topo::CpuSet = caller.parse().unwrap();
        assert_eq!(caller.len(), 2, "nor did the caller: {caller}");
    }

    #[test]
    fn a_program_that_cannot_start_here_is_an_exec_error_and_the_caller_keeps_its_cpus() {
        let before = cpus_of(&own("Cpus_allowed_list:"));
        let blocked = own("SigBlk:");
        let e = spawn_here(Path::new("/no/such/program"), OsStr::new("x"), &[], &[]).unwrap_err();
        match e {
            SpawnError::Exec(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            other => panic!("{other:?}"),
        }
        let e = spawn_here(Path::new("/bin/true"), OsStr::new("a\0b"), &[], &[]).unwrap_err();
        match e {
            SpawnError::Clone(e) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput),
            other => panic!("{other:?}"),
        }
        let after = cpus_of(&own("Cpus_allowed_list:"));
        assert!(before.is_subset(&after), "{before} then {after}");
        assert_eq!(own("SigBlk:"), blocked);
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
