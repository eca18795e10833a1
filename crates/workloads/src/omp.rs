//! The OpenMP build: the `allot-omp-workload` program, built on demand,
//! and running it.

use crate::compile::{self, Product};
use crate::{Kernel, KernelRun, parse_line};
use allot_proto::dirs::TrustedDir;
use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The OpenMP program (`c/driver_omp.c` + the kernels, `gcc -O2
/// -fopenmp`) in the cache `dir`, built there first if it is not yet
/// ([`compile::ensure`]). Its name carries a hash of the sources, flags and
/// compiler, so different builds never overwrite each other's file.
///
/// `dir` is a [`TrustedDir`], so nobody else can swap the program between
/// this call and its execution. It must not be on a `noexec` mount.
///
/// # Errors
/// What [`compile::ensure`] reports: gcc or OpenMP missing (with what to
/// install), a failed compilation, an unwritable cache.
pub fn install_omp_binary(dir: &TrustedDir) -> io::Result<PathBuf> {
    compile::ensure(dir, Product::OmpProgram)
}

/// The command line that runs `kernel` at `scale` with the OpenMP program
/// at `binary`: `binary <kernel> <scale>` (for harnesses that wrap it, e.g.
/// in `allot run`). The scale is printed so that the program parses back
/// exactly the same `f64`.
pub fn omp_args(kernel: Kernel, scale: f64) -> [String; 2] {
    [kernel.name().to_string(), format!("{scale:?}")]
}

/// Runs `kernel` at `scale` with the installed OpenMP program `binary`,
/// with the current environment plus `envs` (e.g. `OMP_NUM_THREADS`), and
/// returns what it reported.
///
/// # Errors
/// If the program cannot be started, exits unsuccessfully (the error
/// carries its stderr), or prints no valid result line for `kernel`.
pub fn run_omp<I, K, V>(kernel: Kernel, scale: f64, binary: &Path, envs: I) -> io::Result<KernelRun>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<OsStr>,
    V: AsRef<OsStr>,
{
    let mut cmd = Command::new(binary);
    cmd.args(omp_args(kernel, scale))
        .envs(envs)
        .stdin(Stdio::null());
    let out = output_retrying_busy(&mut cmd)?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{} {kernel} {scale}: {}: {}",
            binary.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("workload="))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} printed no result line: {stdout:?}", binary.display()),
            )
        })?;
    let parsed = parse_line(line)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{e}: {line:?}")))?;
    if parsed.kernel != kernel {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("asked for {kernel}, the program ran {}", parsed.kernel),
        ));
    }
    Ok(parsed.outcome)
}

/// `cmd.output()`, retried for a while if the program is "busy": right
/// after an install, a child that another thread of this process forked
/// (and has not yet exec'd) may still hold the installer's write
/// descriptor, and `execve` fails with `ETXTBSY` until it lets go.
fn output_retrying_busy(cmd: &mut Command) -> io::Result<std::process::Output> {
    let mut delay = std::time::Duration::from_millis(1);
    for _ in 0..10 {
        match cmd.output() {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error()) => {
                std::thread::sleep(delay);
                delay *= 2;
            }
            r => return r,
        }
    }
    cmd.output()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_program_is_built_once_as_an_executable_linked_with_libgomp() {
        use std::os::unix::fs::PermissionsExt;
        let t = tempfile::tempdir().unwrap();
        let dir = TrustedDir::create(&t.path().join("a/b"), 0o700).unwrap();
        let p = install_omp_binary(&dir).unwrap();
        assert!(
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("allot-omp-workload-")
        );
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], b"\x7fELF");
        assert!(
            bytes.windows(7).any(|w| w == b"libgomp"),
            "linked with libgomp"
        );
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o755
        );
        assert_eq!(install_omp_binary(&dir).unwrap(), p);
    }

    #[test]
    fn scales_print_exactly() {
        for s in [1.0, 0.02, 0.1 + 0.2, 1e-3, 7.5] {
            let [_, text] = omp_args(Kernel::Pricing, s);
            assert_eq!(text.parse::<f64>().unwrap(), s);
        }
    }
}
