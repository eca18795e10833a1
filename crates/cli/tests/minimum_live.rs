//! The system minimum, live (`confine_unmanaged`): processes that asked
//! for nothing run on the reserve, one that acquires resources of its own
//! leaves it, and the broker's exit lets everyone go. The "outside" here
//! is a cgroup this test makes for processes it starts (`unmanaged_from`):
//! a test never confines the machine's own processes (see DEVELOPERS.md).

mod common;

use allot_require::{Blocks, Need};
use common::*;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

fn allowed(pid: u32) -> String {
    allot_testkit::thread_masks(pid)
        .into_iter()
        .map(|(_, m)| m)
        .next()
        .unwrap_or_default()
}

/// The role: waits until it runs on CPU `ALLOT_MIN_RESERVE` alone, says
/// so, then holds CPU `ALLOT_MIN_TAKE` through the broker and says where
/// it may run now.
#[test]
fn minimum_child_role() {
    let (Ok(reserve), Ok(take)) = (
        std::env::var("ALLOT_MIN_RESERVE"),
        std::env::var("ALLOT_MIN_TAKE"),
    ) else {
        return;
    };
    let me = std::process::id();
    assert!(
        eventually(Duration::from_secs(10), || allowed(me) == reserve),
        "never confined: {}",
        allowed(me)
    );
    println!("confined {}", allowed(me));
    let socket = std::env::var("ALLOT_SOCKET").unwrap();
    let m = allot_topo::discover(std::path::Path::new("/sys"), "m", None).unwrap();
    let rt = Blocks::with_broker(m, false, Some(socket.as_ref())).into_static();
    assert!(rt.coordinated());
    let _s = rt
        .enter(vec![Need::device("cpu", take.as_str(), 1.0)])
        .unwrap();
    println!("holding, allowed {}", allowed(me));
    std::thread::sleep(Duration::from_secs(30));
}

#[test]
fn processes_that_asked_for_nothing_run_on_the_reserve() {
    if backend() != "cgroup1" || !prerequisite(allot_testkit::cpus() >= 2, "two CPUs") {
        return;
    }
    let all = allot_topo::allowed_cpus().unwrap();
    let cpuset = std::path::Path::new("/sys/fs/cgroup/cpuset");
    let source = cpuset.join(allot_testkit::unique("outside"));
    let _guard = allot_testkit::CgroupDirs(vec![source.clone()]);
    std::fs::create_dir(&source).unwrap();
    let mems = std::fs::read_to_string(cpuset.join("cpuset.mems")).unwrap();
    std::fs::write(source.join("cpuset.cpus"), all.to_string()).unwrap();
    std::fs::write(source.join("cpuset.mems"), mems.trim()).unwrap();
    let join = |pid: u32| std::fs::write(source.join("cgroup.procs"), pid.to_string()).unwrap();
    let idle = sleeper();
    join(idle.pid());

    let conf = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        conf.path(),
        format!(
            "reserve = 1\nconfine_unmanaged = true\nunmanaged_from = \"{}\"\n",
            source.display()
        ),
    )
    .unwrap();
    let mut d = Daemon::start("cgroup1", &["--config", conf.path().to_str().unwrap()]);
    let reserve = d.status().machine.reserve;
    assert_eq!(reserve.split(',').count(), 1, "one reserved CPU: {reserve}");
    assert!(
        eventually(Duration::from_secs(5), || allowed(idle.pid()) == reserve),
        "the idle process runs on {}, not the reserve {reserve}\n{}",
        allowed(idle.pid()),
        d.log()
    );
    // A process outside the cells that acquires a CPU leaves the reserve.
    let take = all.iter().find(|c| c.to_string() != reserve).unwrap();
    let argv = role("minimum_child_role");
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .env("ALLOT_MIN_RESERVE", &reserve)
        .env("ALLOT_MIN_TAKE", take.to_string())
        .env("ALLOT_SOCKET", &d.socket)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    join(child.id());
    let lines: Vec<String> = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains("confined") || l.contains("holding"))
        .take(2)
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        lines.len() == 2
            && lines[0].ends_with(&format!("confined {reserve}"))
            && lines[1].ends_with(&format!("allowed {all}")),
        "{lines:?}\n{}",
        d.log()
    );
    // The broker's exit lets everyone go.
    d.stop();
    assert_eq!(allowed(idle.pid()), all.to_string());
    assert!(!cpuset.join(&d.cgroup).join("system").exists());
}
