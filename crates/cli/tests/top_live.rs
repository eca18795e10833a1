//! `allot top` in a real terminal: tmux runs it against a test broker, the
//! test reads the pane, watches a cell appear and go, and quits with `q`.

mod common;

use allot_testkit::{eventually, prerequisite};
use common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// tmux on a private server socket, so the test touches no other session.
struct Tmux {
    socket: std::path::PathBuf,
}

impl Tmux {
    fn cmd(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    fn pane(&self) -> String {
        let o = self
            .cmd()
            .args(["capture-pane", "-p", "-t", "top"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    fn alive(&self) -> bool {
        self.cmd()
            .args(["has-session", "-t", "top"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd().arg("kill-server").stderr(Stdio::null()).status();
    }
}

#[test]
fn top_shows_cells_live_and_quits_on_q() {
    if !prerequisite(
        Command::new("tmux").arg("-V").output().is_ok(),
        "tmux (Debian's tmux)",
    ) {
        return;
    }
    let d = Daemon::start("dry-run", &[]);
    let tmux = Tmux {
        socket: d.dir.path().join("tmux.sock"),
    };
    let top = format!("{ALLOT} top --interval 200 --socket {}", d.socket.display());
    let ok = tmux
        .cmd()
        .args(["new-session", "-d", "-s", "top", "-x", "140", "-y", "30"])
        .arg(&top)
        .status()
        .unwrap();
    assert!(ok.success());
    let mut pane = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            pane = tmux.pane();
            pane.contains("no cells")
        }),
        "top did not draw: {pane}"
    );
    assert!(pane.contains("dry-run backend"), "{pane}");

    // Ends when its stdin closes (killing `allot run` would leave it in
    // its cell).
    let mut job = allot_run(&d, &["--no-start", "--name", "watched", "--", "cat"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let seen = eventually(Duration::from_secs(10), || {
        pane = tmux.pane();
        pane.contains("watched")
    });
    drop(job.stdin.take());
    let _ = job.wait();
    assert!(seen, "the cell never showed: {pane}");
    assert!(
        eventually(Duration::from_secs(10), || {
            pane = tmux.pane();
            !pane.contains("watched") && pane.contains("no cells")
        }),
        "the ended cell stayed: {pane}"
    );

    tmux.cmd()
        .args(["send-keys", "-t", "top", "q"])
        .status()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !tmux.alive()),
        "top did not quit on q: {}",
        tmux.pane()
    );
}

#[test]
fn top_refuses_without_a_terminal() {
    let o = Command::new(ALLOT)
        .args(["top", "--socket", "/nonexistent/allot.sock"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("needs a terminal"));
}
