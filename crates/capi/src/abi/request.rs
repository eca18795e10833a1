//! The requests of a C `require` block (`allot_req_t`, [`CReq`]) turned
//! into the runtime's [`Need`]s, and the policies C names: built-in
//! ones by code or name, and those a program defines at run time
//! (`allot_policy_define`). The block itself is `require.rs`.

use super::cell::c_str;
use super::site::{At, COutcome};
use super::status::{Code, Error, Result, entry};
use super::view::{CPolicy, PolicyFn};
use allot_require::policy::{self, Constraint, Domain, Policy};
use allot_require::{Need, Ownership, Timing};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Arc, Mutex};

/// `ALLOT_REQ_*`.
pub const REQ_DEVICE: c_int = 1;
/// A share of what is available.
pub const REQ_SHARE: c_int = 2;
/// A built-in policy.
pub const REQ_POLICY: c_int = 3;
/// A C policy.
pub const REQ_CPOLICY: c_int = 4;
/// A policy by name.
pub const REQ_NAMED: c_int = 5;
/// The outcome's address.
pub const REQ_BIND: c_int = 6;

/// `allot_req_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CReq {
    /// `ALLOT_REQ_*`.
    pub kind: c_int,
    /// `ALLOT_OWN_*`.
    pub own: c_int,
    /// `ALLOT_TIMING_*`.
    pub timing: c_int,
    /// `ALLOT_P_*`.
    pub policy: c_int,
    /// Kind or policy name.
    pub name: *const c_char,
    /// Device name (NULL: `index`).
    pub dev: *const c_char,
    /// The device when `dev` is NULL: its index, or for `memory` the N of `nodeN`.
    pub index: i64,
    /// Amount or share.
    pub amount: f64,
    /// How many cores or nodes `allot_cores`, `allot_min_cores` and `allot_numa_nodes`
    /// ask for.
    pub n: u32,
    /// Fewest cores `allot_constrained` accepts (at least 1).
    pub min: u32,
    /// Most cores `allot_constrained` takes (at least `min`).
    pub max: u32,
    /// `ALLOT_DOMAIN_*`.
    pub domain: u32,
    /// The function of a `REQ_CPOLICY` request, run when the block is entered.
    pub func: Option<PolicyFn>,
    /// Passed to the C policy's function on each call; never read by allot.
    pub arg: *mut c_void,
    /// Where a BIND request's outcome goes.
    pub out: *mut COutcome,
}

/// Named C policies (`allot_policy_define`).
static NAMED: Mutex<Option<HashMap<String, PolicyFn>>> = Mutex::new(None);

/// Built-in policies that take no parameter, by name.
fn builtin_named(name: &str) -> Option<Arc<dyn Policy>> {
    Some(match name {
        "fair_cores" => policy::fair_cores(),
        "fair_numa" => policy::fair_numa(),
        "strong_numa_node" => policy::strong_numa_node(),
        "weak_numa_node" => policy::weak_numa_node(),
        _ => return None,
    })
}

fn ownership(code: c_int, i: usize) -> Result<Ownership> {
    Ok(match code {
        0 => Ownership::Default,
        1 => Ownership::Private,
        2 => Ownership::Shared,
        _ => {
            return Err(Error::invalid(format!(
                "request {i} has ownership {code}; use ALLOT_OWN_DEFAULT, _PRIVATE or _SHARED"
            )));
        }
    })
}

fn timing(code: c_int, i: usize) -> Result<Timing> {
    Ok(match code {
        0 => Timing::Now,
        1 => Timing::BeforeSpawn,
        2 => Timing::AfterSpawn,
        3 => Timing::ForChild,
        4 => Timing::ForDescendants,
        _ => {
            return Err(Error::invalid(format!(
                "request {i} has timing {code}; use the allot_before_spawn/after_spawn/\
                 for_child/for_descendants wrappers"
            )));
        }
    })
}

/// The Rust request for C request `r` (number `i`, not a BIND).
///
/// # Safety
/// `r`'s strings are NULL or NUL-terminated.
pub(crate) unsafe fn to_request(r: &CReq, i: usize, at: At) -> Result<Need> {
    let own = ownership(r.own, i)?;
    let when = timing(r.timing, i)?;
    let req = match r.kind {
        REQ_DEVICE | REQ_SHARE => {
            // SAFETY: the function's contract.
            let kind = unsafe { c_str(r.name, &format!("request {i}'s kind name")) }?;
            let dev = if !r.dev.is_null() {
                // SAFETY: the function's contract.
                unsafe { c_str(r.dev, &format!("request {i}'s device name")) }?.to_string()
            } else if kind == "memory" {
                format!("node{}", r.index)
            } else {
                r.index.to_string()
            };
            if !r.amount.is_finite() {
                return Err(Error::invalid(format!(
                    "{at}: request {i} ({kind} device {dev}) has amount {}",
                    r.amount
                )));
            }
            if r.kind == REQ_SHARE {
                if !(0.0..=1.0).contains(&r.amount) {
                    return Err(Error::invalid(format!(
                        "{at}: request {i} ({kind} device {dev}) asks for a share of {}; \
                         a share is between 0 and 1 (0.5 is 50%)",
                        r.amount
                    )));
                }
                Need::device_share(kind, dev, r.amount)
            } else {
                Need::device(kind, dev, r.amount)
            }
        }
        REQ_POLICY => Need::policy(builtin(r, i, at)?),
        REQ_CPOLICY => {
            let Some(f) = r.func else {
                return Err(Error::invalid(format!(
                    "{at}: request {i} is a C policy without a function"
                )));
            };
            let name = if r.name.is_null() {
                "C policy".to_string()
            } else {
                // SAFETY: the function's contract.
                unsafe { c_str(r.name, &format!("request {i}'s policy name")) }?.to_string()
            };
            Need::policy(Arc::new(CPolicy::new(name, f, r.arg)))
        }
        REQ_NAMED => {
            // SAFETY: the function's contract.
            let name = unsafe { c_str(r.name, &format!("request {i}'s policy name")) }?;
            let defined = NAMED
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .as_ref()
                .and_then(|m| m.get(name).copied());
            match defined {
                Some(f) => Need::policy(Arc::new(CPolicy::new(name.to_string(), f, r.arg))),
                None => match builtin_named(name) {
                    Some(p) => Need::policy(p),
                    None => {
                        let mut known: Vec<String> = NAMED
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .as_ref()
                            .map(|m| m.keys().cloned().collect())
                            .unwrap_or_default();
                        known.sort();
                        known.extend(
                            [
                                "fair_cores",
                                "fair_numa",
                                "strong_numa_node",
                                "weak_numa_node",
                            ]
                            .map(String::from),
                        );
                        return Err(Error::new(
                            Code::Unknown,
                            format!(
                                "{at}: no policy named {name:?} (known: {}); define one with \
                                 allot_policy_define",
                                known.join(", ")
                            ),
                        ));
                    }
                },
            }
        }
        other => {
            return Err(Error::invalid(format!(
                "{at}: request {i} has type {other}; make requests with the allot_* request \
                 functions (allot_cpu, allot_cores, ...)"
            )));
        }
    };
    Ok(req.owned(own).when(when))
}

/// A built-in policy request.
fn builtin(r: &CReq, i: usize, at: At) -> Result<Arc<dyn Policy>> {
    let need_n = |what: &str| {
        if r.n == 0 {
            Err(Error::invalid(format!(
                "{at}: request {i}: {what}(0) asks for nothing; ask for at least 1"
            )))
        } else {
            Ok(())
        }
    };
    Ok(match r.policy {
        1 => {
            need_n("allot_cores")?;
            policy::cores(r.n)
        }
        2 => {
            need_n("allot_min_cores")?;
            policy::min_cores(r.n)
        }
        3 => {
            need_n("allot_numa_nodes")?;
            policy::numa_nodes(r.n)
        }
        4 => policy::fair_cores(),
        5 => policy::fair_numa(),
        6 => policy::strong_numa_node(),
        7 => policy::weak_numa_node(),
        8 => {
            let domain = match r.domain {
                0 => Domain::Any,
                1 => Domain::Llc,
                2 => Domain::Numa,
                d => {
                    return Err(Error::invalid(format!(
                        "{at}: request {i}: domain {d}; use ALLOT_DOMAIN_ANY, _LLC or _NUMA"
                    )));
                }
            };
            if r.min == 0 || r.max < r.min {
                return Err(Error::invalid(format!(
                    "{at}: request {i}: allot_constrained({}, {}) needs 1 <= min <= max",
                    r.min, r.max
                )));
            }
            policy::constrained(Constraint {
                min: r.min,
                max: r.max,
                domain,
            })
        }
        p => {
            return Err(Error::invalid(format!(
                "{at}: request {i} names built-in policy {p}, which does not exist"
            )));
        }
    })
}

/// `int allot_policy_define(const char *, allot_policy_fn)`.
///
/// # Safety
/// The header's contract.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_policy_define(name: *const c_char, func: Option<PolicyFn>) -> c_int {
    entry("allot_policy_define", || {
        // SAFETY: the contract.
        let name = unsafe { c_str(name, "name") }?;
        let Some(f) = func else {
            return Err(Error::invalid("fn is NULL"));
        };
        if builtin_named(name).is_some() {
            return Err(Error::invalid(format!(
                "{name:?} is a built-in policy; choose another name"
            )));
        }
        NAMED
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(name.to_string(), f);
        Ok(())
    })
}
