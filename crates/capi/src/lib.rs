//! allot's C side.
//!
//! - [`shim`]: `liballot_shim.so`, an `LD_PRELOAD` library that keeps the
//!   OpenMP teams of unmodified programs within their cell's grant. The
//!   `allot` binary carries it ([`SHIM_SO`]) and writes it out with
//!   [`install_shim`] before starting a program under it.
//!
//! The C ABI (`liballot`, `include/allot.h`) will live beside it.

pub mod shim;

pub use shim::{SHIM_FILE_NAME, SHIM_SO, install_shim, preload_with_shim};
