//! allot's C side.
//!
//! - [`abi`]: the C ABI, `liballot` with `include/allot.h`: cells (the
//!   grant, its changes, reports) and pools (spawn/join, fork/join,
//!   parallel loops) for C and C++ programs, behind generation-checked
//!   handles. Built as `liballot_capi.{so,a}` and installed as
//!   `liballot.{so,a}` by `scripts/install-liballot.sh`; design notes and
//!   benchmarks in `CAPI.md`.
//! - [`environ`]: the environment of a program in a cell, one definition
//!   for `allot run` and liballot's `allot_cell_environment`.
//! - [`shim`]: `liballot_shim.so`, an `LD_PRELOAD` library that keeps the
//!   OpenMP teams of unmodified programs within their cell's grant. The
//!   `allot` binary carries it ([`SHIM_SO`]) and writes it out with
//!   [`install_shim`] before starting a program under it.
//! - [`tcm`]: `libtcm.so.1`, allot's Thread Composability Manager: oneTBB
//!   and Intel's OpenMP runtime ask it how many threads they may run, and
//!   it answers from the cell's grant, across the processes of a run.

pub mod abi;
pub mod environ;
mod pathlist;
pub mod shim;
pub mod tcm;

pub use shim::{SHIM_FILE_NAME, SHIM_SO, install_shim, preload_with_shim};
