//! The C copies of allot's contracts, compiled and compared with the Rust
//! definitions: the grant page layout and constants in
//! `shim/grant_page.h` (against `allot_proto::page`), the environment names
//! (against `allot_proto::env`), the wire codes `include/allot.h`
//! repeats (placements, grant flags, time kinds), `allot_worker_stats_t`
//! (against `abi::pool::WorkerStatsC`), and `allot_time_t` /
//! `allot_window_t` (against `abi::time`).

use std::fmt::Write;
use std::path::Path;
use std::process::Command;

/// `allot_worker_stats_t`'s fields and their offsets in the Rust copy.
fn worker_stats_fields() -> Vec<(&'static str, usize)> {
    use allot_capi::abi::pool::WorkerStatsC as W;
    use std::mem::offset_of;
    vec![
        ("worker", offset_of!(W, worker)),
        ("cpu", offset_of!(W, cpu)),
        ("tasks_run", offset_of!(W, tasks_run)),
        ("tasks_created", offset_of!(W, tasks_created)),
        ("tasks_stolen", offset_of!(W, tasks_stolen)),
        ("sleeps", offset_of!(W, sleeps)),
        ("ns_asleep", offset_of!(W, ns_asleep)),
        ("ns_awake", offset_of!(W, ns_awake)),
        ("retirements", offset_of!(W, retirements)),
        ("queue_high_water", offset_of!(W, queue_high_water)),
        ("yields", offset_of!(W, yields)),
        ("tasks_migrated", offset_of!(W, tasks_migrated)),
        ("tasks_suspended", offset_of!(W, tasks_suspended)),
        ("tasks_resumed", offset_of!(W, tasks_resumed)),
    ]
}

/// `allot_time_t`'s fields and their offsets in the Rust copy.
fn time_fields() -> Vec<(&'static str, usize)> {
    use allot_capi::abi::time::TimeC as T;
    use std::mem::offset_of;
    vec![
        ("kind", offset_of!(T, kind)),
        ("fraction_ppm", offset_of!(T, fraction_ppm)),
        ("slice_us", offset_of!(T, slice_us)),
        ("period_us", offset_of!(T, period_us)),
        ("budget_us", offset_of!(T, budget_us)),
        ("idle_ms", offset_of!(T, idle_ms)),
    ]
}

/// `allot_window_t`'s fields and their offsets in the Rust copy.
fn window_fields() -> Vec<(&'static str, usize)> {
    use allot_capi::abi::time::WindowC as W;
    use std::mem::offset_of;
    vec![
        ("origin_ns", offset_of!(W, origin_ns)),
        ("edge_ns", offset_of!(W, edge_ns)),
        ("period_us", offset_of!(W, period_us)),
        ("budget_us", offset_of!(W, budget_us)),
        ("open", offset_of!(W, open)),
    ]
}

/// `allot_kind_dev_t`'s and `allot_kind_ops_t`'s fields and offsets.
fn kind_dev_fields() -> Vec<(&'static str, usize)> {
    use allot_capi::abi::kinds::KindDevC as D;
    use std::mem::offset_of;
    vec![
        ("name", offset_of!(D, name)),
        ("min", offset_of!(D, min)),
        ("max", offset_of!(D, max)),
    ]
}

fn kind_ops_fields() -> Vec<(&'static str, usize)> {
    use allot_capi::abi::kinds::KindOpsC as O;
    use std::mem::offset_of;
    vec![
        ("probe", offset_of!(O, probe)),
        ("restrict_thread", offset_of!(O, restrict_thread)),
        ("throttle_thread", offset_of!(O, throttle_thread)),
        ("arg", offset_of!(O, arg)),
    ]
}

fn program() -> String {
    let mut c = String::from(
        "#include <stdio.h>\n#include \"grant_page.h\"\n#include \"allot.h\"\n\
         #include \"table.h\"\n\
         int main(void) {\n",
    );
    for (name, _, _) in allot_proto::page::LAYOUT {
        let _ = writeln!(
            c,
            "  printf(\"field {name} %zu %zu\\n\", offsetof(struct grant_page, {name}), \
             sizeof(((struct grant_page *)0)->{name}));"
        );
    }
    for (name, expr) in [
        ("struct", "(unsigned long)sizeof(struct grant_page)"),
        ("magic", "(unsigned long)ALLOT_PAGE_MAGIC"),
        ("version", "(unsigned long)ALLOT_PAGE_VERSION"),
        ("bytes", "(unsigned long)ALLOT_PAGE_BYTES"),
        ("stacked", "(unsigned long)ALLOT_PAGE_FLAG_STACKED"),
        ("released", "(unsigned long)ALLOT_PAGE_FLAG_RELEASED"),
        ("api_stacked", "(unsigned long)ALLOT_GRANT_STACKED"),
        ("api_released", "(unsigned long)ALLOT_GRANT_RELEASED"),
        ("place_any", "(unsigned long)ALLOT_PLACEMENT_ANY"),
        ("place_llc", "(unsigned long)ALLOT_PLACEMENT_LLC"),
        ("place_numa", "(unsigned long)ALLOT_PLACEMENT_NUMA"),
        ("time_space", "(unsigned long)ALLOT_TIME_SPACE"),
        ("time_fraction", "(unsigned long)ALLOT_TIME_FRACTION"),
        ("time_triggered", "(unsigned long)ALLOT_TIME_TRIGGERED"),
        ("time_message", "(unsigned long)ALLOT_TIME_MESSAGE"),
        ("time_sizeof", "(unsigned long)sizeof(allot_time_t)"),
        ("window_sizeof", "(unsigned long)sizeof(allot_window_t)"),
        ("ticket_max", "(unsigned long)ALLOT_TICKET_MAX"),
        ("kind_dev_sizeof", "(unsigned long)sizeof(allot_kind_dev_t)"),
        ("kind_ops_sizeof", "(unsigned long)sizeof(allot_kind_ops_t)"),
        ("tcm_table_bytes", "(unsigned long)TCM_TABLE_BYTES"),
    ] {
        let _ = writeln!(c, "  printf(\"const {name} %lu\\n\", {expr});");
    }
    for (name, _) in worker_stats_fields() {
        let _ = writeln!(
            c,
            "  printf(\"stats {name} %zu\\n\", offsetof(allot_worker_stats_t, {name}));"
        );
    }
    c.push_str("  printf(\"stats sizeof %zu\\n\", sizeof(allot_worker_stats_t));\n");
    for (name, _) in time_fields() {
        let _ = writeln!(
            c,
            "  printf(\"time {name} %zu\\n\", offsetof(allot_time_t, {name}));"
        );
    }
    for (name, _) in kind_dev_fields() {
        let _ = writeln!(
            c,
            "  printf(\"kind_dev {name} %zu\\n\", offsetof(allot_kind_dev_t, {name}));"
        );
    }
    for (name, _) in kind_ops_fields() {
        let _ = writeln!(
            c,
            "  printf(\"kind_ops {name} %zu\\n\", offsetof(allot_kind_ops_t, {name}));"
        );
    }
    for (name, _) in window_fields() {
        let _ = writeln!(
            c,
            "  printf(\"window {name} %zu\\n\", offsetof(allot_window_t, {name}));"
        );
    }
    c.push_str("  printf(\"env grant_fd %s\\n\", ALLOT_ENV_GRANT_FD);\n");
    c.push_str("  printf(\"env shim_debug %s\\n\", ALLOT_ENV_SHIM_DEBUG);\n");
    c.push_str("  printf(\"env launch_cpus %s\\n\", ALLOT_ENV_LAUNCH_CPUS);\n");
    c.push_str("  printf(\"env tcm_fd %s\\n\", ALLOT_ENV_TCM_FD);\n");
    c.push_str("  return 0;\n}\n");
    c
}

#[test]
fn the_c_copies_match_the_rust_definitions() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c_layout");
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("layout.c");
    let exe = dir.join("layout");
    std::fs::write(&src, program()).unwrap();
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-I")
        .arg(crate_dir.join("shim"))
        .arg("-I")
        .arg(crate_dir.join("include"))
        .arg("-I")
        .arg(crate_dir.join("tcm"))
        .output()
        .expect("a C compiler (cc) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().unwrap();
    let text = String::from_utf8(run.stdout).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    let get = |kind: &str, name: &str| -> Vec<String> {
        lines
            .iter()
            .find(|l| l[0] == kind && l[1] == name)
            .unwrap_or_else(|| panic!("{kind} {name} missing from:\n{text}"))[2..]
            .iter()
            .map(|s| s.to_string())
            .collect()
    };
    for &(name, offset, size) in allot_proto::page::LAYOUT {
        assert_eq!(
            get("field", name),
            vec![offset.to_string(), size.to_string()],
            "grant_page.{name}: C offset and size against Rust"
        );
    }
    let end = allot_proto::page::LAYOUT
        .last()
        .map(|&(_, o, s)| o + s)
        .unwrap();
    let num = |name: &str| get("const", name)[0].parse::<u64>().unwrap();
    assert_eq!(
        num("struct"),
        end as u64,
        "the C struct has no extra fields"
    );
    assert_eq!(num("magic"), allot_proto::page::PAGE_MAGIC as u64);
    assert_eq!(num("version"), allot_proto::PAGE_VERSION as u64);
    assert_eq!(num("bytes"), allot_proto::PAGE_SIZE as u64);
    for flag in ["stacked", "api_stacked"] {
        assert_eq!(num(flag), allot_proto::FLAG_STACKED as u64, "{flag}");
    }
    for flag in ["released", "api_released"] {
        assert_eq!(num(flag), allot_proto::FLAG_RELEASED as u64, "{flag}");
    }
    use allot_spec::Placement;
    assert_eq!(num("place_any"), u64::from(Placement::Any.code()));
    assert_eq!(num("place_llc"), u64::from(Placement::Llc.code()));
    assert_eq!(num("place_numa"), u64::from(Placement::Numa.code()));
    for (name, offset) in worker_stats_fields() {
        assert_eq!(
            get("stats", name),
            vec![offset.to_string()],
            "allot_worker_stats_t.{name}: C offset against Rust"
        );
    }
    assert_eq!(
        get("stats", "sizeof"),
        vec![std::mem::size_of::<allot_capi::abi::pool::WorkerStatsC>().to_string()]
    );
    // The time kinds are the wire's (`time_fields`'s first field).
    use allot_spec::TimeContract;
    for (name, wire) in [
        ("time_space", TimeContract::Space),
        (
            "time_fraction",
            TimeContract::Fraction {
                ppm: 1,
                slice_us: 0,
            },
        ),
        (
            "time_triggered",
            TimeContract::Triggered {
                period_us: 1,
                budget_us: 1,
            },
        ),
        ("time_message", TimeContract::Message { idle_ms: 1 }),
    ] {
        assert_eq!(
            num(name),
            u64::from(allot_proto::msg::spec::time_fields(wire).0),
            "{name}"
        );
    }
    use allot_capi::abi::kinds::{KindDevC, KindOpsC};
    use allot_capi::abi::time::{TimeC, WindowC};
    for (kind, fields, size) in [
        ("time", time_fields(), std::mem::size_of::<TimeC>()),
        ("window", window_fields(), std::mem::size_of::<WindowC>()),
        (
            "kind_dev",
            kind_dev_fields(),
            std::mem::size_of::<KindDevC>(),
        ),
        (
            "kind_ops",
            kind_ops_fields(),
            std::mem::size_of::<KindOpsC>(),
        ),
    ] {
        for (name, offset) in fields {
            assert_eq!(
                get(kind, name),
                vec![offset.to_string()],
                "{kind}.{name}: C offset against Rust"
            );
        }
        assert_eq!(num(&format!("{kind}_sizeof")), size as u64, "{kind} size");
    }
    assert_eq!(get("env", "grant_fd"), vec![allot_proto::env::GRANT_FD]);
    assert_eq!(get("env", "shim_debug"), vec![allot_proto::env::SHIM_DEBUG]);
    assert_eq!(
        get("env", "launch_cpus"),
        vec![allot_proto::env::LAUNCH_CPUS]
    );
    assert_eq!(
        num("ticket_max"),
        allot_capi::abi::launcher::TICKET_MAX as u64
    );
    assert_eq!(get("env", "tcm_fd"), vec![allot_proto::env::TCM_FD]);
    assert_eq!(num("tcm_table_bytes"), allot_capi::tcm::TABLE_BYTES);
}
