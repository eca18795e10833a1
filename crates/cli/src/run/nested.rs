//! `allot run` inside a cell: the enclosing cell, if any.
//!
//! A program `allot run` starts gets `ALLOT_SOCKET` and `ALLOT_CELL`
//! ([`allot_capi::environ`]); an `allot run` below it (a job script, a
//! build step, a Slurm job's inner launcher) finds them. Registering a
//! cell of its own would move it out of the enclosing cell into a sibling
//! — out of the outer `--max`, as no `taskset` or systemd scope lets a
//! child do. So it runs its program inside the enclosing cell instead,
//! with the environment that cell's `allot run` set up (thread counts,
//! jobserver, shim), as `taskset` inside `taskset` does.
//!
//! The enclosing cell counts only while the broker on the same socket
//! still has it, registered by the same user: a stale `ALLOT_CELL` (its
//! cell ended) or another user's id is ignored. Trusting the variable
//! grants nothing: running inside a cell is running without asking for
//! anything. `env -u ALLOT_CELL allot run …` asks for a cell of its own.

use std::path::Path;

/// The id of the cell this process runs inside, per the environment and
/// as the broker on `socket` confirms; `None` when there is none.
pub fn enclosing(socket: &Path) -> Option<u64> {
    let id: u64 = std::env::var(allot_proto::ENV_CELL)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let env_socket = std::env::var_os(allot_proto::ENV_SOCKET)?;
    if Path::new(&env_socket) != socket {
        return None;
    }
    let mut client = allot_client::Client::connect(socket).ok()?;
    let status = client.status().ok()?;
    let me = rustix::process::geteuid().as_raw();
    status
        .cells
        .iter()
        .any(|c| c.id == id && c.uid == me)
        .then_some(id)
}
