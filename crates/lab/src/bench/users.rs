//! `allot bench users`: two users probe one broker for what they may do
//! to each other (docs/security.md, "A request may do only what its
//! sender could do").
//!
//! The users are threads of this process, each switched to a uid of its
//! own with the per-thread `setresuid` call, as in `allot bench load`: the
//! broker takes a connection's user from the thread that connects. Each
//! user's member processes are `sleep`s that its thread starts, so they
//! are that user's. No account is made; the uids are unassigned numbers
//! from [`FIRST_UID`]. Needs root.
//!
//! The broker is a private one (its own socket, state directory and cgroup
//! name, removed at the end), or with `--socket` one the operator started
//! for the purpose. Every check is an attack one user makes on the other,
//! or on everyone, and what the broker must answer. The probe prints one
//! line per check and exits 1 if any fails.
//!
//! All the users' threads share this process's pid, so only the first
//! user holds CPUs through the ledger (which counts holdings by process).

use super::broker::PrivateBroker;
use super::load::{become_user, kill_all, sleeper};
use allot_client::{Client, ClientError};
use allot_proto::msg::{ErrorCode, LedgerItem, Reply};
use allot_proto::{Conn, Request};
use allot_spec::CellSpec;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::mpsc;

/// The first user's uid; the second is the next.
pub const FIRST_UID: u32 = 440_000;

/// Arguments of `allot bench users`.
#[derive(Debug, clap::Args)]
pub struct UsersArgs {
    /// Probe the broker at this socket (started for the purpose: the probe
    /// registers cells and holds CPUs in it) instead of a private one. Its
    /// socket directory must let other users reach it.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Enforcement backend of the private broker [default: cgroup1 with a
    /// v1 cpuset hierarchy, else affinity].
    #[arg(long, value_name = "BACKEND")]
    backend: Option<String>,
}

/// What a user's thread keeps between the steps asked of it.
struct Agent {
    socket: PathBuf,
    client: Client,
    /// Its `sleep`s (member processes), killed when it ends.
    kids: Vec<Child>,
}

impl Agent {
    /// Starts one more `sleep` of this user; its pid.
    fn sleeper(&mut self) -> Result<u32, String> {
        let k = sleeper()?;
        let pid = k.id();
        self.kids.push(k);
        Ok(pid)
    }

    /// Registers a cell of `spec` for `members`, not waiting.
    fn register(
        &mut self,
        name: &str,
        spec: CellSpec,
        members: &[u32],
    ) -> Result<u64, ClientError> {
        self.client
            .register(name, spec, members, false, false, |_, _| {})
            .map(|r| r.cell)
    }
}

/// A step a user's thread runs for the probe.
type Step = Box<dyn FnOnce(&mut Agent) + Send>;

/// One user: a thread of its uid that runs the steps it is sent.
struct User {
    uid: u32,
    steps: Option<mpsc::Sender<Step>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl User {
    fn start(uid: u32, socket: &Path) -> Result<User, String> {
        let (tx, rx) = mpsc::channel::<Step>();
        let (ready_tx, ready) = mpsc::channel::<Result<(), String>>();
        let socket = socket.to_path_buf();
        let thread = std::thread::spawn(move || {
            let agent = become_user(uid).and_then(|()| {
                let client = Client::connect(&socket).map_err(|e| format!("connect: {e}"))?;
                Ok(Agent {
                    socket,
                    client,
                    kids: Vec::new(),
                })
            });
            let mut agent = match agent {
                Ok(a) => {
                    let _ = ready_tx.send(Ok(()));
                    a
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("uid {uid}: {e}")));
                    return;
                }
            };
            for step in rx {
                step(&mut agent);
            }
            kill_all(&mut agent.kids);
        });
        ready
            .recv()
            .map_err(|_| format!("uid {uid}: its thread ended"))??;
        Ok(User {
            uid,
            steps: Some(tx),
            thread: Some(thread),
        })
    }

    /// Runs `f` on this user's thread; its result.
    fn on<R: Send + 'static>(&self, f: impl FnOnce(&mut Agent) -> R + Send + 'static) -> R {
        let (tx, rx) = mpsc::channel();
        let step: Step = Box::new(move |a| {
            let _ = tx.send(f(a));
        });
        self.steps
            .as_ref()
            .expect("running")
            .send(step)
            .expect("the user's thread runs");
        rx.recv().expect("the user's thread answers")
    }
}

impl Drop for User {
    fn drop(&mut self) {
        drop(self.steps.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether `what` (a request's outcome, the cell it made) was refused
/// with one of `codes`; else what happened instead.
fn refused(what: Result<u64, ClientError>, codes: &[ErrorCode]) -> Result<(), String> {
    match what {
        Err(e) if e.code().is_some_and(|c| codes.contains(&c)) => Ok(()),
        Err(e) => Err(format!("refused, but not as {codes:?}: {e}")),
        Ok(cell) => Err(format!("allowed (cell {cell})")),
    }
}

/// `n` CPUs from 0 as exclusive ledger items.
fn cpus(n: u32) -> Vec<LedgerItem> {
    (0..n)
        .map(|dev| LedgerItem {
            kind: "cpu".into(),
            dev,
            amount: 1.0,
            shared: false,
        })
        .collect()
}

/// Runs `allot bench users`.
pub fn run(a: UsersArgs) -> Result<i32, String> {
    super::interrupt::install();
    if !rustix::process::geteuid().is_root() {
        return Err(
            "allot bench users needs root: its users are uids it switches threads to".into(),
        );
    }
    let mut private = None;
    let socket = match &a.socket {
        Some(s) => s.clone(),
        None => {
            let allot = crate::product()?;
            let backend = a.backend.clone().unwrap_or_else(|| {
                if Path::new("/sys/fs/cgroup/cpuset/cpuset.cpus").exists() {
                    "cgroup1".into()
                } else {
                    "affinity".into()
                }
            });
            let b = PrivateBroker::start_with(&allot, &backend, &[])?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(b.dir(), std::fs::Permissions::from_mode(0o755))
                .map_err(|e| e.to_string())?;
            println!("users: a private broker, {backend} backend");
            let s = b.socket().to_path_buf();
            private = Some(b);
            s
        }
    };
    let (a_user, b_user) = (
        User::start(FIRST_UID, &socket)?,
        User::start(FIRST_UID + 1, &socket)?,
    );
    let checks = probe(&a_user, &b_user);
    drop((a_user, b_user));
    let mut failed = 0;
    for (what, r) in &checks {
        match r {
            Ok(()) => println!("ok    {what}"),
            Err(why) => {
                failed += 1;
                println!("FAIL  {what}: {why}");
            }
        }
    }
    println!("users: {} checks, {failed} failed", checks.len());
    if let Some(mut b) = private
        && !b.stop()
    {
        println!("FAIL  the private broker left cgroups behind");
        failed += 1;
    }
    Ok(i32::from(failed > 0))
}

/// The checks: (what must hold, whether it did).
fn probe(a: &User, b: &User) -> Vec<(&'static str, Result<(), String>)> {
    let mut out: Vec<(&'static str, Result<(), String>)> = Vec::new();
    let (cpus_n, backend) = a.on(|g| {
        g.client
            .hello("probe")
            .map(|w| (w.cpus, w.backend))
            .unwrap_or((1, String::new()))
    });
    let setup = a.on(|g| -> Result<(u64, u32), String> {
        let pid = g.sleeper()?;
        let cell = g
            .register("probe-secret-a", CellSpec::default(), &[pid])
            .map_err(|e| format!("user A's own cell: {e}"))?;
        Ok((cell, pid))
    });
    let (cell_a, pid_a) = match setup {
        Ok(x) => x,
        Err(e) => return vec![("user A registers a cell of its own", Err(e))],
    };
    out.push((
        "B cannot end A's cell",
        b.on(move |g| {
            refused(
                g.client.release(cell_a).map(|()| cell_a),
                &[ErrorCode::PermissionDenied, ErrorCode::UnknownCell],
            )
        }),
    ));
    out.push((
        "B cannot make A's process a member of a cell of its own",
        b.on(move |g| {
            refused(
                g.register("probe-b", CellSpec::default(), &[pid_a]),
                &[ErrorCode::PermissionDenied],
            )
        }),
    ));
    out.push((
        "B cannot add A's process to its own cell",
        b.on(move |g| {
            let pid = g.sleeper()?;
            let mine = g
                .register("probe-b", CellSpec::default(), &[pid])
                .map_err(|e| format!("B's own cell: {e}"))?;
            let r = refused(
                g.client.add_member(mine, pid_a).map(|()| mine),
                &[ErrorCode::PermissionDenied],
            );
            let _ = g.client.release(mine);
            r
        }),
    ));
    let a_uid = a.uid;
    out.push((
        "B's status shows A's cell without its name or processes",
        b.on(move |g| {
            let st = g.client.status().map_err(|e| e.to_string())?;
            let c = st
                .cells
                .iter()
                .find(|c| c.id == cell_a)
                .ok_or("A's cell is not listed at all")?;
            let json = serde_json::to_string(&st).unwrap_or_default();
            if !c.private || !c.name.is_empty() || !c.pids.is_empty() || c.uid != a_uid {
                Err(format!("shown as {c:?}"))
            } else if json.contains("probe-secret-a") {
                Err("A's cell name appears in B's status".into())
            } else {
                Ok(())
            }
        }),
    ));
    out.push((
        "A cannot take every CPU as an exclusive cell",
        a.on(move |g| {
            let pid = g.sleeper()?;
            let all = CellSpec {
                min: cpus_n,
                exclusive: true,
                ..CellSpec::default()
            };
            refused(g.register("probe-all", all, &[pid]), &[ErrorCode::Limit])
        }),
    ));
    out.push((
        "A cannot hold every CPU through require outside its cells",
        a.on(move |g| -> Result<(), String> {
            let mut c = Conn::connect(&g.socket).map_err(|e| e.to_string())?;
            let r = match c.call(&Request::kind_try(cpus(cpus_n))) {
                Ok((
                    Reply::Error {
                        code: ErrorCode::Limit,
                        ..
                    },
                    _,
                )) => Ok(()),
                Ok((Reply::Ok, _)) => Err("allowed".to_string()),
                Ok((other, _)) => Err(format!("refused, but not as a limit: {other:?}")),
                Err(e) => Err(e.to_string()),
            };
            let _ = c.send(&Request::KindRelease {
                items: cpus(cpus_n),
            });
            r
        }),
    ));
    const CONFINED: &str = "A cannot take its process out of root's cpuset cgroup";
    match confined_elsewhere(a, cpus_n, &backend) {
        Ok(r) => out.push((CONFINED, r)),
        Err(why) => println!("skip  {CONFINED}: {why}"),
    }
    let _ = a.on(move |g| g.client.release(cell_a));
    out
}

/// A cpuset cgroup root makes for the probe, removed when dropped (its
/// processes must be gone first).
struct RootsGroup(PathBuf);

impl Drop for RootsGroup {
    fn drop(&mut self) {
        for _ in 0..50 {
            if std::fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        eprintln!("users: cannot remove {}", self.0.display());
    }
}

/// Root confines a process of A to CPU 0 in a cpuset cgroup of its own;
/// A then asks for it in a cell, which would take it out of root's
/// confinement: refused. `Err(why not)` where it does not apply: a backend
/// that moves no process between cgroups (affinity narrows a process
/// within its cpuset, never out of it), no cpuset hierarchy mounted
/// (cgroup v1's, or v2's with cpuset enabled at its root, which the probe
/// does not change), or a broker of a single CPU.
fn confined_elsewhere(a: &User, cpus_n: u32, backend: &str) -> Result<Result<(), String>, String> {
    if !backend.starts_with("cgroup") {
        return Err(format!(
            "the {backend} backend moves no process between cgroups"
        ));
    }
    let v1 = Path::new("/sys/fs/cgroup/cpuset");
    let v2 = Path::new("/sys/fs/cgroup");
    let mount = if v1.join("cpuset.cpus").exists() {
        v1
    } else if std::fs::read_to_string(v2.join("cgroup.subtree_control"))
        .is_ok_and(|s| s.split_whitespace().any(|c| c == "cpuset"))
    {
        v2
    } else {
        return Err("no cpuset hierarchy mounted".into());
    };
    if cpus_n < 2 {
        return Err("the broker manages one CPU".into());
    }
    let group = RootsGroup(mount.join(format!("allot-probe-{}", std::process::id())));
    let made = (|| -> std::io::Result<()> {
        std::fs::create_dir(&group.0)?;
        std::fs::write(group.0.join("cpuset.cpus"), "0")?;
        let mems = std::fs::read_to_string(mount.join("cpuset.mems"))?;
        if !mems.trim().is_empty() {
            std::fs::write(group.0.join("cpuset.mems"), mems.trim())?;
        }
        Ok(())
    })();
    if let Err(e) = made {
        return Ok(Err(format!("cannot make {}: {e}", group.0.display())));
    }
    let pid = match a.on(|g| g.sleeper()) {
        Ok(pid) => pid,
        Err(e) => return Ok(Err(e)),
    };
    // Root (this thread) moves it; A asks.
    let r = std::fs::write(group.0.join("cgroup.procs"), pid.to_string())
        .map_err(|e| format!("cannot confine it: {e}"));
    let r = a.on(move |g| {
        let r = r.and_then(|()| {
            refused(
                g.register("probe-confined", CellSpec::default(), &[pid]),
                &[ErrorCode::PermissionDenied],
            )
        });
        if let Some(mut k) = g.kids.pop() {
            let _ = k.kill();
            let _ = k.wait();
        }
        r
    });
    drop(group);
    Ok(r)
}
