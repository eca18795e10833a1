//! Pinning threads to CPUs, and reading back where a thread may run.
//!
//! Workers pin *themselves* (`pin_current`), between tasks, so a thread's
//! affinity only ever changes at a point its worker chose. `thread_cpus`
//! reads any thread's affinity from `/proc` the way an outside observer
//! (a test, `allot status`) would.

use allot_topo::CpuSet;
use std::io;

/// The calling thread's kernel thread id.
pub fn current_tid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// The CPU the calling thread runs on now (it may move right after).
#[inline]
pub fn current_cpu() -> usize {
    rustix::thread::sched_getcpu()
}

/// Restricts the calling thread to `cpu`.
pub fn pin_current(cpu: usize) -> io::Result<()> {
    let mut set = rustix::thread::CpuSet::new();
    if cpu >= rustix::thread::CpuSet::MAX_CPU {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPU {cpu} beyond the affinity mask"),
        ));
    }
    set.set(cpu);
    rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
}

/// The CPUs thread `tid` of this process may run on, from
/// `/proc/self/task/<tid>/status` (`Cpus_allowed_list`).
pub fn thread_cpus(tid: i32) -> io::Result<CpuSet> {
    let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "no Cpus_allowed_list in status")
        })?;
    CpuSet::parse_list(line.trim())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_and_read_back() {
        let allowed = allot_topo::allowed_cpus().expect("allowed cpus");
        let cpu = allowed.last().expect("some CPU");
        std::thread::spawn(move || {
            pin_current(cpu).expect("pin");
            assert_eq!(
                thread_cpus(current_tid())
                    .expect("read")
                    .iter()
                    .collect::<Vec<_>>(),
                vec![cpu]
            );
        })
        .join()
        .unwrap();
    }
}
