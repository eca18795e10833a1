//! `NetRate`: a second kind of the program's own on a real OS counter,
//! written like [`DiskRate`](super::disk): the machine's network
//! interfaces (`/sys/class/net`), each with an amount 0..1 (a share of the
//! interface a block means to use).
//!
//! - **probe**: the bytes the interface received and sent
//!   (`statistics/rx_bytes` + `tx_bytes`), so a policy sees each
//!   interface's rate in bytes per second, by everyone on the machine.
//! - **restrict** and **throttle**: nothing; the kind steers *which*
//!   interface a block uses ([`least_busy`]).

use super::kind::{Device, Kind, KindOps};
use super::policy::Policy;
use std::sync::Arc;

/// The kind's name.
pub const NAME: &str = "NetRate";

/// `NetRate`'s operations.
#[derive(Debug)]
pub struct NetRateOps {
    /// Device index → interface name.
    pub interfaces: Vec<String>,
}

/// The machine's network interfaces, sorted.
pub fn interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().into_string().ok())
        .collect();
    v.sort();
    v
}

fn counter(iface: &str, name: &str) -> Option<u64> {
    std::fs::read_to_string(format!("/sys/class/net/{iface}/statistics/{name}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

impl KindOps for NetRateOps {
    fn probe(&self, dev: usize) -> Option<(u64, u64)> {
        let iface = self.interfaces.get(dev)?;
        Some((counter(iface, "rx_bytes")? + counter(iface, "tx_bytes")?, 0))
    }

    fn restrict(&self, _amounts: &[Option<f64>]) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `NetRate` kind of this machine, for `Blocks::register_kind`.
pub fn net_rate() -> Kind {
    let interfaces = interfaces();
    let devices: Vec<Device> = interfaces
        .iter()
        .map(|name| Device {
            name: name.clone(),
            min: 0.0,
            max: 1.0,
        })
        .collect();
    Kind::with_ops(NAME, devices, Arc::new(NetRateOps { interfaces }))
}

/// A policy: the `NetRate` interface among `candidates` with the lowest
/// measured rate that is wholly available, taken exclusively; the
/// outcome's `nodes` holds its index.
pub fn least_busy(candidates: Vec<String>) -> Arc<dyn Policy> {
    super::disk::least_busy_of(NAME, "least_busy_interface", candidates)
}
