//! Gates: suspending and resuming every thread of a cell at once (gang
//! activation), the mechanism behind time-triggered windows.
//!
//! A [`Gate`] belongs to one cell and is handed to the broker's window
//! driver, which runs on its own thread: it holds its own open control
//! file, so closing and opening never go through the [`Enforcer`] (and
//! never wait for it).
//!
//! | backend  | gate                      | usage read from        | all stopped when |
//! |----------|---------------------------|------------------------|------------------|
//! | cgroup2  | `cgroup.freeze` (1 / 0)   | `cpu.stat` `usage_usec` | `cgroup.events` `frozen 1` |
//! | cgroup1  | `freezer.state` (FROZEN / THAWED) | `cpuacct.usage` | `freezer.state` reads `FROZEN` |
//! | dry-run  | records `Close` / `Open`  | none                   | as the test sets |
//! | affinity | none: windows fall back to CFS bandwidth (no gang) |  |  |
//!
//! Invariants:
//! - Freezing is asynchronous in both cgroup versions: `close` returns
//!   once the kernel has been asked, and threads stop at their next
//!   return to user space. The window driver therefore accounts CPU time
//!   by reading usage, not by trusting the edge times.
//! - A close does not always stop every thread: on the 6.x kernels
//!   measured, a thread asleep in `clock_nanosleep` when the freeze
//!   arrives now and then wakes and runs on while the cgroup reads
//!   "freezing" (docs/time-mechanisms.md). [`Gate::stopped`] reports
//!   whether every thread is stopped, and closing again sends the freeze
//!   to the stragglers; the window driver checks after every close.
//! - A cell is never left closed by allot: the window driver opens every
//!   gate it holds when it lets one go (cell ended, contract changed,
//!   broker exit), and the backends thaw a cell on `adopt` and `remove`
//!   (a broker that died mid-window).
//!
//! [`Enforcer`]: crate::Enforcer

use crate::cgroupfs::{CgroupFs, ControlFile};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Suspends and resumes a whole cell.
pub trait Gate: Send + std::fmt::Debug {
    /// Lets every thread of the cell run (thaw).
    fn open(&mut self) -> io::Result<()>;
    /// Stops every thread of the cell (freeze).
    fn close(&mut self) -> io::Result<()>;
    /// CPU time the cell has used so far, ns (monotonic per cell).
    fn usage_ns(&mut self) -> Option<u64>;
    /// After a close: whether every thread of the cell has stopped
    /// (`None` when the backend cannot tell).
    fn stopped(&mut self) -> Option<bool>;
}

/// The two values a gate's control file takes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateWords {
    pub(crate) open: &'static str,
    pub(crate) close: &'static str,
}

/// cgroup v1 `freezer.state`.
pub(crate) const V1_FREEZER: GateWords = GateWords {
    open: "THAWED",
    close: "FROZEN",
};

/// cgroup v2 `cgroup.freeze`.
pub(crate) const V2_FREEZE: GateWords = GateWords {
    open: "0",
    close: "1",
};

/// Where a cell's usage is read: the one parser of cgroup CPU-time files,
/// for the gates and for [`Enforcer::usage_ns`](crate::Enforcer::usage_ns).
#[derive(Debug, Clone)]
pub(crate) enum UsageFile {
    /// v1 `cpuacct.usage`: nanoseconds.
    Cpuacct(PathBuf),
    /// v2 `cpu.stat`: the `usage_usec` line.
    CpuStat(PathBuf),
    /// No accounting hierarchy.
    None,
}

impl UsageFile {
    pub(crate) fn read(&self, fs: &dyn CgroupFs) -> Option<u64> {
        match self {
            UsageFile::Cpuacct(p) => fs.read(p).ok()?.trim().parse().ok(),
            UsageFile::CpuStat(p) => {
                let text = fs.read(p).ok()?;
                let line = text.lines().find(|l| l.starts_with("usage_usec"))?;
                line.split_whitespace()
                    .nth(1)?
                    .parse::<u64>()
                    .ok()
                    .map(|us| us * 1000)
            }
            UsageFile::None => None,
        }
    }
}

/// Where a gate reads whether a close has stopped every thread.
#[derive(Debug, Clone)]
enum StoppedFile {
    /// v1 `freezer.state`: `FROZEN` once every task is frozen (`FREEZING`
    /// before).
    FreezerState(PathBuf),
    /// v2 `cgroup.events`: the `frozen` line is 1 once every task is.
    Events(PathBuf),
}

impl StoppedFile {
    fn read(&self, fs: &dyn CgroupFs) -> Option<bool> {
        match self {
            StoppedFile::FreezerState(p) => Some(fs.read(p).ok()?.trim() == V1_FREEZER.close),
            StoppedFile::Events(p) => {
                let text = fs.read(p).ok()?;
                let line = text.lines().find(|l| l.starts_with("frozen "))?;
                Some(line.split_whitespace().nth(1)? == "1")
            }
        }
    }
}

/// A gate on a cgroup freezer file kept open.
#[derive(Debug)]
pub struct CgroupGate {
    fs: Arc<dyn CgroupFs>,
    file: Box<dyn ControlFile>,
    words: GateWords,
    usage: UsageFile,
    stopped: StoppedFile,
}

impl CgroupGate {
    /// The gate of a cgroup v1 cell: `freezer.state` in `freezer_dir`,
    /// usage from `cpuacct.usage` in `cpuacct_dir` when there is one.
    pub fn v1(
        fs: Arc<dyn CgroupFs>,
        freezer_dir: &Path,
        cpuacct_dir: Option<&Path>,
    ) -> io::Result<CgroupGate> {
        let usage = match cpuacct_dir {
            Some(d) => UsageFile::Cpuacct(d.join("cpuacct.usage")),
            None => UsageFile::None,
        };
        let state = freezer_dir.join("freezer.state");
        let stopped = StoppedFile::FreezerState(state.clone());
        CgroupGate::new(fs, state, V1_FREEZER, usage, stopped)
    }

    /// The gate of a cgroup v2 cell directory: `cgroup.freeze`, usage
    /// from `cpu.stat`.
    pub fn v2(fs: Arc<dyn CgroupFs>, dir: &Path) -> io::Result<CgroupGate> {
        CgroupGate::new(
            fs,
            dir.join("cgroup.freeze"),
            V2_FREEZE,
            UsageFile::CpuStat(dir.join("cpu.stat")),
            StoppedFile::Events(dir.join("cgroup.events")),
        )
    }

    fn new(
        fs: Arc<dyn CgroupFs>,
        control: PathBuf,
        words: GateWords,
        usage: UsageFile,
        stopped: StoppedFile,
    ) -> io::Result<CgroupGate> {
        let file = fs.open(&control)?;
        Ok(CgroupGate {
            fs,
            file,
            words,
            usage,
            stopped,
        })
    }
}

impl Gate for CgroupGate {
    fn open(&mut self) -> io::Result<()> {
        self.file.set(self.words.open)
    }
    fn close(&mut self) -> io::Result<()> {
        self.file.set(self.words.close)
    }
    fn usage_ns(&mut self) -> Option<u64> {
        self.usage.read(self.fs.as_ref())
    }
    fn stopped(&mut self) -> Option<bool> {
        self.stopped.read(self.fs.as_ref())
    }
}

/// One gate over several cgroups, each with its own freezer: a cell's
/// own directory and the launcher groups it includes
/// ([`crate::launcher`]). Opening and closing reach every one (the first
/// error is returned once all were tried), the usage is their sum, and
/// the cell has stopped once every one has.
#[derive(Debug)]
pub struct Gates(pub Vec<Box<dyn Gate>>);

impl Gates {
    /// Calls `f` on every gate, all of them even after a failure; the
    /// first error.
    fn each(&mut self, mut f: impl FnMut(&mut Box<dyn Gate>) -> io::Result<()>) -> io::Result<()> {
        let mut first = Ok(());
        for g in &mut self.0 {
            let r = f(g);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }
}

impl Gate for Gates {
    fn open(&mut self) -> io::Result<()> {
        self.each(|g| g.open())
    }
    fn close(&mut self) -> io::Result<()> {
        self.each(|g| g.close())
    }
    fn usage_ns(&mut self) -> Option<u64> {
        self.0
            .iter_mut()
            .filter_map(|g| g.usage_ns())
            .reduce(|a, b| a + b)
    }
    fn stopped(&mut self) -> Option<bool> {
        let all: Vec<Option<bool>> = self.0.iter_mut().map(|g| g.stopped()).collect();
        if all.contains(&Some(false)) {
            Some(false)
        } else if all.iter().all(|s| *s == Some(true)) {
            Some(true)
        } else {
            None
        }
    }
}

/// What the dry-run backend's gate was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateCall {
    /// `open` on the cell.
    Open(u64),
    /// `close` on the cell.
    Close(u64),
}

#[cfg(test)]
mod gates_tests {
    use super::*;

    /// A gate that says what it is told to.
    #[derive(Debug)]
    struct Said {
        usage: Option<u64>,
        stopped: Option<bool>,
        fails: bool,
        closed: bool,
    }

    impl Gate for Said {
        fn open(&mut self) -> io::Result<()> {
            self.closed = false;
            if self.fails {
                Err(io::Error::other("refused"))
            } else {
                Ok(())
            }
        }
        fn close(&mut self) -> io::Result<()> {
            self.closed = true;
            if self.fails {
                Err(io::Error::other("refused"))
            } else {
                Ok(())
            }
        }
        fn usage_ns(&mut self) -> Option<u64> {
            self.usage
        }
        fn stopped(&mut self) -> Option<bool> {
            self.stopped
        }
    }

    fn said(usage: Option<u64>, stopped: Option<bool>, fails: bool) -> Box<dyn Gate> {
        Box::new(Said {
            usage,
            stopped,
            fails,
            closed: false,
        })
    }

    #[test]
    fn gates_reach_every_cgroup_and_sum_what_they_read() {
        let mut g = Gates(vec![
            said(Some(5), Some(true), false),
            said(None, Some(true), true),
            said(Some(7), Some(true), false),
        ]);
        // A refusal in the middle still reaches the last, and is returned.
        assert!(g.close().is_err());
        assert!(
            format!("{g:?}").matches("closed: true").count() == 3,
            "{g:?}"
        );
        assert_eq!(g.usage_ns(), Some(12));
        assert_eq!(g.stopped(), Some(true));
        let mut g = Gates(vec![said(None, Some(true), false), said(None, None, false)]);
        assert_eq!(g.usage_ns(), None);
        assert_eq!(g.stopped(), None, "one cannot tell");
        let mut g = Gates(vec![
            said(None, None, false),
            said(None, Some(false), false),
        ]);
        assert_eq!(g.stopped(), Some(false), "one still runs");
        assert!(g.open().is_ok());
    }
}
