//! `allot_require_*`: Poli-C's `require` blocks for C and C++, over the
//! process's [`Blocks::global`].
//!
//! # A block's life
//!
//! The header's `allot_require(...) { ... }` is a `for` statement whose
//! variable, an `allot_scope_t` ([`CScope`]), carries
//! `__attribute__((cleanup))`: its condition calls [`allot_require_enter`]
//! once, and the cleanup calls [`allot_require_leave`] however the block is
//! left. A scope is in one of four states (`state_`): fresh (0), entered
//! (1), left (2), failed (3). Only `enter` moves fresh/left/failed to
//! entered (or failed); only `leave` moves entered to left.
//!
//! An entered scope holds, inside the C struct, the Rust [`Block`] the
//! runtime returned (a plain value, moved in and out with `ptr::write` and
//! `ptr::read`; the C struct must not move meanwhile, which the header
//! states), the call site, and the entering thread's id. Each thread keeps
//! its open C scopes as an intrusive stack (`prev_`, [`TOP`]): leaving
//! anything but the top is a programming error, detected before the
//! runtime is touched, as are leaving twice and leaving on another thread.
//! Each aborts with the file and line of the block, as Poli-C does.
//!
//! # Call-site cache
//!
//! Each call site has a static `allot_site_t` ([`CSite`]) whose `cache`
//! word liballot fills (compare-and-swap, once) with a [`SiteCache`]: the
//! requests of the last entry, as values, and what [`Blocks::prepare`]
//! made of them (kinds and devices looked up, policies built). An entry
//! whose requests equal the cached ones (strings compared by content) reuses
//! them: no lookup, no allocation. Another set of values replaces them. Site
//! caches live as long as the process (one per call site).
//!
//! # Re-entry
//!
//! While a thread is inside liballot's require code ([`Busy`], in
//! [`super::site`]), the thread
//! hooks of the preload shim do nothing: the runtime may create a thread
//! (its ledger watcher) or wait while it holds its own lock, and a hook
//! called back from there would wait for that lock.

use super::cell::c_str;
use super::request::{CReq, REQ_BIND, to_request};
use super::site::{At, Busy, COutcome, CSite, fatal};
use super::status::{Code, Error, Result, entry};
use super::view;
use allot_require::blocks::current_tid;
use allot_require::{Block, Blocks, Prepared, RequireError};
use std::cell::Cell;
use std::ffi::{CStr, c_char, c_int, c_uint};
use std::mem::{align_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};

/// `ALLOT_REQUIRE_ABORT`.
pub const FLAG_ABORT: c_uint = 1;

/// Most requests one block may make (the macros pass at most 17).
const MAX_REQS: usize = 64;

const FRESH: c_int = 0;
const ENTERED: c_int = 1;
const LEFT: c_int = 2;
const FAILED: c_int = 3;

/// `allot_scope_t`.
#[repr(C)]
#[derive(Debug)]
pub struct CScope {
    opaque: [u64; 6],
    prev: *mut CScope,
    site: *mut CSite,
    tid: u64,
    state: c_int,
    reserved: c_int,
}

const _: () = assert!(size_of::<CReq>() == 88);
const _: () = assert!(size_of::<CScope>() == 80);
const _: () = assert!(size_of::<Block<'static>>() <= size_of::<[u64; 6]>());
const _: () = assert!(align_of::<Block<'static>>() <= align_of::<u64>());

thread_local! {
    /// The innermost C scope this thread entered and has not left.
    static TOP: Cell<*mut CScope> = const { Cell::new(ptr::null_mut()) };
}

/// What the last entry at a call site prepared.
#[derive(Debug)]
struct Cached {
    key: Vec<Key>,
    prepared: Prepared,
}

/// One request, as values, for comparing entries.
#[derive(Debug, PartialEq)]
struct Key {
    fields: [i64; 10],
    func: usize,
    arg: usize,
    name: Option<Box<[u8]>>,
    dev: Option<Box<[u8]>>,
}

impl Key {
    fn fields(r: &CReq) -> [i64; 10] {
        [
            r.kind as i64,
            r.own as i64,
            r.timing as i64,
            r.policy as i64,
            r.index,
            r.amount.to_bits() as i64,
            r.n as i64,
            r.min as i64,
            r.max as i64,
            r.domain as i64,
        ]
    }

    /// # Safety
    /// `r`'s strings are NULL or NUL-terminated (checked by validation).
    unsafe fn of(r: &CReq) -> Key {
        // SAFETY: see the function's contract.
        let owned = |p: *const c_char| (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.into());
        Key {
            fields: Key::fields(r),
            func: r.func.map_or(0, |f| f as usize),
            arg: r.arg as usize,
            name: owned(r.name).map(|c: Box<CStr>| c.to_bytes().into()),
            dev: owned(r.dev).map(|c: Box<CStr>| c.to_bytes().into()),
        }
    }

    /// # Safety
    /// As [`Key::of`].
    unsafe fn matches(&self, r: &CReq) -> bool {
        let same = |k: &Option<Box<[u8]>>, p: *const c_char| match (k, p.is_null()) {
            (None, true) => true,
            // SAFETY: see the function's contract.
            (Some(k), false) => **k == *unsafe { CStr::from_ptr(p) }.to_bytes(),
            _ => false,
        };
        self.fields == Key::fields(r)
            && self.func == r.func.map_or(0, |f| f as usize)
            && self.arg == r.arg as usize
            && same(&self.name, r.name)
            && same(&self.dev, r.dev)
    }
}

/// A call site's cache.
#[derive(Debug, Default)]
struct SiteCache {
    last: Mutex<Option<Arc<Cached>>>,
}

/// The cache of `site`, made on first use.
///
/// # Safety
/// `site` is a live `allot_site_t` whose `cache` only liballot writes.
unsafe fn site_cache(site: *mut CSite) -> &'static SiteCache {
    // SAFETY: `cache` is a pointer-sized, pointer-aligned word that only
    // liballot accesses, and only atomically (the C side zero-initialises
    // it statically and never writes it).
    let slot = unsafe { AtomicPtr::<SiteCache>::from_ptr(&raw mut (*site).cache as *mut _) };
    let cur = slot.load(Ordering::Acquire);
    if !cur.is_null() {
        // SAFETY: set below from a leaked box, never freed.
        return unsafe { &*cur };
    }
    let new = Box::into_raw(Box::<SiteCache>::default());
    match slot.compare_exchange(ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
        // SAFETY: `new` is leaked for the life of the process.
        Ok(_) => unsafe { &*new },
        Err(other) => {
            // SAFETY: `new` came from Box::into_raw and was never shared.
            drop(unsafe { Box::from_raw(new) });
            // SAFETY: another thread's leaked box.
            unsafe { &*other }
        }
    }
}

/// A runtime error as the C caller sees it. Programming errors abort.
fn from_require(e: RequireError, at: At) -> Error {
    match e {
        RequireError::UnknownKind { kind, known, .. } => Error::new(
            Code::Unknown,
            format!(
                "{at}: unknown resource kind {kind:?} (known: {known}); define virtual kinds \
                 with allot_kind_define"
            ),
        ),
        RequireError::UnknownDevice {
            kind, dev, count, ..
        } => Error::new(
            Code::Unknown,
            format!("{at}: resource kind {kind:?} has no device {dev:?} (it has {count})"),
        ),
        RequireError::BadAmount {
            kind,
            dev,
            amount,
            max,
            ..
        } => Error::invalid(format!(
            "{at}: invalid amount {amount} for {kind} device {dev} (0 to {max})"
        )),
        RequireError::Impossible { policy, .. } => Error::new(
            Code::Never,
            format!(
                "{at}: policy {policy} cannot be met on this machine even with every device free"
            ),
        ),
        RequireError::TooLarge {
            kind,
            dev,
            asked,
            enclosing,
            ..
        } => fatal(
            at,
            &format!(
                "requires {asked} of {kind} device {dev} inside a block that holds {enclosing}: \
                 a nested require may not ask for more than its enclosing one"
            ),
        ),
        RequireError::Unenforceable { kind, dev, why, .. } => Error::new(
            Code::Never,
            format!("{at}: {kind} device {dev} cannot be held as asked: {why}"),
        ),
        RequireError::KindExists(name) => Error::invalid(format!(
            "{at}: resource kind {name:?} already exists with other devices"
        )),
        #[allow(unreachable_patterns)]
        other => Error::invalid(format!("{at}: {other}")),
    }
}

/// The prepared form of `reqs` (BIND requests left out), from the site's
/// cache when the values match.
///
/// # Safety
/// `reqs`' strings are NULL or NUL-terminated; `site` is NULL or a live
/// `allot_site_t`.
unsafe fn prepared(rt: &Blocks, site: *mut CSite, reqs: &[CReq]) -> Result<Arc<Cached>> {
    let at = At(site);
    let cache = if site.is_null() {
        None
    } else {
        // SAFETY: the function's contract.
        Some(unsafe { site_cache(site) })
    };
    if let Some(c) = cache {
        let last = c.last.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(hit) = last.as_ref() {
            let mut keys = hit.key.iter();
            // SAFETY: the function's contract.
            let same = reqs
                .iter()
                .filter(|r| r.kind != REQ_BIND)
                .all(|r| keys.next().is_some_and(|k| unsafe { k.matches(r) }))
                && keys.next().is_none();
            if same {
                return Ok(hit.clone());
            }
        }
    }
    let mut key = Vec::new();
    let mut list = Vec::new();
    for (i, r) in reqs.iter().enumerate() {
        if r.kind == REQ_BIND {
            continue;
        }
        // SAFETY: the function's contract.
        list.push(unsafe { to_request(r, i, at) }?);
        // SAFETY: the strings were checked by `to_request`.
        key.push(unsafe { Key::of(r) });
    }
    let prepared = rt.prepare(list).map_err(|e| from_require(e, at))?;
    let entry = Arc::new(Cached { key, prepared });
    if let Some(c) = cache {
        *c.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(entry.clone());
    }
    Ok(entry)
}

/// `int allot_require_enter(allot_scope_t *, allot_site_t *, const
/// allot_req_t *, size_t, unsigned)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_require_enter(
    scope: *mut CScope,
    site: *mut CSite,
    reqs: *const CReq,
    n: usize,
    flags: c_uint,
) -> c_int {
    let at = At(site);
    let mut detail = None;
    let rc = entry("allot_require_enter", || {
        // SAFETY: the header's contract.
        let r = unsafe { enter(scope, site, reqs, n) };
        if let Err(e) = &r {
            if !scope.is_null() {
                // SAFETY: checked non-null; the caller's scope.
                unsafe { (*scope).state = FAILED };
            }
            if flags & FLAG_ABORT != 0 {
                detail = Some(e.detail.clone());
            }
        }
        r
    });
    if let Some(d) = detail {
        // The detail starts with the site when one is known.
        let d = d.strip_prefix(&format!("{at}: ")).unwrap_or(&d).to_string();
        fatal(at, &d);
    }
    rc
}

/// # Safety
/// As [`allot_require_enter`].
unsafe fn enter(scope: *mut CScope, site: *mut CSite, reqs: *const CReq, n: usize) -> Result<()> {
    let at = At(site);
    if scope.is_null() {
        return Err(Error::invalid(format!(
            "{at}: scope is NULL; pass the address of an allot_scope_t"
        )));
    }
    // SAFETY: non-null, and a valid allot_scope_t by the contract.
    let s = unsafe { &mut *scope };
    if s.state == ENTERED {
        fatal(
            At(s.site),
            "this allot_scope_t is already entered; leave it before entering it again",
        );
    }
    if view::in_policy() {
        fatal(
            at,
            "a require inside a policy function: policies run under liballot's lock and may \
             only read the view and write requests",
        );
    }
    if n > 0 && reqs.is_null() {
        return Err(Error::invalid(format!("{at}: reqs is NULL with n = {n}")));
    }
    if n > MAX_REQS {
        return Err(Error::invalid(format!(
            "{at}: {n} requests; a block makes at most {MAX_REQS}"
        )));
    }
    let reqs: &[CReq] = if n == 0 {
        &[]
    } else {
        // SAFETY: non-null, `n` elements by the contract.
        unsafe { std::slice::from_raw_parts(reqs, n) }
    };
    for (i, r) in reqs.iter().enumerate() {
        if r.kind == REQ_BIND && r.out.is_null() {
            return Err(Error::invalid(format!(
                "{at}: request {i} binds the outcome to NULL"
            )));
        }
    }
    let rt = Blocks::global();
    let _busy = Busy::new();
    let _site = view::entering(site);
    // SAFETY: the contract (strings, site).
    let cached = unsafe { prepared(rt, site, reqs) }?;
    let entered = rt
        .enter_prepared(&cached.prepared)
        .map_err(|e| from_require(e, at))?;
    let outcome = COutcome::from_outcome(entered.outcome());
    for r in reqs.iter().filter(|r| r.kind == REQ_BIND) {
        // SAFETY: non-null (checked above), a writable allot_outcome_t by
        // the contract.
        unsafe { r.out.write(outcome) };
    }
    // SAFETY: the opaque words are large and aligned enough for a Block
    // (asserted above); the value is moved in and read back exactly once,
    // by `allot_require_leave`.
    unsafe { ptr::write(s.opaque.as_mut_ptr() as *mut Block<'static>, entered) };
    s.prev = TOP.with(|t| t.replace(scope));
    s.site = site;
    s.tid = current_tid();
    s.state = ENTERED;
    Ok(())
}

/// `void allot_require_leave(allot_scope_t *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_require_leave(scope: *mut CScope) {
    if scope.is_null() {
        fatal(At(ptr::null()), "allot_require_leave(NULL)");
    }
    // SAFETY: non-null, a valid allot_scope_t by the contract.
    let s = unsafe { &mut *scope };
    let at = At(s.site);
    match s.state {
        ENTERED => {}
        LEFT => fatal(at, "this require block was already left (left twice)"),
        FRESH | FAILED => return,
        other => fatal(
            at,
            &format!("not an allot_scope_t (state {other}); zero-initialise scopes"),
        ),
    }
    let tid = current_tid();
    if s.tid != tid {
        fatal(
            at,
            &format!(
                "left on thread {tid}, but entered on thread {}: a require block must be left \
                 by the thread that entered it",
                s.tid
            ),
        );
    }
    let top = TOP.with(Cell::get);
    if top != scope {
        let inner = if top.is_null() {
            "another".to_string()
        } else {
            // SAFETY: `top` is an entered scope of this thread, still alive
            // (it is left before its frame ends, by the contract).
            format!("the one at {}", At(unsafe { (*top).site }))
        };
        fatal(
            at,
            &format!(
                "left while a require block entered inside it ({inner}) is still open: leave \
                 the innermost block first"
            ),
        );
    }
    TOP.with(|t| t.set(s.prev));
    s.state = LEFT;
    // SAFETY: written by `enter` in the ENTERED state, read once here.
    let entered = unsafe { ptr::read(s.opaque.as_ptr() as *const Block<'static>) };
    let busy = Busy::new();
    if let Err(p) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(entered))) {
        let what = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        fatal(at, &format!("leaving failed: {what}"));
    }
    drop(busy);
    if s.prev.is_null() {
        super::hooks::release_idle_teams();
    }
}

/// `int allot_release_on(uint32_t waits, uint32_t *previous)`.
///
/// # Safety
/// The header's contract: `previous` is NULL or writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_release_on(waits: u32, previous: *mut u32) -> c_int {
    entry("allot_release_on", || {
        let set = allot_require::Waits::from_bits(waits).ok_or_else(|| {
            Error::invalid(format!(
                "waits 0x{waits:x} name a kind that does not exist; or ALLOT_WAIT_SYNC, \
                 ALLOT_WAIT_SLEEP and ALLOT_WAIT_IO together"
            ))
        })?;
        let before = allot_require::release_on(set);
        if !previous.is_null() {
            // SAFETY: non-null and writable by the contract.
            unsafe { *previous = before.bits() };
        }
        Ok(())
    })
}

/// `uint64_t allot_given_back(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_given_back() -> u64 {
    allot_require::given_back()
}

/// `int allot_kind_define(const char *, size_t, double)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_kind_define(name: *const c_char, count: usize, max: f64) -> c_int {
    entry("allot_kind_define", || {
        // SAFETY: the contract.
        let name = unsafe { c_str(name, "name") }?;
        if count == 0 || count > 65536 {
            return Err(Error::invalid(format!(
                "{count} devices for kind {name:?}; give 1 to 65536"
            )));
        }
        if !max.is_finite() || max <= 0.0 {
            return Err(Error::invalid(format!(
                "a device maximum of {max} for kind {name:?}; give a positive number"
            )));
        }
        let rt = Blocks::global();
        let _busy = Busy::new();
        let existed = rt.kinds().iter().any(|k| k == name);
        rt.register_virtual(name, count, max).map_err(|e| {
            if !existed && rt.coordinated() {
                Error::new(
                    Code::Refused,
                    format!("the broker refused kind {name:?} ({e}): another process defined it with other devices"),
                )
            } else {
                Error::invalid(format!("{e}"))
            }
        })
    })
}
