//! The environment of a program in a cell: the one contract `allot run`,
//! liballot's `allot_cell_environment` (and through it the Slurm plugin)
//! set for the programs they start.
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
//! `OMP_NUM_THREADS` is the cell's *maximum* when the shim is on: the shim
//! caps each OpenMP team to the grant where it starts, and only ever
//! shrinks it, so `omp_get_max_threads()` must stay an upper bound on
//! every team (programs size per-thread buffers with it). Every other
//! variable gets the launch count ([`launch_threads`]): the BLAS libraries
//! are moved from it to the grant of the moment by the shim's follower
//! (OpenBLAS grows its pool when told a larger count; a pool that is not
//! started larger than needed has no idle threads spinning against the
//! neighbours), and the rest are read once, at start, by runtimes nothing
//! resizes later. Without the shim `OMP_NUM_THREADS` gets the launch count
//! too. `GOMAXPROCS` is left unset for a program built with Go 1.25 or
//! later, whose runtime follows its CPU set by itself (setting the
//! variable turns that off). Measurements behind these choices are in
//! docs/run.md.
//!
//! allot's own variables: `ALLOT_SOCKET`, `ALLOT_CELL`, `ALLOT_GRANT_FD`
//! (an inherited descriptor of the grant page), and `MAKEFLAGS` /
//! `CARGO_MAKEFLAGS` naming the cell's jobserver; `LD_PRELOAD` gains the
//! shim. With allot's Thread Composability Manager, `TCM_ENABLE=1` (unless
//! the user set it), `ALLOT_TCM_FD` (the permit table) and
//! `LD_LIBRARY_PATH` starting with the directory of `libtcm.so.1`.

use std::ffi::OsString;

/// OpenMP's team size: the cell's maximum with the shim, which caps teams.
pub const OMP_VAR: &str = "OMP_NUM_THREADS";

/// BLAS libraries: the launch count, then the grant of the moment (the
/// shim's follower sets them while they run).
pub const BLAS_VARS: [&str; 3] = [
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
];

/// Variables read once, at start.
pub const ONCE_VARS: [&str; 4] = [
    "RAYON_NUM_THREADS",
    "GOMAXPROCS",
    "NUMBA_NUM_THREADS",
    "NUMEXPR_MAX_THREADS",
];

/// Every thread-count variable `allot run` sets.
pub fn thread_vars() -> impl Iterator<Item = &'static str> {
    std::iter::once(OMP_VAR).chain(BLAS_VARS).chain(ONCE_VARS)
}

/// The thread count for a runtime that can only be sized once: the cell's
/// fair share of the CPUs, as the broker computes it from the admitted
/// cells' weights, guarantees and maxima (`share_milli`, thousandths of a
/// CPU), rounded down, at least 1 and at most the cell's maximum.
///
/// Not the grant of the moment, which includes CPUs lent by idle cells
/// until their owners need them back: a program that took those for life
/// would oversubscribe its cell as soon as they are. Rounded down because
/// a count that is too small leaves a CPU to the cell's other programs (or
/// to a neighbour, lent), while one that is too large makes threads wait
/// for each other on a shared CPU for the rest of the program.
pub fn launch_threads(share_milli: u32, max: u32) -> u32 {
    (share_milli / 1000).clamp(1, max.max(1))
}

/// Inputs for the environment.
#[derive(Debug, Clone)]
pub struct CellEnv {
    /// The count for variables read once ([`launch_threads`] by default).
    pub launch: u32,
    /// The cell's maximum CPUs: its spec's maximum, or all the CPUs the
    /// broker gives cells; never the first grant, which may be smaller.
    pub max: u32,
    /// Whether the program's Go runtime follows its CPU set by itself
    /// (Go 1.25 or later): then `GOMAXPROCS` is not set.
    pub go_follows: bool,
    /// Socket, cell id, page fd (absent when running unconfined).
    pub cell: Option<(std::path::PathBuf, u64, i32)>,
    /// The jobserver's MAKEFLAGS fragment.
    pub jobserver: Option<String>,
    /// Whether `MAKEFLAGS` names the jobserver too: only where the user
    /// asked make for parallel jobs (a GNU make that finds a jobserver in
    /// `MAKEFLAGS` runs in parallel, and a build that was serial must stay
    /// so). `CARGO_MAKEFLAGS` always does (cargo is parallel by default).
    pub make_jobs: bool,
    /// Path of the shim to preload (`None`: no shim).
    pub shim: Option<std::path::PathBuf>,
    /// allot's Thread Composability Manager: the directory holding
    /// `libtcm.so.1` and the permit table's inherited descriptor (`None`:
    /// oneTBB and Intel OpenMP manage their threads themselves).
    pub tcm: Option<(std::path::PathBuf, i32)>,
}

/// The variables to set (name, value), given the current environment.
pub fn variables(
    c: &CellEnv,
    current: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut out: Vec<(String, OsString)> = Vec::new();
    let launch = c.launch.max(1).to_string();
    let omp = if c.shim.is_some() {
        c.max.max(1).to_string()
    } else {
        launch.clone()
    };
    out.push((OMP_VAR.to_string(), omp.into()));
    for v in BLAS_VARS.into_iter().chain(ONCE_VARS) {
        if v == "GOMAXPROCS" && c.go_follows {
            continue;
        }
        out.push((v.to_string(), launch.clone().into()));
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
        let vars: &[&str] = if c.make_jobs {
            &["MAKEFLAGS", "CARGO_MAKEFLAGS"]
        } else {
            &["CARGO_MAKEFLAGS"]
        };
        for &var in vars {
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
            crate::preload_with_shim(shim, current("LD_PRELOAD").as_deref()),
        ));
    }
    if let Some((dir, fd)) = &c.tcm {
        out.extend(tcm_variables(dir, *fd, current));
    }
    out
}

/// What turns allot's Thread Composability Manager on for a program:
/// `TCM_ENABLE=1` (a user's own value, 0 turning it off, is kept), the
/// permit table's descriptor `fd`, and `dir` (where `libtcm.so.1` is)
/// first on `LD_LIBRARY_PATH`.
pub fn tcm_variables(
    dir: &std::path::Path,
    fd: i32,
    current: &dyn Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    let mut out = Vec::new();
    if current(TCM_ENABLE).is_none() {
        out.push((TCM_ENABLE.into(), "1".into()));
    }
    out.push((allot_proto::env::TCM_FD.into(), fd.to_string().into()));
    out.push((
        "LD_LIBRARY_PATH".into(),
        crate::tcm::library_path_with(dir, current("LD_LIBRARY_PATH").as_deref()),
    ));
    out
}

/// What turns a Thread Composability Manager on for oneTBB and Intel
/// OpenMP.
pub const TCM_ENABLE: &str = "TCM_ENABLE";

/// What a partition's program is told on top of [`variables`]: allot's
/// pools poll (`ALLOT_POOL_POLL=1`), and so do OpenMP's threads
/// (`OMP_WAIT_POLICY=active`, unless the user set it).
pub fn partition_variables(get: &dyn Fn(&str) -> Option<OsString>) -> Vec<(String, OsString)> {
    let mut out = vec![(allot_proto::env::POOL_POLL.into(), "1".into())];
    if get("OMP_WAIT_POLICY").is_none() {
        out.push(("OMP_WAIT_POLICY".into(), "active".into()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(vars: &[(String, OsString)], k: &str) -> Option<String> {
        vars.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.to_string_lossy().into_owned())
    }

    #[test]
    fn sets_thread_counts_and_keeps_user_flags() {
        let c = CellEnv {
            launch: 1,
            max: 2,
            go_follows: false,
            cell: Some(("/s".into(), 4, 7)),
            jobserver: Some("-j2 --jobserver-auth=3,4".into()),
            make_jobs: true,
            shim: Some("/x/shim.so".into()),
            tcm: Some(("/x/tcm-1".into(), 9)),
        };
        let cur = |k: &str| match k {
            "MAKEFLAGS" => Some(OsString::from("-k -j8 --jobserver-auth=9,10")),
            "LD_PRELOAD" => Some(OsString::from("/other.so")),
            "LD_LIBRARY_PATH" => Some(OsString::from("/opt/lib")),
            _ => None,
        };
        let vars = variables(&c, &cur);
        // OpenMP teams are capped by the shim: the maximum. The rest: the
        // launch count (BLAS then follows through the shim).
        assert_eq!(get(&vars, OMP_VAR).unwrap(), "2");
        for v in BLAS_VARS.into_iter().chain(ONCE_VARS) {
            assert_eq!(get(&vars, v).unwrap(), "1", "{v}");
        }
        assert_eq!(get(&vars, "ALLOT_GRANT_FD").unwrap(), "7");
        assert_eq!(
            get(&vars, "MAKEFLAGS").unwrap(),
            "-k -j2 --jobserver-auth=3,4"
        );
        // Where no one asked make for parallel jobs, MAKEFLAGS is left as
        // it is (a make that finds a jobserver runs in parallel); cargo
        // still gets it.
        let serial = CellEnv {
            make_jobs: false,
            ..c.clone()
        };
        let vars = variables(&serial, &cur);
        assert_eq!(get(&vars, "MAKEFLAGS"), None);
        assert!(get(&vars, "CARGO_MAKEFLAGS").is_some());
        let vars = variables(&c, &cur);
        assert_eq!(get(&vars, "LD_PRELOAD").unwrap(), "/x/shim.so:/other.so");
        assert_eq!(get(&vars, TCM_ENABLE).unwrap(), "1");
        assert_eq!(get(&vars, "ALLOT_TCM_FD").unwrap(), "9");
        assert_eq!(get(&vars, "LD_LIBRARY_PATH").unwrap(), "/x/tcm-1:/opt/lib");
        // The user's TCM_ENABLE=0 stays: the manager is off.
        let off = variables(&c, &|k| (k == TCM_ENABLE).then(|| "0".into()));
        assert_eq!(get(&off, TCM_ENABLE), None);
        let c = CellEnv {
            shim: None,
            tcm: None,
            cell: None,
            jobserver: None,
            make_jobs: false,
            go_follows: true,
            ..c
        };
        let vars = variables(&c, &|_| None);
        assert_eq!(
            get(&vars, "OMP_NUM_THREADS").unwrap(),
            "1",
            "no shim: the launch count"
        );
        assert_eq!(get(&vars, "GOMAXPROCS"), None, "Go 1.25+ follows by itself");
        assert!(
            !vars
                .iter()
                .any(|(n, _)| n == "LD_PRELOAD" || n == "ALLOT_CELL" || n == TCM_ENABLE)
        );
    }

    #[test]
    fn the_launch_count_is_the_share_rounded_down() {
        // Four cells of weight 1 on 2 CPUs: half a CPU each.
        assert_eq!(launch_threads(500, 2), 1);
        assert_eq!(launch_threads(1999, 2), 1);
        assert_eq!(launch_threads(2000, 2), 2);
        // Alone on 64 CPUs with a maximum of 8.
        assert_eq!(launch_threads(64_000, 8), 8);
        // Not admitted yet (no share): one thread.
        assert_eq!(launch_threads(0, 4), 1);
        assert_eq!(launch_threads(3000, 0), 1);
    }
}
