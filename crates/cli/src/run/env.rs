//! The environment of a program in a cell.
//!
//! Runtimes size themselves once, at start, from these variables:
//!
//! | variable | runtimes |
//! |----------|----------|
//! | `OMP_NUM_THREADS` | libgomp, LLVM libomp, Intel OpenMP |
//! | `OPENBLAS_NUM_THREADS` | OpenBLAS |
//! | `MKL_NUM_THREADS` | Intel MKL |
//! | `BLIS_NUM_THREADS` | BLIS |
//! | `RAYON_NUM_THREADS` | rayon |
//! | `GOMAXPROCS` | Go |
//! | `NUMBA_NUM_THREADS` | Numba |
//! | `NUMEXPR_MAX_THREADS` | numexpr |
//!
//! All get the cell's recommended thread count at launch, except
//! `OMP_NUM_THREADS` when the OpenMP shim is on: then it is the cell's
//! *maximum*, so that `omp_get_max_threads()` is an upper bound on every
//! team (programs size per-thread buffers with it) and the shim shrinks each
//! team to the grant of the moment. Measurements behind the choice are in
//! docs/run.md.
//!
//! allot's own variables: `ALLOT_SOCKET`, `ALLOT_CELL`, `ALLOT_GRANT_FD`
//! (an inherited descriptor of the grant page), and `MAKEFLAGS` /
//! `CARGO_MAKEFLAGS` naming the cell's jobserver; `LD_PRELOAD` gains the
//! shim.

use std::ffi::OsString;

/// Thread-count variables set to the grant.
pub const THREAD_VARS: [&str; 8] = [
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "RAYON_NUM_THREADS",
    "GOMAXPROCS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
];

/// What `OMP_NUM_THREADS` is set to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OmpThreads {
    /// The grant at launch.
    Grant,
    /// The cell's maximum (with the shim capping teams).
    Max,
}

impl std::str::FromStr for OmpThreads {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grant" => Ok(OmpThreads::Grant),
            "max" => Ok(OmpThreads::Max),
            other => Err(format!("unknown value {other:?}: expected grant or max")),
        }
    }
}

/// Inputs for the environment.
#[derive(Debug, Clone)]
pub struct CellEnv {
    /// Recommended threads now.
    pub threads: u32,
    /// The cell's maximum CPUs.
    pub max: u32,
    /// OMP_NUM_THREADS choice.
    pub omp: OmpThreads,
    /// Socket, cell id, page fd (absent when running unconfined).
    pub cell: Option<(std::path::PathBuf, u64, i32)>,
    /// The jobserver's MAKEFLAGS fragment.
    pub jobserver: Option<String>,
    /// Path of the OpenMP shim to preload.
    pub shim: Option<std::path::PathBuf>,
}

/// The variables to set (name, value), given the current environment.
pub fn variables(
    c: &CellEnv,
    current: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut out: Vec<(String, OsString)> = Vec::new();
    let threads = c.threads.max(1).to_string();
    for v in THREAD_VARS {
        let value = if v == "OMP_NUM_THREADS" && c.omp == OmpThreads::Max {
            c.max.max(1).to_string()
        } else {
            threads.clone()
        };
        out.push((v.to_string(), value.into()));
    }
    if let Some((socket, cell, fd)) = &c.cell {
        out.push((
            allot_proto::ENV_SOCKET.into(),
            socket.clone().into_os_string(),
        ));
        out.push((allot_proto::ENV_CELL.into(), cell.to_string().into()));
        out.push((allot_proto::ENV_GRANT_FD.into(), fd.to_string().into()));
    }
    if let Some(js) = &c.jobserver {
        for var in ["MAKEFLAGS", "CARGO_MAKEFLAGS"] {
            // Keep the user's other flags; drop any earlier jobserver.
            let mut kept: Vec<String> = current(var)
                .map(|v| v.to_string_lossy().into_owned())
                .unwrap_or_default()
                .split_whitespace()
                .filter(|f| !f.starts_with("--jobserver") && !f.starts_with("-j"))
                .map(str::to_string)
                .collect();
            kept.push(js.clone());
            out.push((var.into(), kept.join(" ").into()));
        }
    }
    if let Some(shim) = &c.shim {
        out.push((
            "LD_PRELOAD".into(),
            allot_capi::preload_with_shim(shim, current("LD_PRELOAD").as_deref()),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_thread_counts_and_keeps_user_flags() {
        let c = CellEnv {
            threads: 1,
            max: 2,
            omp: OmpThreads::Max,
            cell: Some(("/s".into(), 4, 7)),
            jobserver: Some("-j2 --jobserver-auth=3,4".into()),
            shim: Some("/x/shim.so".into()),
        };
        let cur = |k: &str| match k {
            "MAKEFLAGS" => Some(OsString::from("-k -j8 --jobserver-auth=9,10")),
            "LD_PRELOAD" => Some(OsString::from("/other.so")),
            _ => None,
        };
        let vars = variables(&c, &cur);
        let get = |k: &str| {
            vars.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        assert_eq!(get("OMP_NUM_THREADS").unwrap(), "2");
        assert_eq!(get("OPENBLAS_NUM_THREADS").unwrap(), "1");
        assert_eq!(get("GOMAXPROCS").unwrap(), "1");
        assert_eq!(get("ALLOT_GRANT_FD").unwrap(), "7");
        assert_eq!(get("MAKEFLAGS").unwrap(), "-k -j2 --jobserver-auth=3,4");
        assert_eq!(get("LD_PRELOAD").unwrap(), "/x/shim.so:/other.so");
        let c = CellEnv {
            omp: OmpThreads::Grant,
            shim: None,
            cell: None,
            jobserver: None,
            ..c
        };
        let vars = variables(&c, &|_| None);
        assert!(vars.iter().any(|(n, v)| n == "OMP_NUM_THREADS" && v == "1"));
        assert!(
            !vars
                .iter()
                .any(|(n, _)| n == "LD_PRELOAD" || n == "ALLOT_CELL")
        );
    }
}
