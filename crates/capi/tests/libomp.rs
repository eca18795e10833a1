//! The shim with LLVM libomp (`__kmpc_fork_call`): clang-compiled programs.
//! Skipped, with a message, where clang or libomp is missing (CI installs
//! `clang` and `libomp-dev`, see `.ci/run`).

mod common;

use common::scenarios;
use common::*;

/// Constructs teamsize.c runs when built by clang (no GOMP_1.0 ones).
const CONSTRUCTS: usize = 12;

#[test]
fn team_follows_the_grant_down_and_back_up() {
    if clang_available() {
        scenarios::team_follows_the_grant(Toolchain::Clang);
    }
}

/// Includes a region with 20 captured variables, so `__kmpc_fork_call`
/// carries arguments on the stack through the trampoline.
#[test]
fn every_kmpc_construct_is_capped() {
    if clang_available() {
        scenarios::every_construct_is_capped(Toolchain::Clang, CONSTRUCTS);
    }
}

/// Exercises `__kmpc_push_num_threads` and the pushed-value bookkeeping.
#[test]
fn num_threads_clause_is_capped_never_raised() {
    if clang_available() {
        scenarios::num_threads_clause_is_capped_never_raised(Toolchain::Clang);
    }
}

#[test]
fn buffers_sized_by_max_threads_never_see_a_bigger_team() {
    if clang_available() {
        scenarios::buffers_sized_by_max_threads_hold(Toolchain::Clang);
    }
}

#[test]
fn libomp_loaded_rtld_local_is_found() {
    if clang_available() {
        scenarios::runtime_loaded_rtld_local(Toolchain::Clang, CONSTRUCTS);
    }
}

#[test]
fn concurrent_first_regions_from_many_threads() {
    if clang_available() {
        scenarios::concurrent_first_regions_from_many_threads(Toolchain::Clang);
    }
}

#[test]
fn grant_changing_under_the_program() {
    if clang_available() {
        scenarios::grant_changing_under_the_program(Toolchain::Clang);
    }
}

/// gcc-compiled code on LLVM libomp's implementation of the GOMP interface
/// (libomp preloaded after the shim): every GOMP entry point is capped and
/// forwarded to libomp.
#[test]
fn gcc_code_on_libomp_gomp_layer() {
    if !clang_available() {
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
    if clang_available() {
        scenarios::region_in_a_constructor_during_dlopen(Toolchain::Clang);
    }
}

/// Every push and fork entry point, with the team size each fork received
/// checked exactly, on a stand-in runtime (tests/omp/fake_rt.c): one that
/// has the entry points newer than LLVM 14 (forking inside
/// `__kmpc_fork_call_if` through `__kmpc_fork_call`, or internally), and
/// one without them, whose calls then reach the shim's stand-ins. An
/// explicit request is never replaced by a larger default cap: not after
/// a strict or list push, nor after a push consumed by `__kmpc_fork_teams`
/// or `__kmpc_fork_call_if`. Strict requests are passed on uncapped.
#[cfg(target_arch = "x86_64")]
#[test]
fn every_push_and_fork_entry_point_keeps_the_explicit_request() {
    use std::process::Command;
    // The runtime's nthreads-var is 4; explicit requests are 2 (lists {2, 1}).
    let capped_to_3 = [
        ("fork", "3"),
        ("push", "2"),
        ("strict", "2"),
        ("list", "2"),
        ("list_intact", "1"),
        ("list_strict", "2"),
        ("fork_after_teams", "3"),
        ("if_true", "3"),
        ("push_if_true", "2"),
        ("fork_after_if_true", "3"),
        ("push_if_false", "1"),
        ("fork_after_if_false", "3"),
        ("args", "1"),
        ("ran", "12"),
    ];
    let capped_to_1 = [
        ("fork", "1"),
        ("push", "1"),
        ("strict", "2"), // strict: passed on as it is
        ("list", "1"),
        ("list_intact", "1"), // the program's array is not written
        ("list_strict", "2"),
        ("fork_after_teams", "1"),
        ("if_true", "1"),
        ("push_if_true", "1"),
        ("fork_after_if_true", "1"),
        ("push_if_false", "1"),
        ("fork_after_if_false", "1"),
        ("args", "1"),
        ("ran", "12"),
    ];
    let inert = [
        ("fork", "4"),
        ("push", "2"),
        ("strict", "2"),
        ("list", "2"),
        ("list_intact", "1"),
        ("list_strict", "2"),
        ("fork_after_teams", "4"),
        ("if_true", "4"),
        ("push_if_true", "2"),
        ("fork_after_if_true", "4"),
        ("push_if_false", "1"),
        ("fork_after_if_false", "4"),
        ("args", "1"),
        ("ran", "12"),
    ];
    let driver = dlopen_driver().unwrap();
    let pages = [Page::new(3), Page::new(1)];
    for (old, direct) in [(false, "0"), (false, "1"), (true, "0")] {
        let lib = fake_rt(old).unwrap();
        for (page, want) in [
            (Some(&pages[0]), &capped_to_3),
            (Some(&pages[1]), &capped_to_1),
            (None, &inert),
        ] {
            let mut cmd = Command::new(&driver);
            cmd.arg(&lib).arg("kmpc");
            with_shim(&mut cmd, scenarios::MAX);
            cmd.env("FAKE_MAX_THREADS", "4").env("FAKE_DIRECT", direct);
            if let Some(p) = page {
                inherit_page(&mut cmd, p.fd());
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            let what = format!(
                "old runtime {old}, direct {direct}, in cell {}",
                page.is_some()
            );
            assert!(out.status.success(), "{what}: {stderr}");
            let got = named_values(&String::from_utf8_lossy(&out.stdout));
            let want: Vec<(String, String)> = want
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            assert_eq!(got, want, "{what}: {stderr}");
        }
    }
}

/// Hand-written calls of LLVM 14's libomp: a push before `__kmpc_fork_teams`
/// (which clang does not emit that way), and the entry points this libomp
/// lacks, which a program finds in the shim (here with `dlsym`): they are
/// harmless, doing what libomp's own do through the entry points it has.
#[test]
fn hand_written_kmpc_calls_on_libomp() {
    use std::process::Command;
    if !clang_available() {
        return;
    }
    let bin = kmpc_calls().unwrap();
    // OMP_NUM_THREADS=4; explicit requests are 2 (lists {2, 1}).
    let capped_to_3 = [
        ("fork", "3"),
        ("fork_after_teams", "3"),
        ("teams_arg", "1"),
        ("strict", "2"),
        ("list", "2"),
        ("list_intact", "1"),
        ("list_strict", "2"),
        ("if_true", "3"),
        ("push_if_true", "2"),
        ("push_if_false", "1"),
        ("fork_after_if_false", "3"),
        ("if_args", "1"),
    ];
    let capped_to_1 = [
        ("fork", "1"),
        ("fork_after_teams", "1"),
        ("teams_arg", "1"),
        ("strict", "2"),
        ("list", "1"),
        ("list_intact", "1"),
        ("list_strict", "2"),
        ("if_true", "1"),
        ("push_if_true", "1"),
        ("push_if_false", "1"),
        ("fork_after_if_false", "1"),
        ("if_args", "1"),
    ];
    let pages = [Page::new(3), Page::new(1)];
    for (page, want) in [(&pages[0], &capped_to_3), (&pages[1], &capped_to_1)] {
        let mut cmd = Command::new(&bin);
        with_shim(&mut cmd, 4);
        inherit_page(&mut cmd, page.fd());
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{stderr}");
        let got = named_values(&String::from_utf8_lossy(&out.stdout));
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        assert_eq!(got, want, "{stderr}");
    }
    // Outside a cell: requests and defaults as they are. (After the
    // serialized if(false) region, what libomp does with the value pushed
    // for it is its own business; not checked.)
    let mut cmd = Command::new(&bin);
    with_shim(&mut cmd, 4);
    let out = cmd.output().unwrap();
    assert!(out.status.success());
    let got: Vec<(String, String)> = named_values(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .filter(|(k, _)| k != "fork_after_if_false")
        .collect();
    let want: Vec<(String, String)> = [
        ("fork", "4"),
        ("fork_after_teams", "4"),
        ("teams_arg", "1"),
        ("strict", "2"),
        ("list", "2"),
        ("list_intact", "1"),
        ("list_strict", "2"),
        ("if_true", "4"),
        ("push_if_true", "2"),
        ("push_if_false", "1"),
        ("if_args", "1"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    assert_eq!(got, want);
}
