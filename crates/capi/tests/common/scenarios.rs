//! Test bodies shared by the libgomp (gcc) and libomp (clang) test files.

use super::*;
use std::time::Duration;

/// `OMP_NUM_THREADS` the tests give programs: the cell's maximum, as
/// `allot run` sets it.
pub const MAX: u32 = 2;

fn teamsize_cmd(tc: Toolchain, args: &[&str]) -> Command {
    let mut cmd = Command::new(teamsize(tc).unwrap());
    cmd.args(args);
    with_shim(&mut cmd, MAX);
    cmd
}

/// Regions run every ~5 ms while the grant goes 2 -> 1 -> 2. Every region
/// has the team of a grant it could have read (the one in force when it
/// started or one published while it ran), and the team does go down and
/// come back up.
pub fn team_follows_the_grant(tc: Toolchain) {
    let mut page = Page::new(2);
    let mut cmd = teamsize_cmd(tc, &["parallel", "900", "5000"]);
    inherit_page(&mut cmd, page.fd());
    let running = Running::start(&mut cmd);
    assert_eq!(running.max, MAX);
    std::thread::sleep(Duration::from_millis(200));
    let down = change(&mut page, 1);
    std::thread::sleep(Duration::from_millis(250));
    let up = change(&mut page, 2);
    let (report, stderr) = running.finish();
    report.assert_complete();
    assert!(stderr.is_empty(), "{stderr}");

    let changes = [down, up];
    for r in &report.regions {
        let allowed: Vec<u32> = grants_during(2, &changes, r.t0, r.t1)
            .into_iter()
            .map(|g| g.min(MAX))
            .collect();
        assert!(
            allowed.contains(&r.team),
            "region at {} ns ran a team of {} where the grant allowed {allowed:?} \
             (grant changes: {changes:?})",
            r.t0,
            r.team
        );
    }
    let during = |from: i64, to: i64| -> Vec<u32> {
        report
            .regions
            .iter()
            .filter(|r| r.t0 > from && r.t1 < to)
            .map(|r| r.team)
            .collect()
    };
    let before = during(0, down.start);
    let shrunk = during(down.end, up.start);
    let after = during(up.end, i64::MAX);
    assert!(
        !before.is_empty() && before.iter().all(|&t| t == 2),
        "{before:?}"
    );
    assert!(
        !shrunk.is_empty() && shrunk.iter().all(|&t| t == 1),
        "{shrunk:?}"
    );
    assert!(
        !after.is_empty() && after.iter().all(|&t| t == 2),
        "{after:?}"
    );
}

/// Under a one-thread grant every construct in teamsize.c runs a team of
/// one and still does all its work (the forwarded loop bounds, chunk sizes
/// and section counts are intact); outside a cell the same program runs
/// its usual teams.
pub fn every_construct_is_capped(tc: Toolchain, constructs: usize) {
    let page = Page::new(1);
    let mut cmd = teamsize_cmd(tc, &["once", "0", "0"]);
    inherit_page(&mut cmd, page.fd());
    let (capped, _) = run(&mut cmd);
    capped.assert_complete();
    assert_eq!(capped.regions.len(), constructs, "{:?}", capped.teams());
    for (name, team) in capped.teams() {
        assert_eq!(team, 1, "{name} was not capped");
    }

    let (inert, stderr) = run(&mut teamsize_cmd(tc, &["once", "0", "0"]));
    inert.assert_complete();
    assert!(stderr.is_empty(), "{stderr}");
    for (name, team) in inert.teams() {
        assert_eq!(team, MAX, "{name} changed outside a cell");
    }
}

/// `num_threads(k)` is capped to the grant, and is never raised: not by a
/// larger grant, nor to `omp_get_max_threads()`.
pub fn num_threads_clause_is_capped_never_raised(tc: Toolchain) {
    // (grant, OMP_NUM_THREADS, clause, expected team)
    let cases = [
        (1, 2, 2, 1),
        (2, 2, 1, 1),
        (2, 1, 2, 2),
        (8, 2, 4, 4),
        (3, 4, 4, 3),
    ];
    for (grant, omp, nt, want) in cases {
        let page = Page::new(grant);
        let mode = format!("nt{nt}");
        let mut cmd = teamsize_cmd(tc, &[&mode, "30", "2000"]);
        cmd.env("OMP_NUM_THREADS", omp.to_string());
        inherit_page(&mut cmd, page.fd());
        let (r, _) = run(&mut cmd);
        r.assert_complete();
        for reg in &r.regions {
            assert_eq!(
                reg.team, want,
                "grant {grant}, OMP_NUM_THREADS={omp}, num_threads({nt})"
            );
        }
    }
}

/// A program sizes per-thread buffers by `omp_get_max_threads()`; grants
/// larger than that (8 on the page, `OMP_NUM_THREADS=2`) never grow a team
/// past it, through every construct, while the grant moves 8 -> 1 -> 8.
pub fn buffers_sized_by_max_threads_hold(tc: Toolchain) {
    let mut page = Page::new(8);
    let mut cmd = teamsize_cmd(tc, &["all", "500", "1000"]);
    inherit_page(&mut cmd, page.fd());
    let running = Running::start(&mut cmd);
    std::thread::sleep(Duration::from_millis(150));
    let down = change(&mut page, 1);
    std::thread::sleep(Duration::from_millis(150));
    let up = change(&mut page, 8);
    let (report, _) = running.finish();
    report.assert_complete(); // includes: no thread number >= max
    for r in &report.regions {
        assert!(r.team <= MAX, "{r:?}");
    }
    let shrunk = report
        .regions
        .iter()
        .filter(|r| r.t0 > down.end && r.t1 < up.start);
    assert!(shrunk.clone().count() > 0);
    assert!(
        shrunk.clone().all(|r| r.team == 1),
        "{:?}",
        shrunk.collect::<Vec<_>>()
    );
}

/// The OpenMP runtime is not in the global scope: the program's code and
/// its runtime were loaded together with `dlopen(RTLD_LOCAL)`, as Python
/// loads extension modules that bundle one. The shim still finds the right
/// runtime, caps under a page, and is inert without one.
pub fn runtime_loaded_rtld_local(tc: Toolchain, constructs: usize) {
    let (driver, lib) = teamsize_rtld_local(tc).unwrap();
    let page = Page::new(1);
    let mut cmd = Command::new(&driver);
    cmd.arg(&lib).args(["once", "0", "0"]);
    with_shim(&mut cmd, MAX);
    inherit_page(&mut cmd, page.fd());
    let (capped, _) = run(&mut cmd);
    capped.assert_complete();
    assert_eq!(capped.regions.len(), constructs);
    assert!(
        capped.regions.iter().all(|r| r.team == 1),
        "{:?}",
        capped.teams()
    );

    let mut cmd = Command::new(&driver);
    cmd.arg(&lib).args(["once", "0", "0"]);
    with_shim(&mut cmd, MAX);
    let (inert, _) = run(&mut cmd);
    inert.assert_complete();
    assert!(
        inert.regions.iter().all(|r| r.team == MAX),
        "{:?}",
        inert.teams()
    );
}

/// Six POSIX threads each start their own top-level OpenMP regions at
/// once, so the first regions race through the shim's lookups: directly
/// linked, and with the runtime loaded `RTLD_LOCAL` (the per-object path).
pub fn concurrent_first_regions_from_many_threads(tc: Toolchain) {
    let (bin, lib) = threads(tc).unwrap();
    let driver = dlopen_driver().unwrap();
    let page = Page::new(1);
    for (in_cell, want) in [(true, "teams 1 1\nsum 1\n"), (false, "teams 2 2\nsum 1\n")] {
        for direct in [true, false] {
            let mut cmd = if direct {
                Command::new(&bin)
            } else {
                let mut c = Command::new(&driver);
                c.arg(&lib);
                c
            };
            cmd.args(["6", "100"]);
            with_shim(&mut cmd, MAX);
            if in_cell {
                inherit_page(&mut cmd, page.fd());
            }
            let out = cmd.output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success(),
                "in cell {in_cell}, direct {direct}: {stderr}"
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout),
                want,
                "in cell {in_cell}, direct {direct}"
            );
        }
    }
}

/// The broker publishes as fast as it can, alternating 1 and 2, while the
/// program runs every construct: every team is one the grant allowed (the
/// seqlock never hands out a torn value) and no region loses work.
pub fn grant_changing_under_the_program(tc: Toolchain) {
    let mut page = Page::new(2);
    let mut cmd = teamsize_cmd(tc, &["all", "300", "100"]);
    inherit_page(&mut cmd, page.fd());
    let running = Running::start(&mut cmd);
    let deadline = std::time::Instant::now() + Duration::from_millis(300);
    let mut publishes = 0u32;
    while std::time::Instant::now() < deadline {
        page.publish(1 + publishes % 2);
        publishes += 1;
    }
    let (report, _) = running.finish();
    report.assert_complete();
    assert!(publishes > 1000, "only {publishes} publishes");
    for r in &report.regions {
        assert!(r.team == 1 || r.team == 2, "{r:?}");
    }
}

/// A library's constructor runs a region whose team thread opens a nested
/// region through an entry point not used before, all inside the `dlopen`
/// that loads it, so with the loader lock held by the primary thread, which
/// waits for the team at the region's end. The shim must not need the
/// loader on the team thread (it looks a runtime's functions up all at
/// once, on first meeting it): the program finishes, in a cell or not.
pub fn region_in_a_constructor_during_dlopen(tc: Toolchain) {
    let lib = ctor_nested(tc).unwrap();
    let driver = dlopen_driver().unwrap();
    let page = Page::new(2);
    for in_cell in [false, true] {
        let mut cmd = Command::new(&driver);
        cmd.arg(&lib);
        with_shim(&mut cmd, MAX);
        if in_cell {
            inherit_page(&mut cmd, page.fd());
        }
        let out = output_within(&mut cmd, Duration::from_secs(60));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "in cell {in_cell}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "outer 2 inner 2 sum 4950\n",
            "in cell {in_cell}: {stderr}"
        );
    }
}
