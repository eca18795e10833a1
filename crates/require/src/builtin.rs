//! The built-in kinds, `cpu`, `memory` and `io` (see [`super::kind`] for
//! what each device and amount means): the machine's CPUs and NUMA nodes
//! with the operations that confine the calling thread to them (and, as
//! an option, cap the process's memory: [`super::memcap`]), and the
//! block devices with [`super::io`]'s.

use super::io::{IoOps, block_devices};
use super::kind::{Device, Kind, KindOps};
use super::memcap::Setting;
use allot_topo::{CpuSet, Machine};
use std::sync::Arc;
use std::time::Duration;

/// `cpu`: one device per usable CPU.
#[derive(Debug)]
pub struct CpuOps {
    /// Device index → CPU number.
    pub cpus: Vec<usize>,
}

impl CpuOps {
    /// The CPUs whose amount is not zero (`None`: unconstrained).
    fn mask(&self, amounts: &[Option<f64>]) -> std::io::Result<rustix::thread::CpuSet> {
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
        Ok(set)
    }
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
        rustix::thread::sched_setaffinity(None, &self.mask(amounts)?)?;
        Ok(())
    }

    fn restrict_other(&self, tid: u64, amounts: &[Option<f64>]) -> std::io::Result<()> {
        let pid = i32::try_from(tid)
            .ok()
            .and_then(rustix::process::Pid::from_raw)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        rustix::thread::sched_setaffinity(Some(pid), &self.mask(amounts)?)?;
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
    /// The process's cap, when `ALLOT_MEMORY_CAP` asks for one.
    pub cap: Setting,
}

impl KindOps for MemoryOps {
    fn unenforced(&self, _dev: usize) -> Option<String> {
        match &self.cap {
            Setting::Refused(why) => Some(why.clone()),
            _ => None,
        }
    }

    fn limits_process(&self) -> bool {
        matches!(self.cap, Setting::On(_))
    }

    fn limit_process(&self, entered: &[f64]) -> std::io::Result<()> {
        match &self.cap {
            Setting::On(cap) => cap.hold(entered.iter().sum::<f64>().max(0.0).ceil() as u64),
            _ => Ok(()),
        }
    }

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
            cap: Setting::from_env(),
        })),
        measured: false,
        local: false,
    };
    let disks = block_devices();
    let io = Kind {
        name: "io".into(),
        ops: Some(Arc::new(IoOps::from_env(&disks))),
        devices: disks,
        measured: false,
        local: false,
    };
    vec![cpu, memory, io]
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
            let mem = MemoryOps {
                nodes: vec![0],
                cap: Setting::Off,
            };
            mem.restrict(&[Some(1.0)]).unwrap();
            mem.restrict(&[None]).unwrap();
        })
        .join()
        .unwrap();
    }
}
