//! Resource kinds (Poli-C §4.2): named resources with devices and the
//! operations that make the OS honour an allocation.
//!
//! | kind | devices | amount | restrict (per thread) | throttle |
//! |------|---------|--------|-----------------------|----------|
//! | `cpu` | the CPUs this process may use | utilisation 0..1 | `sched_setaffinity` to the CPUs with a non-zero amount; a team's threads one CPU each (`runtime::place`) | fractions below 1: a per-thread cgroup quota when a cgroup is given, else the monitor thread (`throttle.rs`) |
//! | `memory` | NUMA nodes | bytes | `set_mempolicy(MPOL_BIND)` to the nodes with a non-zero amount | none: amounts are accounted, not enforced |
//! | `io` | block devices (`major:minor`) | weight 1..1000 | the thread's blkio group of that weight (`ALLOT_IO_CGROUP`, cgroup v1, BFQ), else its I/O priority (`ioprio_set`); see [`super::io`] | — |
//! | virtual | named counters | any | — | — |
//!
//! Operations apply to the *calling* thread: a thread applies its own
//! allocation when it enters or leaves a scope, and a child applies what it
//! inherits when it starts. Kinds that touch the OS (`cpu`, `memory`, `io`)
//! are built in and trusted; processes may register *virtual* kinds, which
//! only count (the paper's StrongCore/WeakCore), through the broker so every
//! process sees the same counters, and kinds of their own with operations
//! ([`Kind::with_ops`], `Runtime::register_kind`; [`super::disk`] is one),
//! whose devices are theirs alone.

use allot_topo::{CpuSet, Machine};
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
    /// placed one per device (`runtime::place`; the `cpu` kind).
    fn spreads(&self) -> bool {
        false
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
}

/// A registered resource kind.
#[derive(Debug, Clone)]
pub struct Kind {
    /// Name used in requests.
    pub name: String,
    /// Its devices.
    pub devices: Vec<Device>,
    /// OS operations (`None`: virtual, counting only).
    pub ops: Option<Arc<dyn KindOps>>,
    /// Whether policy views show each device's rate of use from
    /// [`KindOps::probe`] (kinds registered with
    /// [`Runtime::register_kind`](super::Runtime::register_kind) that
    /// measure; the built-in kinds do not, to keep policies cheap).
    pub measured: bool,
    /// Whether the devices are this process's alone (a kind registered
    /// with `register_kind`), never shared through a broker.
    pub local: bool,
}

impl Kind {
    /// A kind of the program's own for
    /// [`Runtime::register_kind`](super::Runtime::register_kind): named
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

/// `cpu`: one device per usable CPU.
#[derive(Debug)]
pub struct CpuOps {
    /// Device index → CPU number.
    pub cpus: Vec<usize>,
}

impl KindOps for CpuOps {
    fn probe(&self, _dev: usize) -> Option<(u64, u64)> {
        // The calling thread's CPU time, ns.
        let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        Some((t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64, 0))
    }

    fn rate(&self, before: (u64, u64), after: (u64, u64), dt: Duration) -> f64 {
        // Utilisation: CPU ns per wall ns.
        after.0.saturating_sub(before.0) as f64 / dt.as_nanos().max(1) as f64
    }

    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()> {
        let mut set = rustix::thread::CpuSet::new();
        let mut any = false;
        for (i, a) in amounts.iter().enumerate() {
            if a.is_none_or(|x| x > 0.0)
                && let Some(&c) = self.cpus.get(i)
            {
                set.set(c);
                any = true;
            }
        }
        if !any {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "an allocation that denies every CPU",
            ));
        }
        rustix::thread::sched_setaffinity(None, &set)?;
        Ok(())
    }

    fn throttle(&self, tid: u64, amounts: &[Option<f64>]) -> std::io::Result<()> {
        super::throttle::set(tid, cpu_fraction(amounts));
        Ok(())
    }

    fn spreads(&self) -> bool {
        true
    }

    fn current_device(&self) -> Option<usize> {
        // SAFETY: sched_getcpu takes no arguments; -1 on failure.
        let cpu = unsafe { libc::sched_getcpu() };
        let cpu = usize::try_from(cpu).ok()?;
        self.cpus.iter().position(|&c| c == cpu)
    }
}

/// The rate limit of a CPU allocation: the sum of fractional amounts when
/// any allowed CPU is held below 1.0, else none.
pub fn cpu_fraction(h: &[Option<f64>]) -> Option<f64> {
    let allowed = h.iter().filter_map(|a| *a).filter(|&a| a > 0.0);
    if allowed.clone().any(|a| a < 1.0 - 1e-9) {
        Some(allowed.sum::<f64>().min(1.0))
    } else {
        None
    }
}

/// `memory`: one device per NUMA node.
#[derive(Debug)]
pub struct MemoryOps {
    /// Device index → kernel node id.
    pub nodes: Vec<u32>,
}

impl KindOps for MemoryOps {
    fn restrict(&self, amounts: &[Option<f64>]) -> std::io::Result<()> {
        const MPOL_DEFAULT: libc::c_long = 0;
        const MPOL_BIND: libc::c_long = 2;
        let unconstrained = amounts.iter().all(Option::is_none);
        let mut mask = [0u64; 16];
        for (i, a) in amounts.iter().enumerate() {
            if a.is_none_or(|x| x > 0.0)
                && let Some(&n) = self.nodes.get(i)
            {
                mask[n as usize / 64] |= 1 << (n % 64);
            }
        }
        let (mode, ptr, bits) = if unconstrained || mask.iter().all(|&w| w == 0) {
            (MPOL_DEFAULT, std::ptr::null::<u64>(), 0)
        } else {
            (MPOL_BIND, mask.as_ptr(), 1024)
        };
        // SAFETY: set_mempolicy reads `bits` bits from `ptr`, which points
        // at our 1024-bit mask (or is null with 0 bits for MPOL_DEFAULT).
        let r = unsafe { libc::syscall(libc::SYS_set_mempolicy, mode, ptr, bits as libc::c_ulong) };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// The built-in kinds for `machine`, restricted to `usable` CPUs.
pub fn builtin(machine: &Machine, usable: &CpuSet) -> Vec<Kind> {
    let cpus: Vec<usize> = usable.iter().collect();
    let cpu = Kind {
        name: "cpu".into(),
        devices: cpus
            .iter()
            .map(|c| Device {
                name: c.to_string(),
                min: 0.0,
                max: 1.0,
            })
            .collect(),
        ops: Some(Arc::new(CpuOps { cpus })),
        measured: false,
        local: false,
    };
    let nodes: Vec<&allot_topo::Node> = machine.nodes().iter().collect();
    let memory = Kind {
        name: "memory".into(),
        devices: nodes
            .iter()
            .map(|n| Device {
                name: format!("node{}", n.id),
                min: 0.0,
                max: (n.mem_total_kib * 1024) as f64,
            })
            .collect(),
        ops: Some(Arc::new(MemoryOps {
            nodes: nodes.iter().map(|n| n.id).collect(),
        })),
        measured: false,
        local: false,
    };
    let disks = super::io::block_devices();
    let io = Kind {
        name: "io".into(),
        ops: Some(Arc::new(super::io::IoOps::from_env(&disks))),
        devices: disks,
        measured: false,
        local: false,
    };
    vec![cpu, memory, io]
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
    fn builtins_describe_this_machine() {
        let m = allot_topo::discover_live().unwrap();
        let kinds = builtin(&m, m.usable());
        assert_eq!(kinds[0].name, "cpu");
        assert_eq!(kinds[0].devices.len(), m.num_cpus());
        assert_eq!(kinds[0].device("0"), Some(0));
        assert_eq!(kinds[1].name, "memory");
        assert!(kinds[1].devices.iter().all(|d| d.max > 0.0));
        assert_eq!(kinds[2].name, "io");
    }

    #[test]
    fn cpu_restrict_confines_the_calling_thread() {
        let all = allot_topo::allowed_cpus().unwrap();
        let cpus: Vec<usize> = all.iter().collect();
        let ops = CpuOps { cpus: cpus.clone() };
        std::thread::spawn(move || {
            let mut amounts: Vec<Option<f64>> = vec![Some(0.0); cpus.len()];
            amounts[0] = Some(1.0);
            ops.restrict(&amounts).unwrap();
            let got = rustix::thread::sched_getaffinity(None).unwrap();
            assert!(got.is_set(cpus[0]));
            assert_eq!((0..1024).filter(|&c| got.is_set(c)).count(), 1);
            assert!(
                ops.restrict(&vec![Some(0.0); cpus.len()]).is_err(),
                "denying every CPU is refused"
            );
            ops.restrict(&vec![None; cpus.len()]).unwrap();
            assert_eq!(
                (0..1024)
                    .filter(|&c| rustix::thread::sched_getaffinity(None).unwrap().is_set(c))
                    .count(),
                cpus.len()
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn memory_binding_and_io_priority_apply() {
        std::thread::spawn(|| {
            let mem = MemoryOps { nodes: vec![0] };
            mem.restrict(&[Some(1.0)]).unwrap();
            mem.restrict(&[None]).unwrap();
        })
        .join()
        .unwrap();
    }

    #[test]
    fn virtual_kinds_count_only() {
        let k = virtual_kind("StrongCore", 4, 2.0);
        assert!(k.is_virtual());
        assert_eq!(k.devices.len(), 4);
        assert_eq!(k.device("3"), Some(3));
        assert_eq!(k.device("9"), None);
    }
}
