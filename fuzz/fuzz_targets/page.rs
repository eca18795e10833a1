//! The grant page reader, through the path every client takes: the bytes
//! become a sealed memfd, `PageMap::open` checks and maps it, and the page
//! is read. Never panics; a consistent read's CPU count matches its set.
#![no_main]

use allot_proto::{PAGE_SIZE, PageMap};
use libfuzzer_sys::fuzz_target;
use rustix::fs::{MemfdFlags, SealFlags};

fuzz_target!(|data: &[u8]| {
    let fd = rustix::fs::memfd_create("fuzz-page", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .expect("memfd");
    let mut page = vec![0u8; PAGE_SIZE];
    let n = data.len().min(PAGE_SIZE);
    page[..n].copy_from_slice(&data[..n]);
    rustix::io::pwrite(&fd, &page, 0).expect("write");
    // The first byte past a page decides whether the page is sealed (an
    // unsealed page must be refused, never mapped).
    if data.get(PAGE_SIZE).is_none_or(|b| b & 1 == 0) {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)
            .expect("seal");
    }
    let Ok(map) = PageMap::open(fd) else {
        return;
    };
    if let Some(g) = map.page().try_read() {
        let _ = (
            g.stacked(),
            g.released(),
            g.cpus.len(),
            g.lent.is_subset(&g.cpus),
        );
    }
    let _ = map.page().generation();
    let _ = map.page().threads();
});
