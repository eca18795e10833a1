//! Regression tests for directories another user controls (docs/security.md).
//!
//! The attack: another user creates `/tmp/allot-$UID` before the victim's
//! first `allot run`, world-writable, and plants a library where the OpenMP
//! shim goes (or swaps it between the check and the loader's use). Whatever
//! they plant must never be loaded, executed or trusted: `allot run`, the
//! broker and every client refuse such a directory and say why.

use allot_testkit::user::{NOBODY, RemoveOnDrop, SharedExe, as_user, can_switch_users, test_uid};
use allot_testkit::{is_root, prerequisite};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const ALLOT: &str = env!("CARGO_BIN_EXE_allot");

fn chown(p: &Path, uid: u32) {
    rustix::fs::chown(
        p,
        Some(rustix::process::Uid::from_raw(uid)),
        Some(rustix::process::Gid::from_raw(uid)),
    )
    .unwrap();
}

fn chmod(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A library whose constructor writes `marker` when anything loads it.
fn planted_library(at: &Path, marker: &Path) {
    let src = at.with_extension("c");
    std::fs::write(
        &src,
        format!(
            "#include <stdio.h>\n\
             __attribute__((constructor)) static void planted(void) {{\n\
               FILE *f = fopen(\"{}\", \"w\"); if (f) {{ fputs(\"ran\\n\", f); fclose(f); }}\n\
             }}\n",
            marker.display()
        ),
    )
    .unwrap();
    let st = Command::new("gcc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(at)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success());
    std::fs::remove_file(&src).unwrap();
}

/// `/tmp/allot-<victim>` created by `owner` with `mode`, with a planted
/// shim inside; removed on drop.
struct Planted {
    dir: PathBuf,
    marker: PathBuf,
    _guard: RemoveOnDrop,
}

fn plant(victim: u32, owner: u32, mode: u32) -> Planted {
    let dir = PathBuf::from(format!("/tmp/allot-{victim}"));
    let _ = std::fs::remove_dir_all(&dir);
    let guard = RemoveOnDrop(dir.clone());
    std::fs::create_dir(&dir).unwrap();
    let shim = dir.join("shim");
    std::fs::create_dir(&shim).unwrap();
    let marker = dir.join("planted-code-ran");
    planted_library(&shim.join(allot_capi::SHIM_FILE_NAME), &marker);
    for p in [&dir, &shim] {
        chown(p, owner);
        chmod(p, mode);
    }
    chown(&shim.join(allot_capi::SHIM_FILE_NAME), owner);
    Planted {
        dir,
        marker,
        _guard: guard,
    }
}

fn allot_run_as(victim: u32, exe: &SharedExe) -> Output {
    allot_testkit::output_within(
        as_user(victim, exe.path())
            .args(["run", "--", "/bin/true"])
            .env("ALLOT_BACKEND", "affinity"),
        std::time::Duration::from_secs(30),
    )
}

#[test]
fn a_runtime_directory_planted_by_another_user_is_refused() {
    if !prerequisite(
        can_switch_users(),
        "needs root and setpriv to act as other users",
    ) {
        return;
    }
    let exe = SharedExe::new(Path::new(ALLOT));
    let victim = test_uid(1);
    let p = plant(victim, NOBODY, 0o777);
    let out = allot_run_as(victim, &exe);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(
        err.contains(&format!("{}", p.dir.display())) && err.contains("belongs to uid 65534"),
        "{err}"
    );
    assert!(!p.marker.exists(), "the planted library ran as the victim");
    assert!(
        !p.dir.join("allot.sock").exists() && !p.dir.join("broker.log").exists(),
        "nothing was created in the planted directory"
    );
}

#[test]
fn a_runtime_directory_others_can_write_is_refused_even_if_it_is_yours() {
    if !prerequisite(
        can_switch_users(),
        "needs root and setpriv to act as other users",
    ) {
        return;
    }
    let exe = SharedExe::new(Path::new(ALLOT));
    let victim = test_uid(2);
    let p = plant(victim, victim, 0o777);
    let out = allot_run_as(victim, &exe);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(125), "{err}");
    assert!(err.contains("writable by other users"), "{err}");
    assert!(!p.marker.exists(), "the planted library ran");
}

#[test]
fn a_private_runtime_directory_works_and_stays_private() {
    if !prerequisite(
        can_switch_users(),
        "needs root and setpriv to act as other users",
    ) {
        return;
    }
    let exe = SharedExe::new(Path::new(ALLOT));
    let victim = test_uid(3);
    let dir = PathBuf::from(format!("/tmp/allot-{victim}"));
    let _ = std::fs::remove_dir_all(&dir);
    let _guard = RemoveOnDrop(dir.clone());
    let out = as_user(victim, exe.path())
        .args(["run", "--", "/bin/sh", "-c", "echo $LD_PRELOAD"])
        .env("ALLOT_BACKEND", "affinity")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.starts_with(&format!("{}/shim/", dir.display())),
        "the shim is loaded from the private directory: {text}"
    );
    let meta = std::fs::metadata(&dir).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), victim);
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    // Let the started broker go away (it exits when idle) before removing
    // its directory.
    allot_testkit::eventually(std::time::Duration::from_secs(10), || {
        !dir.join("allot.sock").exists()
    });
}

#[test]
fn the_broker_and_clients_refuse_a_socket_directory_others_can_write() {
    if !prerequisite(is_root(), "needs root to make a directory of another user") {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("shared");
    std::fs::create_dir(&dir).unwrap();
    chmod(&dir, 0o777);
    let socket = dir.join("allot.sock");
    // (A broker that wrongly starts would run forever: bounded.)
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .args(["daemon", "--backend", "dry-run", "--socket"])
            .arg(&socket),
        std::time::Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("refusing the socket directory") && err.contains("writable by other users"),
        "{err}"
    );
    assert!(!socket.exists());

    // A client does not talk to a socket someone else could have planted.
    chmod(&dir, 0o755);
    chown(&dir, NOBODY);
    let out = allot_testkit::output_within(
        Command::new(ALLOT)
            .arg("status")
            .arg("--socket")
            .arg(&socket),
        std::time::Duration::from_secs(20),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("belongs to uid 65534"), "{err}");
}
