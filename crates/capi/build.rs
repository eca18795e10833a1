//! Builds the C parts of the crate into `OUT_DIR`.

#[path = "shim/build_shim.rs"]
mod build_shim;

fn main() {
    build_shim::build();
}
