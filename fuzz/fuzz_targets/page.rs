//! The grant page reader, through the path every client takes: the bytes
//! become a sealed memfd, `PageMap::open` checks and maps it, and the page
//! is read. Never panics; a consistent read's CPU count matches its set.
//! With a report page (written by the cell, so untrusted by the broker
//! that reads it), its snapshot, differences and quantiles never panic.
#![no_main]

use allot_proto::{PAGE_SIZE, PageMap, Reports};
use libfuzzer_sys::fuzz_target;
use rustix::fs::{MemfdFlags, SealFlags};

fuzz_target!(|data: &[u8]| {
    let fd = rustix::fs::memfd_create("fuzz-page", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
        .expect("memfd");
    // The first byte past a page decides whether the page is sealed (an
    // unsealed page must be refused, never mapped; bit 0) and whether a
    // report page follows (the bytes after that byte; bit 1).
    let control = data.get(PAGE_SIZE).copied().unwrap_or(0);
    let pages = if control & 2 != 0 { 2 } else { 1 };
    let mut page = vec![0u8; pages * PAGE_SIZE];
    let n = data.len().min(PAGE_SIZE);
    page[..n].copy_from_slice(&data[..n]);
    if pages == 2 {
        let rest = data.get(PAGE_SIZE + 1..).unwrap_or(&[]);
        let m = rest.len().min(PAGE_SIZE);
        page[PAGE_SIZE..PAGE_SIZE + m].copy_from_slice(&rest[..m]);
    }
    rustix::io::pwrite(&fd, &page, 0).expect("write");
    if control & 1 == 0 {
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
    if let Some(r) = map.reports() {
        let now = r.snapshot();
        let d = now.since(&Reports::default()).plus(&now);
        for q in [0.5, 0.99, 1.0] {
            let _ = d.latency_quantile_us(q);
        }
        let _ = d.mean_latency_us();
    }
});
