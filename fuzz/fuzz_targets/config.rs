//! The broker's configuration parser: any text. Never panics; what it
//! accepts stays within the documented ranges.
#![no_main]

use allot_broker::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut c = Config::new("/nonexistent/allot.sock".into());
    if c.apply_toml(text).is_ok() {
        assert!((10..=10_000).contains(&(c.tick.as_millis() as u64)));
        let name = c.cgroup_name();
        assert!(!name.is_empty() && !name.contains('/') && !name.starts_with('.'));
        assert!(c.limits.connections > 0 && c.limits.cells > 0 && c.limits.members > 0);
    }
});
