//! Where the cgroup hierarchies are mounted (from `/proc/self/mountinfo`).

use std::path::{Path, PathBuf};

/// The cgroup mounts of this process's mount namespace.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mounts {
    /// The cgroup2 (unified) mount.
    pub cgroup2: Option<PathBuf>,
    /// v1 mounts: (controllers, mount point).
    pub v1: Vec<(Vec<String>, PathBuf)>,
}

impl Mounts {
    /// Reads this process's mounts.
    pub fn read() -> Mounts {
        std::fs::read_to_string("/proc/self/mountinfo")
            .map(|t| Mounts::parse(&t))
            .unwrap_or_default()
    }

    /// Parses mountinfo text.
    pub fn parse(mountinfo: &str) -> Mounts {
        let mut m = Mounts::default();
        for line in mountinfo.lines() {
            let Some((left, right)) = line.split_once(" - ") else {
                continue;
            };
            let point = left.split_whitespace().nth(4).map(unescape);
            let mut r = right.split_whitespace();
            let (Some(fstype), _, Some(opts), Some(point)) = (r.next(), r.next(), r.next(), point)
            else {
                continue;
            };
            match fstype {
                "cgroup2" if m.cgroup2.is_none() => m.cgroup2 = Some(point),
                "cgroup" => {
                    let ctrls = opts
                        .split(',')
                        .filter(|o| {
                            ["cpuset", "cpu", "cpuacct", "memory", "blkio", "freezer"].contains(o)
                        })
                        .map(str::to_string)
                        .collect();
                    m.v1.push((ctrls, point));
                }
                _ => {}
            }
        }
        m
    }

    /// The v1 mount holding `controller`.
    pub fn v1_for(&self, controller: &str) -> Option<&Path> {
        self.v1
            .iter()
            .find(|(c, _)| c.iter().any(|x| x == controller))
            .map(|(_, p)| p.as_path())
    }

    /// The v1 mounts allot uses, if cpuset is there.
    pub fn v1(&self) -> Option<crate::V1Mounts> {
        Some(crate::V1Mounts {
            cpuset: self.v1_for("cpuset")?.to_path_buf(),
            cpu: self.v1_for("cpu").map(Path::to_path_buf),
            cpuacct: self.v1_for("cpuacct").map(Path::to_path_buf),
            freezer: self.v1_for("freezer").map(Path::to_path_buf),
            blkio: self.v1_for("blkio").map(Path::to_path_buf),
            // (The broker's own memory group is read by `crate::open`.)
            memory: None,
        })
    }
}

fn unescape(s: &str) -> PathBuf {
    // mountinfo escapes space, tab, newline and backslash as \ooo.
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    PathBuf::from(String::from_utf8_lossy(&out).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hybrid_layout() {
        let text = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
50 31 0:39 / /mnt/with\\040space rw - cgroup cgroup rw,cpu,cpuacct
";
        let m = Mounts::parse(text);
        assert_eq!(
            m.cgroup2.as_deref(),
            Some(Path::new("/sys/fs/cgroup/unified"))
        );
        let v1 = m.v1().unwrap();
        assert_eq!(v1.cpuset, Path::new("/sys/fs/cgroup/cpuset"));
        assert_eq!(v1.cpu.as_deref(), Some(Path::new("/sys/fs/cgroup/cpu")));
        assert_eq!(m.v1[3].1, Path::new("/mnt/with space"));
    }

    #[test]
    fn pure_v2() {
        let m = Mounts::parse("30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n");
        assert_eq!(m.cgroup2.as_deref(), Some(Path::new("/sys/fs/cgroup")));
        assert!(m.v1().is_none());
    }
}
