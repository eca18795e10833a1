//! The shim with LLVM libomp (`__kmpc_fork_call`): clang-compiled programs.
//! Skipped, with a message, where clang or libomp is missing (CI installs
//! `clang` and `libomp-dev`, see `.ci/run`).

mod common;

use common::scenarios;
use common::*;

/// Constructs teamsize.c runs when built by clang (no GOMP_1.0 ones).
const CONSTRUCTS: usize = 12;

/// Whether to run: clang with OpenMP works here.
fn available() -> bool {
    match clang_openmp() {
        Ok(_) => true,
        Err(why) => {
            eprintln!("skipping libomp test: {why} (apt-get install clang libomp-dev)");
            false
        }
    }
}

#[test]
fn team_follows_the_grant_down_and_back_up() {
    if available() {
        scenarios::team_follows_the_grant(Toolchain::Clang);
    }
}

/// Includes a region with 20 captured variables, so `__kmpc_fork_call`
/// carries arguments on the stack through the trampoline.
#[test]
fn every_kmpc_construct_is_capped() {
    if available() {
        scenarios::every_construct_is_capped(Toolchain::Clang, CONSTRUCTS);
    }
}

/// Exercises `__kmpc_push_num_threads` and the pushed-value bookkeeping.
#[test]
fn num_threads_clause_is_capped_never_raised() {
    if available() {
        scenarios::num_threads_clause_is_capped_never_raised(Toolchain::Clang);
    }
}

#[test]
fn buffers_sized_by_max_threads_never_see_a_bigger_team() {
    if available() {
        scenarios::buffers_sized_by_max_threads_hold(Toolchain::Clang);
    }
}

#[test]
fn libomp_loaded_rtld_local_is_found() {
    if available() {
        scenarios::runtime_loaded_rtld_local(Toolchain::Clang, CONSTRUCTS);
    }
}

#[test]
fn concurrent_first_regions_from_many_threads() {
    if available() {
        scenarios::concurrent_first_regions_from_many_threads(Toolchain::Clang);
    }
}

#[test]
fn grant_changing_under_the_program() {
    if available() {
        scenarios::grant_changing_under_the_program(Toolchain::Clang);
    }
}

/// gcc-compiled code on LLVM libomp's implementation of the GOMP interface
/// (libomp preloaded after the shim): every GOMP entry point is capped and
/// forwarded to libomp.
#[test]
fn gcc_code_on_libomp_gomp_layer() {
    if !available() {
        return;
    }
    let libomp = libomp_path().unwrap();
    let page = Page::new(1);
    let mut cmd = std::process::Command::new(teamsize(Toolchain::Gcc).unwrap());
    cmd.args(["once", "0", "0"]);
    with_shim(&mut cmd, scenarios::MAX);
    cmd.env(
        "LD_PRELOAD",
        format!("{}:{}", shim().display(), libomp.display()),
    );
    inherit_page(&mut cmd, page.fd());
    let (r, _) = run(&mut cmd);
    r.assert_complete();
    assert_eq!(r.regions.len(), 19);
    assert!(r.regions.iter().all(|x| x.team == 1), "{:?}", r.teams());
}

/// Regions run by a library constructor during `dlopen`, with a nested
/// region on a team thread: no deadlock on the loader lock.
#[test]
fn region_in_a_constructor_during_dlopen_finishes() {
    if available() {
        scenarios::region_in_a_constructor_during_dlopen(Toolchain::Clang);
    }
}
