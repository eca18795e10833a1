//! What the core's subsystems keep, each behind its own methods (private
//! fields): the files here import nothing of the engine, and the engine's
//! side of each (when it acts, on which cells, with which kernel writes)
//! is the file of the same name in `core/`. (`cells`, `account`,
//! `memory` and `journaling` are states of the same kind kept in `core/`
//! itself; the account's engine side is `holdings`, memory's
//! `memory_limits`.)

pub(super) mod arrival;
pub(super) mod isolation;
pub(super) mod keep_off;
pub(crate) mod measure;
pub(super) mod message;
pub(crate) mod outside;
pub(crate) mod pause;
