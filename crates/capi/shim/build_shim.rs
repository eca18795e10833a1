//! Build step for `liballot_shim.so` (included by the crate's `build.rs`).
//!
//! Compiles the shim's sources (`SOURCES`, sharing `shim.h`) with the system
//! C compiler (`$CC`, else `cc`) into `$OUT_DIR/liballot_shim.so`, and exports the first 12 hex
//! digits of its FNV-1a hash as `ALLOT_SHIM_HASH`, which names the installed
//! file. The shim links only libc (and `-ldl`, part of it since glibc 2.34):
//! never an OpenMP runtime, which it finds at run time with `dlsym`.

use std::env;
use std::path::PathBuf;
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

pub fn build() {
    for f in SOURCES.iter().chain(HEADERS) {
        println!("cargo::rerun-if-changed={f}");
    }
    println!("cargo::rerun-if-changed=shim/build_shim.rs");
    println!("cargo::rerun-if-env-changed=CC");
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let so = out.join("liballot_shim.so");
    let cc = env::var_os("CC").unwrap_or_else(|| "cc".into());
    let result = Command::new(&cc)
        .args(CFLAGS)
        .arg("-o")
        .arg(&so)
        .args(SOURCES)
        .arg("-ldl")
        .arg("-lpthread")
        .output();
    let output = match result {
        Ok(o) => o,
        Err(e) => panic!(
            "cannot run the C compiler {cc:?} to build the shim ({SOURCES:?}): {e}; install gcc \
             (Debian: apt-get install gcc) or point CC at a C compiler"
        ),
    };
    if !output.status.success() {
        panic!(
            "{cc:?} failed to build the shim ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let bytes = std::fs::read(&so).expect("the compiler wrote the shim");
    println!(
        "cargo::rustc-env=ALLOT_SHIM_HASH={:012x}",
        fnv1a(&bytes) >> 16
    );
}

/// 64-bit FNV-1a: enough to tell shim builds apart in a file name (the
/// installer compares contents before trusting a file).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
