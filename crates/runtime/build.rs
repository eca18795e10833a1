//! Declares `cfg(loom)` (set by `RUSTFLAGS="--cfg loom"` for the loom
//! models) and `cfg(allot_no_stats)` (statistics compiled out, only to
//! measure what they cost: `crates/runtime/BENCHMARKS.md`) so the
//! workspace lints do not warn about them.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
    println!("cargo::rustc-check-cfg=cfg(allot_no_stats)");
}
