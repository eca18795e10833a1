//! Declares `cfg(loom)` (set by `RUSTFLAGS="--cfg loom"` for the loom
//! models) so the workspace lints do not warn about it.
fn main() {
    println!("cargo::rustc-check-cfg=cfg(loom)");
}
