//! `allot bench upload`: Poli-C's file-upload server (§7.3) on a real
//! block device.
//!
//! A server stores uploads durably before it answers: each upload is
//! written with `O_DIRECT | O_SYNC`, one thread per upload, all arriving at
//! once. Concurrent synchronous writers share the device and all finish
//! late; Poli-C wraps each upload's writes in `require(DiskWeight(1000))`,
//! the whole device exclusively, so uploads take the disk in turn and the
//! average upload finishes sooner. Here the request is `io(dev, 1000)`:
//! exclusive in the process, and with BFQ and a blkio group of the
//! benchmark's own (`ALLOT_IO_CGROUP`) the holder's weight is 1000.
//!
//! The device is a loop device the benchmark attaches (direct I/O, BFQ
//! when the kernel has it) to a file it makes in `--dir`, and detaches,
//! with the file and the group, when it ends (also on failure). Each
//! upload writes its own region. Needs root. Prints a table of the mean
//! and worst upload latency and the throughput, per number of clients,
//! medians of `--repeats` runs.

use allot_require::{Blocks, Need};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// Arguments of `allot bench upload`.
#[derive(Debug, clap::Args)]
pub struct UploadArgs {
    /// Numbers of clients uploading at once (comma-separated).
    #[arg(long, default_value = "1,2,4,8", value_name = "N[,N…]")]
    clients: String,
    /// Size of each upload.
    #[arg(long, default_value_t = 32, value_name = "MiB")]
    mib: u64,
    /// Runs per point (medians are reported).
    #[arg(long, default_value_t = 3, value_name = "R")]
    repeats: usize,
    /// Where the loop device's backing file goes (a local file system).
    #[arg(long, default_value = "/var/tmp", value_name = "DIR")]
    dir: PathBuf,
}

/// How uploads are written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    /// Every upload at once (the server without Poli-C).
    Plain,
    /// Each upload inside `require(io(dev, 1000))`.
    Require,
}

/// What a benchmark made; removed on drop.
struct Device {
    file: PathBuf,
    dev: String,
    group: Option<PathBuf>,
}

impl Drop for Device {
    fn drop(&mut self) {
        // The group and the per-thread groups `require` made in it: their
        // threads back to the root, each removed once the kernel released
        // the threads that left (the test kit's removal).
        if let Some(g) = self.group.take() {
            drop(allot_testkit::CgroupDirs(vec![g]));
        }
        let _ = Command::new("losetup").args(["-d", &self.dev]).status();
        let _ = std::fs::remove_file(&self.file);
    }
}

const BLKIO: &str = "/sys/fs/cgroup/blkio";
const CHUNK: usize = 1 << 20;

/// Attaches a loop device of `bytes` to a file in `dir`, with BFQ where
/// the kernel has it, and a blkio group where v1 blkio has BFQ weights.
fn make_device(dir: &Path, bytes: u64) -> anyhow::Result<Device> {
    let file = dir.join(format!("allot-bench-upload-{}.img", std::process::id()));
    {
        let f = std::fs::File::create(&file)?;
        // Allocated, not sparse: writes then go to the file's blocks.
        let chunk = vec![0x5au8; CHUNK];
        let mut off = 0;
        while off < bytes {
            f.write_at(&chunk, off)?;
            off += CHUNK as u64;
        }
        f.sync_all()?;
    }
    let out = Command::new("losetup")
        .args(["--find", "--show", "--direct-io=on"])
        .arg(&file)
        .output();
    let out = match out {
        Ok(o) if o.status.success() => o,
        Ok(o) => {
            let _ = std::fs::remove_file(&file);
            anyhow::bail!(
                "losetup failed ({}); run as root",
                String::from_utf8_lossy(&o.stderr).trim()
            );
        }
        Err(e) => {
            let _ = std::fs::remove_file(&file);
            anyhow::bail!("cannot run losetup ({e}); install util-linux");
        }
    };
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let mut d = Device {
        file,
        dev,
        group: None,
    };
    let name = Path::new(&d.dev)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let _ = std::fs::write(format!("/sys/block/{name}/queue/scheduler"), "bfq");
    // No weight raising for new queues: weights alone decide.
    let _ = std::fs::write(format!("/sys/block/{name}/queue/iosched/low_latency"), "0");
    if Path::new(BLKIO).join("blkio.bfq.io_serviced").exists() {
        let g = Path::new(BLKIO).join(format!("allot-bench-upload-{}", std::process::id()));
        if std::fs::create_dir(&g).is_ok() {
            d.group = Some(g);
        }
    }
    Ok(d)
}

fn majmin(dev: &str) -> anyhow::Result<String> {
    let name = Path::new(dev)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    Ok(std::fs::read_to_string(format!("/sys/block/{name}/dev"))?
        .trim()
        .to_string())
}

/// One upload: `mib` MiB written to region `i` with O_DIRECT | O_SYNC.
fn upload(dev: &str, i: u64, mib: u64) -> std::io::Result<()> {
    let f = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT | libc::O_SYNC)
        .open(dev)?;
    let layout = std::alloc::Layout::from_size_align(CHUNK, 4096).expect("a valid layout");
    // SAFETY: a non-zero size; freed below with the same layout.
    let ptr = unsafe { std::alloc::alloc(layout) };
    if ptr.is_null() {
        return Err(std::io::Error::other("out of memory"));
    }
    // SAFETY: `ptr` points at CHUNK bytes we own; filled before use.
    let buf = unsafe { std::slice::from_raw_parts_mut(ptr, CHUNK) };
    buf.fill(i as u8);
    let base = i * mib * CHUNK as u64;
    let mut r = Ok(());
    for c in 0..mib {
        if let Err(e) = f.write_all_at(buf, base + c * CHUNK as u64) {
            r = Err(e);
            break;
        }
    }
    // SAFETY: allocated above with this layout.
    unsafe { std::alloc::dealloc(ptr, layout) };
    r
}

/// `n` uploads at once; each one's latency, and the time for all.
fn round(
    rt: &'static Blocks,
    dev: &str,
    mm: &str,
    n: usize,
    mib: u64,
    mode: Mode,
) -> anyhow::Result<(Vec<Duration>, Duration)> {
    let start = Arc::new(Barrier::new(n + 1));
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let (start, dev, mm) = (start.clone(), dev.to_string(), mm.to_string());
            std::thread::spawn(move || -> std::io::Result<Instant> {
                start.wait();
                let scope = match mode {
                    Mode::Plain => None,
                    Mode::Require => Some(
                        rt.enter(vec![Need::device("io", &mm, 1000.0)])
                            .map_err(std::io::Error::other)?,
                    ),
                };
                upload(&dev, i as u64, mib)?;
                drop(scope);
                Ok(Instant::now())
            })
        })
        .collect();
    let t0 = Instant::now();
    start.wait();
    let mut lat = Vec::with_capacity(n);
    for h in handles {
        let done = h
            .join()
            .map_err(|_| anyhow::anyhow!("an upload thread panicked"))??;
        lat.push(done - t0);
    }
    Ok((lat.clone(), lat.into_iter().max().unwrap_or_default()))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

/// Runs `allot bench upload`.
pub fn run(a: UploadArgs) -> anyhow::Result<()> {
    let clients: Vec<usize> = a
        .clients
        .split(',')
        .map(|s| s.trim().parse::<usize>())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("--clients {:?}: {e}", a.clients))?;
    anyhow::ensure!(
        clients.iter().all(|&c| (1..=64).contains(&c)),
        "--clients: each number from 1 to 64"
    );
    anyhow::ensure!((1..=1024).contains(&a.mib), "--mib: 1 to 1024");
    anyhow::ensure!(a.repeats >= 1, "--repeats: at least 1");
    let max = *clients.iter().max().unwrap_or(&1) as u64;
    eprintln!(
        "allot bench upload: a {} MiB loop device in {} ...",
        max * a.mib,
        a.dir.display()
    );
    let dev = make_device(&a.dir, max * a.mib * CHUNK as u64)?;
    let mm = majmin(&dev.dev)?;
    if let Some(g) = &dev.group {
        // SAFETY: set before any thread of this process reads the
        // environment (the require runtime reads it when first used).
        unsafe { std::env::set_var(allot_proto::env::IO_CGROUP, g) };
    }
    let rt = Blocks::global();
    let sched = allot_require::io::scheduler(&mm).unwrap_or_else(|| "?".into());
    eprintln!(
        "device {} ({mm}), scheduler {sched}, {}",
        dev.dev,
        if dev.group.is_some() {
            "blkio weights (ALLOT_IO_CGROUP)"
        } else {
            "no blkio group: I/O priorities"
        }
    );
    // Warm-up, untimed: the runtime's first block (its groups, the
    // broker's ledger) and the device's first writes.
    round(rt, &dev.dev, &mm, 1, 1, Mode::Require)?;
    round(rt, &dev.dev, &mm, 1, 1, Mode::Plain)?;
    println!(
        "| clients | plain: mean / worst latency | require(io 1000): mean / worst | mean ratio | throughput plain / require |"
    );
    println!("|---|---|---|---|---|");
    for &n in &clients {
        let mut rows: Vec<[f64; 4]> = Vec::new();
        for r in 0..a.repeats {
            let mut row = [0.0; 4];
            // Alternate the order so neither mode always runs first.
            let order = if r % 2 == 0 {
                [Mode::Plain, Mode::Require]
            } else {
                [Mode::Require, Mode::Plain]
            };
            for mode in order {
                let (lat, _all) = round(rt, &dev.dev, &mm, n, a.mib, mode)?;
                let mean = lat.iter().map(Duration::as_secs_f64).sum::<f64>() / n as f64;
                let worst = lat.iter().map(Duration::as_secs_f64).fold(0.0, f64::max);
                let i = if mode == Mode::Plain { 0 } else { 2 };
                row[i] = mean;
                row[i + 1] = worst;
                eprintln!(
                    "  {n} clients, run {}, {mode:?}: mean {mean:.2} s, worst {worst:.2} s",
                    r + 1
                );
            }
            rows.push(row);
        }
        let col = |i: usize| median(rows.iter().map(|r| r[i]).collect());
        let mb = (n as u64 * a.mib) as f64 * CHUNK as f64 / 1e6;
        println!(
            "| {n} | {:.2} s / {:.2} s | {:.2} s / {:.2} s | {:.2} | {:.0} / {:.0} MB/s |",
            col(0),
            col(1),
            col(2),
            col(3),
            col(2) / col(0),
            mb / col(1),
            mb / col(3)
        );
    }
    drop(dev);
    Ok(())
}
