//! Ctrl-C, SIGTERM and SIGHUP during an experiment.
//!
//! Jobs run in process groups of their own (so that a time limit can kill
//! a job's whole tree), which also means a terminal's Ctrl-C never reaches
//! them, and the experiment's private broker runs in a group of its own
//! too, so that it is not stopped while the jobs it confines still run.
//! The experiment therefore catches these signals itself: [`install`]
//! turns them into a flag, the runner polls it ([`requested`]) every few
//! milliseconds, kills the jobs it started and returns an error, and the
//! callers unwind — the private broker's guard then stops the broker,
//! which removes its cgroups. A second signal does not wait: it ends the
//! process at once (the broker, started with a parent-death signal, still
//! stops).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

static FLAG: OnceLock<Arc<AtomicBool>> = OnceLock::new();

/// Signals that stop an experiment.
const SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Catches the stopping signals for the rest of the process. Idempotent.
pub fn install() {
    let flag = FLAG.get_or_init(|| Arc::new(AtomicBool::new(false)));
    for sig in SIGNALS {
        // The second signal exits with the conventional status: the
        // conditional handler must be registered before the flag setter.
        let _ = signal_hook::flag::register_conditional_shutdown(sig, 130, flag.clone());
        let _ = signal_hook::flag::register(sig, flag.clone());
    }
}

/// Whether a stopping signal arrived since [`install`].
pub fn requested() -> bool {
    FLAG.get().is_some_and(|f| f.load(Ordering::Relaxed))
}

/// The error an interrupted run returns.
pub fn error() -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Interrupted,
        "interrupted: the experiment's jobs were killed and its broker stopped",
    )
}

/// Makes the child `cmd` starts receive `sig` when the thread that starts
/// it exits (for the experiment, its main thread: the process), so that
/// nothing it started outlives an experiment that was killed outright.
pub fn die_with_parent(cmd: &mut std::process::Command, sig: rustix::process::Signal) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the child between fork and exec and
    // makes one async-signal-safe system call (prctl).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(sig))?;
            Ok(())
        });
    }
}
