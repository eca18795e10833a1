//! A child's output read as it comes, so a test waits for a line with a
//! bound ([`PATIENCE`]) instead of blocking on a read or sleeping.

use crate::eventually;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a test waits for a program to print what it waits for: far
/// more than a loaded machine needs; reached only when the program is
/// wrong.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// A child's stream (stdout or stderr) read line by line by a thread as
/// it comes, so a test can wait for a line with a bound instead of
/// blocking on a read.
pub struct Stream {
    lines: Arc<Mutex<Vec<String>>>,
    reader: std::thread::JoinHandle<()>,
}

impl Stream {
    /// Starts reading `r`.
    pub fn read(r: impl std::io::Read + Send + 'static) -> Stream {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(r).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Stream { lines, reader }
    }

    /// The lines read so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// What was read so far, each line ended by a newline.
    pub fn text(&self) -> String {
        as_text(&self.lines())
    }

    /// Whether `seen` holds for the lines read so far.
    pub fn holds(&self, seen: impl FnOnce(&[String]) -> bool) -> bool {
        seen(&self.lines.lock().unwrap())
    }

    /// Whether the stream has ended (every line is read).
    pub fn ended(&self) -> bool {
        self.reader.is_finished()
    }

    /// Waits (at most [`PATIENCE`]) until `needle` was read; fails the
    /// test otherwise.
    pub fn wait_for(&self, needle: &str) {
        let seen = eventually(PATIENCE, || self.text().contains(needle));
        assert!(seen, "waited {PATIENCE:?} for {needle:?}: {}", self.text());
    }

    /// Every line the stream carried, once it has ended (its writer
    /// exited).
    pub fn all_lines(self) -> Vec<String> {
        self.reader.join().unwrap();
        std::mem::take(&mut *self.lines.lock().unwrap())
    }

    /// [`Stream::all_lines`] as text.
    pub fn rest(self) -> String {
        as_text(&self.all_lines())
    }
}

/// Lines as text, each ended by a newline.
fn as_text(lines: &[String]) -> String {
    lines.iter().map(|l| format!("{l}\n")).collect()
}
