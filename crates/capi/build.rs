//! Builds the C parts of the crate into `OUT_DIR`, and names the C library.

#[path = "shim/build_shim.rs"]
mod build_shim;

/// The shared library's soname. The crate's own name stays `allot_capi`
/// (the `allot` binary links it as a Rust crate), so cargo writes
/// `liballot_capi.so`; `scripts/install-liballot.sh` installs that file as
/// `liballot.so.<VERSION>` with the links `liballot.so.0` and `liballot.so`.
/// Bump the `0` with any incompatible change to `include/allot.h`
/// (`ALLOT_ABI_VERSION`).
const SONAME: &str = "liballot.so.0";

fn main() {
    build_shim::build();
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rustc-cdylib-link-arg=-Wl,-soname,{SONAME}");
}
