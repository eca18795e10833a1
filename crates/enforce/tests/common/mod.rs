//! Helpers for the live tests: processes and cgroups the test made, cleaned
//! up on drop even when the test panics.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed and reaped on drop.
pub struct Proc(pub Child);

impl Proc {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A Python process that starts `early` threads now and `late` more after
/// `delay_ms`, then sleeps.
pub fn threaded(early: u32, late: u32, delay_ms: u32) -> Proc {
    let code = format!(
        "import threading,time\n\
         def s(): time.sleep(60)\n\
         [threading.Thread(target=s,daemon=True).start() for _ in range({early})]\n\
         time.sleep({delay_ms}/1000)\n\
         [threading.Thread(target=s,daemon=True).start() for _ in range({late})]\n\
         time.sleep(60)\n"
    );
    let child = Command::new("python3")
        .arg("-c")
        .arg(code)
        .stdin(Stdio::null())
        .spawn()
        .expect("python3 runs");
    Proc(child)
}

/// A shell that forks `n` sleeping children.
pub fn forking(n: u32) -> Proc {
    let script = format!("for i in $(seq {n}); do sleep 60 & done; wait");
    Proc(
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .spawn()
            .expect("sh runs"),
    )
}

/// Waits until `f` holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    f()
}

/// `Cpus_allowed_list` of every thread of `pid`.
pub fn thread_masks(pid: u32) -> Vec<(u32, String)> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for e in rd.flatten() {
            let tid: u32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
            if let Ok(s) = std::fs::read_to_string(e.path().join("status"))
                && let Some(l) = s.lines().find(|l| l.starts_with("Cpus_allowed_list:"))
            {
                out.push((tid, l.split_whitespace().nth(1).unwrap_or("").to_string()));
            }
        }
    }
    out
}

/// Directories removed (deepest first) on drop; processes in them are
/// moved back to the hierarchy root first so removal cannot fail on them.
pub struct CgroupDirs(pub Vec<PathBuf>);

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for d in self.0.iter().rev() {
            if let Ok(rd) = std::fs::read_dir(d) {
                let mut kids: Vec<PathBuf> = rd
                    .flatten()
                    .map(|e| e.path())
                    .filter(|p| p.is_dir())
                    .collect();
                kids.sort();
                for k in kids.iter().rev() {
                    move_out(k);
                    let _ = std::fs::remove_dir(k);
                }
            }
            move_out(d);
            let _ = std::fs::remove_dir(d);
        }
    }
}

fn move_out(dir: &Path) {
    let Ok(procs) = std::fs::read_to_string(dir.join("cgroup.procs")) else {
        return;
    };
    let mut root = dir.to_path_buf();
    while root.join("..").join("cgroup.procs").exists() && root.parent().is_some() {
        let p = root.parent().unwrap().to_path_buf();
        if !p.join("cgroup.procs").exists() {
            break;
        }
        root = p;
    }
    for pid in procs.split_whitespace() {
        let _ = std::fs::write(root.join("cgroup.procs"), pid);
    }
}

/// Whether we may write the v1 cpuset hierarchy.
pub fn v1_writable() -> bool {
    let m = allot_enforce::detect::Mounts::read();
    match m.v1() {
        Some(v1) => rustix::process::getuid().is_root() && v1.cpuset.join("cpuset.cpus").exists(),
        None => false,
    }
}

pub fn unique(tag: &str) -> String {
    format!("allot-test-{tag}-{}", std::process::id())
}

/// A plain `sleep 60`.
pub fn sleeper() -> Proc {
    Proc(Command::new("sleep").arg("60").spawn().expect("sleep runs"))
}
