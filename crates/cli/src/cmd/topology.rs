//! `allot topology`: the machine model allot plans with.

use allot_topo::TopologyReport;
use std::path::PathBuf;

/// Arguments of `allot topology`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Read this sysfs tree instead of /sys: a directory playing /sys, or a
    /// packed tree (a fixture machine: crates/topo/fixtures/xeonphi7250.sysfs).
    #[arg(long, value_name = "PATH")]
    sysfs: Option<PathBuf>,
    /// Print JSON: a `cpus` list (one entry per logical CPU with its core,
    /// LLC and NUMA node) and the cores, LLCs and nodes.
    #[arg(long)]
    json: bool,
}

/// Runs `allot topology`.
pub fn run(a: Args) -> i32 {
    let machine = match &a.sysfs {
        Some(dir) => allot_topo::discover(dir, &dir.display().to_string(), None),
        None => allot_topo::discover_live(),
    };
    let m = match machine {
        Ok(m) => m,
        Err(e) => return super::fail(anyhow::anyhow!(e).context("cannot read the topology")),
    };
    let report = TopologyReport::new(&m);
    if a.json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => return super::fail(e.into()),
        }
    } else {
        print!("{}", report.to_text());
    }
    0
}
