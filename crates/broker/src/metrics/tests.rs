//! The metrics' tests: the exposition format a scraper relies on, and a
//! scrape served by the exporter.

use super::exporter::request_line;
use super::*;
use std::io::{Read, Write};
use std::net::TcpStream;

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
        outside_cpus: Some(0.75),
        together_threads: Some(6.0),
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
                cpu_seconds: Some(12.5),
                cpu_pressure_seconds: Some(0.25),
                memory: Some(allot_spec::MemoryUse {
                    current: 1 << 20,
                    limit: 8 << 20,
                    at_limit: 2,
                    oom_kills: 1,
                    pressure: Some(12.5),
                }),
                outside: Some((1.25, 1)),
                partition: Some(false),
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
                cpu_seconds: Some(3.0),
                cpu_pressure_seconds: None,
                memory: None,
                outside: None,
                partition: None,
            },
        ],
        counters: c,
        process: Some(ProcessGauges {
            cpu_seconds: 1.5,
            resident_bytes: 8 << 20,
            virtual_bytes: 64 << 20,
            open_fds: 12,
            max_fds: Some(1024),
            start_time_seconds: 1_700_000_000.5,
        }),
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
fn build_process_and_per_cell_cpu_metrics_follow_the_conventions() {
    let samples = check_format(&render(&sample()));
    let version = format!(
        "allot_build_info{{version=\"{}\"}}",
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(samples[&version], 1.0);
    assert_eq!(samples["process_cpu_seconds_total"], 1.5);
    assert_eq!(samples["process_resident_memory_bytes"], 8_388_608.0);
    assert_eq!(samples["process_open_fds"], 12.0);
    assert_eq!(samples["process_max_fds"], 1024.0);
    assert_eq!(samples["process_start_time_seconds"], 1_700_000_000.5);
    assert_eq!(
        samples["allot_cell_cpu_seconds_total{cell=\"2\",uid=\"0\"}"],
        3.0
    );
    let p1 = "allot_cell_cpu_pressure_seconds_total{cell=\"1\",uid=\"1000\",\
              name=\"a \\\"quoted\\\" \\\\ name\"}";
    assert_eq!(samples[p1], 0.25);
    // A cell whose backend keeps no pressure has no sample (not a zero).
    assert!(!samples.contains_key("allot_cell_cpu_pressure_seconds_total{cell=\"2\",uid=\"0\"}"));
    // Memory, per cell, where the backend has memory control.
    let named = |family: &str| {
        format!("{family}{{cell=\"1\",uid=\"1000\",name=\"a \\\"quoted\\\" \\\\ name\"}}")
    };
    assert_eq!(samples[&named("allot_cell_memory_bytes")], 1_048_576.0);
    assert_eq!(
        samples[&named("allot_cell_memory_limit_bytes")],
        8_388_608.0
    );
    assert_eq!(samples[&named("allot_cell_memory_oom_kills_total")], 1.0);
    assert_eq!(samples[&named("allot_cell_memory_pressure_ratio")], 0.125);
    assert!(!samples.contains_key("allot_cell_memory_bytes{cell=\"2\",uid=\"0\"}"));
    // An exclusive cell that is not a partition reads 0; a shared one has none.
    assert_eq!(samples[&named("allot_cell_partition")], 0.0);
    assert!(!samples.contains_key("allot_cell_partition{cell=\"2\",uid=\"0\"}"));
    // Work outside the cells, and what the cells weigh against it.
    assert_eq!(samples["allot_machine_outside_cpus"], 0.75);
    assert_eq!(samples["allot_cells_weight_threads"], 6.0);
    assert_eq!(samples[&named("allot_cell_outside_cpus")], 1.25);
    assert_eq!(samples[&named("allot_cell_outside_taken_cpus")], 1.0);
    assert!(!samples.contains_key("allot_cell_outside_cpus{cell=\"2\",uid=\"0\"}"));
    // Without /proc, the process families are left out, not zero.
    let quiet = check_format(&render(&Snapshot {
        process: None,
        ..sample()
    }));
    assert!(!quiet.keys().any(|k| k.starts_with("process_")));
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
