//! `allot status`: what the broker has decided.

use allot_proto::{Conn, Reply, Request};
use anyhow::{Context, bail};
use serde_json::Value;
use std::path::PathBuf;

/// Arguments of `allot status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Broker socket [default: $ALLOT_SOCKET or the per-user default].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the broker's JSON status document (a `cells` list and a `machine`
    /// summary; see docs/operations.md).
    #[arg(long)]
    json: bool,
}

/// Fetches the status document from the broker at `socket`.
pub fn fetch(socket: &std::path::Path) -> anyhow::Result<Value> {
    let mut conn = Conn::connect(socket).with_context(|| {
        format!(
            "no broker answers on {} (start one with `allot daemon`, or let `allot run` start one)",
            socket.display()
        )
    })?;
    conn.set_timeout(Some(std::time::Duration::from_secs(10)))?;
    conn.send(&Request::Status)?;
    let mut json = String::new();
    loop {
        match conn.recv()?.0 {
            Reply::Status { more, json: part } => {
                json.push_str(&part);
                if !more {
                    break;
                }
            }
            Reply::Error { message, .. } => bail!("the broker refused: {message}"),
            other => bail!("unexpected reply {other:?}"),
        }
    }
    serde_json::from_str(&json).context("the broker sent malformed status JSON")
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

/// Human-readable rendering.
pub fn render(v: &Value) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let b = &v["broker"];
    let m = &v["machine"];
    let _ = writeln!(
        out,
        "broker pid {} ({} backend, {} policy), up {} s on {}: {}",
        b["pid"],
        s(&b["backend"]),
        s(&b["policy"]),
        b["uptime_s"],
        s(&m["name"]),
        s(&m["summary"])
    );
    let _ = writeln!(
        out,
        "CPUs for cells: {}   reserve: {}   stacked pool: {}   idle: {}",
        m["capacity"],
        s(&m["reserve"]),
        s(&m["pool"]),
        s(&m["idle"])
    );
    let cells = v["cells"].as_array().cloned().unwrap_or_default();
    if cells.is_empty() {
        let _ = writeln!(out, "no cells");
    } else {
        let _ = writeln!(
            out,
            "{:>4}  {:<16} {:<12} {:<10} {:<8} {:>7} {:>5} {:>6} {:>5}",
            "ID", "NAME", "PIDS", "CPUS", "LENT", "THREADS", "GEN", "SHARE", "BUSY"
        );
        for c in cells {
            let pids: Vec<String> = c["pids"]
                .as_array()
                .map(|a| a.iter().map(|p| p.to_string()).collect())
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{:>4}  {:<16} {:<12} {:<10} {:<8} {:>7} {:>5} {:>6} {:>5}",
                c["id"],
                s(&c["name"]),
                pids.join(","),
                s(&c["cpus"]),
                s(&c["lent"]),
                c["threads"],
                c["generation"],
                c["share"],
                c["busy"]
            );
        }
    }
    if let Some(q) = v["queue"].as_array().filter(|q| !q.is_empty()) {
        let _ = writeln!(out, "waiting:");
        for e in q {
            let _ = writeln!(
                out,
                "  {}. cell {} ({}): {}",
                e["position"],
                e["id"],
                s(&e["name"]),
                s(&e["reason"])
            );
        }
    }
    out
}

/// Runs `allot status`.
pub fn run(a: Args) -> i32 {
    let socket = a.socket.unwrap_or_else(allot_proto::default_socket_path);
    match fetch(&socket) {
        Ok(v) if a.json => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            0
        }
        Ok(v) => {
            print!("{}", render(&v));
            0
        }
        Err(e) => super::fail(e),
    }
}
