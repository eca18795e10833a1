//! Build step for the crate's two C libraries (included by `build.rs`).
//!
//! Compiles the shim's sources (`SOURCES`, sharing `shim.h`) with the system
//! C compiler (`$CC`, else `cc`) into `$OUT_DIR/liballot_shim.so`, and
//! allot's Thread Composability Manager (`TCM_SOURCES`) into
//! `$OUT_DIR/libtcm.so.1`; exports the first 12 hex digits of each one's
//! FNV-1a hash as `ALLOT_SHIM_HASH` and `ALLOT_TCM_HASH`, which name the
//! installed files. The shim links only libc (and `-ldl`, part of it since glibc 2.34):
//! never an OpenMP runtime, which it finds at run time with `dlsym`.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The shim's parts (see `shim/shim.h`).
const SOURCES: &[&str] = &[
    "shim/page.c",
    "shim/omp.c",
    "shim/omp_route.c",
    "shim/threads.c",
    "shim/bind.c",
    "shim/blocking.c",
    "shim/follow.c",
    "shim/entry.c",
    "shim/start.c",
];
/// Headers they include.
const HEADERS: &[&str] = &[
    "shim/shim.h",
    "shim/page.h",
    "shim/omp_route.h",
    "shim/grant_page.h",
];

/// Flags beyond `-o OUT SOURCES`. `-fvisibility=hidden` keeps everything
/// but the interposed entry points out of the program's symbol scope.
const CFLAGS: &[&str] = &[
    "-std=c11",
    "-shared",
    "-fPIC",
    "-O2",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fvisibility=hidden",
    "-Wl,--no-undefined",
    "-Wl,-z,relro,-z,now",
];

/// `libtcm.so.1`'s parts (see `tcm/tcm.c`): its own files and the shim's
/// grant page reader.
const TCM_SOURCES: &[&str] = &["tcm/tcm.c", "tcm/table.c", "tcm/divide.c", "shim/page.c"];
const TCM_HEADERS: &[&str] = &["tcm/tcm_api.h", "tcm/table.h", "tcm/divide.h"];

pub fn build() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let hash = compile(
        &out.join("liballot_shim.so"),
        "the shim",
        SOURCES,
        HEADERS,
        &[],
    );
    println!("cargo::rustc-env=ALLOT_SHIM_HASH={hash:012x}");
    let version = format!(
        "-DALLOT_VERSION=\"{}\"",
        env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION")
    );
    let hash = compile(
        &out.join("libtcm.so.1"),
        "libtcm",
        TCM_SOURCES,
        TCM_HEADERS,
        // Never unloaded: its watcher threads run its code until the
        // process ends, whoever loaded it.
        &["-Wl,-soname,libtcm.so.1", "-Wl,-z,nodelete", &version],
    );
    println!("cargo::rustc-env=ALLOT_TCM_HASH={hash:012x}");
    println!("cargo::rerun-if-changed=shim/build_shim.rs");
    println!("cargo::rerun-if-env-changed=CC");
}

/// Compiles `sources` into the shared library `so`; returns a hash of it
/// (the first 48 bits of its FNV-1a), which names the installed file.
fn compile(so: &Path, what: &str, sources: &[&str], headers: &[&str], extra: &[&str]) -> u64 {
    for f in sources.iter().chain(headers) {
        println!("cargo::rerun-if-changed={f}");
    }
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let result = Command::new(&cc)
        .args(CFLAGS)
        .args(extra)
        .arg("-o")
        .arg(so)
        .args(sources)
        .arg("-ldl")
        .arg("-lpthread")
        .output();
    let output = match result {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run the C compiler {cc:?} to build {what} ({sources:?}): {e}; install gcc \
             (Debian: apt-get install gcc) or point CC at a C compiler"
        ),
    };
    if !output.status.success() {
        panic!(
            "{cc:?} failed to build {what} ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let bytes = std::fs::read(so).expect("the compiler wrote the library");
    fnv1a(&bytes) >> 16
}

/// 64-bit FNV-1a: enough to tell shim builds apart in a file name (the
/// installer compares contents before trusting a file).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
