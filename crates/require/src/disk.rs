//! `DiskRate`: a kind of the program's own, written with
//! [`Blocks::register_kind`](super::Blocks::register_kind) the way a
//! program would write one, on a real OS counter.
//!
//! Its devices are the machine's block devices (disks and attached loop
//! devices, `major:minor`), each with an amount 0..1: a share of the
//! device a block means to use. Its operations:
//!
//! - **probe**: the bytes the device has read and written, from the
//!   kernel's counters (`/sys/dev/block/MAJ:MIN/stat`: sectors read and
//!   written, 512 bytes each), so a policy sees each device's rate of use
//!   in bytes per second, by everyone on the machine
//!   ([`DevView::rate`](super::policy::DevView::rate)). (A blkio cgroup's
//!   `blkio.throttle.io_service_bytes` would count one cell's I/O only,
//!   and the root group's counts nothing on cgroup v1.)
//! - **restrict** and **throttle**: nothing; the kind steers *which*
//!   device a block uses (with [`least_busy`]), it does not confine.

use super::io::block_devices;
use super::kind::{Device, Kind, KindOps};
use super::policy::{self, Policy, View};
use std::sync::Arc;

/// The kind's name.
pub const NAME: &str = "DiskRate";

/// `DiskRate`'s operations.
#[derive(Debug)]
pub struct DiskRateOps {
    /// Device index → `major:minor`.
    pub devices: Vec<String>,
}

/// The bytes a block device's `stat` text counts as read and written
/// (its 3rd and 7th fields are sectors of 512 bytes).
pub fn stat_bytes(text: &str) -> Option<u64> {
    let f: Vec<u64> = text
        .split_whitespace()
        .map(|x| x.parse().ok())
        .collect::<Option<_>>()?;
    Some((f.get(2)? + f.get(6)?) * 512)
}

impl KindOps for DiskRateOps {
    fn probe(&self, dev: usize) -> Option<(u64, u64)> {
        let majmin = self.devices.get(dev)?;
        let text = std::fs::read_to_string(format!("/sys/dev/block/{majmin}/stat")).ok()?;
        Some((stat_bytes(&text)?, 0))
    }

    fn restrict(&self, _amounts: &[Option<f64>]) -> std::io::Result<()> {
        Ok(())
    }
}

/// The `DiskRate` kind of this machine, for `Blocks::register_kind`.
pub fn disk_rate() -> Kind {
    let devices: Vec<Device> = block_devices()
        .into_iter()
        .map(|d| Device {
            name: d.name,
            min: 0.0,
            max: 1.0,
        })
        .collect();
    let ops = DiskRateOps {
        devices: devices.iter().map(|d| d.name.clone()).collect(),
    };
    Kind::with_ops(NAME, devices, Arc::new(ops))
}

/// A policy: the `DiskRate` device among `candidates` (`major:minor`)
/// with the lowest measured rate of use that is wholly available, taken
/// exclusively (1.0); the outcome's `nodes` holds its index. Devices not
/// measured yet count as idle. False when none is free.
pub fn least_busy(candidates: Vec<String>) -> Arc<dyn Policy> {
    least_busy_of(NAME, "least_busy_disk", candidates)
}

/// [`least_busy`] for any measured kind (`kind`'s devices named by
/// `candidates`), as policy `name`.
pub fn least_busy_of(kind: &'static str, name: &str, candidates: Vec<String>) -> Arc<dyn Policy> {
    policy::from_fn(name, move |v: &mut View<'_>| {
        let pick = v
            .devices(kind)
            .filter(|d| candidates.contains(&d.name) && d.available >= 1.0 - 1e-9)
            .min_by(|a, b| {
                a.rate
                    .unwrap_or(0.0)
                    .total_cmp(&b.rate.unwrap_or(0.0))
                    .then(a.index.cmp(&b.index))
            })
            .map(|d| d.index);
        let Some(i) = pick else {
            return false;
        };
        for d in v.devices(kind) {
            d.request = (d.index == i).then_some(1.0);
        }
        v.out.nodes = vec![i as u32];
        true
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sectors_read_and_written_are_the_bytes() {
        let text = "  120  3  4096  50  10  0  8192  40  0  60  90  0 0 0 0 0 0\n";
        assert_eq!(stat_bytes(text), Some((4096 + 8192) * 512));
        assert_eq!(stat_bytes("1 2"), None);
        assert_eq!(stat_bytes("x y z"), None);
    }
}
