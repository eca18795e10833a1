//! Programs that follow the grant, watched while they run: their output is
//! read as it comes, each phase is judged from the programs' own clock
//! stamps, and a program ends when the test has seen enough rather than
//! after a fixed time. A test that waited a fixed time (a sleep for "the
//! program has started", a run of N seconds for "there will be samples
//! after the neighbour") failed on a loaded machine, where starting a
//! process can take a second.
//!
//! Every watched program honours `STOP_FILE`: it ends at its next sample
//! once that file exists (its duration argument is only a cap).

use super::{Daemon, allot_run, eventually};
pub use allot_testkit::{PATIENCE, Stream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A program started with stdout piped and `STOP_FILE` set; its lines are
/// read as they come ([`Stream`]). Dropping it asks the program to stop
/// and reaps it.
pub struct Watched {
    child: Option<Child>,
    /// `None` once [`Watched::stop`] has read it to the end.
    out: Option<Stream>,
    stop: PathBuf,
    _dir: tempfile::TempDir,
}

impl Watched {
    /// Starts `cmd` (stdin closed, stdout piped, `STOP_FILE` set).
    pub fn spawn(mut cmd: Command) -> Watched {
        let dir = tempfile::tempdir().unwrap();
        let stop = dir.path().join("stop");
        let mut child = cmd
            .env("STOP_FILE", &stop)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("the program starts");
        let out = Stream::read(child.stdout.take().unwrap());
        Watched {
            child: Some(child),
            out: Some(out),
            stop,
            _dir: dir,
        }
    }

    /// The lines printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.out().lines()
    }

    fn out(&self) -> &Stream {
        self.out
            .as_ref()
            .expect("the program's output is still read")
    }

    /// Waits until `seen` holds for the lines printed so far; fails the
    /// test, saying `what`, after [`PATIENCE`] or if the program ended
    /// without it.
    pub fn wait_for(&mut self, what: &str, mut seen: impl FnMut(&[String]) -> bool) {
        let ok = eventually(PATIENCE, || {
            // Every line is in once the program has exited and the reader
            // has read to the end: then a wait could never be met.
            let ended =
                self.child.as_mut().unwrap().try_wait().unwrap().is_some() && self.out().ended();
            if self.out().holds(&mut seen) {
                return true;
            }
            assert!(
                !ended,
                "the program ended before {what}: {:?}",
                self.lines()
            );
            false
        });
        assert!(ok, "waited {PATIENCE:?} for {what}: {:?}", self.lines());
    }

    /// Asks the program to stop, waits for it, and returns every line it
    /// printed; fails the test if it did not succeed.
    pub fn stop(mut self) -> Vec<String> {
        std::fs::write(&self.stop, "").unwrap();
        let mut status = None;
        let child = self.child.as_mut().unwrap();
        eventually(PATIENCE, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        // (Dropping `self` on this failure kills it.)
        let status =
            status.unwrap_or_else(|| panic!("the program did not stop: {:?}", self.lines()));
        self.child = None;
        let lines = self.out.take().unwrap().all_lines();
        assert!(status.success(), "the program failed: {status}");
        lines
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = std::fs::write(&self.stop, "");
            if !eventually(Duration::from_secs(5), || {
                child.try_wait().ok().flatten().is_some()
            }) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// `t NS VALUE` lines as (CLOCK_MONOTONIC seconds, value).
pub fn stamped(lines: &[String]) -> Vec<(f64, u32)> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("t "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f[0].parse::<f64>().unwrap() / 1e9, f[1].parse().unwrap())
        })
        .collect()
}

/// When a neighbour came and went (CLOCK_MONOTONIC seconds).
#[derive(Debug, Clone, Copy)]
pub struct Visit {
    /// Before its `allot run` started: the others had their grants until
    /// at least then.
    pub launched: f64,
    /// Its own first instant inside its cell: it was admitted (and the
    /// others' grants shrunk) before.
    pub started: f64,
    /// Its own last instant: its share is given back only after.
    pub ended: f64,
}

/// A neighbour for [`with_a_neighbour`]: prints its first instant, keeps a
/// CPU busy until told to stop (two minutes at most, should the test die
/// without telling it), prints its last instant (CLOCK_MONOTONIC ns).
const NEIGHBOUR: &str = "import os, time\n\
    print(time.clock_gettime_ns(time.CLOCK_MONOTONIC), flush=True)\n\
    stop, end = os.environ['STOP_FILE'], time.monotonic() + 120\n\
    while not os.path.exists(stop) and time.monotonic() < end: pass\n\
    print(time.clock_gettime_ns(time.CLOCK_MONOTONIC), flush=True)";

/// The program (already printing) alone for `lead` at least, then next to
/// a CPU-bound neighbour cell named `other`, then alone again (`times`
/// reads the samples' stamps from the program's lines). The neighbour
/// comes once the program has printed three samples in the last 0.35 s,
/// stays until it has printed five stamped `secs` or more after the
/// neighbour started (and 0.1 s more), and the program runs on until it
/// has printed one stamped `after` seconds past the neighbour's end. So
/// every phase has samples however slowly a loaded machine runs the
/// program. Stops the program; returns its lines and the neighbour's
/// visit.
pub fn with_a_neighbour(
    d: &Daemon,
    mut program: Watched,
    times: impl Fn(&[String]) -> Vec<f64>,
    lead: Duration,
    secs: f64,
    after: f64,
) -> (Vec<String>, Visit) {
    let instant = |line: Option<&String>| {
        line.and_then(|l| l.trim().parse::<f64>().ok())
            .map(|ns| ns / 1e9)
            .expect("the neighbour prints its instants")
    };
    let alone_until = super::now_mono() + lead.as_secs_f64();
    program.wait_for("samples before the neighbour", |lines| {
        let now = super::now_mono();
        now >= alone_until && times(lines).iter().filter(|&&t| t > now - 0.35).count() >= 3
    });
    let launched = super::now_mono();
    let mut other = Watched::spawn(allot_run(
        d,
        &[
            "--name",
            "other",
            "--",
            allot_testkit::PYTHON,
            "-c",
            NEIGHBOUR,
        ],
    ));
    other.wait_for("the neighbour's start", |lines| !lines.is_empty());
    let started = instant(other.lines().first());
    program.wait_for("samples while sharing", |lines| {
        times(lines).iter().filter(|&&t| t > started + secs).count() >= 5
    });
    // The neighbour leaves a little after those samples, so that they
    // fall inside the sharing phase whose end a reader keeps clear of the
    // change (a CI run saw a program on a loaded machine print nothing
    // for 0.75 s, then the five samples within 0.02 s of the end).
    std::thread::sleep(Duration::from_millis(100));
    let ended = instant(other.stop().get(1));
    program.wait_for("samples after the neighbour left", |lines| {
        times(lines).iter().any(|&t| t > ended + after)
    });
    let visit = Visit {
        launched,
        started,
        ended,
    };
    (program.stop(), visit)
}

/// The stamps of a program's `t NS VALUE` lines (seconds).
pub fn t_times(lines: &[String]) -> Vec<f64> {
    stamped(lines).iter().map(|s| s.0).collect()
}

/// Fails the test unless a program's counts in the three phases of a
/// neighbour's visit ([`with_a_neighbour`]) settle at `alone`, `shared`,
/// and `alone` again ([`settles_at`]); `what` names the counts, `context`
/// says the rest on failure (every sample, the broker's log).
pub fn assert_phases<T: PartialEq + Copy + std::fmt::Debug>(
    [before, during, after]: &[Vec<T>; 3],
    (alone, shared): (T, T),
    what: &str,
    context: impl Fn() -> String,
) {
    for (phase, samples, want) in [
        ("alone", before, alone),
        ("sharing", during, shared),
        ("alone again", after, alone),
    ] {
        assert!(
            settles_at(samples, want),
            "{phase}: {what} of {want:?}: {samples:?}; {}",
            context()
        );
    }
}

/// Whether a phase's samples follow the grant to `want` and stay there:
/// some samples, the last at `want`, and once at `want` never off it (on a
/// busy machine the follower may be late, so the first samples after a
/// change may still show the old count; going back would be wrong).
pub fn settles_at<T: PartialEq>(samples: &[T], want: T) -> bool {
    samples.last() == Some(&want)
        && samples
            .iter()
            .skip_while(|&t| *t != want)
            .all(|t| *t == want)
}
