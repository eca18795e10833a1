//! Prometheus metrics: what the broker counts, and the text exposition
//! format it serves at `/metrics` (`allot daemon --metrics ADDR`).
//!
//! - [`Counters`]: kept by [`crate::core::Core`] as things happen
//!   (admissions, refusals, grant changes, reclaims) and by the event loop
//!   (the time of each turn). Plain integers and fixed-bucket histograms:
//!   counting costs an add.
//! - [`Snapshot`]: the counters plus the gauges of the moment (cells,
//!   their CPUs and busy-ness, the queue), taken by the event loop only
//!   when a scrape asks for it, so an unscraped broker pays nothing more.
//! - [`render`]: a pure function from a snapshot to the exposition text
//!   (format version 0.0.4), unit-tested against the format's rules.
//! - [`Exporter`]: a thread that answers HTTP `GET /metrics`; it asks the
//!   event loop for a fresh snapshot through a pipe the loop polls and waits
//!   up to [`FRESH_WAIT`] for it (else serves the last one; 503 before the
//!   first). One connection at a time, each with one deadline.
//!
//! Cells are labelled by id and uid; their names only when the
//! configuration shows other users' names (`show_other_users`), because
//! whoever reaches the port sees every cell.
//!
//! Metric names and meanings are listed once, in [`render`], and in
//! docs/operations.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// Upper bounds (seconds) of the latency histograms' buckets.
pub const BUCKETS: [f64; 12] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0,
];

/// How long a scrape waits for the event loop's fresh snapshot.
pub const FRESH_WAIT: Duration = Duration::from_secs(1);

/// A histogram with the fixed [`BUCKETS`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Observations at or below each bound (not cumulative).
    counts: [u64; BUCKETS.len()],
    /// Observations above the last bound.
    over: u64,
    sum: f64,
}

impl Histogram {
    /// Records one observation of `d`.
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        self.sum += s;
        match BUCKETS.iter().position(|&b| s <= b) {
            Some(i) => self.counts[i] += 1,
            None => self.over += 1,
        }
    }

    /// Number of observations.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum::<u64>() + self.over
    }
}

/// What the broker counts as it runs.
#[derive(Debug, Clone, Default)]
pub struct Counters {
    /// Cells admitted (at once or from the queue).
    pub admitted: u64,
    /// Registrations that were queued (`--wait`).
    pub queued: u64,
    /// Registrations answered with an error, by error code.
    pub refused: BTreeMap<&'static str, u64>,
    /// Cells ended (their last process gone, or released).
    pub ended: u64,
    /// Grants published (every cell's generation step).
    pub grant_changes: u64,
    /// From noticing a cell's last process exit to every survivor's new
    /// grant applied and published.
    pub reclaim: Histogram,
    /// The work of one event-loop turn (requests, exits, ticks).
    pub turn: Histogram,
}

/// One cell's gauges.
#[derive(Debug, Clone, PartialEq)]
pub struct CellGauges {
    /// Cell id.
    pub id: u64,
    /// Owner.
    pub uid: u32,
    /// Name, when it may be shown.
    pub name: Option<String>,
    /// CPUs granted.
    pub cpus: u32,
    /// Of which lent by idle cells.
    pub lent: u32,
    /// Recommended thread count.
    pub threads: u32,
    /// CPUs busy (the demand estimator's smoothed value).
    pub busy: f64,
    /// Grant changes published to it.
    pub generation: u64,
    /// Member processes.
    pub members: u32,
}

/// Everything one scrape shows.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Seconds since the broker started.
    pub uptime_s: f64,
    /// CPUs the broker manages.
    pub capacity: u32,
    /// Of which held by no cell.
    pub idle: u32,
    /// Cells waiting for admission.
    pub queue: u32,
    /// Admitted cells.
    pub cells: Vec<CellGauges>,
    /// The counters.
    pub counters: Counters,
}

/// `v` escaped for a label value: backslash, double quote, newline.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    head(out, name, "histogram", help);
    let mut acc = 0;
    for (b, c) in BUCKETS.iter().zip(h.counts) {
        acc += c;
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {acc}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count());
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count());
}

/// The exposition text (format 0.0.4) of `s`.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(1024 + 512 * s.cells.len());
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        head(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    };
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        head(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    };
    gauge(
        &mut out,
        "allot_broker_uptime_seconds",
        "Seconds since the broker started.",
        s.uptime_s,
    );
    gauge(
        &mut out,
        "allot_machine_cpus",
        "CPUs the broker manages.",
        s.capacity.into(),
    );
    gauge(
        &mut out,
        "allot_machine_idle_cpus",
        "Managed CPUs no cell holds.",
        s.idle.into(),
    );
    gauge(
        &mut out,
        "allot_cells",
        "Admitted cells.",
        s.cells.len() as f64,
    );
    gauge(
        &mut out,
        "allot_queue_length",
        "Cells waiting for admission.",
        s.queue.into(),
    );
    let c = &s.counters;
    counter(
        &mut out,
        "allot_admissions_total",
        "Cells admitted.",
        c.admitted,
    );
    counter(
        &mut out,
        "allot_queued_total",
        "Registrations that waited in the queue.",
        c.queued,
    );
    head(
        &mut out,
        "allot_refusals_total",
        "counter",
        "Registrations answered with an error, by error code.",
    );
    for (code, n) in &c.refused {
        let _ = writeln!(out, "allot_refusals_total{{code=\"{}\"}} {n}", label(code));
    }
    counter(&mut out, "allot_cells_ended_total", "Cells ended.", c.ended);
    counter(
        &mut out,
        "allot_grant_changes_total",
        "Grants published to cells.",
        c.grant_changes,
    );
    histogram(
        &mut out,
        "allot_reclaim_seconds",
        "From a cell's last process exit seen to the survivors' grants applied.",
        &c.reclaim,
    );
    histogram(
        &mut out,
        "allot_broker_turn_seconds",
        "Work of one event-loop turn.",
        &c.turn,
    );
    type Field = fn(&CellGauges) -> f64;
    let per_cell: [(&str, &str, &str, Field); 6] = [
        (
            "allot_cell_cpus",
            "gauge",
            "CPUs granted to the cell.",
            |c| c.cpus.into(),
        ),
        (
            "allot_cell_lent_cpus",
            "gauge",
            "CPUs the cell holds on loan from idle cells.",
            |c| c.lent.into(),
        ),
        (
            "allot_cell_threads",
            "gauge",
            "Threads the cell is told to run.",
            |c| c.threads.into(),
        ),
        (
            "allot_cell_busy_cpus",
            "gauge",
            "CPUs the cell keeps busy (smoothed).",
            |c| c.busy,
        ),
        (
            "allot_cell_grant_changes_total",
            "counter",
            "Grants published to the cell.",
            |c| c.generation as f64,
        ),
        (
            "allot_cell_processes",
            "gauge",
            "Member processes the broker watches.",
            |c| c.members.into(),
        ),
    ];
    for (name, kind, help, field) in per_cell {
        head(&mut out, name, kind, help);
        for cell in &s.cells {
            let _ = write!(out, "{name}{{cell=\"{}\",uid=\"{}\"", cell.id, cell.uid);
            if let Some(n) = &cell.name {
                let _ = write!(out, ",name=\"{}\"", label(n));
            }
            let _ = writeln!(out, "}} {}", field(cell));
        }
    }
    out
}

/// State shared by the exporter thread and the event loop.
#[derive(Debug)]
struct Shared {
    /// The last rendered text and the request serial it answers.
    text: Mutex<(u64, String)>,
    fresh: Condvar,
    /// Serial of the latest scrape asking for a fresh snapshot.
    asked: AtomicU64,
    stop: AtomicBool,
}

/// The HTTP side of the metrics: a thread serving `/metrics`.
#[derive(Debug)]
pub struct Exporter {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// The event loop polls this; a byte means "render now".
    wake_r: rustix::fd::OwnedFd,
    thread: Option<JoinHandle<()>>,
}

/// Largest request head read.
const MAX_REQUEST: usize = 8192;
/// A client gets this long to send its request and read the answer.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(2);

impl Exporter {
    /// Binds `addr` and starts serving.
    pub fn start(addr: SocketAddr) -> std::io::Result<Exporter> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        let (wake_r, wake_w) = rustix::pipe::pipe_with(
            rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
        )?;
        let shared = Arc::new(Shared {
            text: Mutex::new((0, String::new())),
            fresh: Condvar::new(),
            asked: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("allot-metrics".into())
            .spawn(move || serve(listener, s, wake_w))?;
        Ok(Exporter {
            shared,
            addr,
            wake_r,
            thread: Some(thread),
        })
    }

    /// The address served (with the port the kernel chose for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The descriptor the event loop polls for scrapes.
    pub fn wake_fd(&self) -> &rustix::fd::OwnedFd {
        &self.wake_r
    }

    /// Whether a scrape waits for a snapshot (drains the wake pipe).
    pub fn wanted(&self) -> bool {
        let mut b = [0u8; 64];
        let mut any = false;
        while matches!(rustix::io::read(&self.wake_r, &mut b), Ok(n) if n > 0) {
            any = true;
        }
        any
    }

    /// Hands the exporter a fresh snapshot.
    pub fn publish(&self, s: &Snapshot) {
        // Read before rendering: a scrape that asks later is not answered
        // with a snapshot taken before it asked.
        let serial = self.shared.asked.load(Ordering::Acquire);
        let text = render(s);
        let mut t = self.shared.text.lock().unwrap_or_else(|e| e.into_inner());
        *t = (serial, text);
        self.shared.fresh.notify_all();
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        // The thread sees the flag within ACCEPT_POLL, or once the
        // connection it serves reaches its deadline (CLIENT_TIMEOUT).
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How often the (non-blocking) listener is looked at when idle.
const ACCEPT_POLL: Duration = Duration::from_millis(100);

fn serve(listener: TcpListener, shared: Arc<Shared>, wake_w: rustix::fd::OwnedFd) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    while !shared.stop.load(Ordering::Acquire) {
        match listener.accept() {
            Ok((conn, _)) => {
                let _ = conn.set_nonblocking(false);
                let _ = answer(conn, &shared, &wake_w);
            }
            // Nothing waiting, out of descriptors, a reset connection: do
            // not spin.
            Err(_) => std::thread::sleep(ACCEPT_POLL),
        }
    }
}

/// The request line's method and path, once the head is complete.
fn request_line(head: &[u8]) -> Option<(&str, &str)> {
    let text = std::str::from_utf8(head).ok()?;
    let line = text.lines().next()?;
    let mut parts = line.split(' ');
    let method = parts.next()?;
    let target = parts.next()?;
    let path = target.split('?').next().unwrap_or(target);
    Some((method, path))
}

fn answer(
    mut conn: TcpStream,
    shared: &Shared,
    wake_w: &rustix::fd::OwnedFd,
) -> std::io::Result<()> {
    // One deadline for the whole request, not per read: a client sending
    // a byte at a time cannot hold the (single) exporter thread.
    let deadline = std::time::Instant::now() + CLIENT_TIMEOUT;
    conn.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST {
            return reply(
                &mut conn,
                "431 Request Header Fields Too Large",
                "too long\n",
                true,
            );
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return Ok(());
        }
        conn.set_read_timeout(Some(left))?;
        let n = conn.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    let Some((method, path)) = request_line(&head) else {
        return reply(&mut conn, "400 Bad Request", "bad request\n", true);
    };
    let body_wanted = method == "GET";
    if method != "GET" && method != "HEAD" {
        return reply(&mut conn, "405 Method Not Allowed", "GET /metrics\n", true);
    }
    match path {
        "/metrics" => match fresh_text(shared, wake_w) {
            Some(text) => reply(&mut conn, "200 OK", &text, body_wanted),
            None => reply(
                &mut conn,
                "503 Service Unavailable",
                "the broker has not answered yet; try again\n",
                body_wanted,
            ),
        },
        "/" => reply(
            &mut conn,
            "200 OK",
            "allot broker: metrics at /metrics\n",
            body_wanted,
        ),
        _ => reply(
            &mut conn,
            "404 Not Found",
            "not found; try /metrics\n",
            body_wanted,
        ),
    }
}

/// Asks the event loop for a snapshot and waits up to [`FRESH_WAIT`];
/// the last one published if none comes in time, `None` if none ever did.
fn fresh_text(shared: &Shared, wake_w: &rustix::fd::OwnedFd) -> Option<String> {
    let want = shared.asked.fetch_add(1, Ordering::AcqRel) + 1;
    let _ = rustix::io::write(wake_w, &[1]);
    let guard = shared.text.lock().unwrap_or_else(|e| e.into_inner());
    let (guard, _) = shared
        .fresh
        .wait_timeout_while(guard, FRESH_WAIT, |(serial, _)| *serial < want)
        .unwrap_or_else(|e| e.into_inner());
    (guard.0 > 0).then(|| guard.1.clone())
}

fn reply(conn: &mut TcpStream, status: &str, body: &str, with_body: bool) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    conn.write_all(head.as_bytes())?;
    if with_body {
        conn.write_all(body.as_bytes())?;
    }
    conn.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Snapshot {
        let mut c = Counters {
            admitted: 3,
            grant_changes: 7,
            ..Default::default()
        };
        c.refused.insert("refused", 2);
        c.refused.insert("limit", 1);
        c.reclaim.observe(Duration::from_micros(300));
        c.reclaim.observe(Duration::from_millis(3));
        c.reclaim.observe(Duration::from_secs(2));
        c.turn.observe(Duration::from_micros(50));
        Snapshot {
            uptime_s: 12.5,
            capacity: 8,
            idle: 2,
            queue: 1,
            cells: vec![
                CellGauges {
                    id: 1,
                    uid: 1000,
                    name: Some("a \"quoted\" \\ name".into()),
                    cpus: 4,
                    lent: 1,
                    threads: 4,
                    busy: 3.5,
                    generation: 5,
                    members: 2,
                },
                CellGauges {
                    id: 2,
                    uid: 0,
                    name: None,
                    cpus: 2,
                    lent: 0,
                    threads: 2,
                    busy: 0.25,
                    generation: 2,
                    members: 1,
                },
            ],
            counters: c,
        }
    }

    /// Checks the format's rules that a scraper relies on: every sample's
    /// family was declared by HELP and TYPE before it and only once, names
    /// are valid, label values are quoted and escaped, values parse.
    fn check_format(text: &str) -> BTreeMap<String, f64> {
        let mut declared: BTreeMap<String, String> = BTreeMap::new();
        let mut samples = BTreeMap::new();
        let valid_name = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        };
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert!(valid_name(name), "{line}");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                assert!(
                    declared.insert(name.into(), kind.into()).is_none(),
                    "declared twice: {line}"
                );
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            assert!(!line.starts_with('#') && !line.is_empty(), "{line:?}");
            let (series, value) = line.rsplit_once(' ').expect("series value");
            let v: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            let name = series.split('{').next().unwrap();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| {
                    name.strip_suffix(s)
                        .filter(|f| declared.get(*f).is_some_and(|k| k == "histogram"))
                })
                .unwrap_or(name);
            assert!(declared.contains_key(family), "undeclared: {line}");
            if let Some(labels) = series.strip_prefix(name)
                && !labels.is_empty()
            {
                assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                let inner = &labels[1..labels.len() - 1];
                // key="value" pairs; values end at an unescaped quote.
                let mut rest = inner;
                while !rest.is_empty() {
                    let (key, after) = rest.split_once("=\"").expect(line);
                    assert!(valid_name(key), "{line}");
                    let mut end = None;
                    let mut esc = false;
                    for (i, ch) in after.char_indices() {
                        match (esc, ch) {
                            (true, '\\' | '"' | 'n') => esc = false,
                            (true, _) => panic!("bad escape in {line}"),
                            (false, '\\') => esc = true,
                            (false, '"') => {
                                end = Some(i);
                                break;
                            }
                            _ => {}
                        }
                    }
                    let end = end.expect(line);
                    rest = after[end + 1..]
                        .strip_prefix(',')
                        .unwrap_or(&after[end + 1..]);
                }
            }
            samples.insert(series.to_string(), v);
        }
        samples
    }

    #[test]
    fn the_text_follows_the_exposition_format() {
        let samples = check_format(&render(&sample()));
        assert_eq!(samples["allot_machine_cpus"], 8.0);
        assert_eq!(samples["allot_cells"], 2.0);
        assert_eq!(samples["allot_refusals_total{code=\"limit\"}"], 1.0);
        assert_eq!(
            samples["allot_cell_cpus{cell=\"1\",uid=\"1000\",name=\"a \\\"quoted\\\" \\\\ name\"}"],
            4.0
        );
        assert_eq!(samples["allot_cell_busy_cpus{cell=\"2\",uid=\"0\"}"], 0.25);
    }

    #[test]
    fn histogram_buckets_are_cumulative_and_end_at_the_count() {
        let samples = check_format(&render(&sample()));
        let mut last = 0.0;
        for b in BUCKETS {
            let v = samples[&format!("allot_reclaim_seconds_bucket{{le=\"{b}\"}}")];
            assert!(v >= last, "bucket {b}: {v} < {last}");
            last = v;
        }
        assert_eq!(last, 2.0, "two observations at or below 1 s");
        assert_eq!(samples["allot_reclaim_seconds_bucket{le=\"+Inf\"}"], 3.0);
        assert_eq!(samples["allot_reclaim_seconds_count"], 3.0);
        assert_eq!(samples["allot_reclaim_seconds_bucket{le=\"0.00025\"}"], 0.0);
        assert_eq!(samples["allot_reclaim_seconds_bucket{le=\"0.0005\"}"], 1.0);
        let sum = samples["allot_reclaim_seconds_sum"];
        assert!((sum - 2.0033).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn request_lines_are_read_and_queries_ignored() {
        assert_eq!(
            request_line(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n"),
            Some(("GET", "/metrics"))
        );
        assert_eq!(request_line(b"\xff\xfe"), None);
    }

    #[test]
    fn a_scrape_is_served_the_snapshot_the_loop_publishes() {
        let ex = Exporter::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = ex.addr();
        let client = std::thread::spawn(move || {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
                .unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            text
        });
        // The loop's side: wait for the wake byte, then publish.
        let t = std::time::Instant::now();
        while !ex.wanted() {
            assert!(t.elapsed() < Duration::from_secs(5), "no scrape arrived");
            std::thread::sleep(Duration::from_millis(5));
        }
        ex.publish(&sample());
        let text = client.join().unwrap();
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
        let body = text.split_once("\r\n\r\n").unwrap().1;
        assert_eq!(check_format(body)["allot_queue_length"], 1.0);
        // Other paths and methods; a second exporter that nothing publishes
        // to answers 503 rather than an empty page.
        let quiet = Exporter::start("127.0.0.1:0".parse().unwrap()).unwrap();
        let mut s = TcpStream::connect(quiet.addr()).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 503"), "{text}");
        drop(quiet);
        for (req, status) in [
            ("GET /nope HTTP/1.1\r\n\r\n", "404"),
            ("POST /metrics HTTP/1.1\r\n\r\n", "405"),
        ] {
            let mut s = TcpStream::connect(addr).unwrap();
            s.write_all(req.as_bytes()).unwrap();
            let mut text = String::new();
            s.read_to_string(&mut text).unwrap();
            assert!(text.starts_with(&format!("HTTP/1.1 {status}")), "{text}");
        }
        drop(ex);
        assert!(
            TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err(),
            "still listening after drop"
        );
    }
}
