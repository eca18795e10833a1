//! The wire decoder: any bytes, as a request and as a reply. Never panics;
//! whatever decodes re-encodes to the same bytes and decodes again to the
//! same message.
#![no_main]

use allot_proto::{Reply, Request};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(r) = Request::decode(data) {
        let bytes = r.encode();
        assert_eq!(bytes, data, "a request re-encodes to its bytes");
        assert_eq!(Request::decode(&bytes).as_ref(), Ok(&r));
    }
    if let Ok(r) = Reply::decode(data) {
        let bytes = r.encode();
        assert_eq!(bytes, data, "a reply re-encodes to its bytes");
        assert_eq!(Reply::decode(&bytes).as_ref(), Ok(&r));
    }
});
