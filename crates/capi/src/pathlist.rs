//! The environment's `:`-separated lists (`LD_PRELOAD`, `LD_LIBRARY_PATH`)
//! with one entry of allot's put first.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `first`, then what `existing` holds. A value of nothing but blanks
/// counts as none: it names no library and no directory anyone meant.
pub fn put_first(first: &Path, existing: Option<&OsStr>) -> OsString {
    let mut v = OsString::from(first);
    if let Some(rest) = existing.filter(|e| !e.as_bytes().iter().all(u8::is_ascii_whitespace)) {
        v.push(":");
        v.push(rest);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_entry_goes_first_and_the_rest_is_kept() {
        let first = Path::new("/x/lib");
        assert_eq!(put_first(first, None), "/x/lib");
        for blank in ["", " ", " \t"] {
            assert_eq!(put_first(first, Some(OsStr::new(blank))), "/x/lib");
        }
        assert_eq!(put_first(first, Some(OsStr::new("/a:/b"))), "/x/lib:/a:/b");
    }
}
