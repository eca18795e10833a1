//! Which parallel runtimes (OpenMP, BLAS, Go, …) the processes of a cell
//! hold, as `allot status` shows them: read from each process's mappings,
//! at most [`RUNTIME_SCAN_PROCS`] processes a cell, and each process read
//! at most once per [`RUNTIME_CACHE_FOR`] ([`RuntimeCache`], which the
//! engine keeps between status requests).

use allot_enforce::os::{Os, process_tree_at_most};
use allot_enforce::runtimes::{self, Runtime};
use allot_proto::status::{Follows, RuntimeStatus};

/// The most processes of one cell whose mappings a status request reads
/// (a cell's members and their descendants, in that order).
const RUNTIME_SCAN_PROCS: usize = 32;

/// How long what a process's mappings said is reused before they are
/// read again (a library loaded later, numpy's BLAS, shows after this).
const RUNTIME_CACHE_FOR: std::time::Duration = std::time::Duration::from_secs(10);

/// What the mappings of each process scanned lately said, by pid and start
/// time (a reused pid is another process): a status request reads a
/// process's `maps` at most once per [`RUNTIME_CACHE_FOR`], so a loop of
/// requests for cells of processes with thousands of mappings costs the
/// event loop little after the first. Entries not looked at for that long
/// are dropped, so it holds at most the processes scanned lately.
#[derive(Debug, Default)]
pub(crate) struct RuntimeCache {
    seen: std::collections::HashMap<(u32, u64), (std::time::Instant, runtimes::Found)>,
}

impl RuntimeCache {
    /// Process `pid`'s runtimes, read or reused at `now`; `None` when it
    /// is gone or its mappings are not ours to read.
    fn of(&mut self, os: &dyn Os, pid: u32, now: std::time::Instant) -> Option<runtimes::Found> {
        let start = os.start_time(pid)?;
        if let Some((at, found)) = self.seen.get(&(pid, start))
            && now.duration_since(*at) < RUNTIME_CACHE_FOR
        {
            return Some(found.clone());
        }
        let objects = os.mapped_objects(pid).ok()?;
        let mut here = runtimes::classify(&objects);
        if let Some(go) = os.go_release(pid) {
            here.runtimes.push(Runtime::Go(go));
        }
        self.seen.insert((pid, start), (now, here.clone()));
        Some(here)
    }

    /// Drops what was read longer ago than [`RUNTIME_CACHE_FOR`].
    pub(crate) fn expire(&mut self, now: std::time::Instant) {
        self.seen
            .retain(|_, (at, _)| now.duration_since(*at) < RUNTIME_CACHE_FOR);
    }
}

/// The parallel runtimes in the processes of a cell whose members are
/// `pids`: each once, following the grant at run time only if it does so
/// in every process it was found in. At most [`RUNTIME_SCAN_PROCS`]
/// processes are looked at, each read at most once per
/// [`RUNTIME_CACHE_FOR`] ([`RuntimeCache`]).
pub(crate) fn runtimes_of(
    os: &dyn Os,
    pids: &[u32],
    cache: &mut RuntimeCache,
    now: std::time::Instant,
) -> Vec<RuntimeStatus> {
    let mut found: Vec<(Runtime, bool)> = Vec::new();
    for pid in process_tree_at_most(os, pids, RUNTIME_SCAN_PROCS) {
        let Some(here) = cache.of(os, pid, now) else {
            continue; /* gone, or not ours to read */
        };
        for r in here.runtimes {
            let follows = r.follows_at_run_time(here.shim);
            match found.iter_mut().find(|(seen, _)| *seen == r) {
                Some((_, f)) => *f &= follows,
                None => found.push((r, follows)),
            }
        }
    }
    found.sort_unstable();
    found
        .into_iter()
        .map(|(r, run_time)| RuntimeStatus {
            name: r.name(),
            follows: if run_time {
                Follows::RunTime
            } else {
                Follows::Launch
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn runtimes_of_a_cell_follow_only_where_every_process_does() {
        use allot_enforce::os::FakeOs;
        use allot_enforce::runtimes::GoRelease;
        use allot_proto::status::Follows::{Launch, RunTime};
        let all = allot_topo::CpuSet::first_n(2);
        let os = FakeOs::new();
        os.spawn(100, 0, 1, &all);
        os.spawn(200, 100, 1, &all); // a child of the member, without the shim
        os.spawn(300, 0, 1, &all);
        os.set_objects(
            100,
            &[
                "/usr/bin/python3.11",
                "/tmp/allot-0/shim/liballot_shim-0123.so",
                "/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0",
                "/usr/lib/x86_64-linux-gnu/libgomp.so.1",
            ],
            None,
        );
        os.set_objects(
            200,
            &["/usr/lib/x86_64-linux-gnu/openblas-pthread/libopenblas.so.0"],
            None,
        );
        os.set_objects(
            300,
            &["/srv/bin/server"],
            Some(GoRelease {
                major: 1,
                minor: 26,
            }),
        );
        let mut cache = super::RuntimeCache::default();
        let now = std::time::Instant::now();
        let got: Vec<(String, _)> = super::runtimes_of(&os, &[100, 300, 999], &mut cache, now)
            .into_iter()
            .map(|r| (r.name, r.follows))
            .collect();
        assert_eq!(
            got,
            vec![
                ("libgomp".to_string(), RunTime),
                ("openblas".to_string(), Launch),
                ("go1.26".to_string(), RunTime),
            ]
        );
    }

    /// A process's mappings are read once per RUNTIME_CACHE_FOR: a loop of
    /// status requests does not read them again; a library loaded later
    /// shows after that; a reused pid is read afresh.
    #[test]
    fn runtimes_are_read_once_a_while_per_process() {
        use allot_enforce::os::FakeOs;
        let names = |os: &FakeOs, cache: &mut super::RuntimeCache, at| {
            super::runtimes_of(os, &[100], cache, at)
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>()
        };
        let os = FakeOs::new();
        os.spawn(100, 0, 1, &allot_topo::CpuSet::first_n(2));
        os.set_objects(100, &["/usr/bin/python3.11"], None);
        let mut cache = super::RuntimeCache::default();
        let t0 = std::time::Instant::now();
        assert!(names(&os, &mut cache, t0).is_empty());
        os.set_objects(
            100,
            &["/usr/bin/python3.11", "/usr/lib/libopenblas.so.0"],
            None,
        );
        assert!(names(&os, &mut cache, t0).is_empty(), "read again at once");
        let later = t0 + super::RUNTIME_CACHE_FOR;
        assert_eq!(names(&os, &mut cache, later), ["openblas"]);
        os.set_objects(100, &["/usr/lib/x86_64-linux-gnu/libgomp.so.1"], None);
        os.set_start(100, 999_999);
        assert_eq!(
            names(&os, &mut cache, later),
            ["libgomp"],
            "another process"
        );
        cache.expire(later + super::RUNTIME_CACHE_FOR);
        assert!(cache.seen.is_empty());
    }
}
