//! Policies written in C: `allot_policy(name, fn, arg)` and
//! `allot_policy_define`, and the `allot_view_*` / `allot_dev_*` functions
//! they read and write devices with.
//!
//! A C policy is a [`Policy`] ([`CPolicy`]) like the built-in ones: the
//! runtime runs it under its lock on a [`View`] of every device, whenever
//! the block is entered and again when availability changes. For the call,
//! the view's devices are exposed as a slice; `allot_dev_t *` is the address
//! of one element, `allot_view_t *` the address of a [`CView`] on the
//! calling thread's stack, which is also this thread's [`VIEW`] while the
//! function runs. Every function checks that its view is the one running
//! and its device lies in that view's slice, so a stale or foreign pointer
//! aborts with a message instead of reading freed memory.
//!
//! The C function is called through [`call_policy`], an `extern "C"`
//! trampoline: an exception or panic unwinding out of it aborts the process.

use super::site::{At, COutcome, CSite, fatal};
use allot_require::Ownership;
use allot_require::policy::{DevView, Policy, View};
use std::cell::Cell;
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::fmt;
use std::ptr;

/// `int (*)(allot_view_t *, void *)`.
pub type PolicyFn = unsafe extern "C-unwind" fn(*mut CView, *mut c_void) -> c_int;

thread_local! {
    /// The view of the C policy running on this thread.
    static VIEW: Cell<*mut CView> = const { Cell::new(ptr::null_mut()) };
    /// The call site of the block this thread is entering (for messages).
    static SITE: Cell<*const CSite> = const { Cell::new(ptr::null()) };
}

/// Whether a C policy runs on this thread now.
pub(crate) fn in_policy() -> bool {
    VIEW.with(|v| !v.get().is_null())
}

/// Sets the call site policies report against while the returned value
/// lives.
pub(crate) fn entering(site: *const CSite) -> SiteMark {
    SiteMark(SITE.with(|s| s.replace(site)))
}

/// Restores the previous call site on drop.
#[derive(Debug)]
pub(crate) struct SiteMark(*const CSite);

impl Drop for SiteMark {
    fn drop(&mut self) {
        SITE.with(|s| s.set(self.0));
    }
}

/// `allot_view_t`: the view being run, seen from C.
#[derive(Debug)]
pub struct CView {
    base: *mut DevView,
    len: usize,
    total_waiters: u32,
    own: Ownership,
    outcome: COutcome,
    /// NUL-terminated names and kinds handed out, by device.
    names: Vec<Option<CString>>,
    kinds: Vec<Option<CString>>,
}

impl CView {
    fn devs(&mut self) -> &mut [DevView] {
        // SAFETY: `base`/`len` come from the view's device slice, which
        // outlives the policy call during which this CView exists, and no
        // other reference to it is used meanwhile.
        unsafe { std::slice::from_raw_parts_mut(self.base, self.len) }
    }
}

/// A policy implemented by a C function.
pub(crate) struct CPolicy {
    name: String,
    func: PolicyFn,
    arg: *mut c_void,
}

// SAFETY: the C function and its argument are the program's; the header
// tells it that a policy may run on any thread entering a block that names
// it. liballot only passes `arg` back to `func`.
unsafe impl Send for CPolicy {}
// SAFETY: as above; nothing in it is mutated.
unsafe impl Sync for CPolicy {}

impl fmt::Debug for CPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "C policy {}", self.name)
    }
}

impl CPolicy {
    pub(crate) fn new(name: String, func: PolicyFn, arg: *mut c_void) -> CPolicy {
        CPolicy { name, func, arg }
    }
}

/// Calls a C policy. Not unwinding: an exception or panic thrown through
/// it aborts here.
extern "C" fn call_policy(f: PolicyFn, view: *mut CView, arg: *mut c_void) -> c_int {
    // SAFETY: `f` is the non-null function the program gave for this
    // policy, of this type by the header's contract.
    unsafe { f(view, arg) }
}

impl Policy for CPolicy {
    fn name(&self) -> &str {
        &self.name
    }

    fn run(&self, view: &mut View<'_>) -> bool {
        let total_waiters = view.total_waiters();
        let own = view.own;
        let devs = view.devs_mut();
        let len = devs.len();
        let mut cv = CView {
            base: devs.as_mut_ptr(),
            len,
            total_waiters,
            own,
            outcome: COutcome::default(),
            names: vec![None; len],
            kinds: vec![None; len],
        };
        let prev = VIEW.with(|v| v.replace(&mut cv));
        let ok = call_policy(self.func, &mut cv, self.arg) != 0;
        VIEW.with(|v| v.set(prev));
        if !ok {
            return false;
        }
        let at = At(SITE.with(Cell::get));
        let written = cv.outcome;
        let mut out = std::mem::take(&mut view.out);
        for d in view.devs_mut().iter() {
            let Some(a) = d.request else { continue };
            if !(a >= 0.0 && a <= d.max + 1e-9) {
                fatal(
                    at,
                    &format!(
                        "policy {} requested {a} of {} device {} (0 to {})",
                        self.name, d.kind, d.name, d.max
                    ),
                );
            }
            if written == COutcome::default() {
                if d.kind == "cpu"
                    && a > 0.0
                    && let Ok(c) = d.name.parse::<usize>()
                {
                    out.cpus.insert(c);
                    out.ncores += u32::from(a >= 1.0 - 1e-9);
                }
                if d.kind == "memory"
                    && a > 0.0
                    && let Ok(n) = d.name.trim_start_matches("node").parse::<u32>()
                {
                    out.nodes.push(n);
                }
            }
        }
        if written != COutcome::default() {
            out.ncores = written.ncores;
            for c in 0..1024 {
                if written.cpus[c / 64] >> (c % 64) & 1 == 1 {
                    out.cpus.insert(c);
                }
                if written.nodes[c / 64] >> (c % 64) & 1 == 1 {
                    out.nodes.push(c as u32);
                }
            }
        }
        view.out = out;
        true
    }
}

/// The running view `v`, or abort.
fn running<'a>(v: *mut CView, what: &str) -> &'a mut CView {
    let cur = VIEW.with(Cell::get);
    if v.is_null() || v != cur {
        fatal(
            At(SITE.with(Cell::get)),
            &format!("{what}: not the view of the policy running on this thread"),
        );
    }
    // SAFETY: `v` is the live CView of the policy running on this thread.
    unsafe { &mut *v }
}

/// The index of device `d` in the running view, or abort.
fn index_of(d: *const c_void, what: &str) -> (&'static mut CView, usize) {
    let v = running(VIEW.with(Cell::get), what);
    let base = v.base as usize;
    let addr = d as usize;
    let size = std::mem::size_of::<DevView>();
    if addr < base || addr >= base + v.len * size || !(addr - base).is_multiple_of(size) {
        fatal(
            At(SITE.with(Cell::get)),
            &format!("{what}: not a device of the view being run"),
        );
    }
    (v, (addr - base) / size)
}

/// # Safety
/// `kind` is NULL or NUL-terminated.
unsafe fn kind_is(d: &DevView, kind: *const c_char) -> bool {
    // SAFETY: the function's contract.
    !kind.is_null() && unsafe { CStr::from_ptr(kind) }.to_bytes() == d.kind.as_bytes()
}

fn dev_ptr(v: &mut CView, i: usize) -> *mut c_void {
    // SAFETY: `i < len`, inside the slice.
    unsafe { v.base.add(i) as *mut c_void }
}

/// `size_t allot_view_count(allot_view_t *, const char *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_count(view: *mut CView, kind: *const c_char) -> usize {
    let v = running(view, "allot_view_count");
    // SAFETY: the contract.
    v.devs()
        .iter()
        .filter(|d| unsafe { kind_is(d, kind) })
        .count()
}

/// `allot_dev_t *allot_view_first(allot_view_t *, const char *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_first(view: *mut CView, kind: *const c_char) -> *mut c_void {
    let v = running(view, "allot_view_first");
    // SAFETY: the contract.
    match v.devs().iter().position(|d| unsafe { kind_is(d, kind) }) {
        Some(i) => dev_ptr(v, i),
        None => ptr::null_mut(),
    }
}

/// `allot_dev_t *allot_view_next(allot_view_t *, allot_dev_t *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_next(view: *mut CView, dev: *mut c_void) -> *mut c_void {
    running(view, "allot_view_next");
    let (v, i) = index_of(dev, "allot_view_next");
    let devs = v.devs();
    let kind = devs[i].kind.clone();
    match devs[i + 1..].iter().position(|d| d.kind == kind) {
        Some(j) => dev_ptr(v, i + 1 + j),
        None => ptr::null_mut(),
    }
}

/// `allot_dev_t *allot_view_dev(allot_view_t *, const char *, const char *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_dev(
    view: *mut CView,
    kind: *const c_char,
    name: *const c_char,
) -> *mut c_void {
    let v = running(view, "allot_view_dev");
    if name.is_null() {
        return ptr::null_mut();
    }
    // SAFETY: the contract.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    let idx = name.parse::<usize>().ok();
    // SAFETY: the contract.
    let of_kind = |d: &DevView| unsafe { kind_is(d, kind) };
    let devs = v.devs();
    let found = devs
        .iter()
        .position(|d| of_kind(d) && d.name == name)
        .or_else(|| devs.iter().position(|d| of_kind(d) && Some(d.index) == idx));
    match found {
        Some(i) => dev_ptr(v, i),
        None => ptr::null_mut(),
    }
}

/// # Safety
/// `kind` is NULL or NUL-terminated.
unsafe fn best(
    view: *mut CView,
    kind: *const c_char,
    what: &str,
    most_available: bool,
) -> *mut c_void {
    let v = running(view, what);
    let mut pick: Option<usize> = None;
    let devs = v.devs();
    for (i, d) in devs.iter().enumerate() {
        // SAFETY: the function's contract.
        if !unsafe { kind_is(d, kind) } {
            continue;
        }
        let better = match pick {
            None => true,
            Some(p) => {
                let b = &devs[p];
                if most_available {
                    d.available > b.available
                } else {
                    d.waiters < b.waiters
                }
            }
        };
        if better {
            pick = Some(i);
        }
    }
    pick.map_or(ptr::null_mut(), |i| dev_ptr(v, i))
}

/// `allot_dev_t *allot_view_max_available(allot_view_t *, const char *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_max_available(
    view: *mut CView,
    kind: *const c_char,
) -> *mut c_void {
    // SAFETY: the contract.
    unsafe { best(view, kind, "allot_view_max_available", true) }
}

/// `allot_dev_t *allot_view_min_waiters(allot_view_t *, const char *)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_view_min_waiters(
    view: *mut CView,
    kind: *const c_char,
) -> *mut c_void {
    // SAFETY: the contract.
    unsafe { best(view, kind, "allot_view_min_waiters", false) }
}

/// `const char *allot_view_kind(allot_view_t *, size_t)`: the `i`-th
/// resource kind in registration order, or NULL past the last (the
/// paper's `res_iter`). The name is the one `allot_dev_kind` gives for the
/// kind's first device.
#[unsafe(no_mangle)]
pub extern "C" fn allot_view_kind(view: *mut CView, i: usize) -> *const c_char {
    let v = running(view, "allot_view_kind");
    let firsts: Vec<usize> = (0..v.len)
        .filter(|&j| {
            let devs = v.devs();
            !devs[..j].iter().any(|d| d.kind == devs[j].kind)
        })
        .collect();
    let Some(&j) = firsts.get(i) else {
        return ptr::null();
    };
    let kind = v.devs()[j].kind.replace('\0', "?");
    v.kinds[j]
        .get_or_insert_with(|| CString::new(kind).unwrap_or_default())
        .as_ptr()
}

/// `uint32_t allot_view_total_waiters(allot_view_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_view_total_waiters(view: *mut CView) -> u32 {
    running(view, "allot_view_total_waiters").total_waiters
}

fn own_code(o: Ownership) -> c_int {
    match o {
        Ownership::Default => 0,
        Ownership::Private => 1,
        Ownership::Shared => 2,
    }
}

/// `int allot_view_ownership(allot_view_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_view_ownership(view: *mut CView) -> c_int {
    own_code(running(view, "allot_view_ownership").own)
}

/// `allot_outcome_t *allot_view_outcome(allot_view_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_view_outcome(view: *mut CView) -> *mut COutcome {
    &mut running(view, "allot_view_outcome").outcome
}

/// `const char *allot_dev_name(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_name(dev: *const c_void) -> *const c_char {
    let (v, i) = index_of(dev, "allot_dev_name");
    let name = v.devs()[i].name.replace('\0', "?");
    v.names[i]
        .get_or_insert_with(|| CString::new(name).unwrap_or_default())
        .as_ptr()
}

/// `const char *allot_dev_kind(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_kind(dev: *const c_void) -> *const c_char {
    let (v, i) = index_of(dev, "allot_dev_kind");
    let kind = v.devs()[i].kind.replace('\0', "?");
    v.kinds[i]
        .get_or_insert_with(|| CString::new(kind).unwrap_or_default())
        .as_ptr()
}

/// `size_t allot_dev_index(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_index(dev: *const c_void) -> usize {
    let (v, i) = index_of(dev, "allot_dev_index");
    v.devs()[i].index
}

/// `double allot_dev_available(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_available(dev: *const c_void) -> f64 {
    let (v, i) = index_of(dev, "allot_dev_available");
    v.devs()[i].available
}

/// `double allot_dev_shared_available(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_shared_available(dev: *const c_void) -> f64 {
    let (v, i) = index_of(dev, "allot_dev_shared_available");
    v.devs()[i].shared_available
}

/// `double allot_dev_max(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_max(dev: *const c_void) -> f64 {
    let (v, i) = index_of(dev, "allot_dev_max");
    v.devs()[i].max
}

/// `double allot_dev_rate(const allot_dev_t *)`: the device's rate of use
/// from its kind's probe, or -1 when not measured (yet).
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_rate(dev: *const c_void) -> f64 {
    let (v, i) = index_of(dev, "allot_dev_rate");
    v.devs()[i].rate.unwrap_or(-1.0)
}

/// `uint32_t allot_dev_waiters(const allot_dev_t *)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_waiters(dev: *const c_void) -> u32 {
    let (v, i) = index_of(dev, "allot_dev_waiters");
    v.devs()[i].waiters
}

/// `void allot_dev_request(allot_dev_t *, double)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_request(dev: *mut c_void, amount: f64) {
    let (v, i) = index_of(dev, "allot_dev_request");
    v.devs()[i].request = Some(amount);
}

/// `void allot_dev_set_ownership(allot_dev_t *, int)`.
#[unsafe(no_mangle)]
pub extern "C" fn allot_dev_set_ownership(dev: *mut c_void, own: c_int) {
    let (v, i) = index_of(dev, "allot_dev_set_ownership");
    v.devs()[i].ownership = match own {
        0 => Ownership::Default,
        1 => Ownership::Private,
        2 => Ownership::Shared,
        o => fatal(
            At(SITE.with(Cell::get)),
            &format!("allot_dev_set_ownership: ownership {o}; use ALLOT_OWN_*"),
        ),
    };
}
