//! Smoke test of the hand-over benchmark's C program
//! (`benches/c/handoff.c`, run by `scripts/bench-handoff.sh`): it compiles
//! with `-Werror` and, with a broker of the test's own, every waiter is
//! let in only after the holder of every CPU left its block. No timing is
//! checked; the script measures.

mod abi_util;
#[path = "support/liballot.rs"]
mod liballot;

use abi_util::broker::TestBroker;
use std::path::Path;
use std::process::Command;

#[test]
fn a_waiting_process_enters_only_after_the_holder_leaves() {
    let work = Path::new(env!("CARGO_TARGET_TMPDIR")).join("handoff");
    let prefix = work.join("prefix");
    liballot::install(&prefix);
    let exe = work.join("handoff");
    liballot::run(&mut liballot::gcc_against(
        &prefix,
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/c/handoff.c"),
        &exe,
        &[],
    ));
    let broker = TestBroker::start();
    let out = liballot::run_stdout(
        Command::new(&exe)
            .arg("8")
            .env("ALLOT_SOCKET", &broker.path)
            .env_remove("ALLOT_CELL")
            .env_remove("ALLOT_GRANT_FD")
            .env_remove("LD_PRELOAD"),
    );
    drop(broker);
    let fields: std::collections::BTreeMap<&str, f64> = out
        .split_whitespace()
        .filter_map(|f| f.split_once('='))
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect();
    assert_eq!(fields.get("n"), Some(&8.0), "{out}");
    let min = fields["min_us"];
    assert!(
        min >= 0.0 && min <= fields["p50_us"] && fields["p50_us"] <= fields["max_us"],
        "a waiter entered while the holder held every CPU, or the line is wrong: {out}"
    );
}
