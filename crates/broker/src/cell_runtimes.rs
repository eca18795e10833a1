//! Which parallel runtimes (OpenMP, BLAS, Go, …) the processes of a cell
//! hold, as `allot status` shows them: read from each process's mappings,
//! at most [`RUNTIME_SCAN_PROCS`] processes a cell, and each process read
//! at most once per [`RUNTIME_CACHE_FOR`] ([`RuntimeCache`], which the
//! engine keeps between status requests).
//!
//! Invariant: the event loop never reads a process's mappings itself. A
//! process with tens of thousands of mappings takes milliseconds to read,
//! and a cell may hold many: the reads are done on a thread of their own
//! ([`Reader`]), and a status request waits for the reads it asked for at
//! most [`STATUS_WAIT`] in all, then answers with what is known, counting
//! the processes not read yet (`CellStatus::runtimes_unread`). A read
//! still under way when the next request comes is not waited for again.

use allot_enforce::os::{Os, process_tree_at_most};
use allot_enforce::runtimes::{self, Runtime};
use allot_proto::status::{Follows, RuntimeStatus};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

/// The most processes of one cell whose mappings a status request reads
/// (a cell's members and their descendants, in that order).
const RUNTIME_SCAN_PROCS: usize = 32;

/// How long what a process's mappings said is reused before they are
/// read again (a library loaded later, numpy's BLAS, shows after this).
const RUNTIME_CACHE_FOR: Duration = Duration::from_secs(10);

/// The longest one status request waits, over all its cells, for the
/// mappings it asked to be read: time the event loop is not serving
/// anyone else.
pub(crate) const STATUS_WAIT: Duration = Duration::from_millis(20);

/// A process, told from a later one that reuses its pid: (pid, start time).
type Process = (u32, u64);

/// What the mappings of each process scanned lately said, by pid and start
/// time (a reused pid is another process): a status request reads a
/// process's `maps` at most once per [`RUNTIME_CACHE_FOR`], so a loop of
/// requests for cells of processes with thousands of mappings costs
/// little after the first. Entries not looked at for that long are
/// dropped, so it holds at most the processes scanned lately.
#[derive(Debug, Default)]
pub(crate) struct RuntimeCache {
    seen: HashMap<Process, (Instant, runtimes::Found)>,
    /// Asked of the reader, not answered yet.
    pending: HashSet<Process>,
    /// Started at the first read; `None` before, or where no thread could
    /// be started (the reads are then done in place).
    reader: Option<Reader>,
}

/// The thread that reads mappings: asked for a process, it answers what
/// that process's mappings say, or `None` when it is gone (or another
/// process took its pid meanwhile) or not ours to read. It ends when the
/// cache that asks is dropped.
#[derive(Debug)]
struct Reader {
    ask: Sender<Process>,
    done: Receiver<(Process, Option<runtimes::Found>)>,
}

impl Reader {
    fn start(os: Arc<dyn Os>) -> Option<Reader> {
        let (ask, asked) = mpsc::channel::<Process>();
        let (answer, done) = mpsc::channel();
        std::thread::Builder::new()
            .name("allot-maps".into())
            .spawn(move || {
                for p in asked {
                    if answer.send((p, read(os.as_ref(), p))).is_err() {
                        return;
                    }
                }
            })
            .ok()?;
        Some(Reader { ask, done })
    }
}

/// What process `p`'s mappings say, if `p` still runs (its pid not taken
/// by a later process before or during the read).
fn read(os: &dyn Os, (pid, start): Process) -> Option<runtimes::Found> {
    let same = || os.start_time(pid) == Some(start);
    if !same() {
        return None;
    }
    let objects = os.mapped_objects(pid).ok()?;
    let mut here = runtimes::classify(&objects);
    if let Some(go) = os.go_release(pid) {
        here.runtimes.push(Runtime::Go(go));
    }
    same().then_some(here)
}

impl RuntimeCache {
    /// Asks for process `p` to be read unless it is known and fresh at
    /// `now` or already asked for; returns whether it was asked now.
    fn ask(&mut self, os: &Arc<dyn Os>, p: Process, now: Instant) -> bool {
        if self.fresh(p, now).is_some() || self.pending.contains(&p) {
            return false;
        }
        if self.reader.is_none() {
            self.reader = Reader::start(os.clone());
        }
        match &self.reader {
            Some(r) if r.ask.send(p).is_ok() => {
                self.pending.insert(p);
                true
            }
            _ => {
                // No thread: read in place, as a last resort.
                self.reader = None;
                if let Some(found) = read(os.as_ref(), p) {
                    self.seen.insert(p, (now, found));
                }
                false
            }
        }
    }

    /// What process `p`'s mappings said, if read within
    /// [`RUNTIME_CACHE_FOR`] of `now`.
    fn fresh(&self, p: Process, now: Instant) -> Option<&runtimes::Found> {
        self.seen
            .get(&p)
            .filter(|(at, _)| now.saturating_duration_since(*at) < RUNTIME_CACHE_FOR)
            .map(|(_, found)| found)
    }

    /// Takes in the reader's answers, waiting for them until `until` while
    /// some are pending.
    fn collect(&mut self, now: Instant, until: Instant) {
        let Some(r) = &self.reader else { return };
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let got = if self.pending.is_empty() || left.is_zero() {
                r.done.try_recv().map_err(|_| RecvTimeoutError::Timeout)
            } else {
                r.done.recv_timeout(left)
            };
            match got {
                Ok((p, found)) => {
                    self.pending.remove(&p);
                    if let Some(found) = found {
                        self.seen.insert(p, (now, found));
                    }
                }
                Err(RecvTimeoutError::Timeout) => return,
                Err(RecvTimeoutError::Disconnected) => {
                    // The thread is gone: ask again of a new one.
                    self.reader = None;
                    self.pending.clear();
                    return;
                }
            }
        }
    }

    /// Drops what was read longer ago than [`RUNTIME_CACHE_FOR`].
    pub(crate) fn expire(&mut self, now: Instant) {
        self.seen
            .retain(|_, (at, _)| now.saturating_duration_since(*at) < RUNTIME_CACHE_FOR);
    }
}

/// The parallel runtimes of one cell, as far as known.
pub(crate) struct CellRuntimes {
    /// Each runtime once, following the grant at run time only if it does
    /// so in every process it was found in.
    pub runtimes: Vec<RuntimeStatus>,
    /// Processes of the cell whose mappings are not read yet.
    pub unread: u32,
}

/// The parallel runtimes in the processes of a cell whose members are
/// `pids`. At most [`RUNTIME_SCAN_PROCS`] processes are looked at, each
/// read at most once per [`RUNTIME_CACHE_FOR`], off the event loop
/// ([`RuntimeCache`]); reads asked for now are waited for until `until`.
pub(crate) fn runtimes_of(
    os: &Arc<dyn Os>,
    pids: &[u32],
    cache: &mut RuntimeCache,
    now: Instant,
    until: Instant,
) -> CellRuntimes {
    let procs: Vec<Process> = process_tree_at_most(os.as_ref(), pids, RUNTIME_SCAN_PROCS)
        .into_iter()
        .filter_map(|pid| Some((pid, os.start_time(pid)?)))
        .collect();
    let mut asked = false;
    for &p in &procs {
        asked |= cache.ask(os, p, now);
    }
    cache.collect(now, if asked { until } else { now });
    let mut found: Vec<(Runtime, bool)> = Vec::new();
    let mut unread = 0;
    for &p in &procs {
        let Some(here) = cache.fresh(p, now) else {
            unread += u32::from(cache.pending.contains(&p));
            continue; /* gone, or not ours to read */
        };
        for r in &here.runtimes {
            let follows = r.follows_at_run_time(here.shim);
            match found.iter_mut().find(|(seen, _)| seen == r) {
                Some((_, f)) => *f &= follows,
                None => found.push((*r, follows)),
            }
        }
    }
    found.sort_unstable();
    let runtimes = found
        .into_iter()
        .map(|(r, run_time)| RuntimeStatus {
            name: r.name(),
            follows: if run_time {
                Follows::RunTime
            } else {
                Follows::Launch
            },
        })
        .collect();
    CellRuntimes { runtimes, unread }
}

#[cfg(test)]
mod tests {
    use allot_enforce::os::{FakeOs, Os};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// The runtimes' names `runtimes_of` gives for `pids` at `at`, waiting
    /// for the reads as long as they take.
    fn names(
        os: &FakeOs,
        pids: &[u32],
        cache: &mut super::RuntimeCache,
        at: Instant,
    ) -> Vec<String> {
        let os: Arc<dyn Os> = Arc::new(os.clone());
        let r = super::runtimes_of(
            &os,
            pids,
            cache,
            at,
            Instant::now() + Duration::from_secs(60),
        );
        assert_eq!(r.unread, 0);
        r.runtimes.into_iter().map(|r| r.name).collect()
    }

    #[test]
    fn runtimes_of_a_cell_follow_only_where_every_process_does() {
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
        let now = Instant::now();
        let dynos: Arc<dyn Os> = Arc::new(os.clone());
        let got = super::runtimes_of(
            &dynos,
            &[100, 300, 999],
            &mut cache,
            now,
            now + Duration::from_secs(60),
        );
        assert_eq!(got.unread, 0);
        let got: Vec<(String, _)> = got
            .runtimes
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
        let names = |os: &FakeOs, cache: &mut super::RuntimeCache, at| names(os, &[100], cache, at);
        let os = FakeOs::new();
        os.spawn(100, 0, 1, &allot_topo::CpuSet::first_n(2));
        os.set_objects(100, &["/usr/bin/python3.11"], None);
        let mut cache = super::RuntimeCache::default();
        let t0 = Instant::now();
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

    /// A read that takes long does not hold the status up: it is answered
    /// without that process's runtimes, counted as unread, and a later
    /// status has them, without asking for the read again.
    #[test]
    fn a_slow_read_is_not_waited_for_past_the_status_wait() {
        let os = FakeOs::new();
        os.spawn(100, 0, 1, &allot_topo::CpuSet::first_n(2));
        os.set_objects(100, &["/usr/lib/libopenblas.so.0"], None);
        let dynos: Arc<dyn Os> = Arc::new(os.clone());
        let mut cache = super::RuntimeCache::default();
        let held = os.hold_reads();
        let now = Instant::now();
        let r = super::runtimes_of(&dynos, &[100], &mut cache, now, now + super::STATUS_WAIT);
        assert_eq!((r.runtimes.len(), r.unread), (0, 1));
        drop(held);
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let r = super::runtimes_of(&dynos, &[100], &mut cache, now, Instant::now());
            if r.unread == 0 {
                assert_eq!(r.runtimes[0].name, "openblas");
                break;
            }
            assert!(Instant::now() < deadline, "the read never came back");
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
