//! allot's client library.
//!
//! A program (or `allot run` on its behalf) connects to the broker,
//! registers a cell, and reads its grant from a shared page at the cost of a
//! few loads: [`Client`], [`Registration`], [`allot_proto::GrantPage`].

mod conn;

pub use allot_plan::{CellSpec, Placement};
pub use allot_proto::{Grant, GrantPage, PageMap};
pub use conn::{Client, ClientError, Registration, Welcome};
