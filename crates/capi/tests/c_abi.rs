//! The C ABI from C: installs liballot into a temporary prefix with
//! `scripts/install-liballot.sh --from <this build's directory>`, then
//! compiles C programs against the *installed* header and library (found
//! through pkg-config) and runs them.
//!
//! - `tests/c/parallel_loop.c` under AddressSanitizer and
//!   UndefinedBehaviorSanitizer, leak checking on, linked to liballot.so;
//! - the same program linked statically to liballot.a;
//! - `examples/c/parallel_sum.c`, as its README builds it;
//! - the header compiled as C++ and by clang with `-pedantic`.
//!
//! The library is the one cargo built for this test run (the `cdylib` and
//! `staticlib` of this crate, beside the test binary in `deps/`): no nested
//! cargo build, which would wait for the build lock this run holds.

#[path = "support/liballot.rs"]
mod liballot;

use liballot::{repo, run};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The libraries cargo built for this run (see `support/liballot.rs`),
/// checked to be there.
fn artifacts() -> PathBuf {
    let dir = liballot::artifacts();
    for f in ["liballot_capi.so", "liballot_capi.a"] {
        assert!(
            dir.join(f).is_file(),
            "{} is missing: cargo builds it with the crate (crate-type cdylib, staticlib)",
            dir.join(f).display()
        );
    }
    dir
}

fn work() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_abi");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The prefix liballot is installed into, once per test process.
fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        // One prefix per profile (debug, release), reinstalled by every
        // run: the script is idempotent and replaces files atomically.
        let profile = artifacts()
            .parent()
            .unwrap()
            .file_name()
            .unwrap()
            .to_owned();
        let prefix = work().join("prefix").join(profile);
        liballot::install(&prefix);
        prefix
    })
}

fn pkg_config(args: &[&str]) -> Vec<String> {
    let out = run(Command::new("pkg-config")
        .args(args)
        .arg("allot")
        .env("PKG_CONFIG_PATH", prefix().join("lib/pkgconfig")));
    String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// A C program's environment: no broker (so cells are standalone, whatever
/// runs on this machine), no inherited cell.
fn program(path: &Path) -> Command {
    let mut cmd = Command::new(path);
    cmd.env("ALLOT_SOCKET", work().join("no-broker.sock"))
        .env_remove("ALLOT_CELL")
        .env_remove("ALLOT_GRANT_FD")
        .env_remove("LD_PRELOAD");
    cmd
}

const C_FLAGS: &[&str] = &["-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-Werror"];

#[test]
fn install_lays_out_the_prefix_and_is_idempotent() {
    let p = prefix();
    for f in [
        "include/allot.h",
        "include/allot/pool.h",
        "include/allot/require.h",
        "include/allot/time.h",
        "include/allot/goals.h",
        "include/allot/memory.h",
        "include/allot/channel.h",
        "include/allot/hooks.h",
        "lib/liballot.so",
        "lib/liballot.so.0",
        "lib/liballot.a",
        "lib/pkgconfig/allot.pc",
    ] {
        assert!(p.join(f).exists(), "{f} not installed");
    }
    assert_eq!(
        std::fs::read_link(p.join("lib/liballot.so")).unwrap(),
        Path::new("liballot.so.0")
    );
    let pc = std::fs::read_to_string(p.join("lib/pkgconfig/allot.pc")).unwrap();
    assert!(pc.contains(&format!("prefix={}", p.display())), "{pc}");
    assert!(!pc.contains('@'), "unsubstituted template variable:\n{pc}");
    let cflags = pkg_config(&["--cflags"]);
    assert_eq!(cflags, [format!("-I{}/include", p.display())]);

    // Again, into the same prefix: same files, nothing left over.
    let before = listing(p);
    liballot::install(p);
    assert_eq!(listing(p), before);

    // Clear errors.
    let script = repo().join("scripts/install-liballot.sh");
    let out = Command::new("bash").arg(&script).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no PREFIX given"));
    let out = Command::new("bash")
        .arg(&script)
        .args(["--from", "/nonexistent", "/tmp/unused"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent is not a directory"));
}

fn listing(p: &Path) -> Vec<(PathBuf, u64)> {
    let mut v = Vec::new();
    let mut stack = vec![p.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = std::fs::symlink_metadata(e.path()).unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else {
                v.push((e.path(), m.len()));
            }
        }
    }
    v.sort();
    v
}

fn sanitizer_report(stderr: &str) -> bool {
    [
        "ERROR: AddressSanitizer",
        "ERROR: LeakSanitizer",
        "runtime error:",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

#[test]
fn parallel_loop_c_passes_under_asan_and_ubsan() {
    let libdir = prefix().join("lib");
    let exe = work().join("parallel_loop_asan");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/parallel_loop.c");
    run(Command::new("gcc")
        .args(C_FLAGS)
        .args([
            "-fsanitize=address,undefined",
            "-fno-omit-frame-pointer",
            "-fno-sanitize-recover=all",
        ])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--cflags", "--libs"]))
        .arg(format!("-Wl,-rpath,{}", libdir.display())));
    // The executable finds the installed library by its soname.
    let ldd = run(Command::new("ldd").arg(&exe));
    let ldd = String::from_utf8_lossy(&ldd.stdout);
    assert!(
        ldd.contains(&format!(
            "liballot.so.0 => {}",
            libdir.join("liballot.so.0").display()
        )),
        "{ldd}"
    );

    let out = program(&exe)
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:abort_on_error=0:halt_on_error=1",
        )
        .env("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && !sanitizer_report(&stderr),
        "{}:\n{stdout}{stderr}",
        out.status
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

#[test]
fn parallel_loop_c_links_statically() {
    let exe = work().join("parallel_loop_static");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/parallel_loop.c");
    // liballot.a by path, then what it needs (Libs.private), without the
    // -lallot that would pick the shared library.
    let private: Vec<String> = pkg_config(&["--static", "--libs-only-l"])
        .into_iter()
        .filter(|l| l != "-lallot")
        .collect();
    run(Command::new("gcc")
        .args(C_FLAGS)
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--cflags"]))
        .arg(prefix().join("lib/liballot.a"))
        .args(&private));
    let ldd = run(Command::new("ldd").arg(&exe));
    assert!(!String::from_utf8_lossy(&ldd.stdout).contains("liballot"));
    let out = run(&mut program(&exe));
    assert!(String::from_utf8_lossy(&out.stdout).contains("all checks passed"));
}

#[test]
fn the_example_builds_as_its_readme_says_and_runs() {
    let libdir = prefix().join("lib");
    let exe = work().join("parallel_sum");
    let src = repo().join("examples/c/parallel_sum.c");
    run(Command::new("cc")
        .args(["-std=c11", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .args(pkg_config(&["--cflags", "--libs"]))
        .arg(format!("-Wl,-rpath,{}", libdir.display())));
    let out = run(program(&exe).arg("200000"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("sum of 200000 values: ok"), "{stdout}");
}

#[test]
fn the_header_compiles_as_cplusplus_and_pedantic_c() {
    let inc = prefix().join("include");
    let cpp = work().join("header.cpp");
    std::fs::write(
        &cpp,
        "#include <allot.h>\n\
         static_assert(sizeof(allot_grant_t) == 280, \"layout\");\n\
         int main() { allot_pool_t p{}; return allot_pool_free(p) == ALLOT_ERR_HANDLE ? 0 : 1; }\n",
    )
    .unwrap();
    run(Command::new("g++")
        .args([
            "-std=c++17",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
            "-fsyntax-only",
        ])
        .arg(format!("-I{}", inc.display()))
        .arg(&cpp));
    let c = work().join("header.c");
    std::fs::write(
        &c,
        "#include <allot.h>\nint main(void) { return allot_abi_version() != ALLOT_ABI_VERSION; }\n",
    )
    .unwrap();
    for cc in ["gcc", "clang"] {
        run(Command::new(cc)
            .args([
                "-std=c11",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-pedantic",
                "-fsyntax-only",
            ])
            .arg(format!("-I{}", inc.display()))
            .arg(&c));
    }
}

#[test]
fn the_library_exports_exactly_the_functions_the_header_declares() {
    // allot.h and the parts it includes.
    let header = [
        "allot.h",
        "allot/pool.h",
        "allot/require.h",
        "allot/time.h",
        "allot/goals.h",
        "allot/memory.h",
        "allot/channel.h",
        "allot/hooks.h",
    ]
    .map(|h| std::fs::read_to_string(prefix().join("include").join(h)).unwrap())
    .concat();
    // Declarations start in column 0; the name is the identifier right
    // before the first parenthesis. Inline helpers, typedefs and C++ are
    // not exported functions.
    let mut declared: Vec<String> = header
        .lines()
        .filter(|l| !l.starts_with([' ', '#', '/', '}', '{']))
        .filter(|l| {
            !["static ", "typedef ", "inline ", "class ", "namespace "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .filter_map(|l| {
            let end = l.find('(')?;
            let start = l[..end]
                .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(0, |i| i + 1);
            let name = &l[start..end];
            name.starts_with("allot_").then(|| name.to_string())
        })
        .collect();
    declared.sort();
    let nm = run(Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(prefix().join("lib/liballot.so")));
    let mut exported: Vec<String> = String::from_utf8_lossy(&nm.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect();
    exported.sort();
    assert_eq!(declared.len(), 94, "{declared:?}");
    assert_eq!(exported, declared);
}
