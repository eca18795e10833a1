//! Which parallel runtimes a process carries, and how each follows its
//! cell's grant.
//!
//! Detection is by what the process has mapped: the shared objects it
//! loaded (named as their packages and wheels name them) and, for Go, the
//! release that built its program, read from the program's
//! `.go.buildinfo` section. Both mappings here are pure: [`classify`] from
//! object paths, [`go_release`] from an ELF file's bytes; [`crate::os::Os`]
//! reads them from `/proc`.
//!
//! Whether a runtime follows the grant while it runs, or keeps the size it
//! took at start, depends on the runtime and on whether `allot run`'s shim
//! is loaded in the same process ([`Runtime::follows_at_run_time`]):
//!
//! | runtime | with the shim | without |
//! |---------|---------------|---------|
//! | libgomp, LLVM/Intel libomp | run time: each team capped where it starts | launch: `OMP_NUM_THREADS` |
//! | OpenBLAS, BLIS, MKL | run time: set between calls by the shim's follower | launch: `*_NUM_THREADS` |
//! | oneTBB (`libtbb.so.12` on) | run time: a global limit the follower moves | launch: the CPU set at start |
//! | TBB before oneTBB (`libtbb.so.2`) | launch: the CPU set at start | launch |
//! | Go 1.25 on | run time: the runtime follows its CPU set | run time |
//! | Go before 1.25 | launch: `GOMAXPROCS` | launch |
//! | liballot (linked) | run time: the program follows by itself | run time |
//! | allot's TCM (`libtcm.so.1` from `allot run`) | run time: oneTBB and Intel OpenMP ask it for permits | run time |
//!
//! Every runtime found at least sizes itself at start from what its cell
//! gave it (the variables `allot run` sets, or the CPU set it starts on).

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;

/// A parallel runtime found in a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Runtime {
    /// GNU libgomp (also a wheel's vendored `libgomp-<hash>.so`).
    Libgomp,
    /// LLVM libomp or Intel's libiomp5.
    Libomp,
    /// OpenBLAS, any build (also scipy's `libscipy_openblas`).
    Openblas,
    /// BLIS (`libblis`).
    Blis,
    /// Intel MKL (any `libmkl_*` library).
    Mkl,
    /// oneTBB (`libtbb.so.12` and later).
    Onetbb,
    /// TBB before oneTBB (`libtbb.so.2`).
    TbbLegacy,
    /// A Go program, with the release that built it.
    Go(GoRelease),
    /// allot's client library, linked by the program.
    Liballot,
    /// allot's Thread Composability Manager (`libtcm.so.1` from the
    /// directory `allot run` installs it in, `tcm-<hash>`), loaded by
    /// oneTBB or Intel OpenMP. Intel's own manager is not listed: it
    /// divides one process's CPUs and does not follow a grant.
    Tcm,
}

/// A Go release, `major.minor`; programs built before Go 1.18 (which wrote
/// no version inline) read as 1.17.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GoRelease {
    /// The major release: 1 for every Go release so far.
    pub major: u32,
    /// The minor release.
    pub minor: u32,
}

impl GoRelease {
    /// The first release whose runtime follows changes of its CPU set and
    /// cgroup CPU limit by itself, unless `GOMAXPROCS` is set.
    pub const FOLLOWS_CPU_SET: GoRelease = GoRelease {
        major: 1,
        minor: 25,
    };

    /// Whether the runtime follows its CPU set while it runs.
    pub fn follows_cpu_set(self) -> bool {
        self >= Self::FOLLOWS_CPU_SET
    }
}

impl std::fmt::Display for GoRelease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

impl Runtime {
    /// Its name in `allot status` and the status JSON.
    pub fn name(self) -> String {
        match self {
            Runtime::Libgomp => "libgomp".into(),
            Runtime::Libomp => "libomp".into(),
            Runtime::Openblas => "openblas".into(),
            Runtime::Blis => "blis".into(),
            Runtime::Mkl => "mkl".into(),
            Runtime::Onetbb => "onetbb".into(),
            Runtime::TbbLegacy => "tbb".into(),
            Runtime::Go(r) => format!("go{r}"),
            Runtime::Liballot => "liballot".into(),
            Runtime::Tcm => "tcm".into(),
        }
    }

    /// Whether it follows the grant while it runs (rather than keeping
    /// the size it took at start), with or without the shim in its process.
    pub fn follows_at_run_time(self, shim: bool) -> bool {
        match self {
            Runtime::Liballot | Runtime::Tcm => true,
            Runtime::Go(r) => r.follows_cpu_set(),
            Runtime::TbbLegacy => false,
            Runtime::Libgomp
            | Runtime::Libomp
            | Runtime::Openblas
            | Runtime::Blis
            | Runtime::Mkl
            | Runtime::Onetbb => shim,
        }
    }
}

/// What a process's mapped objects say: its runtimes (sorted, each once)
/// and whether `allot run`'s shim is among them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Found {
    /// Runtimes, sorted, each once.
    pub runtimes: Vec<Runtime>,
    /// `liballot_shim-*.so` is loaded.
    pub shim: bool,
}

/// The runtime a shared object's file name stands for, if any.
fn runtime_of_file(name: &str) -> Option<Runtime> {
    let stem_is = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with(".so") || rest.starts_with('-'))
    };
    if stem_is("libgomp") {
        Some(Runtime::Libgomp)
    } else if stem_is("libomp") || stem_is("libiomp5") {
        Some(Runtime::Libomp)
    } else if name.starts_with("libopenblas") || name.starts_with("libscipy_openblas") {
        Some(Runtime::Openblas)
    } else if stem_is("libblis") {
        Some(Runtime::Blis)
    } else if name.starts_with("libmkl_") {
        Some(Runtime::Mkl)
    } else if let Some(rest) = name.strip_prefix("libtbb.so.") {
        let major: u32 = rest.split('.').next()?.parse().ok()?;
        Some(if major >= 12 {
            Runtime::Onetbb
        } else {
            Runtime::TbbLegacy
        })
    } else if stem_is("liballot") {
        Some(Runtime::Liballot)
    } else {
        None
    }
}

/// Classifies a process's mapped objects (paths as `/proc/PID/maps` shows
/// them; the program's Go release, if any, is added by the caller).
pub fn classify<P: AsRef<Path>>(objects: &[P]) -> Found {
    let mut found = Found::default();
    for path in objects {
        let Some(name) = path.as_ref().file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let in_tcm_dir = || {
            path.as_ref()
                .parent()
                .and_then(Path::file_name)
                .and_then(|d| d.to_str())
                .is_some_and(|d| d.starts_with("tcm-"))
        };
        if name.starts_with("liballot_shim") {
            found.shim = true;
        } else if name.starts_with("libtcm.so") && in_tcm_dir() {
            found.runtimes.push(Runtime::Tcm);
        } else if let Some(r) = runtime_of_file(name) {
            found.runtimes.push(r);
        }
    }
    found.runtimes.sort_unstable();
    found.runtimes.dedup();
    found
}

/// The most section headers and the largest name table [`go_release`]
/// reads: a malformed file costs at most this much.
const MAX_SECTIONS: u64 = 4096;
const MAX_NAMES: u64 = 1 << 20;

/// The start of a `.go.buildinfo` section.
const BUILDINFO_MAGIC: &[u8] = b"\xff Go buildinf:";

fn read_at<R: Read + Seek>(f: &mut R, off: u64, len: usize) -> io::Result<Vec<u8>> {
    f.seek(SeekFrom::Start(off))?;
    let mut buf = vec![0; len];
    f.read_exact(&mut buf)?;
    Ok(buf)
}

fn u16_at(b: &[u8], i: usize) -> u64 {
    u16::from_le_bytes([b[i], b[i + 1]]).into()
}

fn u32_at(b: &[u8], i: usize) -> u64 {
    u32::from_le_bytes(b[i..i + 4].try_into().unwrap()).into()
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().unwrap())
}

/// The Go release that built the ELF file `f` (64-bit, little-endian: the
/// platforms allot runs on), or `None` if Go did not (or the file is not
/// such an ELF file). Reads the section headers and the first bytes of
/// `.go.buildinfo`, never more than a bounded amount.
pub fn go_release<R: Read + Seek>(f: &mut R) -> Option<GoRelease> {
    let eh = read_at(f, 0, 64).ok()?;
    if &eh[..4] != b"\x7fELF" || eh[4] != 2 || eh[5] != 1 {
        return None;
    }
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(&eh, 0x28),
        u16_at(&eh, 0x3a),
        u16_at(&eh, 0x3c),
        u16_at(&eh, 0x3e),
    );
    if !(64..=256).contains(&shentsize) || shnum == 0 || shnum > MAX_SECTIONS || shstrndx >= shnum {
        return None;
    }
    let table = read_at(f, shoff, (shentsize * shnum) as usize).ok()?;
    let section = |i: u64| {
        let s = &table[(i * shentsize) as usize..];
        (u32_at(s, 0), u64_at(s, 0x18), u64_at(s, 0x20))
    };
    let (_, names_off, names_len) = section(shstrndx);
    let names = read_at(f, names_off, names_len.min(MAX_NAMES) as usize).ok()?;
    let (_, off, len) = (0..shnum).map(section).find(|&(name, _, _)| {
        let name = names.get(name as usize..).unwrap_or_default();
        name.starts_with(b".go.buildinfo\0")
    })?;
    let head = read_at(f, off, len.min(64) as usize).ok()?;
    parse_buildinfo(&head)
}

/// The release in the first bytes of a `.go.buildinfo` section.
fn parse_buildinfo(head: &[u8]) -> Option<GoRelease> {
    if head.len() < 32 || !head.starts_with(BUILDINFO_MAGIC) {
        return None;
    }
    let inline = head[15] & 0x2 != 0;
    if !inline {
        // Before Go 1.18 the header pointed at the version elsewhere.
        return Some(GoRelease {
            major: 1,
            minor: 17,
        });
    }
    // A uvarint length, then the version ("go1.25.4", "go1.26rc1", ...).
    let len = usize::from(*head.get(32)? & 0x7f);
    let text = head.get(33..33 + len)?;
    let text = std::str::from_utf8(text).ok()?;
    let rest = &text[text.find("go1.")? + 4..];
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some(GoRelease {
        major: 1,
        minor: minor.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    #[test]
    fn names_as_packages_and_wheels_ship_them() {
        let found = classify(&[
            "/usr/bin/python3.11",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
            "/site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so",
            "/site-packages/scikit_learn.libs/libgomp-a34b3233.so.1.0.0",
            "/usr/lib/x86_64-linux-gnu/libtbb.so.12.8",
            "/opt/intel/lib/libmkl_core.so.2",
            "/opt/intel/lib/libmkl_gnu_thread.so.2",
            "/usr/lib/llvm-14/lib/libomp.so.5",
            "/tmp/allot-0/shim/liballot_shim-0e8b5749faf4.so",
            "/usr/lib/libgompish.so", // not libgomp
        ]);
        assert!(found.shim);
        assert_eq!(
            found.runtimes,
            vec![
                Runtime::Libgomp,
                Runtime::Libomp,
                Runtime::Openblas,
                Runtime::Mkl,
                Runtime::Onetbb
            ]
        );
        let legacy = classify(&["/usr/lib/libtbb.so.2", "/usr/lib/liballot.so.0"]);
        assert!(!legacy.shim);
        assert_eq!(legacy.runtimes, vec![Runtime::TbbLegacy, Runtime::Liballot]);
        // allot's manager, from the directory `allot run` installs it in;
        // Intel's (beside a wheel's libtbb) is not a runtime of its own.
        let tcm = classify(&[
            "/run/user/0/allot/shim/tcm-0e8b5749faf4/libtcm.so.1",
            "/venv/lib/libtbb.so.12",
        ]);
        assert_eq!(tcm.runtimes, vec![Runtime::Onetbb, Runtime::Tcm]);
        assert!(Runtime::Tcm.follows_at_run_time(false));
        assert_eq!(Runtime::Tcm.name(), "tcm");
        let intel = classify(&["/venv/lib/libtcm.so.1", "/venv/lib/libtbb.so.12"]);
        assert_eq!(intel.runtimes, vec![Runtime::Onetbb]);
    }

    #[test]
    fn the_shim_decides_for_the_libraries_it_follows() {
        for r in [Runtime::Libgomp, Runtime::Openblas, Runtime::Onetbb] {
            assert!(r.follows_at_run_time(true));
            assert!(!r.follows_at_run_time(false));
        }
        let go = |minor| Runtime::Go(GoRelease { major: 1, minor });
        assert!(go(25).follows_at_run_time(false));
        assert!(!go(24).follows_at_run_time(true));
        assert!(!Runtime::TbbLegacy.follows_at_run_time(true));
        assert!(Runtime::Liballot.follows_at_run_time(false));
        assert_eq!(go(26).name(), "go1.26");
    }

    /// A minimal ELF64 file: a header, a name table and `.go.buildinfo`
    /// holding `info`, and its section headers.
    fn elf_with_buildinfo(info: &[u8]) -> Vec<u8> {
        let names = b"\0.shstrtab\0.go.buildinfo\0";
        let mut f = vec![0u8; 64];
        f[..6].copy_from_slice(b"\x7fELF\x02\x01");
        let names_off = f.len() as u64;
        f.extend_from_slice(names);
        let info_off = f.len() as u64;
        f.extend_from_slice(info);
        let shoff = f.len() as u64;
        let mut section = |name: u32, off: u64, len: u64| {
            let mut s = [0u8; 64];
            s[..4].copy_from_slice(&name.to_le_bytes());
            s[0x18..0x20].copy_from_slice(&off.to_le_bytes());
            s[0x20..0x28].copy_from_slice(&len.to_le_bytes());
            f.extend_from_slice(&s);
        };
        section(0, 0, 0);
        section(1, names_off, names.len() as u64);
        section(11, info_off, info.len() as u64);
        f[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        f[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        f[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        f[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        f
    }

    fn buildinfo(flags: u8, version: &str) -> Vec<u8> {
        let mut b = BUILDINFO_MAGIC.to_vec();
        b.push(8); // pointer size
        b.push(flags);
        b.resize(32, 0);
        b.push(version.len() as u8);
        b.extend_from_slice(version.as_bytes());
        b.extend_from_slice(b"\x00modinfo");
        b
    }

    #[test]
    fn reads_the_release_from_buildinfo() {
        let release = |info: Vec<u8>| go_release(&mut Cursor::new(elf_with_buildinfo(&info)));
        let v = |minor| Some(GoRelease { major: 1, minor });
        assert_eq!(release(buildinfo(2, "go1.25.4")), v(25));
        assert_eq!(release(buildinfo(2, "go1.26rc1")), v(26));
        assert_eq!(release(buildinfo(2, "devel go1.27-8c1a0d1 +x")), v(27));
        assert_eq!(release(buildinfo(0, "")), v(17), "pre-1.18 header");
        assert_eq!(release(buildinfo(2, "gcc")), None);
        assert_eq!(
            release(b"not buildinfo at all, but 32+ bytes long".to_vec()),
            None
        );
    }

    #[test]
    fn malformed_files_are_not_go() {
        assert_eq!(go_release(&mut Cursor::new(b"#!/bin/sh\n".to_vec())), None);
        let mut elf = elf_with_buildinfo(&buildinfo(2, "go1.25.1"));
        // Too many sections, then a table past the end of the file.
        elf[0x3c..0x3e].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_eq!(go_release(&mut Cursor::new(elf.clone())), None);
        elf[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        elf[0x28..0x30].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(go_release(&mut Cursor::new(elf)), None);
    }

    #[test]
    fn the_running_test_is_not_go() {
        let mut exe = std::fs::File::open("/proc/self/exe").unwrap();
        assert_eq!(go_release(&mut exe), None);
    }

    #[test]
    fn a_short_or_cut_buildinfo_is_no_release_and_no_panic() {
        // Any process's executable is read by the broker: a section cut
        // anywhere must give `None`, never a panic.
        let mut head = BUILDINFO_MAGIC.to_vec();
        head.resize(15, 0);
        head.push(0x2); // inline version
        head.resize(32, 0);
        for cut in 0..=head.len() {
            assert_eq!(parse_buildinfo(&head[..cut]), None, "cut at {cut}");
        }
        head.push(40); // a length past the end
        head.extend_from_slice(b"go1.25");
        assert_eq!(parse_buildinfo(&head), None);
    }
}
