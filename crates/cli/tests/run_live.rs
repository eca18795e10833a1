//! `allot run` with real programs and a real broker (make and its jobserver: `jobserver_live.rs`).

mod common;

use common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn unknown_commands_fail_like_env() {
    let d = Daemon::start("dry-run", &[]);
    let o = run_out(allot_run(&d, &["--", "no-such-command-xyz", "a"]));
    assert_eq!(o.status.code(), Some(127));
    assert!(
        String::from_utf8_lossy(&o.stderr)
            .contains("'no-such-command-xyz': No such file or directory")
    );
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-a-program");
    std::fs::write(&plain, "just text").unwrap();
    let o = run_out(allot_run(&d, &["--", plain.to_str().unwrap()]));
    assert_eq!(o.status.code(), Some(126));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Permission denied"));
    assert!(
        d.status().cells.is_empty(),
        "no cell for a command that cannot run"
    );
}

#[test]
fn exit_status_and_signals_pass_through() {
    use std::os::unix::process::ExitStatusExt;
    let d = Daemon::start("dry-run", &[]);
    let o = run_out(allot_run(&d, &["--", "sh", "-c", "echo hi; exit 7"]));
    assert_eq!(o.status.code(), Some(7));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "hi\n");
    let o = run_out(allot_run(&d, &["--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(
        o.status.signal(),
        Some(15),
        "allot run dies of the program's signal"
    );
    // SIGTERM to allot run reaches the program (sent once the program has
    // set its trap: it says so; 30 s at most).
    let mut c = allot_run(
        &d,
        &[
            "--",
            "sh",
            "-c",
            "trap 'echo got-term; exit 3' TERM; echo ready; \
             i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done",
        ],
    );
    let mut child = Proc(c.stdout(Stdio::piped()).spawn().unwrap());
    let out = Stream::read(child.0.stdout.take().unwrap());
    out.wait_for("ready\n");
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(child.pid() as i32).unwrap(),
        rustix::process::Signal::TERM,
    );
    out.wait_for("got-term");
    assert_eq!(child.0.wait().unwrap().code(), Some(3));
    // The cell was released.
    assert!(eventually(Duration::from_secs(3), || d
        .status()
        .cells
        .is_empty()));
}

#[test]
fn impossible_requests_name_the_limit() {
    let d = Daemon::start("dry-run", &[]);
    let o = run_out(allot_run(&d, &["--min", "64", "--", "true"]));
    assert_eq!(o.status.code(), Some(125));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("at least 64 CPUs"), "{err}");
}

/// Pids of the program a cell runs (not `allot run` itself).
fn cell_program_pids(d: &Daemon) -> Vec<u32> {
    d.status()
        .cells
        .iter()
        .flat_map(|c| c.pids.iter().copied())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/comm"))
                .is_ok_and(|c| !c.starts_with("allot"))
        })
        .collect()
}

const THREADS_PY: &str = "import threading,time\n\
def spin():\n    t=time.time()\n    while time.time()-t<30: pass\n\
[threading.Thread(target=spin,daemon=True).start() for _ in range(2)]\n\
time.sleep(0.7)\n\
[threading.Thread(target=spin,daemon=True).start() for _ in range(2)]\n\
time.sleep(30)\n";

#[test]
fn every_thread_follows_the_grant() {
    let all = allot_topo::allowed_cpus().unwrap();
    if !prerequisite(all.len() >= 2, "needs two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let mut a = Proc(
        allot_run(
            &d,
            &["--name", "a", "--", allot_testkit::PYTHON, "-c", THREADS_PY],
        )
        .spawn()
        .unwrap(),
    );
    assert!(eventually(Duration::from_secs(5), || cell_program_pids(&d)
        .len()
        == 1));
    let pa = cell_program_pids(&d)[0];
    // Alone: both CPUs, on every thread.
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = thread_masks(pa);
            m.len() >= 3 && m.iter().all(|x| *x == all.take_first(2).to_string())
        }),
        "{:?}",
        thread_masks(pa)
    );
    // A second program arrives: the first shrinks to one CPU, threads created
    // later included.
    let mut b = Proc(
        allot_run(
            &d,
            &["--name", "b", "--", allot_testkit::PYTHON, "-c", THREADS_PY],
        )
        .spawn()
        .unwrap(),
    );
    assert!(eventually(Duration::from_secs(5), || cell_program_pids(&d)
        .len()
        == 2));
    let pb = *cell_program_pids(&d).iter().find(|&&p| p != pa).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || {
            let (ma, mb) = (thread_masks(pa), thread_masks(pb));
            ma.len() >= 5
                && mb.len() >= 3
                && ma.iter().all(|x| x.len() == 1)
                && mb.iter().all(|x| x.len() == 1)
                && ma[0] != mb[0]
        }),
        "a {:?} b {:?}\n{}",
        thread_masks(pa),
        thread_masks(pb),
        d.log()
    );
    // The second program ends: the first gets both CPUs back.
    let _ = rustix::process::kill_process(
        rustix::process::Pid::from_raw(pb as i32).unwrap(),
        rustix::process::Signal::KILL,
    );
    let _ = b.0.wait();
    assert!(eventually(Duration::from_secs(5), || thread_masks(pa)
        .iter()
        .all(|x| *x == all.take_first(2).to_string())));
    a.kill9();
}

#[test]
fn program_runs_on_when_the_broker_dies() {
    let mut d = Daemon::start(backend(), &[]);
    // The program runs until the test has seen the wrapper lose the broker
    // (the file appears; 30 s at most), and a second more, while the
    // wrapper tries to reconnect.
    let dir = tempfile::tempdir().unwrap();
    let lost = dir.path().join("lost");
    let script = format!(
        "i=0; while [ ! -e {} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; \
         sleep 1; echo finished",
        lost.display()
    );
    let mut child = Proc(
        allot_run(&d, &["--", "sh", "-c", &script])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let out = Stream::read(child.0.stdout.take().unwrap());
    let err = Stream::read(child.0.stderr.take().unwrap());
    assert!(eventually(PATIENCE, || d.status().cells.len() == 1));
    d.kill9();
    err.wait_for("lost the broker");
    std::fs::write(&lost, "").unwrap();
    assert_eq!(child.0.wait().unwrap().code(), Some(0));
    assert_eq!(out.rest(), "finished\n");
    // The wrapper says once that it lost the broker, and what to do;
    // its reconnect attempts are not logged one by one.
    let err = err.rest();
    assert_eq!(err.matches("lost the broker").count(), 1, "{err}");
    assert!(err.contains("allot daemon"), "{err}");
    assert!(
        !err.contains("cannot reach"),
        "info lines at the default level: {err}"
    );
    // A restarted broker finds the cell gone and cleans up.
    d.spawn();
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .cells
        .is_empty()));
}

#[test]
fn a_broker_is_started_on_first_use_and_leaves_when_idle() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("auto/allot.sock");
    let o = Command::new(ALLOT)
        .args(["run", "--", "sh", "-c", "echo $ALLOT_CELL $OMP_NUM_THREADS"])
        .env("ALLOT_SOCKET", &socket)
        .env("ALLOT_BACKEND", "affinity")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = String::from_utf8_lossy(&o.stdout);
    let cell: u64 = out
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .expect("ALLOT_CELL set");
    assert!(cell >= 1);
    assert!(dir.path().join("auto/broker.log").exists());
    // It exits by itself once idle (2 s) and removes its socket.
    assert!(
        eventually(Duration::from_secs(8), || !socket.exists()),
        "the auto-started broker did not leave"
    );
}

#[test]
fn no_broker_possible_means_unconfined_with_a_warning() {
    let o = Command::new(ALLOT)
        .args(["run", "--", "sh", "-c", "echo ran; exit 4"])
        .env("ALLOT_SOCKET", "/proc/allot-cannot-exist/allot.sock")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "ran\n");
    assert!(String::from_utf8_lossy(&o.stderr).contains("unconfined"));
}

#[test]
fn queued_with_wait_then_admitted() {
    let d = Daemon::start("dry-run", &[]);
    let cpus = allot_topo::allowed_cpus().unwrap().len().to_string();
    // The holder (cat) keeps every CPU until its stdin closes.
    let mut holder = Proc(
        allot_run(&d, &["--min", &cpus, "--exclusive", "--", "cat"])
            .stdin(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    assert!(eventually(PATIENCE, || d.status().cells.len() == 1));
    // (A guarantee: a best-effort run would start paused instead,
    // `pause_live.rs`.)
    let o = run_out(allot_run(&d, &["--min", "1", "--", "true"]));
    assert_eq!(o.status.code(), Some(125), "refused without --wait");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--wait"));
    let mut waiter = Proc(
        allot_run(&d, &["--min", "1", "--wait", "--", "true"])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    Stream::read(waiter.0.stderr.take().unwrap()).wait_for("waiting for CPUs");
    assert!(
        waiter.0.try_wait().unwrap().is_none(),
        "it waits while the holder holds every CPU"
    );
    drop(holder.0.stdin.take());
    assert!(holder.0.wait().unwrap().success());
    assert!(waiter.0.wait().unwrap().success(), "admitted once freed");
}

/// An unmodified OpenMP program under `allot run`: its teams follow the
/// grant (through the preload shim) as another program comes and goes.
#[test]
fn openmp_teams_follow_the_grant_under_allot_run() {
    if !prerequisite(
        allot_topo::allowed_cpus().unwrap().len() >= 2,
        "needs two CPUs",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../capi/tests/omp/teamsize.c");
    let exe = dir.path().join("teamsize");
    let cc = Command::new("gcc")
        .args(["-fopenmp", "-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .status();
    if !prerequisite(
        cc.is_ok_and(|s| s.success()),
        "gcc -fopenmp (apt-get install gcc)",
    ) {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    // Exclusive: the program keeps its CPUs even when mostly idle, and a
    // newcomer takes half by fair share.
    let mut omp = Watched::spawn(allot_run(
        &d,
        &[
            "--exclusive",
            "--name",
            "omp",
            "--",
            exe.to_str().unwrap(),
            "parallel",
            "120000",
            "2000",
        ],
    ));
    // Regions as (start, team, complete), stamped by the program.
    let regions = |lines: &[String]| -> Vec<(f64, usize, bool)> {
        lines
            .iter()
            .filter(|l| l.starts_with("r "))
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (
                    f[2].parse::<f64>().unwrap() / 1e9,
                    f[4].parse().unwrap(),
                    f[5] == "1",
                )
            })
            .collect()
    };
    omp.wait_for("the first region", |lines| !regions(lines).is_empty());
    let starts = |lines: &[String]| regions(lines).iter().map(|r| r.0).collect();
    let (lines, visit) = with_a_neighbour(&d, omp, starts, Duration::from_millis(800), 1.0, 1.0);
    assert!(
        lines[0].starts_with("max 2"),
        "OMP_NUM_THREADS is the cell maximum: {lines:?}"
    );
    let regions = regions(&lines);
    assert!(
        regions.iter().all(|r| r.2),
        "every region completed its work"
    );
    let teams = |from: f64, to: f64| -> Vec<usize> {
        regions
            .iter()
            .filter(|r| r.0 > from && r.0 < to)
            .map(|r| r.1)
            .collect()
    };
    let phases = [
        teams(0.0, visit.launched),
        teams(visit.started + 0.3, visit.ended - 0.05),
        teams(visit.ended + 0.3, f64::MAX),
    ];
    assert_phases(&phases, (2, 1), "teams", || {
        format!("neighbour {visit:?}; regions {regions:?}\n{}", d.log())
    });
}

/// The numbers of a benchmark table's `row`, after its first `words`
/// words (the row's name) and without the column separators.
fn figures(row: &str, words: usize) -> Vec<f64> {
    row.split_whitespace()
        .skip(words)
        .filter(|x| *x != "|")
        .map(|x| x.parse().unwrap_or_else(|_| panic!("{x:?} in {row:?}")))
        .collect()
}

/// `allot bench launch`, briefly: a row per backend asked for, with the
/// overhead of `allot run` over the program alone, ordered p50 ≤ p90 ≤ p99.
#[test]
fn launch_cost_is_measured_per_backend() {
    let backends = if prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        "cgroup1,affinity"
    } else {
        "affinity"
    };
    let _turn = machine_turn();
    let text = succeeds_within(
        &[
            "bench",
            "launch",
            "--runs",
            "12",
            "--backends",
            backends,
            "--burst",
            "3",
            "--burst-rounds",
            "2",
        ],
        Duration::from_secs(120),
    );
    let (runs, bursts) = text
        .split_once("programs started at once")
        .unwrap_or_else(|| panic!("no burst table: {text}"));
    for b in backends.split(',') {
        // Bursts: plain, then warm and cold (median, largest), each a
        // time after the first spawn.
        let row = bursts.lines().find(|l| l.starts_with(b));
        let row = row.unwrap_or_else(|| panic!("no {b} burst row: {text}"));
        let v = figures(row, 1);
        let [plain, warm, warm_max, cold, cold_max] = v[..] else {
            panic!("{row}");
        };
        assert!(plain > 0.0 && warm > 0.0 && cold > 0.0, "{row}");
        assert!(warm <= warm_max && cold <= cold_max, "{row}");
        // Every cold round's broker is gone, and so are its cgroups.
        let cold_groups: Vec<_> = std::fs::read_dir("/sys/fs/cgroup/cpuset")
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with("allot-bench-") && n.contains("-cold")
            })
            .collect();
        assert!(cold_groups.is_empty(), "{cold_groups:?}");
    }
    for b in backends.split(',') {
        let row = runs.lines().find(|l| l.starts_with(b));
        let row = row.unwrap_or_else(|| panic!("no {b} row: {text}"));
        let v = figures(row, 1);
        let [direct, run, start50, start99, exit50, exit99, p50, p90, p99] = v[..] else {
            panic!("{row}");
        };
        assert!(direct > 0.0 && run > direct, "{row}");
        assert!(start50 > 0.0 && start50 <= start99, "{row}");
        assert!(exit50 <= exit99, "{row}");
        assert!(p50 > 0.0 && p50 <= p90 && p90 <= p99, "{row}");
    }
}

/// `allot bench launch --vs`: two binaries measured in the same rounds, a
/// row each, named, each with the binary it measured said above the table.
#[test]
fn launch_cost_of_two_binaries_is_measured_side_by_side() {
    let _turn = machine_turn();
    let text = succeeds_within(
        &[
            "bench",
            "launch",
            "--runs",
            "3",
            "--backends",
            "affinity",
            "--vs",
            ALLOT,
        ],
        Duration::from_secs(120),
    );
    for (name, row) in [("allot A: ", "affinity A "), ("allot B: ", "affinity B ")] {
        let said = text.lines().find(|l| l.starts_with(name));
        assert!(said.is_some_and(|l| l.contains(ALLOT)), "{text}");
        let row = text.lines().find(|l| l.starts_with(row));
        let row = row.unwrap_or_else(|| panic!("no {row:?} row: {text}"));
        let v = figures(row, 2);
        assert_eq!(v.len(), 9, "{row}");
        assert!(v[0] > 0.0 && v[1] > v[0], "{row}");
    }
    // A second binary that is not there is refused before any round.
    let out = Command::new(ALLOT)
        .args([
            "bench",
            "launch",
            "--runs",
            "1",
            "--vs",
            "/nonexistent/allot",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--vs /nonexistent/allot: no such file"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A neighbour cell that guarantees itself one CPU (`sleep 30` under
/// `allot run --min 1`), once the broker lists it.
fn one_cpu_holder(d: &Daemon) -> Proc {
    let holder = Proc(
        allot_run(d, &["--min", "1", "--name", "holder", "--", "sleep", "30"])
            .spawn()
            .unwrap(),
    );
    assert!(eventually(Duration::from_secs(5), || d
        .status()
        .cells
        .len()
        == 1));
    holder
}

/// Ends an `allot run` with SIGTERM, which it forwards to its program (a
/// SIGKILL would leave the program behind), and reaps it.
fn end_forwarded(mut p: Proc) {
    let pid = rustix::process::Pid::from_raw(p.pid() as i32).unwrap();
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let _ = p.0.wait();
}

#[test]
fn a_program_started_on_one_cpu_may_still_grow_its_openmp_teams() {
    // A program whose cell holds one CPU when it starts (a neighbour
    // guarantees itself the other) gets the machine as its OpenMP ceiling:
    // the shim caps teams to the grant of the moment, so a smaller
    // OMP_NUM_THREADS would keep the program on one thread for life.
    let all = allot_topo::allowed_cpus().unwrap();
    if !prerequisite(all.len() >= 2, "needs two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let holder = one_cpu_holder(&d);
    let o = run_out(allot_run(
        &d,
        &[
            "--min",
            "1",
            "--",
            "sh",
            "-c",
            "echo $OMP_NUM_THREADS; grep Cpus_allowed_list /proc/self/status",
        ],
    ));
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some(all.len().to_string().as_str()), "{text}");
    if backend() == "cgroup1" {
        // It did start on one CPU (the case this test is about).
        let cpus = lines
            .next()
            .unwrap_or_default()
            .rsplit('\t')
            .next()
            .unwrap_or_default();
        assert_eq!(
            cpus.parse::<allot_topo::CpuSet>().map(|s| s.len()),
            Ok(1),
            "{text}"
        );
    }
    end_forwarded(holder);
}

#[test]
fn a_program_started_on_one_cpu_grows_when_its_neighbour_ends() {
    // Started while a neighbour holds the other CPU, the program runs on
    // one; when the neighbour ends, its cell grows and so must the
    // program's mask. (On the cgroup v1 backend `allot run` creates the
    // program on its own CPU, narrowing its mask for the clone: a mask put
    // back to the one CPU of the moment would be kept by the kernel and
    // stop the program growing with its cpuset.)
    let all = allot_topo::allowed_cpus().unwrap();
    if !prerequisite(all.len() >= 2, "needs two CPUs") {
        return;
    }
    let d = Daemon::start(backend(), &[]);
    let holder = one_cpu_holder(&d);
    assert!(eventually(Duration::from_secs(5), || cell_program_pids(&d)
        .len()
        == 1));
    let held = cell_program_pids(&d)[0];
    let grower = Proc(
        allot_run(&d, &["--min", "1", "--name", "grower", "--", "sleep", "30"])
            .spawn()
            .unwrap(),
    );
    assert!(eventually(Duration::from_secs(5), || cell_program_pids(&d)
        .len()
        == 2));
    let p = *cell_program_pids(&d).iter().find(|&&p| p != held).unwrap();
    assert!(
        eventually(Duration::from_secs(5), || thread_masks(p)
            .iter()
            .all(|m| m.parse::<allot_topo::CpuSet>().map(|s| s.len()) == Ok(1))),
        "{:?}",
        thread_masks(p)
    );
    end_forwarded(holder);
    let both = all.take_first(2).to_string();
    assert!(
        eventually(Duration::from_secs(5), || thread_masks(p)
            .iter()
            .all(|m| *m == both)),
        "{:?} (both: {both})\n{}",
        thread_masks(p),
        d.log()
    );
    end_forwarded(grower);
}

/// `--timeline` prints the run's own steps and the broker's for the cell,
/// in time order, and `allot status --json` carries the broker's part.
#[test]
fn the_timeline_shows_each_step_of_start_and_exit() {
    let d = Daemon::start("dry-run", &[]);
    // The program lives until the broker has watched it join (one that
    // exits before the broker reads the request is never a member): the
    // live cell's timeline in the status document shows it, and
    // `allot run` itself, joined.
    let mut child = allot_run(&d, &["--timeline", "--", "sh", "-c", "read _; exit 4"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(PATIENCE, || {
        d.status().cells.iter().any(|c| {
            c.timeline.as_ref().is_some_and(|t| {
                t.origin_ns > 0
                    && t.steps.iter().any(|s| s.step == "admission")
                    && t.steps.iter().filter(|s| s.step == "joined").count() == 2
            })
        })
    }));
    drop(child.stdin.take());
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(4), "the exit status still passes");
    let err = String::from_utf8_lossy(&o.stderr);
    let order = [
        "allot run started",
        "broker answering",
        "[broker] request",
        "[broker] admission admitted",
        "[broker] cgroup",
        "[broker] journal",
        "[broker] cpuset",
        "[broker] grant generation 1",
        "[broker] joined process",
        "registered as cell",
        "program started (process",
        "program exited",
    ];
    let mut from = 0;
    for step in order {
        let at = err[from..]
            .find(step)
            .unwrap_or_else(|| panic!("{step:?} missing or out of order in:\n{err}"));
        from += at;
    }
    // The request goes out before the libraries are made ready, and the
    // answer is taken after: the two overlap.
    let at = |step: &str| {
        err.find(step)
            .unwrap_or_else(|| panic!("{step:?} in:\n{err}"))
    };
    let mine = [
        "broker answering",
        "registration sent",
        "library directory checked",
        "shim ready",
        "thread composability manager ready",
        "program looked at",
        "registered as cell",
    ];
    assert!(mine.windows(2).all(|w| at(w[0]) < at(w[1])), "{err}");
    // The broker saw the program join and exit (its own pid).
    let pid = err
        .split("program started (process ")
        .nth(1)
        .and_then(|s| s.split(')').next())
        .unwrap();
    assert!(
        err.contains(&format!("[broker] joined process {pid}")),
        "{err}"
    );
    assert!(
        err.contains(&format!("[broker] exited process {pid}")),
        "{err}"
    );
    // Costs are shown for what the kernel was asked to do.
    assert!(
        err.lines()
            .any(|l| l.contains("[broker] cpuset") && l.ends_with(" ms)")),
        "{err}"
    );
}

/// The cell id `allot run --timeline` printed on `err`.
fn registered_cell(err: &str) -> u64 {
    err.split("registered as cell ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no cell id in:\n{err}"))
}

/// Between its turns the broker makes the next cell's directories, so a
/// registration takes them instead of making its own (the timeline says
/// "made ahead"); the next id's are made after it, and whatever was made
/// ahead goes when the broker stops.
#[test]
fn a_registration_takes_the_groups_made_ahead_and_none_outlive_the_broker() {
    if !prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        return;
    }
    let mut d = Daemon::start("cgroup1", &[]);
    let top = Path::new("/sys/fs/cgroup/cpuset").join(&d.cgroup);
    let cells = || -> Vec<String> {
        std::fs::read_dir(&top)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("cell-"))
            .collect()
    };
    // Made after the broker's first turn (its first tick at the latest).
    assert!(eventually(PATIENCE, || !cells().is_empty()));
    let o = run_out(allot_run(&d, &["--timeline", "--", "true"]));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let cell = registered_cell(&err);
    assert!(
        err.contains(&format!("[broker] cgroup cell-{cell} made ahead")),
        "{err}"
    );
    let next = format!("cell-{}", cell + 1);
    assert!(
        eventually(PATIENCE, || cells().contains(&next)
            && d.status().broker.made_ahead == Some(cell + 1)),
        "{next} was not made ahead: {:?}",
        cells()
    );
    d.stop();
    assert!(
        allot_testkit::broker::remove_leftovers(&d.cgroup),
        "the broker left directories behind"
    );
}

/// On cgroup v1 `allot run` moves itself into its cell (writing `0` to the
/// join files the broker hands a launcher it trusts) instead of being
/// moved by pid, which waits for an RCU grace period after a quiet spell;
/// the program it forks then starts inside, and the broker's own move of
/// the program is skipped as it is there already.
#[test]
fn allot_run_moves_itself_into_its_cgroup_cell() {
    if !prerequisite(
        v1_cpuset_writable(),
        "a writable cgroup v1 cpuset hierarchy (root)",
    ) {
        return;
    }
    let d = Daemon::start("cgroup1", &[]);
    let o = run_out(allot_run(
        &d,
        &["--timeline", "--", "cat", "/proc/self/cgroup"],
    ));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let cell = registered_cell(&err);
    let out = String::from_utf8_lossy(&o.stdout);
    let want = format!("/{}/cell-{cell}", d.cgroup);
    for ctrl in ["cpuset", "cpu"] {
        assert!(
            out.lines().any(|l| {
                let mut p = l.splitn(3, ':');
                let (_, c, path) = (p.next(), p.next().unwrap_or(""), p.next().unwrap_or(""));
                c.split(',').any(|x| x == ctrl) && path == want
            }),
            "the program is not in {want} for {ctrl}:\n{out}"
        );
    }
    assert!(err.contains("(moves itself in)"), "{err}");
}
