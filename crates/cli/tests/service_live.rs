//! Running the broker as a service: Prometheus metrics, socket activation
//! (through systemd's own `systemd-socket-activate`), the units checked by
//! `systemd-analyze verify`, the install script, `--check-config`.
//!
//! Nothing here installs onto the machine or talks to the machine's systemd:
//! the units are verified offline and the install script is staged under a
//! temporary root.

mod common;

use allot_testkit::{eventually, prerequisite};
use common::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `GET path` on `addr`; the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the metrics port");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: test\r\n\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").expect("an HTTP answer");
    (head.lines().next().unwrap().to_string(), body.to_string())
}

/// The address the broker logged that it serves its metrics at. (The
/// broker's socket accepts connections a moment before that line is
/// written: wait for it.)
fn metrics_addr(d: &Daemon) -> String {
    eventually(Duration::from_secs(10), || {
        d.log().contains("metrics at http://")
    });
    let log = d.log();
    log.split("metrics at http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("no metrics address logged: {log}"))
        .to_string()
}

/// The value of the sample `series` (exact name and labels).
fn sample(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.rsplit_once(' ').filter(|(s, _)| *s == series))
        .and_then(|(_, v)| v.parse().ok())
}

#[test]
fn metrics_are_served_while_cells_run() {
    let d = Daemon::start("dry-run", &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&d);
    let (status, body) = get(&addr, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    assert_eq!(sample(&body, "allot_cells"), Some(0.0), "{body}");
    assert_eq!(
        sample(&body, "allot_machine_cpus"),
        Some(allot_testkit::cpus() as f64)
    );
    // The conventions every exporter follows: build information and the
    // broker's own process.
    let build = format!(
        "allot_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(sample(&body, &build), Some(1.0), "{body}");
    assert!(
        sample(&body, "process_open_fds").is_some_and(|n| n >= 3.0),
        "{body}"
    );
    assert!(
        sample(&body, "process_resident_memory_bytes").is_some_and(|b| b > 0.0),
        "{body}"
    );
    let started = sample(&body, "process_start_time_seconds").unwrap_or(0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        started <= now && started > now - 3600.0,
        "{started} vs {now}"
    );

    // A program that ends when told, its stdin closed (killing
    // `allot run` would leave it running in its cell).
    let mut job = allot_run(&d, &["--no-start", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut body = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            body = get(&addr, "/metrics").1;
            sample(&body, "allot_cells") == Some(1.0)
        }),
        "the cell never showed: {body}"
    );
    assert_eq!(sample(&body, "allot_admissions_total"), Some(1.0));
    let cpus = body
        .lines()
        .find(|l| l.starts_with("allot_cell_cpus{cell="))
        .unwrap_or_else(|| panic!("no per-cell line: {body}"));
    let uid = rustix::process::geteuid().as_raw();
    assert!(cpus.contains(&format!("uid=\"{uid}\"")), "{cpus}");
    assert!(
        !cpus.contains("name="),
        "names shown without show_other_users: {cpus}"
    );

    // The program ends: the cell ends and its reclaim is timed.
    drop(job.stdin.take());
    assert!(job.wait().unwrap().success());
    assert!(
        eventually(Duration::from_secs(10), || {
            body = get(&addr, "/metrics").1;
            sample(&body, "allot_cells_ended_total") == Some(1.0)
        }),
        "the cell's end was not counted: {body}"
    );
    assert_eq!(sample(&body, "allot_reclaim_seconds_count"), Some(1.0));
    assert_eq!(
        sample(&body, "allot_reclaim_seconds_bucket{le=\"+Inf\"}"),
        Some(1.0)
    );
    assert!(sample(&body, "allot_broker_turn_seconds_count").unwrap() >= 2.0);

    let (status, _) = get(&addr, "/elsewhere");
    assert!(status.contains("404"), "{status}");
}

/// The CPU time a cell's processes use is a per-cell counter, read from
/// the backend (the cgroup's usage, or the processes' own on the affinity
/// backend).
#[test]
fn a_busy_cells_cpu_seconds_count_up() {
    let d = Daemon::start(backend(), &["--metrics", "127.0.0.1:0"]);
    let addr = metrics_addr(&d);
    let job = cell(&d, "spin", &["--no-start"], SPIN);
    let _k = Killed(&d, vec![job]);
    let used = |body: &str| {
        body.lines()
            .find(|l| l.starts_with("allot_cell_cpu_seconds_total{cell="))
            .and_then(|l| l.rsplit_once(' '))
            .and_then(|(_, v)| v.parse::<f64>().ok())
    };
    let mut body = String::new();
    assert!(
        eventually(Duration::from_secs(20), || {
            body = get(&addr, "/metrics").1;
            used(&body).is_some_and(|s| s >= 0.3)
        }),
        "the spinning cell's CPU seconds never reached 0.3: {body}"
    );
    let before = used(&body).unwrap();
    assert!(
        eventually(Duration::from_secs(20), || {
            body = get(&addr, "/metrics").1;
            used(&body).is_some_and(|s| s > before)
        }),
        "the counter did not grow past {before}: {body}"
    );
}

/// As a `Type=notify` service the broker tells the manager when it serves,
/// that its loop still turns, and when it stops; with stderr the
/// journal's stream (`JOURNAL_STREAM` naming it), each log line carries
/// its priority. The manager here is a datagram socket the test reads.
#[test]
fn the_service_manager_hears_ready_watchdog_and_stopping() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify");
    let manager = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
    manager
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut d = Daemon::start_later("dry-run", &[]);
    // The broker's stderr is its log file: name it as journald names the
    // stream it hands a service.
    let log = d.log_path();
    std::fs::write(&log, "").unwrap();
    let st = std::fs::metadata(&log).unwrap();
    d.env = vec![
        ("NOTIFY_SOCKET".into(), path.display().to_string()),
        ("WATCHDOG_USEC".into(), "200000".into()),
        (
            "JOURNAL_STREAM".into(),
            format!("{}:{}", st.dev(), st.ino()),
        ),
    ];
    d.spawn();
    let recv = || {
        let mut b = [0u8; 512];
        let n = manager.recv(&mut b).expect("a notification within 10 s");
        String::from_utf8_lossy(&b[..n]).into_owned()
    };
    let ready = recv();
    assert!(
        ready.starts_with("READY=1\nSTATUS=serving 0 cells"),
        "{ready:?}"
    );
    assert_eq!(recv(), "WATCHDOG=1", "the loop reports that it turns");
    assert_eq!(d.stop(), Some(0));
    let stopping = std::iter::repeat_with(recv)
        .find(|m| m != "WATCHDOG=1")
        .unwrap();
    assert!(stopping.starts_with("STOPPING=1"), "{stopping:?}");
    let text = d.log();
    assert!(
        text.lines()
            .any(|l| l.starts_with("<6>allotd [") && l.contains("serving")),
        "{text}"
    );
    assert!(
        text.lines().all(|l| l.is_empty() || l.starts_with('<')),
        "every line carries a priority: {text}"
    );
}

#[test]
fn a_taken_metrics_port_is_a_clear_start_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--backend", "dry-run", "--socket"])
            .arg(dir.path().join("s.sock"))
            .args(["--metrics", &format!("127.0.0.1:{port}")]),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot serve metrics") && err.contains("in use"),
        "{err}"
    );
    assert!(
        !dir.path().join("s.sock").exists(),
        "socket left behind by a failed start"
    );
}

fn socket_activate() -> Option<PathBuf> {
    let p = Path::new("/usr/bin/systemd-socket-activate");
    prerequisite(p.exists(), "systemd-socket-activate (Debian's systemd)").then(|| p.into())
}

/// `systemd-socket-activate` listening on `listen`, running the broker for
/// `serve`; stderr to `log`.
fn activated(tool: &Path, listen: &Path, serve: &Path, log: &Path) -> Child {
    Command::new(tool)
        .arg("--seqpacket")
        .arg("-l")
        .arg(listen)
        .arg("--")
        .arg(ALLOT)
        .args([
            "daemon",
            "--backend",
            "dry-run",
            "--idle-exit",
            "1",
            "--socket",
        ])
        .arg(serve)
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap()
}

#[test]
fn a_socket_passed_by_systemd_is_served_and_kept() {
    let Some(tool) = socket_activate() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("allot.sock");
    let log = dir.path().join("log");
    let mut sa = activated(&tool, &sock, &sock, &log);
    assert!(
        eventually(Duration::from_secs(5), || sock.exists()),
        "systemd-socket-activate did not listen"
    );
    // The first connection starts the broker, which serves it.
    let out = allot_testkit::output_within(
        Command::new(ALLOT).arg("status").arg("--socket").arg(&sock),
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // Idle for a second, the broker exits (and the tool with it); the
    // socket is systemd's, so it stays for the next start.
    let exited = eventually(Duration::from_secs(10), || {
        matches!(sa.try_wait(), Ok(Some(_)))
    });
    let _ = sa.kill();
    let _ = sa.wait();
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(out.status.success(), "{text}{log}");
    assert!(exited, "the broker did not exit when idle: {log}");
    assert!(sock.exists(), "the broker removed systemd's socket: {log}");
    assert!(text.contains("no cells"), "{text}");
    assert!(
        log.contains("serving the socket systemd passed"),
        "not socket-activated: {log}"
    );
}

#[test]
fn a_passed_socket_for_another_path_is_refused_with_the_fix() {
    let Some(tool) = socket_activate() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let listen = dir.path().join("a.sock");
    let serve = dir.path().join("b.sock");
    let log = dir.path().join("log");
    let mut sa = activated(&tool, &listen, &serve, &log);
    assert!(eventually(Duration::from_secs(5), || listen.exists()));
    let _ = allot_testkit::output_within(
        Command::new(ALLOT)
            .arg("status")
            .arg("--socket")
            .arg(&listen),
        Duration::from_secs(20),
    );
    let mut text = String::new();
    let refused = eventually(Duration::from_secs(10), || {
        text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("is bound to")
    });
    let _ = sa.kill();
    let _ = sa.wait();
    assert!(refused, "{text}");
    assert!(
        text.contains("ListenSequentialPacket=") && text.contains("--socket"),
        "{text}"
    );
    assert!(!serve.exists(), "the broker listened on its own path");
}

/// The repository's units with the binary and config paths of this test.
fn units_for_test(dir: &Path, config: &Path) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../dist/systemd");
    ["allotd.socket", "allotd.service"]
        .iter()
        .map(|u| {
            let text = std::fs::read_to_string(root.join(u)).unwrap();
            let text = text
                .replace("/usr/local/bin/allot", ALLOT)
                .replace("/etc/allot/allotd.toml", &config.display().to_string());
            let p = dir.join(u);
            std::fs::write(&p, text).unwrap();
            p
        })
        .collect()
}

fn analyze() -> bool {
    prerequisite(
        Path::new("/usr/bin/systemd-analyze").exists(),
        "systemd-analyze (Debian's systemd)",
    )
}

#[test]
fn the_units_pass_systemd_analyze_verify() {
    if !analyze() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("allotd.toml");
    std::fs::write(&config, "# empty\n").unwrap();
    let units = units_for_test(dir.path(), &config);
    let out = allot_testkit::output_within(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .args(&units),
        Duration::from_secs(60),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Problems in a unit are warnings with exit status 0: none allowed.
    assert!(
        !err.contains("allotd."),
        "systemd-analyze complains about the units: {err}"
    );

    // And the check can fail: a misspelt setting is reported.
    let bad = dir.path().join("allotd.service");
    let text = std::fs::read_to_string(&bad).unwrap();
    std::fs::write(
        &bad,
        text.replace("Restart=on-failure", "Restart=sometimes"),
    )
    .unwrap();
    let out = allot_testkit::output_within(
        Command::new("systemd-analyze")
            .args(["verify", "--man=no"])
            .arg(&bad),
        Duration::from_secs(60),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("allotd.service"),
        "a bad unit was not reported"
    );
}

#[test]
fn the_service_runs_the_same_command_check_config_accepts() {
    // ExecStartPre's check, with the unit's own arguments and an empty
    // configuration file like the one the install script writes.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("allotd.toml");
    std::fs::write(&config, "# empty\n").unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--check-config", "--socket"])
            .arg(dir.path().join("allot.sock"))
            .arg("--config")
            .arg(&config),
        Duration::from_secs(20),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("configuration OK"), "{text}");
    assert!(text.contains("metrics           off"), "{text}");

    std::fs::write(&config, "reserve = 4096\n").unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--check-config", "--config"])
            .arg(&config),
        Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("reserve = 4096 leaves no CPU"), "{err}");

    std::fs::write(&config, "metrics = \"localhost\"\n").unwrap();
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--check-config", "--config"])
            .arg(&config),
        Duration::from_secs(20),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("IP:PORT"));
}

#[test]
fn the_install_script_stages_units_completions_and_man_pages() {
    let root = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/install-service.sh");
    let out = allot_testkit::output_within(
        Command::new("bash")
            .arg(&script)
            .arg("--root")
            .arg(root.path())
            .args(["--prefix", "/opt/allot", "--bin", ALLOT]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = root.path();
    let service = std::fs::read_to_string(r.join("etc/systemd/system/allotd.service")).unwrap();
    assert!(
        service.contains("ExecStart=/opt/allot/bin/allot daemon"),
        "{service}"
    );
    assert!(r.join("etc/systemd/system/allotd.socket").exists());
    assert!(r.join("opt/allot/bin/allot").exists());
    assert!(r.join("etc/allot/allotd.toml").exists());
    let bash =
        std::fs::read_to_string(r.join("usr/share/bash-completion/completions/allot")).unwrap();
    assert!(
        bash.contains("complete") && bash.contains("--launch-threads"),
        "bash completion lacks run's options"
    );
    // Options with a fixed set of values complete to those values, not
    // to file names.
    for values in [
        "\"any llc numa\"",
        "\"pipe fifo off\"",
        "\"auto cgroup2 cgroup1 affinity dry-run\"",
        "\"fair-share priority goals\"",
    ] {
        assert!(bash.contains(values), "no completion to {values}");
    }
    assert!(r.join("usr/share/zsh/vendor-completions/_allot").exists());
    assert!(
        r.join("usr/share/fish/vendor_completions.d/allot.fish")
            .exists()
    );
    let man = std::fs::read_to_string(r.join("opt/allot/share/man/man1/allot-run.1")).unwrap();
    assert!(
        man.contains(".TH") && man.contains("launch\\-threads"),
        "{man}"
    );
    assert!(
        !r.join("opt/allot/share/man/man1/allot-help.1").exists(),
        "a page for clap's help command"
    );
    // What the pages cite exists: no allot-help(1); allotd.toml(5) and
    // the documents are installed; run's page says how it exits.
    let top = std::fs::read_to_string(r.join("opt/allot/share/man/man1/allot.1")).unwrap();
    assert!(!top.contains("allot\\-help"), "{top}");
    for section in ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES"] {
        assert!(
            man.contains(&format!(".SH \"{section}\"")),
            "no {section}: {man}"
        );
    }
    let toml = std::fs::read_to_string(r.join("opt/allot/share/man/man5/allotd.toml.5")).unwrap();
    assert!(
        toml.contains(".TH allotd.toml 5") && toml.contains("cgroup_name"),
        "{toml}"
    );
    assert!(r.join("opt/allot/share/doc/allot/operations.md").exists());
    let config = std::fs::read_to_string(r.join("etc/allot/allotd.toml")).unwrap();
    assert!(config.contains("man 5 allotd.toml"), "{config}");
}
