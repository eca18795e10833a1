//! Helpers for the shim's process tests and benchmark: compiling the C test
//! programs, installing the shim, a grant page the child inherits, and
//! reading what `tests/omp/teamsize.c` reports.
#![allow(dead_code)]

use allot_proto::{Grant, PageMap};
use allot_topo::CpuSet;
use std::io::{BufRead, BufReader, Read};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

/// Where built programs and the installed shim go (inside `target/`).
pub fn work_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("capi");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The shim, installed once per test process.
pub fn shim() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        let dir = allot_proto::dirs::TrustedDir::create(&work_dir().join("shim"), 0o700).unwrap();
        allot_capi::install_shim(&dir).unwrap()
    })
}

/// A C compiler with OpenMP support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Toolchain {
    /// gcc + libgomp.
    Gcc,
    /// clang + LLVM libomp.
    Clang,
}

impl Toolchain {
    pub fn cc(self) -> &'static str {
        match self {
            Toolchain::Gcc => "gcc",
            Toolchain::Clang => "clang",
        }
    }
    fn tag(self) -> &'static str {
        match self {
            Toolchain::Gcc => "gcc",
            Toolchain::Clang => "clang",
        }
    }
    /// Flags for a build of teamsize.c: the GOMP_1.0 entry points exist only
    /// in libgomp's interface as gcc used it.
    fn teamsize_flags(self) -> &'static [&'static str] {
        match self {
            Toolchain::Gcc => &["-DLEGACY_GOMP"],
            Toolchain::Clang => &[],
        }
    }
}

fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(name)
}

/// Compiles `src` (relative to the crate) with `cc args`, once per process,
/// into the work dir as `out`; `Err` carries the compiler's complaint.
pub fn compile(cc: &str, src: &str, out: &str, args: &[&str]) -> Result<PathBuf, String> {
    static BUILT: Mutex<Vec<(String, Result<PathBuf, String>)>> = Mutex::new(Vec::new());
    let mut built = BUILT.lock().unwrap();
    if let Some((_, r)) = built.iter().find(|(o, _)| o == out) {
        return r.clone();
    }
    let dir = work_dir().join("bin");
    std::fs::create_dir_all(&dir).unwrap();
    let dst = dir.join(out);
    // Build under a private name, then rename: other test processes may be
    // running the previous binary.
    let tmp = dir.join(format!(".{out}.{}", std::process::id()));
    let r = match Command::new(cc)
        .args(["-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(source(src))
        .args(args) // after the source: libraries are linked in order
        .arg("-o")
        .arg(&tmp)
        .output()
    {
        Err(e) => Err(format!("cannot run {cc}: {e}")),
        Ok(o) if !o.status.success() => Err(format!(
            "{cc} failed on {src}: {}",
            String::from_utf8_lossy(&o.stderr)
        )),
        Ok(_) => std::fs::rename(&tmp, &dst)
            .map(|()| dst)
            .map_err(|e| e.to_string()),
    };
    built.push((out.to_owned(), r.clone()));
    r
}

/// teamsize.c as a program.
pub fn teamsize(tc: Toolchain) -> Result<PathBuf, String> {
    let mut args = vec!["-fopenmp"];
    args.extend(tc.teamsize_flags());
    compile(
        tc.cc(),
        "tests/omp/teamsize.c",
        &format!("teamsize-{}", tc.tag()),
        &args,
    )
}

/// teamsize.c as a library, and the driver that loads it `RTLD_LOCAL`.
pub fn teamsize_rtld_local(tc: Toolchain) -> Result<(PathBuf, PathBuf), String> {
    let mut args = vec!["-fopenmp", "-fPIC", "-shared", "-DAS_LIBRARY"];
    args.extend(tc.teamsize_flags());
    let lib = compile(
        tc.cc(),
        "tests/omp/teamsize.c",
        &format!("libteamsize-{}.so", tc.tag()),
        &args,
    )?;
    Ok((dlopen_driver()?, lib))
}

/// The driver that runs a library build of a test program.
pub fn dlopen_driver() -> Result<PathBuf, String> {
    compile(
        "gcc",
        "tests/omp/dlopen_driver.c",
        "dlopen_driver",
        &["-ldl"],
    )
}

/// threads.c as a program and as a library.
pub fn threads(tc: Toolchain) -> Result<(PathBuf, PathBuf), String> {
    let src = "tests/omp/threads.c";
    let bin = compile(
        tc.cc(),
        src,
        &format!("threads-{}", tc.tag()),
        &["-fopenmp", "-pthread"],
    )?;
    let lib = compile(
        tc.cc(),
        src,
        &format!("libthreads-{}.so", tc.tag()),
        &["-fopenmp", "-pthread", "-fPIC", "-shared", "-DAS_LIBRARY"],
    )?;
    Ok((bin, lib))
}

/// ctor_nested.c as a library: OpenMP regions, nested ones on team threads,
/// run by its constructor, so inside the `dlopen` that loads it.
pub fn ctor_nested(tc: Toolchain) -> Result<PathBuf, String> {
    compile(
        tc.cc(),
        "tests/omp/ctor_nested.c",
        &format!("libctor_nested-{}.so", tc.tag()),
        &["-fopenmp", "-fPIC", "-shared", "-DAS_LIBRARY"],
    )
}

/// fake_rt.c, a stand-in runtime with a program of its own: with every
/// entry point the shim knows, or (`old`) without those newer than LLVM 14.
pub fn fake_rt(old: bool) -> Result<PathBuf, String> {
    let (out, args): (&str, &[&str]) = if old {
        ("libfake_rt_old.so", &["-fPIC", "-shared", "-DOLD_RUNTIME"])
    } else {
        ("libfake_rt.so", &["-fPIC", "-shared"])
    };
    compile("gcc", "tests/omp/fake_rt.c", out, args)
}

/// `n` copies of fake_rt.c's library under different names: `n` distinct
/// runtimes to the loader (and the shim), in load order.
pub fn fake_rt_copies(n: usize) -> Result<Vec<PathBuf>, String> {
    let lib = fake_rt(false)?;
    let dir = work_dir().join(format!("fake_rt_copies.{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    (0..n)
        .map(|i| {
            let copy = dir.join(format!("libfake_rt{i}.so"));
            std::fs::copy(&lib, &copy).map_err(|e| e.to_string())?;
            Ok(copy)
        })
        .collect()
}

/// The driver that runs several library builds of test programs in turn.
pub fn each_driver() -> Result<PathBuf, String> {
    compile("gcc", "tests/omp/each_driver.c", "each_driver", &["-ldl"])
}

/// kmpc_calls.c: hand-written calls of libomp's entry points (clang).
pub fn kmpc_calls() -> Result<PathBuf, String> {
    compile(
        "clang",
        "tests/omp/kmpc_calls.c",
        "kmpc_calls",
        &["-fopenmp", "-ldl"],
    )
}

/// `NAME VALUE` lines (as fake_rt.c and kmpc_calls.c print them).
pub fn named_values(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

pub use allot_testkit::output_within;

/// Where LLVM's libomp is: the one clang's OpenMP programs load (`ldd`).
pub fn libomp_path() -> Result<PathBuf, String> {
    let bin = teamsize(Toolchain::Clang)?;
    let out = Command::new("ldd")
        .arg(&bin)
        .output()
        .map_err(|e| format!("ldd: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.contains("libomp"))
        .find_map(|l| l.split_whitespace().nth(2))
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .ok_or_else(|| format!("no libomp in ldd's output: {text}"))
}

/// Whether to run the libomp cases: clang with OpenMP works here (else they
/// are skipped, with the reason and the packages to install).
pub fn clang_available() -> bool {
    let works = clang_openmp();
    allot_testkit::prerequisite(
        works.is_ok(),
        &format!(
            "clang with LLVM OpenMP: {} (apt-get install clang libomp-dev)",
            works.err().unwrap_or_default()
        ),
    )
}

/// Whether clang can build and run an OpenMP program here; the reason if not.
pub fn clang_openmp() -> Result<PathBuf, String> {
    let bin = teamsize(Toolchain::Clang)?;
    let out = Command::new(&bin)
        .args(["once", "0", "0"])
        .env("OMP_NUM_THREADS", "2")
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "clang's OpenMP program does not run: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(bin)
}

/// A cell's grant page that a child process inherits.
pub struct Page {
    map: PageMap,
    generation: u64,
}

impl Page {
    /// A page whose grant recommends `threads`.
    pub fn new(threads: u32) -> Page {
        let mut p = Page {
            map: PageMap::create(42, 1).unwrap(),
            generation: 0,
        };
        p.publish(threads);
        p
    }

    /// Publishes a new grant of `threads` on the first `threads` CPUs.
    pub fn publish(&mut self, threads: u32) {
        self.publish_on(threads, CpuSet::first_n(threads as usize));
    }

    /// Publishes a new grant of `threads` on `cpus`.
    pub fn publish_on(&mut self, threads: u32, cpus: CpuSet) {
        self.generation += 1;
        self.map.page().publish(&Grant {
            cell: 42,
            generation: self.generation,
            instance: 1,
            threads,
            entitled: threads,
            share_milli: threads * 1000,
            cpus,
            ..Grant::default()
        });
    }

    pub fn fd(&self) -> BorrowedFd<'_> {
        self.map.fd()
    }

    /// Leaves the page as a writer that died in the middle of a publish
    /// does: `seq` odd, and nobody to make it even. The next
    /// [`Page::publish`], like a new writer's, recovers it.
    pub fn stall_mid_publish(&self) {
        const SEQ: u64 = 16; // offset of `seq` (docs/protocol.md)
        let mut b = [0u8; 8];
        assert_eq!(rustix::io::pread(self.fd(), &mut b[..], SEQ).unwrap(), 8);
        let seq = u64::from_le_bytes(b);
        assert_eq!(seq % 2, 0, "a publish is in progress");
        let odd = (seq + 1).to_le_bytes();
        assert_eq!(rustix::io::pwrite(self.fd(), &odd, SEQ).unwrap(), 8);
    }
}

/// Makes `cmd` inherit `fd` (opened close-on-exec in this process) under
/// the same number, named by `ALLOT_GRANT_FD`.
pub fn inherit_page<'a>(cmd: &'a mut Command, fd: BorrowedFd<'_>) -> &'a mut Command {
    let raw = fd.as_raw_fd();
    cmd.env("ALLOT_GRANT_FD", raw.to_string());
    // SAFETY: runs in the child between fork and exec; it only calls
    // fcntl(F_SETFD), which is async-signal-safe, on a descriptor the
    // child inherited open.
    unsafe {
        cmd.pre_exec(move || {
            let fd = BorrowedFd::borrow_raw(raw);
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::empty())?;
            Ok(())
        })
    }
}

/// `cmd` with the shim preloaded and the given OpenMP default team.
pub fn with_shim(cmd: &mut Command, omp_num_threads: u32) -> &mut Command {
    cmd.env("LD_PRELOAD", shim())
        .env("OMP_NUM_THREADS", omp_num_threads.to_string())
        .env_remove("ALLOT_GRANT_FD")
        .env_remove("ALLOT_SHIM_DEBUG")
        .env_remove("OMP_DYNAMIC")
}

/// `CLOCK_MONOTONIC` in nanoseconds, the clock teamsize.c stamps regions with.
pub fn now_ns() -> i64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec * 1_000_000_000 + t.tv_nsec
}

/// One region teamsize.c ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Region {
    pub name: String,
    pub t0: i64,
    pub t1: i64,
    pub team: u32,
    pub ok: bool,
}

/// What teamsize.c printed.
#[derive(Debug, Clone, Default)]
pub struct Report {
    pub max: u32,
    pub regions: Vec<Region>,
    pub done: bool,
}

impl Report {
    pub fn parse(text: &str) -> Report {
        let mut r = Report::default();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            match f.as_slice() {
                ["max", m] => r.max = m.parse().unwrap(),
                ["r", name, t0, t1, team, ok] => r.regions.push(Region {
                    name: (*name).to_owned(),
                    t0: t0.parse().unwrap(),
                    t1: t1.parse().unwrap(),
                    team: team.parse().unwrap(),
                    ok: *ok == "1",
                }),
                ["done", _] => r.done = true,
                _ => panic!("unexpected teamsize output line {line:?}"),
            }
        }
        r
    }

    /// Team sizes by construct name, in order.
    pub fn teams(&self) -> Vec<(&str, u32)> {
        self.regions
            .iter()
            .map(|r| (r.name.as_str(), r.team))
            .collect()
    }

    pub fn assert_complete(&self) {
        assert!(self.done, "teamsize did not finish: {self:?}");
        assert!(!self.regions.is_empty());
        for r in &self.regions {
            assert!(
                r.ok,
                "region {} lost work or overran its buffer: {r:?}",
                r.name
            );
        }
    }
}

/// Runs `cmd` to completion; panics with its stderr unless it succeeds.
pub fn run(cmd: &mut Command) -> (Report, String) {
    let out: Output = cmd.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}): {stderr}",
        out.status
    );
    (Report::parse(&String::from_utf8_lossy(&out.stdout)), stderr)
}

/// A running teamsize whose first line (`max M`) has been read.
pub struct Running {
    pub child: Child,
    pub max: u32,
    stdout: BufReader<ChildStdout>,
    first: String,
}

impl Running {
    pub fn start(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        let max = Report::parse(&first).max;
        assert!(max > 0, "teamsize printed {first:?}");
        Running {
            child,
            max,
            stdout,
            first,
        }
    }

    pub fn finish(mut self) -> (Report, String) {
        let mut rest = String::new();
        self.stdout.read_to_string(&mut rest).unwrap();
        let mut stderr = String::new();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "teamsize failed ({status}): {stderr}");
        (Report::parse(&(self.first + &rest)), stderr)
    }
}

/// A grant change as the test saw it: `threads` published between
/// `start` and `end` (CLOCK_MONOTONIC ns).
#[derive(Debug, Clone, Copy)]
pub struct Change {
    pub start: i64,
    pub end: i64,
    pub threads: u32,
}

/// Publishes `threads` on `page`, timing it.
pub fn change(page: &mut Page, threads: u32) -> Change {
    let start = now_ns();
    page.publish(threads);
    Change {
        start,
        end: now_ns(),
        threads,
    }
}

/// The grants that may have been read by a region spanning `[t0, t1]`:
/// the one in force at `t0` and every one published before `t1`.
pub fn grants_during(initial: u32, changes: &[Change], t0: i64, t1: i64) -> Vec<u32> {
    let mut in_force = initial;
    let mut seen = Vec::new();
    for c in changes {
        if c.end < t0 {
            in_force = c.threads;
        } else if c.start <= t1 {
            seen.push(c.threads);
        }
    }
    seen.insert(0, in_force);
    seen
}

pub mod scenarios;
