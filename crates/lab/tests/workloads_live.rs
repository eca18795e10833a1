//! `allot-lab workload`, the lab's C and Rust workloads: built on first
//! use into a cache, with what to install named when a compiler is
//! missing. (The demo and `allot bench` run end to end through `allot` in
//! the `allot` command's tests, `crates/cli/tests/demo_live.rs`.)

use std::process::Command;

/// The workloads are not part of the `allot` binary: `allot-lab workload`
/// builds them on first use, says what to install when gcc is missing,
/// builds the runtime's kernels with a gcc that has no OpenMP, and says so
/// when the OpenMP program cannot be built.
#[test]
fn workloads_are_built_on_first_use_and_name_what_is_missing() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let workload = |variant: &str, path: &std::ffi::OsStr, cache: &str| {
        Command::new(env!("CARGO_BIN_EXE_allot-lab"))
            .args([
                "workload",
                "pricing",
                "--scale",
                "0.01",
                "--variant",
                variant,
            ])
            .arg("--build-dir")
            .arg(dir.path().join(cache))
            .env("PATH", path)
            .env(allot_proto::env::SOCKET, dir.path().join("no-broker.sock"))
            .output()
            .unwrap()
    };
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };

    // No gcc at all.
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let o = workload("omp", empty.as_os_str(), "c1");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("cannot run gcc") && text(&o).contains("apt-get install gcc"),
        "{}",
        text(&o)
    );

    // A gcc that refuses -fopenmp, as one without OpenMP support does.
    let bin = dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let gcc = bin.join("gcc");
    std::fs::write(
        &gcc,
        "#!/bin/sh\nfor a in \"$@\"; do\n  if [ \"$a\" = -fopenmp ]; then\n    \
         echo 'gcc: error: -fopenmp: OpenMP is not supported here' >&2; exit 1\n  fi\ndone\n\
         exec /usr/bin/gcc \"$@\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&gcc, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = std::ffi::OsString::from(format!("{}:/usr/bin:/bin", bin.display()));
    let o = workload("omp", &path, "c2");
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("cannot build OpenMP programs"),
        "{}",
        text(&o)
    );
    let o = workload("allot", &path, "c2");
    assert!(o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("workload=pricing variant=allot"),
        "{}",
        text(&o)
    );
    let cached: Vec<String> = std::fs::read_dir(dir.path().join("c2"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        cached.len() == 1 && cached[0].starts_with("libwl-kernels-"),
        "{cached:?}"
    );
}
