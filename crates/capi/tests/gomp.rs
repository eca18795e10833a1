//! The shim with GNU libgomp: gcc-compiled programs run as real processes
//! with the shim preloaded and a grant page the test publishes to.

mod common;

use common::scenarios::{self, MAX};
use common::*;
use std::process::Command;

/// Constructs teamsize.c runs when built by gcc (with the GOMP_1.0 ones).
const CONSTRUCTS: usize = 19;

#[test]
fn team_follows_the_grant_down_and_back_up() {
    scenarios::team_follows_the_grant(Toolchain::Gcc);
}

#[test]
fn every_gomp_entry_point_is_capped() {
    scenarios::every_construct_is_capped(Toolchain::Gcc, CONSTRUCTS);
}

#[test]
fn num_threads_clause_is_capped_never_raised() {
    scenarios::num_threads_clause_is_capped_never_raised(Toolchain::Gcc);
}

#[test]
fn buffers_sized_by_max_threads_never_see_a_bigger_team() {
    scenarios::buffers_sized_by_max_threads_hold(Toolchain::Gcc);
}

#[test]
fn libgomp_loaded_rtld_local_is_found() {
    scenarios::runtime_loaded_rtld_local(Toolchain::Gcc, CONSTRUCTS);
}

#[test]
fn concurrent_first_regions_from_many_threads() {
    scenarios::concurrent_first_regions_from_many_threads(Toolchain::Gcc);
}

#[test]
fn grant_changing_under_the_program() {
    scenarios::grant_changing_under_the_program(Toolchain::Gcc);
}

/// A region whose outlined function lies in no loaded object (as
/// JIT-compiled code's does), with libgomp loaded `RTLD_LOCAL`: the shim
/// falls back to the loaded library that provides the entry point.
#[cfg(target_arch = "x86_64")]
#[test]
fn region_from_code_in_no_object_finds_the_runtime() {
    let lib = compile(
        "gcc",
        "tests/omp/anon.c",
        "libanon.so",
        &["-fopenmp", "-fPIC", "-shared", "-DAS_LIBRARY"],
    )
    .unwrap();
    let driver = dlopen_driver().unwrap();
    let page = Page::new(1);
    for (in_cell, want) in [(true, "team 1\n"), (false, "team 2\n")] {
        let mut cmd = Command::new(&driver);
        cmd.arg(&lib);
        with_shim(&mut cmd, MAX);
        if in_cell {
            inherit_page(&mut cmd, page.fd());
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "in cell {in_cell}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            want,
            "in cell {in_cell}"
        );
    }
}

#[test]
fn debug_prints_one_line_per_capped_region_and_nothing_when_off() {
    let page = Page::new(1);
    let mut cmd = Command::new(teamsize(Toolchain::Gcc).unwrap());
    cmd.args(["nt2", "20", "1000"]);
    with_shim(&mut cmd, MAX);
    inherit_page(&mut cmd, page.fd());
    let (quiet, stderr) = run(&mut cmd);
    assert!(
        stderr.is_empty(),
        "debug output without ALLOT_SHIM_DEBUG: {stderr}"
    );
    assert!(quiet.regions.iter().all(|r| r.team == 1));

    cmd.env("ALLOT_SHIM_DEBUG", "1");
    let (r, stderr) = run(&mut cmd);
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].contains("active: cell 42, grant 1 threads"),
        "{stderr}"
    );
    let capped = lines
        .iter()
        .filter(|l| l.contains("GOMP_parallel: team of 2 capped to the grant's 1"));
    assert_eq!(capped.count(), r.regions.len(), "{stderr}");
    assert_eq!(lines.len(), r.regions.len() + 1, "{stderr}");
}

/// Anything but a sealed allot page of version 1 leaves the shim inert:
/// teams are unchanged and the debug line says why.
#[test]
fn no_valid_page_means_inert() {
    use rustix::fs::{MemfdFlags, SealFlags};
    let plain = tempfile::tempfile().unwrap();
    plain.set_len(4096).unwrap();
    let unsealed = rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&unsealed, 4096).unwrap();
    let zeros =
        rustix::fs::memfd_create("x", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&zeros, 4096).unwrap();
    rustix::fs::fcntl_add_seals(&zeros, SealFlags::SHRINK | SealFlags::GROW).unwrap();

    let run_with = |fd: Option<std::os::fd::BorrowedFd<'_>>, var: Option<&str>, why: &str| {
        let mut cmd = Command::new(teamsize(Toolchain::Gcc).unwrap());
        cmd.args(["once", "0", "0"]);
        with_shim(&mut cmd, MAX);
        cmd.env("ALLOT_SHIM_DEBUG", "1");
        if let Some(fd) = fd {
            inherit_page(&mut cmd, fd);
        }
        if let Some(v) = var {
            cmd.env("ALLOT_GRANT_FD", v);
        }
        let (r, stderr) = run(&mut cmd);
        r.assert_complete();
        assert!(
            r.regions.iter().all(|x| x.team == MAX),
            "{why}: {:?}",
            r.teams()
        );
        assert!(stderr.contains(&format!("inert: {why}")), "{why}: {stderr}");
    };
    use std::os::fd::AsFd;
    run_with(None, None, "ALLOT_GRANT_FD is not set");
    run_with(None, Some(""), "ALLOT_GRANT_FD is not set");
    run_with(
        None,
        Some("3x"),
        "ALLOT_GRANT_FD is not a descriptor number",
    );
    run_with(
        None,
        Some("-1"),
        "ALLOT_GRANT_FD is not a descriptor number",
    );
    run_with(None, Some("987"), "ALLOT_GRANT_FD is not open");
    run_with(
        None,
        Some("0"),
        "ALLOT_GRANT_FD is not a grant page (wrong type or size)",
    );
    run_with(
        Some(plain.as_fd()),
        None,
        "ALLOT_GRANT_FD is not a sealed grant page",
    );
    run_with(
        Some(unsealed.as_fd()),
        None,
        "ALLOT_GRANT_FD is not a sealed grant page",
    );
    run_with(
        Some(zeros.as_fd()),
        None,
        "ALLOT_GRANT_FD is not an allot grant page of this page version",
    );
}

/// The page and the shim pass through `sh` and `exec` to the whole cell.
#[test]
fn children_of_the_program_follow_the_grant_too() {
    let page = Page::new(1);
    let bin = teamsize(Toolchain::Gcc).unwrap();
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "'{}' parallel 20 1000 && exec '{}' nt2 20 1000",
        bin.display(),
        bin.display()
    ));
    with_shim(&mut cmd, MAX);
    inherit_page(&mut cmd, page.fd());
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let teams: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("r "))
        .map(|l| l.rsplit(' ').nth(1).unwrap())
        .collect();
    assert!(teams.len() >= 4, "{text}");
    assert!(teams.iter().all(|&t| t == "1"), "{text}");
}

/// Regions run by a library constructor during `dlopen`, with a nested
/// region on a team thread: no deadlock on the loader lock.
#[test]
fn region_in_a_constructor_during_dlopen_finishes() {
    scenarios::region_in_a_constructor_during_dlopen(Toolchain::Gcc);
}

/// The page's writer died in the middle of a publish: `seq` stays odd. The
/// shim waits (a bounded spin) once, then runs regions uncapped without
/// waiting again, until a new writer publishes, which it then follows.
#[test]
fn page_left_mid_publish_costs_one_wait_and_recovers() {
    let mut page = Page::new(1);
    page.stall_mid_publish();
    let mut cmd = Command::new(teamsize(Toolchain::Gcc).unwrap());
    cmd.args(["parallel", "1000", "1000"]);
    with_shim(&mut cmd, MAX);
    cmd.env("ALLOT_SHIM_DEBUG", "1");
    inherit_page(&mut cmd, page.fd());
    let running = Running::start(&mut cmd);
    std::thread::sleep(std::time::Duration::from_millis(400));
    let resumed = change(&mut page, 1);
    let (report, stderr) = running.finish();
    report.assert_complete();
    let stuck: Vec<&Region> = report
        .regions
        .iter()
        .filter(|r| r.t1 < resumed.start)
        .collect();
    let after: Vec<&Region> = report
        .regions
        .iter()
        .filter(|r| r.t0 > resumed.end)
        .collect();
    assert!(stuck.len() >= 3, "{stuck:?}");
    assert!(after.len() >= 3, "{after:?}");
    assert!(stuck.iter().all(|r| r.team == MAX), "{stuck:?}");
    assert!(after.iter().all(|r| r.team == 1), "{after:?}");
    let waits = stderr
        .lines()
        .filter(|l| l.contains("left mid-publish"))
        .count();
    assert_eq!(waits, 1, "{stderr}");
}

/// More distinct runtimes than the shim's table holds (16; here copies of
/// a stand-in runtime, each running a region of its own, loaded
/// `RTLD_LOCAL`): the regions of the first 16 are capped, the others run
/// uncapped, and the program is not stopped; the debug output says so once.
#[test]
fn more_runtimes_than_the_shim_tracks_run_uncapped() {
    let libs = fake_rt_copies(19).unwrap();
    let page = Page::new(3);
    let mut cmd = Command::new(each_driver().unwrap());
    cmd.args(&libs).args(["--", "gomp"]);
    with_shim(&mut cmd, MAX);
    cmd.env("ALLOT_SHIM_DEBUG", "1")
        .env("FAKE_MAX_THREADS", "4");
    inherit_page(&mut cmd, page.fd());
    let out = output_within(&mut cmd, std::time::Duration::from_secs(60));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let teams: Vec<String> = named_values(&String::from_utf8_lossy(&out.stdout))
        .into_iter()
        .map(|(k, v)| {
            assert_eq!(k, "gomp");
            v
        })
        .collect();
    let mut want = vec!["3"; 16];
    want.extend(["0"; 3]); // 0: the default team, uncapped
    assert_eq!(teams, want, "{stderr}");
    let told = stderr
        .lines()
        .filter(|l| l.contains("more than 16 OpenMP runtimes"))
        .count();
    assert_eq!(told, 1, "{stderr}");
    let _ = std::fs::remove_dir_all(libs[0].parent().unwrap());
}
