//! Building the workloads on first use, from the C sources this crate
//! carries as text.
//!
//! The `allot` binary needs no C compiler or OpenMP to be built: it holds
//! the kernels' sources (`c/`, embedded with `include_str!`) and compiles
//! them with `gcc` the first time an experiment or the demo needs them,
//! into a cache directory the caller names (normally [`default_dir`]):
//!
//! | product | what | name in the cache |
//! |---------|------|-------------------|
//! | [`Product::OmpProgram`] | kernels + `c/driver_omp.c`, `gcc -fopenmp` (libgomp) | `allot-omp-workload-<key>` |
//! | [`Product::KernelLib`] | kernels + `c/par_bind.c`, no OpenMP, a shared object | `libwl-kernels-<key>.so` |
//!
//! # Invariants
//!
//! - **The key names the build.** `<key>` is a hash of every source text,
//!   the flags and the compiler's own version line, so a changed source,
//!   flag or compiler never reuses an old product, and two builds of one
//!   key are interchangeable.
//! - **Only the user's own files are used.** The cache is a
//!   [`TrustedDir`] (only the user and root can change what it holds), the
//!   sources are written by this process into a fresh private directory
//!   inside it, and products enter the cache through
//!   [`TrustedDir::install`] (a temporary name renamed into place), so a
//!   concurrent build or a running copy never sees a partial file.
//! - **Both products are compiled with the same flags** apart from
//!   `-fopenmp` and `-shared`, so they compute bit-identical answers.

use allot_proto::dirs::TrustedDir;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The compiler: gcc, whose OpenMP runtime (libgomp) the experiments use.
pub const CC: &str = "gcc";

/// Flags of every compilation (both products).
const CFLAGS: &[&str] = &["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-Werror"];

/// Every source file, by name, as text.
const SOURCES: &[(&str, &str)] = &[
    ("par.h", include_str!("../c/par.h")),
    ("wl.h", include_str!("../c/wl.h")),
    ("kernels.h", include_str!("../c/kernels.h")),
    ("pricing.c", include_str!("../c/pricing.c")),
    ("stencil.c", include_str!("../c/stencil.c")),
    ("pipeline.c", include_str!("../c/pipeline.c")),
    ("anneal.c", include_str!("../c/anneal.c")),
    ("cluster.c", include_str!("../c/cluster.c")),
    ("driver_omp.c", include_str!("../c/driver_omp.c")),
    ("par_bind.c", include_str!("../c/par_bind.c")),
];

/// The kernels' files, compiled into both products.
const KERNEL_FILES: &[&str] = &[
    "pricing.c",
    "stencil.c",
    "pipeline.c",
    "anneal.c",
    "cluster.c",
];

/// What can be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Product {
    /// The standalone OpenMP program, `allot-omp-workload <kernel> [scale]`.
    OmpProgram,
    /// The kernels as a shared object whose `par_for` calls back into
    /// allot's runtime (`c/par_bind.c`).
    KernelLib,
}

impl Product {
    fn prefix(self) -> &'static str {
        match self {
            Product::OmpProgram => "allot-omp-workload-",
            Product::KernelLib => "libwl-kernels-",
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Product::OmpProgram => "",
            Product::KernelLib => ".so",
        }
    }

    /// Arguments after [`CFLAGS`]: the product-specific flags and files.
    fn args(self) -> (&'static [&'static str], &'static str) {
        match self {
            Product::OmpProgram => (&["-fopenmp"], "driver_omp.c"),
            Product::KernelLib => (&["-shared"], "par_bind.c"),
        }
    }

    fn mode(self) -> u32 {
        match self {
            Product::OmpProgram => 0o755,
            Product::KernelLib => 0o644,
        }
    }

    fn describe(self) -> &'static str {
        match self {
            Product::OmpProgram => "the OpenMP workload program",
            Product::KernelLib => "the workload kernels for allot's runtime",
        }
    }
}

/// The cache directory the commands share: `workloads` in the user's state
/// directory ([`allot_proto::default_state_dir`], a runtime directory that
/// is emptied at reboot).
pub fn default_dir() -> PathBuf {
    allot_proto::default_state_dir().join("workloads")
}

/// The file name `product` has in a cache for the compiler whose version
/// line is `compiler`.
pub fn file_name(product: Product, compiler: &str) -> String {
    let mut h = Fnv::new();
    for (name, text) in SOURCES {
        h.add(name.as_bytes());
        h.add(text.as_bytes());
    }
    for f in CFLAGS.iter().chain(product.args().0) {
        h.add(f.as_bytes());
    }
    h.add(compiler.as_bytes());
    format!("{}{:012x}{}", product.prefix(), h.0 >> 16, product.suffix())
}

/// The path of `product` in `dir`, compiling it first if the cache does
/// not hold it yet (a note goes to stderr while it compiles: about a second
/// for each product).
///
/// # Errors
/// If `gcc` is missing or cannot build OpenMP programs (the message says
/// what to install), if it fails on the sources, or if `dir` cannot be
/// written.
pub fn ensure(dir: &TrustedDir, product: Product) -> io::Result<PathBuf> {
    let compiler = compiler_version()?;
    let name = file_name(product, &compiler);
    let path = dir.join(&name);
    if is_file(&path) {
        return Ok(path);
    }
    eprintln!(
        "allot: building {} with {CC} (once; cached in {}) …",
        product.describe(),
        dir.path().display()
    );
    let started = Instant::now();
    remove_abandoned_builds(dir);
    let work = Scratch::new(dir)?;
    for (file, text) in SOURCES {
        std::fs::write(work.0.join(file), text)?;
    }
    let out = work.0.join("product");
    let (flags, driver) = product.args();
    let mut cmd = Command::new(CC);
    cmd.current_dir(&work.0)
        .args(CFLAGS)
        .args(flags)
        .arg("-o")
        .arg(&out)
        .arg(driver)
        .args(KERNEL_FILES)
        .arg("-lm");
    let output = cmd.output().map_err(|e| missing_compiler(&e))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(io::Error::other(
            if product == Product::OmpProgram && !openmp_works(&work.0) {
                format!(
                    "{CC} cannot build OpenMP programs (`{CC} -fopenmp` failed on a two-line probe); \
                 the OpenMP workloads need gcc with libgomp (Debian: apt-get install gcc libgomp1)"
                )
            } else {
                format!(
                    "{CC} failed to build {} ({}):\n{}",
                    product.describe(),
                    output.status,
                    stderr.trim()
                )
            },
        ));
    }
    let bytes = std::fs::read(&out)?;
    let installed = dir.install(&name, &bytes, product.mode())?;
    eprintln!(
        "allot: built {} in {:.1} s",
        installed.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(installed)
}

/// Whether `path` names a regular file (not following a link; the cache
/// is trusted, so what it holds under a product's name is that product).
fn is_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

/// `gcc --version`'s first line, which goes into every product's key.
fn compiler_version() -> io::Result<String> {
    let out = Command::new(CC)
        .arg("--version")
        .output()
        .map_err(|e| missing_compiler(&e))?;
    let text = String::from_utf8_lossy(&out.stdout);
    match text.lines().next() {
        Some(line) if out.status.success() && !line.trim().is_empty() => Ok(line.to_string()),
        _ => Err(io::Error::other(format!(
            "`{CC} --version` failed ({}); the workloads are built with gcc on first use \
             (Debian: apt-get install gcc)",
            out.status
        ))),
    }
}

fn missing_compiler(e: &io::Error) -> io::Error {
    io::Error::new(
        e.kind(),
        format!(
            "cannot run {CC}: {e}; allot's experiments and demo build their workloads with gcc \
             and OpenMP on first use (Debian: apt-get install gcc libgomp1); allot itself does \
             not need them"
        ),
    )
}

/// Whether `gcc -fopenmp` builds a two-line OpenMP program (run in `dir`).
fn openmp_works(dir: &Path) -> bool {
    let src = dir.join("omp_probe.c");
    let probe = "#include <omp.h>\nint main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }\n";
    std::fs::write(&src, probe).is_ok()
        && Command::new(CC)
            .current_dir(dir)
            .args(["-fopenmp", "-o", "omp_probe", "omp_probe.c"])
            .output()
            .is_ok_and(|o| o.status.success())
}

/// Removes the build directories of processes that died while building
/// (`.build-<pid>-<n>` whose process is gone).
fn remove_abandoned_builds(dir: &TrustedDir) {
    let Ok(entries) = std::fs::read_dir(dir.path()) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix(".build-"))
            .and_then(|rest| rest.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// A private directory inside the cache for one build, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(dir: &TrustedDir) -> io::Result<Scratch> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            ".build-{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        );
        let path = dir.join(name);
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Ok(Scratch(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// 64-bit FNV-1a: enough to tell builds apart in a file name.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Adds `bytes` and a separator, so ("ab", "c") and ("a", "bc") differ.
    fn add(&mut self, bytes: &[u8]) {
        for &b in bytes.iter().chain(&[0xff]) {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_depend_on_the_product_and_the_compiler() {
        let a = file_name(Product::OmpProgram, "gcc (Debian 12.2.0-14) 12.2.0");
        let b = file_name(Product::OmpProgram, "gcc (Debian 13.1.0-1) 13.1.0");
        let c = file_name(Product::KernelLib, "gcc (Debian 12.2.0-14) 12.2.0");
        assert!(a.starts_with("allot-omp-workload-") && !a.ends_with(".so"));
        assert!(c.starts_with("libwl-kernels-") && c.ends_with(".so"));
        assert_ne!(a, b);
        assert_ne!(a.trim_start_matches("allot-omp-workload-"), c);
        assert_eq!(
            a,
            file_name(Product::OmpProgram, "gcc (Debian 12.2.0-14) 12.2.0")
        );
    }

    #[test]
    fn every_source_in_the_directory_is_carried() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/c");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        on_disk.sort();
        let mut carried: Vec<String> = SOURCES.iter().map(|(n, _)| n.to_string()).collect();
        carried.sort();
        assert_eq!(on_disk, carried);
    }

    #[test]
    fn builds_once_and_reuses_the_cache() {
        let t = tempfile::tempdir().unwrap();
        let dir = TrustedDir::create(&t.path().join("cache"), 0o700).unwrap();
        // A build abandoned by a process that no longer exists (pid 2^22
        // + 1 is above the kernel's largest) is cleared away.
        std::fs::create_dir(dir.join(".build-4194305-0")).unwrap();
        let first = ensure(&dir, Product::KernelLib).unwrap();
        let built = std::fs::metadata(&first).unwrap().modified().unwrap();
        let again = ensure(&dir, Product::KernelLib).unwrap();
        assert_eq!(first, again);
        assert_eq!(
            std::fs::metadata(&again).unwrap().modified().unwrap(),
            built
        );
        let bytes = std::fs::read(&first).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert_eq!(bytes[16], 3, "a shared object (ET_DYN)");
        // Nothing but the product is left in the cache.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, [first.file_name().unwrap()]);
    }
}
