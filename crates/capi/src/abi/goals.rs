//! `allot_cell_set_goal`, `allot_heartbeat` and `allot_report_latency`:
//! goals and performance reports from C (`include/allot/goals.h`).
//!
//! The goal's text form is the one `allot run --goal` takes
//! ([`allot_spec::Goal`]'s parser); heartbeats and latencies go to the
//! cell's report page (`allot_proto::report`) without a system call.

use super::CELLS;
use super::CellHandle;
use super::cell::client_error;
use super::status::{Error, Result, entry};
use std::ffi::{CStr, c_char, c_int};
use std::time::Duration;

/// The goal `text` names.
fn goal_from_c(text: *const c_char) -> Result<allot_spec::Goal> {
    if text.is_null() {
        return Err(Error::invalid("goal is NULL: pass \"none\" for no goal"));
    }
    // SAFETY: non-null and NUL-terminated by the contract.
    let text = unsafe { CStr::from_ptr(text) }
        .to_str()
        .map_err(|_| Error::invalid("goal is not UTF-8"))?;
    text.parse()
        .map_err(|e: allot_spec::GoalError| Error::invalid(e.to_string()))
}

/// `int allot_cell_set_goal(allot_cell_t cell, const char *goal)`.
///
/// # Safety
/// `goal` is null or a NUL-terminated string.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_set_goal(cell: CellHandle, goal: *const c_char) -> c_int {
    entry("allot_cell_set_goal", || {
        let goal = goal_from_c(goal)?;
        let c = CELLS.get(cell.id)?;
        c.set_goal(goal).map_err(client_error)
    })
}

/// `int allot_heartbeat(allot_cell_t cell, uint64_t n)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_heartbeat(cell: CellHandle, n: u64) -> c_int {
    entry("allot_heartbeat", || {
        CELLS.with(cell.id, |c| c.heartbeat(n))
    })
}

/// `int allot_report_latency(allot_cell_t cell, uint64_t latency_ns)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_report_latency(cell: CellHandle, latency_ns: u64) -> c_int {
    entry("allot_report_latency", || {
        CELLS.with(cell.id, |c| {
            c.report_latency(Duration::from_nanos(latency_ns))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn goals_parse_from_c_strings_and_mistakes_are_invalid() {
        let ok = goal_from_c(c"p99=5ms".as_ptr()).unwrap();
        assert_eq!(ok, allot_spec::Goal::P99 { us: 5_000 });
        for bad in [c"fast", c"rate=0/s"] {
            let e = goal_from_c(bad.as_ptr()).unwrap_err();
            assert_eq!(e.status, super::super::status::Code::Invalid, "{e:?}");
        }
        assert!(goal_from_c(std::ptr::null()).is_err());
    }
}
