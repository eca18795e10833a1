//! Loop devices a live test attaches to files it makes, for real block
//! I/O without touching the machine's disks: detached, and their files
//! removed, when dropped (also when the test fails).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `losetup` runs here.
pub fn losetup_available() -> bool {
    Command::new("losetup")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// A loop device (direct I/O) attached to a file of the test's own.
#[derive(Debug)]
pub struct LoopDevice {
    file: PathBuf,
    dev: Option<String>,
}

impl LoopDevice {
    /// Makes `file` of `bytes` (each byte `fill`, so the file's blocks are
    /// allocated; 0 leaves it sparse) and attaches a loop device to it.
    pub fn attach(file: PathBuf, bytes: u64, fill: u8) -> std::io::Result<LoopDevice> {
        let f = std::fs::File::create(&file)?;
        // From here on, drop removes the file.
        let mut d = LoopDevice { file, dev: None };
        if fill == 0 {
            f.set_len(bytes)?;
        } else {
            let chunk = vec![fill; 1 << 20];
            let mut off = 0;
            while off < bytes {
                f.write_at(&chunk, off)?;
                off += chunk.len() as u64;
            }
            f.sync_all()?;
        }
        let out = Command::new("losetup")
            .args(["--find", "--show", "--direct-io=on"])
            .arg(&d.file)
            .output()?;
        if !out.status.success() {
            return Err(std::io::Error::other(format!(
                "losetup: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        d.dev = Some(String::from_utf8_lossy(&out.stdout).trim().to_string());
        Ok(d)
    }

    /// Its path (`/dev/loopN`).
    pub fn path(&self) -> &str {
        self.dev.as_deref().expect("attached")
    }

    /// Its kernel name (`loopN`).
    pub fn name(&self) -> &str {
        Path::new(self.path())
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a /dev path")
    }

    /// Switches its I/O scheduler (`bfq`, `mq-deadline`, …).
    pub fn set_scheduler(&self, scheduler: &str) -> std::io::Result<()> {
        std::fs::write(
            format!("/sys/block/{}/queue/scheduler", self.name()),
            scheduler,
        )
    }

    /// Its `major:minor`.
    pub fn majmin(&self) -> String {
        std::fs::read_to_string(format!("/sys/block/{}/dev", self.name()))
            .expect("an attached loop device is in /sys/block")
            .trim()
            .to_string()
    }
}

impl Drop for LoopDevice {
    fn drop(&mut self) {
        if let Some(d) = &self.dev {
            let _ = Command::new("losetup").args(["-d", d]).status();
        }
        let _ = std::fs::remove_file(&self.file);
    }
}
