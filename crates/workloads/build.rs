//! Builds the C kernels twice from the same sources in `c/`:
//!
//! 1. `allot-omp-workload`: the kernels plus `c/driver_omp.c`, compiled
//!    and linked with `gcc -fopenmp` (libgomp) into `$OUT_DIR`; the crate
//!    embeds it (`include_bytes!`) and `install_omp_binary` writes it out.
//!    `ALLOT_OMP_WORKLOAD_HASH` (12 hex digits of its FNV-1a hash) names the
//!    installed file.
//! 2. `liballot_wl_kernels.a`: the kernels alone, without `-fopenmp`,
//!    linked into the crate; `par_for`/`par_workers` come from `src/par.rs`.
//!
//! Both use the same flags apart from `-fopenmp`, so both programs compute
//! bit-identical answers. Fails with a clear message if gcc is missing or
//! cannot build OpenMP programs.

use std::env;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The kernel sources, shared by both builds.
const KERNELS: &[&str] = &["pricing", "stencil", "pipeline", "anneal", "cluster"];
const HEADERS: &[&str] = &["c/par.h", "c/wl.h", "c/kernels.h"];
const DRIVER: &str = "c/driver_omp.c";

/// The C compiler: gcc, whose OpenMP runtime (libgomp) the experiment uses.
const CC: &str = "gcc";

/// Flags of every compilation (both builds).
const CFLAGS: &[&str] = &["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror"];

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    for h in HEADERS {
        println!("cargo::rerun-if-changed={h}");
    }
    println!("cargo::rerun-if-changed={DRIVER}");
    for k in KERNELS {
        println!("cargo::rerun-if-changed=c/{k}.c");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    check_openmp(&out);
    build_omp_binary(&out);
    build_kernel_library(&out);
}

/// Runs `gcc args…`, panicking with its output if it fails.
fn gcc(args: &[&std::ffi::OsStr], what: &str) {
    let output = Command::new(CC).args(args).output().unwrap_or_else(|e| {
        panic!(
            "cannot run {CC} to build {what}: {e}; allot-workloads needs gcc with OpenMP \
             (Debian: apt-get install gcc)"
        )
    });
    if !output.status.success() {
        panic!(
            "{CC} failed to build {what} ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Compiles and links a tiny OpenMP program, so a gcc without OpenMP
/// support (or without libgomp) fails here with a message saying so.
fn check_openmp(out: &Path) {
    let src = out.join("omp_probe.c");
    let exe = out.join("omp_probe");
    std::fs::write(
        &src,
        "#include <omp.h>\nint main(void) { int n = 0;\n#pragma omp parallel\n{\n#pragma omp atomic\nn++;\n}\nreturn n > 0 ? 0 : 1; }\n",
    )
    .expect("write the OpenMP probe");
    let ok = Command::new(CC)
        .arg("-fopenmp")
        .arg("-o")
        .arg(&exe)
        .arg(&src)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        panic!(
            "{CC} cannot build OpenMP programs (`{CC} -fopenmp` failed on a two-line probe); \
             allot-workloads needs gcc with libgomp (Debian: apt-get install gcc libgomp1)"
        );
    }
}

fn build_omp_binary(out: &Path) {
    let exe = out.join("allot-omp-workload");
    let mut args: Vec<std::ffi::OsString> = CFLAGS.iter().map(Into::into).collect();
    args.push("-fopenmp".into());
    args.push("-o".into());
    args.push(exe.clone().into());
    args.push(DRIVER.into());
    for k in KERNELS {
        args.push(format!("c/{k}.c").into());
    }
    args.push("-lm".into());
    let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
    gcc(&refs, "the OpenMP workload program");
    let bytes = std::fs::read(&exe).expect("gcc wrote the OpenMP program");
    println!(
        "cargo::rustc-env=ALLOT_OMP_WORKLOAD_HASH={:012x}",
        fnv1a(&bytes) >> 16
    );
}

fn build_kernel_library(out: &Path) {
    let mut objects = Vec::new();
    for k in KERNELS {
        let obj = out.join(format!("wl_{k}.o"));
        let mut args: Vec<std::ffi::OsString> = CFLAGS.iter().map(Into::into).collect();
        args.extend(["-c".into(), "-o".into(), obj.clone().into()]);
        args.push(format!("c/{k}.c").into());
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        gcc(&refs, &format!("kernel {k}"));
        objects.push(obj);
    }
    let lib = out.join("liballot_wl_kernels.a");
    let _ = std::fs::remove_file(&lib);
    let status = Command::new("ar")
        .arg("crs")
        .arg(&lib)
        .args(&objects)
        .status()
        .unwrap_or_else(|e| panic!("cannot run ar to archive the kernels: {e} (install binutils)"));
    assert!(
        status.success(),
        "ar failed to archive the kernels ({status})"
    );
    println!("cargo::rustc-link-search=native={}", out.display());
    println!("cargo::rustc-link-lib=static=allot_wl_kernels");
    println!("cargo::rustc-link-lib=dylib=m");
}

/// 64-bit FNV-1a: enough to tell builds apart in a file name (the installer
/// compares contents before trusting a file).
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
