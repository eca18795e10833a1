//! What the core's subsystems keep, each behind its own methods (private
//! fields): the files here import nothing of the engine, and the engine's
//! side of each (when it acts, on which cells, with which kernel writes)
//! is the file of the same name in `core/`.

pub(super) mod arrival;
pub(super) mod isolation;
pub(super) mod keep_off;
pub(crate) mod measure;
pub(super) mod message;
pub(crate) mod pause;
