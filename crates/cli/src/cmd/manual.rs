//! What `--help` and the man pages say beyond the options: examples, exit
//! status, environment and files, per command, and the configuration
//! file's page (`allotd.toml(5)`). One text each, used by both.

/// `allot run`'s examples (its `--help` and `allot-run(1)`).
pub const RUN_EXAMPLES: &str = "\
Examples:
  allot run -- make -j               a build: as many jobs as the cell's CPUs
  allot run --max 4 -- ./solver      at most 4 CPUs, resized as others come and go
  allot run --min 2 --wait -- ./srv  2 CPUs guaranteed, queued until they are free
  allot run --memory-max 8G -- python3 train.py
  allot run --goal p99=50ms -- ./api a latency goal (a broker run with --policy goals)
  allot status                       the cells, their CPUs and what they use";

/// `allot daemon`'s examples.
pub const DAEMON_EXAMPLES: &str = "\
Examples:
  allot daemon --check-config --config /etc/allot/allotd.toml
  sudo allot daemon --cpus 2-63 --reserve 2 --metrics 127.0.0.1:9464
  allot daemon --socket /tmp/mine/allot.sock --backend affinity --idle-exit 60";

/// `allot`'s examples (the top-level `--help` and `allot(1)`).
pub const TOP_EXAMPLES: &str = "\
Examples:
  allot demo                   what allot does for co-running programs, in two minutes
  allot run -- ./omp_program   run a program in a cell (a broker starts on first use)
  allot status                 the broker's cells and grants
  allot top                    the same, live
See allot-run(1), allot-daemon(1), allotd.toml(5).";

/// `allot run`'s exit status.
const RUN_EXIT: &str = "\
The program's own exit status. A program killed by a signal makes allot run
die of the same signal (the shell reports it the same way; one killed at its
--memory-max is named as such first).
125  allot itself failed or refused: a request that can never be met, a bad
     option, a socket path that is not a socket, an untrusted directory.
126  the program was found but cannot be run.
127  the program was not found.";

/// `allot daemon`'s exit status.
const DAEMON_EXIT: &str = "\
0  a clean stop (SIGTERM, SIGINT, SIGHUP, a shutdown request, idle exit).
1  a failure: the socket path is not a socket, the cgroup directory is another
   broker's, a backend cannot be set up.
2  a bad configuration (also what --check-config returns for one).
3  another broker already serves the socket.
4  another broker holds the state directory while serving another socket.";

/// `allot run`'s environment.
const RUN_ENV: &str = "\
ALLOT_SOCKET      the broker's socket (default: $XDG_RUNTIME_DIR/allot/allot.sock,
                  /run/allot/allot.sock for root, else /tmp/allot-$UID/allot.sock).
ALLOT_CELL        set for the program; an allot run that finds it (inside a cell)
                  runs its program in that cell instead of a cell of its own.
ALLOT_BACKEND, ALLOT_CGROUP_NAME
                  the backend and cgroup directory of a broker started on first use.
MAKEFLAGS         a -jN in it asks for parallel jobs (N the cap); without one a make
                  gets no jobserver and stays serial.
The program gets OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, MKL_NUM_THREADS,
BLIS_NUM_THREADS, RAYON_NUM_THREADS, GOMAXPROCS, NUMBA_NUM_THREADS and
NUMEXPR_MAX_THREADS sized for its cell, ALLOT_SOCKET, ALLOT_CELL,
ALLOT_GRANT_FD, CARGO_MAKEFLAGS (and MAKEFLAGS, above) and LD_PRELOAD with
the OpenMP shim.";

/// `allot daemon`'s files.
const DAEMON_FILES: &str = "\
/etc/allot/allotd.toml       the configuration (allotd.toml(5)), read with --config.
/run/allot/allot.sock        the system broker's socket; its state directory
                             /run/allot holds broker.lock, journal and broker.log.
/sys/fs/cgroup/.../allot     its cgroup directory (cgroup_name), one per broker.";

/// The sections a command's man page gets beyond clap's, as (title, text
/// shown as written).
pub fn sections(page: &str) -> Vec<(&'static str, &'static str)> {
    match page {
        "allot" => vec![("EXAMPLES", TOP_EXAMPLES)],
        "allot-run" => vec![
            ("EXIT STATUS", RUN_EXIT),
            ("ENVIRONMENT", RUN_ENV),
            ("EXAMPLES", RUN_EXAMPLES),
        ],
        "allot-daemon" => vec![
            ("EXIT STATUS", DAEMON_EXIT),
            ("FILES", DAEMON_FILES),
            ("EXAMPLES", DAEMON_EXAMPLES),
        ],
        _ => vec![],
    }
}

/// `allotd.toml(5)`'s description: every key, its default and meaning.
pub fn config_page_text() -> String {
    format!(
        "The broker's configuration file, in TOML, read by allot daemon --config FILE \
         (the service reads /etc/allot/allotd.toml). Every key is optional; options on \
         the command line win. allot daemon --check-config prints the settings in effect \
         and checks them against the machine.\n\n{}",
        allot_broker::config::EXAMPLE
    )
}

/// `text` as roff lines shown as written (no filling), with roff's
/// special characters escaped.
pub fn roff_verbatim(text: &str) -> String {
    let mut out = String::from(".nf\n");
    for line in text.lines() {
        let l = line.replace('\\', "\\e").replace('-', "\\-");
        if l.starts_with('.') || l.starts_with('\'') {
            out.push_str("\\&");
        }
        out.push_str(&l);
        out.push('\n');
    }
    out.push_str(".fi\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roff_text_is_escaped_and_kept_as_written() {
        let r = roff_verbatim(".hidden\n--max 4 \\x");
        assert_eq!(r, ".nf\n\\&.hidden\n\\-\\-max 4 \\ex\n.fi\n");
    }

    #[test]
    fn run_and_daemon_pages_say_how_they_exit() {
        let run: Vec<_> = sections("allot-run").iter().map(|s| s.0).collect();
        assert_eq!(run, ["EXIT STATUS", "ENVIRONMENT", "EXAMPLES"]);
        assert!(RUN_EXIT.contains("125") && RUN_EXIT.contains("127"));
        assert!(DAEMON_EXIT.contains("\n4  "));
        assert!(config_page_text().contains("cgroup_name"));
    }
}
