//! Journal replay: any bytes. Never panics; the state replayed from a
//! snapshot of what was replayed is the same state (what a broker restart
//! after compaction relies on).
#![no_main]

use allot_broker::journal::{replay, snapshot_bytes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = replay(data) else {
        return;
    };
    let again = replay(&snapshot_bytes(&r.state)).expect("a snapshot replays");
    assert_eq!(again.damaged_at, None);
    assert_eq!(again.state, r.state);
});
