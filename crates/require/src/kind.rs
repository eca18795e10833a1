//! Resource kinds (Poli-C §4.2): named resources with devices and the
//! operations that make the OS honour an allocation.
//!
//! | kind | devices | amount | restrict (per thread) | throttle |
//! |------|---------|--------|-----------------------|----------|
//! | `cpu` | the CPUs this process may use | utilisation 0..1 | `sched_setaffinity` to the CPUs with a non-zero amount; a team's threads one CPU each (`blocks::place`) | fractions below 1: a per-thread cgroup quota when a cgroup is given, else the monitor thread (`throttle.rs`) |
//! | `memory` | NUMA nodes | bytes | `set_mempolicy(MPOL_BIND)` to the nodes with a non-zero amount | none; with `ALLOT_MEMORY_CAP`, the process's memory group limited to what its blocks hold ([`super::memcap`]) |
//! | `io` | block devices (`major:minor`) | weight 1..1000 | the thread's blkio group of that weight (`ALLOT_IO_CGROUP`, cgroup v1, BFQ), else its I/O priority (`ioprio_set`); see [`super::io`] | — |
//! | virtual | named counters | any | — | — |
//!
//! Operations apply to the *calling* thread: a thread applies its own
//! allocation when it enters or leaves a scope, and a child applies what it
//! inherits when it starts. Kinds that touch the OS (`cpu`, `memory`, `io`)
//! are built in and trusted; processes may register *virtual* kinds, which
//! only count (the paper's StrongCore/WeakCore), through the broker so every
//! process sees the same counters, and kinds of their own with operations
//! ([`Kind::with_ops`], `Blocks::register_kind`; [`super::disk`] is one),
//! whose devices are theirs alone. The built-in kinds' operations are in
//! [`super::builtin`] and [`super::io`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// One device of a kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// Name (`"3"` for CPU 3, `"node0"`, `"8:0"`, or the virtual kind's).
    pub name: String,
    /// Amount left to processes that asked for nothing.
    pub min: f64,
    /// Largest allocation the device supports.
    pub max: f64,
}

/// OS operations of a kind, for the calling thread.
pub trait KindOps: Send + Sync + fmt::Debug {
    /// Cumulative usage counters of `dev` (Poli-C's get1/get2) — the
    /// calling thread's, its cgroup's or the device's, as the kind counts
    /// — if the kind can measure them.
    fn probe(&self, _dev: usize) -> Option<(u64, u64)> {
        None
    }
    /// A usage rate from two probes `dt` apart: by default `Δget1 / Δt`
    /// (per second), or `Δget1 / Δget2` when `get2` counts too.
    fn rate(&self, before: (u64, u64), after: (u64, u64), dt: Duration) -> f64 {
        let d1 = after.0.saturating_sub(before.0) as f64;
        let d2 = after.1.saturating_sub(before.1) as f64;
        if d2 > 0.0 {
            d1 / d2
        } else {
            d1 / dt.as_secs_f64().max(1e-9)
        }
    }
    /// Lets the calling thread use exactly the devices whose amount is not
    /// zero; `None` means "unconstrained" (no frame on that device).
    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()>;
    /// Limits the rate of thread `tid` (the caller) to what `amounts`
    /// allow, or lifts the limit. Kinds without a rate to enforce keep the
    /// default, which does nothing.
    fn throttle(&self, _tid: u64, _amounts: &[Option<f64>]) -> std::io::Result<()> {
        Ok(())
    }
    /// Whether the threads of a team holding several of its devices are
    /// placed one per device (`blocks::place`; the `cpu` kind).
    fn spreads(&self) -> bool {
        false
    }
    /// Moves thread `tid` of this process (not the caller) onto exactly
    /// the devices whose amount is not zero: how a placement is rebalanced
    /// when a team member ends. Kinds that spread implement it.
    fn restrict_other(&self, _tid: u64, _amounts: &[Option<f64>]) -> std::io::Result<()> {
        Err(std::io::ErrorKind::Unsupported.into())
    }
    /// The device the calling thread uses now, if the kind knows (the
    /// CPU it runs on): placement prefers to leave a thread there.
    fn current_device(&self) -> Option<usize> {
        None
    }
    /// Why a non-zero amount on `dev` could not be enforced on this
    /// machine, if so: such a request is refused with this reason rather
    /// than accounted and silently not enforced.
    fn unenforced(&self, _dev: usize) -> Option<String> {
        None
    }
    /// Whether the kind also limits the whole process by what its blocks
    /// hold ([`KindOps::limit_process`]; the `memory` kind's cap). Asked on
    /// every change of a thread's allocation, so it must be cheap.
    fn limits_process(&self) -> bool {
        false
    }
    /// Makes the OS hold the whole process to `entered[d]` of each device:
    /// what its outermost blocks entered and not left ask for, also while
    /// their threads wait. Called when a kind [`limits_process`] and an
    /// allocation of the process changed.
    ///
    /// [`limits_process`]: KindOps::limits_process
    fn limit_process(&self, _entered: &[f64]) -> std::io::Result<()> {
        Ok(())
    }
}

/// A registered resource kind.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Name used in requests.
    pub name: String,
    /// Its devices; a device's index in this list is its `DevId`.
    pub devices: Vec<Device>,
    /// OS operations (`None`: virtual, counting only).
    pub ops: Option<Arc<dyn KindOps>>,
    /// Whether policy views show each device's rate of use from
    /// [`KindOps::probe`] (kinds registered with
    /// [`Blocks::register_kind`](super::Blocks::register_kind) that
    /// measure; the built-in kinds do not, to keep policies cheap).
    pub measured: bool,
    /// Whether the devices are this process's alone (a kind registered
    /// with `register_kind`), never shared through a broker.
    pub local: bool,
}

impl Kind {
    /// A kind of the program's own for
    /// [`Blocks::register_kind`](super::Blocks::register_kind): named
    /// `name`, with `devices` and `ops`, its devices' rates shown to
    /// policies when `ops` can probe them.
    pub fn with_ops(name: &str, devices: Vec<Device>, ops: Arc<dyn KindOps>) -> Kind {
        Kind {
            name: name.to_string(),
            devices,
            ops: Some(ops),
            measured: true,
            local: true,
        }
    }

    /// Index of a device named `name` or numbered by it.
    pub fn device(&self, name: &str) -> Option<usize> {
        self.devices
            .iter()
            .position(|d| d.name == name)
            .or_else(|| {
                name.parse::<usize>()
                    .ok()
                    .filter(|&i| i < self.devices.len())
            })
    }

    /// Whether the kind only counts.
    pub fn is_virtual(&self) -> bool {
        self.ops.is_none()
    }
}

/// A virtual kind: `count` devices named `0..count`, each up to `max`.
pub fn virtual_kind(name: &str, count: usize, max: f64) -> Kind {
    Kind {
        name: name.to_string(),
        devices: (0..count)
            .map(|i| Device {
                name: i.to_string(),
                min: 0.0,
                max,
            })
            .collect(),
        ops: None,
        measured: false,
        local: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_kinds_count_only() {
        let k = virtual_kind("StrongCore", 4, 2.0);
        assert!(k.is_virtual());
        assert_eq!(k.devices.len(), 4);
        assert_eq!(k.device("3"), Some(3));
        assert_eq!(k.device("9"), None);
    }
}
