//! The memory that holds a grant page: a sealed memfd.
//!
//! The memfd holds two pages: the grant page ([`crate::page`]), which the
//! broker writes and clients read, and the report page
//! ([`crate::report`]), which the cell's processes write and the broker
//! reads. The broker creates the memfd, maps it read-write and seals its
//! size (`F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`): nobody can resize it
//! or lift the seals, so neither side can ever fault on a page the other
//! truncated. The fd is passed to the client with `SCM_RIGHTS`; the client
//! maps the grant page read-only and the report page read-write. A memfd
//! of one page (from an older broker) is a grant page without reports.
//!
//! The page is deliberately *not* sealed against writes: after a broker
//! restart the client hands the same fd back (`Rejoin`) and the new broker
//! resumes writing the very page every process of the cell already has
//! mapped, including programs that inherited it from `allot run`. A client
//! that maps its own page writable can only mislead itself: the kernel
//! enforces the grant, not the page.

use crate::page::{GrantPage, PAGE_SIZE, PageError};
use crate::report::ReportPage;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};
use std::ptr::NonNull;

/// A mapping of one grant page. Unmapped on drop.
#[derive(Debug)]
pub struct PageMap {
    ptr: NonNull<GrantPage>,
    reports: Option<NonNull<ReportPage>>,
    fd: OwnedFd,
    writable: bool,
}

// SAFETY: the mapping is plain shared memory whose fields are all atomics;
// `&GrantPage` is safe to use from any thread, and the mapping's lifetime is
// tied to `PageMap`, not to a thread.
unsafe impl Send for PageMap {}
// SAFETY: see `Send`: every access goes through atomics.
unsafe impl Sync for PageMap {}

/// Why a page could not be created or mapped.
#[derive(Debug, thiserror::Error)]
pub enum ShmError {
    /// A system call failed.
    #[error("{what}: {source}")]
    Os {
        /// The step that failed ("mmap grant page", "seal grant page", …), for the message.
        what: &'static str,
        /// The system call's error, or a description of what the check found.
        source: std::io::Error,
    },
    /// The page header is not valid.
    #[error(transparent)]
    Page(#[from] PageError),
}

/// Seals every grant page carries: its size is fixed for good.
const REQUIRED_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

fn os(what: &'static str) -> impl FnOnce(rustix::io::Errno) -> ShmError {
    move |e| ShmError::Os {
        what,
        source: e.into(),
    }
}

/// Bytes of the memfd: the grant page, then the report page.
pub const MEMFD_SIZE: usize = 2 * PAGE_SIZE;

/// Checks that `fd` is memory of one or two pages, sealed against
/// resizing; returns whether it holds a report page.
fn check_sealed_page(fd: &OwnedFd) -> Result<bool, ShmError> {
    let bad = |why: String| ShmError::Os {
        what: "grant page",
        source: std::io::Error::other(why),
    };
    let seals = rustix::fs::fcntl_get_seals(fd)
        .map_err(|_| bad("the descriptor is not sealable memory (not a memfd)".into()))?;
    if !seals.contains(REQUIRED_SEALS) {
        return Err(bad("the page is not sealed against resizing".into()));
    }
    let st = rustix::fs::fstat(fd).map_err(os("stat grant page"))?;
    match st.st_size as usize {
        PAGE_SIZE => Ok(false),
        MEMFD_SIZE => Ok(true),
        n => Err(bad(format!(
            "page is {n} bytes, expected {PAGE_SIZE} or {MEMFD_SIZE}"
        ))),
    }
}

/// Maps the page at `offset` (0: grant, PAGE_SIZE: reports) of `fd`.
fn map<T>(fd: BorrowedFd<'_>, offset: usize, prot: ProtFlags) -> Result<NonNull<T>, ShmError> {
    // SAFETY: a fresh mapping (null hint) of PAGE_SIZE bytes of a file at
    // least `offset + PAGE_SIZE` long (checked or made by the caller);
    // nothing else aliases the address range we get back.
    let ptr = unsafe {
        rustix::mm::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            prot,
            MapFlags::SHARED,
            fd,
            offset as u64,
        )
    }
    .map_err(os("mmap grant page"))?;
    NonNull::new(ptr.cast::<T>()).ok_or(ShmError::Os {
        what: "mmap grant page",
        source: std::io::Error::other("null mapping"),
    })
}

/// Maps the report page of `fd` read-write, if it has one.
fn map_reports(fd: BorrowedFd<'_>, has: bool) -> Result<Option<NonNull<ReportPage>>, ShmError> {
    if !has {
        return Ok(None);
    }
    map(fd, PAGE_SIZE, ProtFlags::READ | ProtFlags::WRITE)
        .map(Some)
        .map_err(|e| match e {
            ShmError::Os { source, .. } => ShmError::Os {
                what: "mmap report page",
                source,
            },
            other => other,
        })
}

impl PageMap {
    /// Creates a sealed page for `cell`, writable by the caller only.
    pub fn create(cell: u64, instance: u64) -> Result<PageMap, ShmError> {
        let fd = rustix::fs::memfd_create(
            "allot-grant",
            MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING,
        )
        .map_err(os("memfd_create"))?;
        rustix::fs::ftruncate(&fd, MEMFD_SIZE as u64).map_err(os("ftruncate grant page"))?;
        let ptr = map(fd.as_fd(), 0, ProtFlags::READ | ProtFlags::WRITE)?;
        let mut page = PageMap {
            ptr,
            reports: None,
            fd,
            writable: true,
        };
        page.reports = map_reports(page.fd.as_fd(), true)?;
        rustix::fs::fcntl_add_seals(&page.fd, REQUIRED_SEALS).map_err(os("seal grant page"))?;
        page.page().init(cell, instance);
        if let Some(r) = page.reports() {
            r.init();
        }
        Ok(page)
    }

    /// Takes over a page a client handed back after a broker restart: checks
    /// that it is a sealed memfd of the right size, maps it read-write and
    /// rewrites its header for `cell` and this broker `instance`.
    pub fn adopt(fd: OwnedFd, cell: u64, instance: u64) -> Result<PageMap, ShmError> {
        let has_reports = check_sealed_page(&fd)?;
        let ptr = map(fd.as_fd(), 0, ProtFlags::READ | ProtFlags::WRITE)?;
        let mut page = PageMap {
            ptr,
            reports: None,
            fd,
            writable: true,
        };
        page.reports = map_reports(page.fd.as_fd(), has_reports)?;
        page.page().init(cell, instance);
        // The counters carry on: the cell's processes kept adding to them.
        if let Some(r) = page.reports() {
            r.init();
        }
        Ok(page)
    }

    /// Maps a page received from the broker, read-only, and checks its header.
    /// The memory must be sealed against resizing: a page someone could
    /// truncate would fault (`SIGBUS`) under its readers.
    pub fn open(fd: OwnedFd) -> Result<PageMap, ShmError> {
        let has_reports = check_sealed_page(&fd)?;
        let ptr = map(fd.as_fd(), 0, ProtFlags::READ)?;
        let mut page = PageMap {
            ptr,
            reports: None,
            fd,
            writable: false,
        };
        // A reader that cannot map the report page (a descriptor opened
        // read-only) still follows its grant; its reports go nowhere.
        page.reports = map_reports(page.fd.as_fd(), has_reports).unwrap_or(None);
        page.page().validate()?;
        Ok(page)
    }

    /// The mapped grant page, shared with the broker and other readers; lives as long as `self`.
    pub fn page(&self) -> &GrantPage {
        // SAFETY: `ptr` is a live mapping of PAGE_SIZE bytes, suitably aligned
        // (page-aligned), valid until `self` drops; GrantPage is all atomics
        // and bytes, valid for any bit pattern.
        unsafe { self.ptr.as_ref() }
    }

    /// The report page, when the memfd has one (mapped read-write on both
    /// sides: the cell writes it, the broker reads it).
    pub fn reports(&self) -> Option<&ReportPage> {
        // SAFETY: as in `page`: a live, page-aligned mapping of PAGE_SIZE
        // bytes, valid until `self` drops; ReportPage is atomics and bytes.
        self.reports.map(|p| unsafe { p.as_ref() })
    }

    /// The memfd, to pass to a client.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether this mapping can publish.
    pub fn writable(&self) -> bool {
        self.writable
    }
}

impl Drop for PageMap {
    fn drop(&mut self) {
        // SAFETY: we own this mapping; no reference into it outlives `self`
        // because `page()` borrows `self`.
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), PAGE_SIZE) };
        if let Some(r) = self.reports {
            // SAFETY: as above, for the report page's own mapping.
            let _ = unsafe { rustix::mm::munmap(r.as_ptr().cast(), PAGE_SIZE) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::page::Grant;
    use allot_topo::CpuSet;

    #[test]
    fn reader_sees_what_writer_publishes() {
        let w = PageMap::create(5, 77).unwrap();
        let dup = rustix::io::fcntl_dupfd_cloexec(w.fd(), 0).unwrap();
        let r = PageMap::open(dup).unwrap();
        let g = Grant {
            cell: 5,
            generation: 3,
            instance: 77,
            threads: 2,
            flags: 0,
            entitled: 2,
            share_milli: 2000,
            home: 1,
            window: crate::Window {
                origin_ns: 123_456_789,
                period_us: 10_000,
                budget_us: 3_000,
            },
            cpus: CpuSet::parse_list("0-1").unwrap(),
            lent: CpuSet::parse_list("1").unwrap(),
        };
        let seen = r.page().futex_word();
        w.page().publish(&g);
        assert!(
            r.page()
                .wait(seen, Some(std::time::Duration::from_millis(10)))
        );
        assert_eq!(r.page().read(), g);
        assert!(!r.writable());
    }

    #[test]
    fn the_page_cannot_be_resized_or_unsealed() {
        let w = PageMap::create(1, 1).unwrap();
        let dup = rustix::io::fcntl_dupfd_cloexec(w.fd(), 0).unwrap();
        assert!(rustix::fs::ftruncate(&dup, 3 * PAGE_SIZE as u64).is_err());
        assert!(rustix::fs::ftruncate(&dup, 0).is_err());
        assert!(
            rustix::fs::fcntl_add_seals(&dup, SealFlags::WRITE).is_err(),
            "seals are sealed"
        );
        let r = PageMap::open(dup).unwrap();
        assert!(!r.writable());
    }

    #[test]
    fn a_restarted_writer_adopts_the_page_readers_hold() {
        let old = PageMap::create(4, 1).unwrap();
        let reader = PageMap::open(rustix::io::fcntl_dupfd_cloexec(old.fd(), 0).unwrap()).unwrap();
        let handed_back = rustix::io::fcntl_dupfd_cloexec(old.fd(), 0).unwrap();
        drop(old); // the old broker dies
        let new = PageMap::adopt(handed_back, 4, 2).unwrap();
        let g = Grant {
            cell: 4,
            generation: 9,
            instance: 2,
            threads: 1,
            cpus: CpuSet::first_n(1),
            ..Default::default()
        };
        new.page().publish(&g);
        assert_eq!(
            reader.page().read(),
            g,
            "the reader sees the new broker's writes on its old mapping"
        );
    }

    #[test]
    fn what_a_reader_reports_the_writer_sees_and_an_adopter_keeps() {
        let w = PageMap::create(6, 1).unwrap();
        let r = PageMap::open(rustix::io::fcntl_dupfd_cloexec(w.fd(), 0).unwrap()).unwrap();
        let before = w.reports().unwrap().snapshot();
        let reports = r.reports().expect("a client maps the report page");
        reports.heartbeat(40);
        reports.record_latency(std::time::Duration::from_micros(300));
        let d = w.reports().unwrap().snapshot().since(&before);
        assert_eq!((d.beats, d.count), (40, 1));
        // A restarted broker adopts the memfd: the counters carry on.
        let handed_back = rustix::io::fcntl_dupfd_cloexec(w.fd(), 0).unwrap();
        drop(w);
        let new = PageMap::adopt(handed_back, 6, 2).unwrap();
        assert_eq!(new.reports().unwrap().snapshot().beats, 40);
        reports.heartbeat(2);
        assert_eq!(new.reports().unwrap().snapshot().beats, 42);
    }

    #[test]
    fn a_memfd_of_one_page_is_a_grant_page_without_reports() {
        let fd = rustix::fs::memfd_create("old", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        rustix::fs::fcntl_add_seals(&fd, REQUIRED_SEALS).unwrap();
        let dup = rustix::io::fcntl_dupfd_cloexec(&fd, 0).unwrap();
        let w = PageMap::adopt(fd, 3, 1).unwrap();
        assert!(w.reports().is_none());
        let r = PageMap::open(dup).unwrap();
        assert!(r.reports().is_none());
    }

    #[test]
    fn adoption_refuses_unsealed_memory() {
        let fd = rustix::fs::memfd_create("plain", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        assert!(PageMap::adopt(fd, 1, 1).is_err());
    }

    #[test]
    fn garbage_is_not_a_page() {
        let fd = rustix::fs::memfd_create("junk", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)
            .unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        rustix::fs::fcntl_add_seals(&fd, REQUIRED_SEALS).unwrap();
        assert!(matches!(
            PageMap::open(fd),
            Err(ShmError::Page(PageError::Magic(0)))
        ));
    }

    #[test]
    fn memory_someone_could_truncate_is_not_mapped() {
        // A fake broker handing out an unsealed page could shrink it and
        // fault every reader.
        let w = PageMap::create(1, 1).unwrap();
        let fd = rustix::fs::memfd_create("unsealed", MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, PAGE_SIZE as u64).unwrap();
        // Even with a valid header, copied from a real page.
        // SAFETY: reading the whole mapped page of `w` as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts((w.page() as *const GrantPage).cast::<u8>(), PAGE_SIZE)
        };
        rustix::io::pwrite(&fd, bytes, 0).unwrap();
        let e = PageMap::open(fd).unwrap_err();
        assert!(
            e.to_string().contains("sealable") || e.to_string().contains("sealed"),
            "{e}"
        );
        let file = tempfile_fd();
        assert!(PageMap::open(file).is_err(), "a plain file is refused");
    }

    fn tempfile_fd() -> OwnedFd {
        let f = tempfile::tempfile().unwrap();
        f.set_len(PAGE_SIZE as u64).unwrap();
        OwnedFd::from(f)
    }
}
