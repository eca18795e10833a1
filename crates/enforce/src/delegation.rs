//! Where allot's cgroup v2 subtree lives, and the broker's own place in it.
//!
//! On a machine whose PID 1 is systemd, systemd owns the cgroup tree: a
//! program may create cgroups only inside a subtree systemd delegated to
//! it (a unit with `Delegate=yes`), never beside systemd's own. So there:
//!
//! - the delegated subtree `D` is the nearest cgroup at or above the
//!   broker's own that systemd marked delegated (the `trusted.delegate` or
//!   `user.delegate` extended attribute, "1", which systemd 251 and later
//!   set on every delegated cgroup);
//! - the cells live in `D/cells/cell-<id>` ([`CELLS`]);
//! - the broker lives in the leaf `D/broker` ([`BROKER`]) when systemd
//!   started it in `D` itself: a cgroup whose children have controllers
//!   may hold no process (the v2 "no internal processes" rule), so the
//!   broker moves itself to the leaf before `D` enables any. A broker
//!   that systemd already started in a subgroup of `D`
//!   (`DelegateSubgroup=`) stays there.
//!
//! Without a delegated subtree under systemd the cgroup2 backend refuses,
//! saying how to get one; `auto` then falls back to the next backend.
//! Where PID 1 is not systemd (containers, hosts without it) the subtree
//! is `<mount>/<cgroup_name>`, as it always was. An operator's explicit
//! `cgroup2_root` wins over both.
//!
//! The decision is [`place`], a pure function of what [`Facts::read`]
//! found; [`settle`] moves the broker into its leaf. Nothing here ever
//! takes the hierarchy's root cgroup for a delegated one.

use crate::cgroupfs::CgroupFs;
use std::path::{Path, PathBuf};

/// The cells' directory inside a delegated subtree.
pub const CELLS: &str = "cells";

/// The broker's leaf inside a delegated subtree.
pub const BROKER: &str = "broker";

/// What decides the layout, as read from the running system.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// PID 1 is systemd (`/run/systemd/system` exists, as `sd_booted` checks).
    pub systemd: bool,
    /// The cgroup2 mount.
    pub mount: PathBuf,
    /// This process's cgroup relative to the mount (`/proc/self/cgroup`,
    /// the `0::` line), e.g. `/system.slice/allotd.service`.
    pub own: Option<String>,
}

impl Facts {
    /// Reads the facts for a cgroup2 hierarchy mounted at `mount`.
    pub fn read(mount: &Path) -> Facts {
        Facts {
            systemd: Path::new("/run/systemd/system").is_dir(),
            mount: mount.to_path_buf(),
            own: std::fs::read_to_string("/proc/self/cgroup")
                .ok()
                .and_then(|t| own_cgroup(&t)),
        }
    }

    /// This process's cgroup directory.
    pub fn own_dir(&self) -> Option<PathBuf> {
        self.own
            .as_deref()
            .map(|o| self.mount.join(o.trim_start_matches('/')))
    }
}

/// The v2 cgroup named in `/proc/<pid>/cgroup` text (its `0::` line).
pub fn own_cgroup(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
        .filter(|p| p.starts_with('/'))
}

/// Where the cells go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// `<mount>/<cgroup_name>`: no systemd to answer to.
    Plain(PathBuf),
    /// Inside the subtree systemd delegated.
    Delegated {
        /// The delegated cgroup (`D`).
        unit: PathBuf,
        /// The cells' directory, `D/cells`.
        cells: PathBuf,
        /// Where the unit's processes move, `D/broker`; `None` when the
        /// broker already runs in a subgroup of `D`.
        broker: Option<PathBuf>,
    },
}

impl Layout {
    /// The directory the cells are made in.
    pub fn cells(&self) -> &Path {
        match self {
            Layout::Plain(p) => p,
            Layout::Delegated { cells, .. } => cells,
        }
    }
}

/// Decides the layout from `facts`; `delegated` says whether a cgroup
/// directory carries systemd's delegation mark. The error says what to do.
pub fn place(
    facts: &Facts,
    cgroup_name: &str,
    delegated: impl Fn(&Path) -> bool,
) -> Result<Layout, String> {
    if !facts.systemd {
        return Ok(Layout::Plain(facts.mount.join(cgroup_name)));
    }
    let Some(own) = facts.own_dir() else {
        return Err("PID 1 is systemd, and this process's cgroup is unknown \
                    (/proc/self/cgroup has no cgroup v2 line)"
            .into());
    };
    let mut dir = own.as_path();
    while dir != facts.mount && dir.starts_with(&facts.mount) {
        if delegated(dir) {
            let unit = dir.to_path_buf();
            return Ok(Layout::Delegated {
                cells: unit.join(CELLS),
                broker: (dir == own).then(|| unit.join(BROKER)),
                unit,
            });
        }
        let Some(up) = dir.parent() else { break };
        dir = up;
    }
    Err(format!(
        "PID 1 is systemd and the broker runs in {}, which systemd did not delegate: allot \
         creates cgroups only in a delegated subtree. Run it as the allotd.service unit \
         (Delegate=yes, scripts/install-service.sh), or under `systemd-run --scope -p \
         Delegate=yes allot daemon`, or name a delegated directory as cgroup2_root",
        own.display()
    ))
}

/// The layout for an operator's own `cgroup2_root`: as given, and when
/// the broker runs in its parent (a delegated unit named explicitly, as
/// on a systemd too old to mark delegation), the broker moves to a leaf
/// beside it.
pub fn explicit(root: &Path, facts: &Facts) -> Layout {
    match root.parent() {
        // Never the hierarchy's root: that is the whole machine's.
        Some(parent) if parent != facts.mount && facts.own_dir().as_deref() == Some(parent) => {
            Layout::Delegated {
                unit: parent.to_path_buf(),
                cells: root.to_path_buf(),
                broker: Some(parent.join(BROKER)),
            }
        }
        _ => Layout::Plain(root.to_path_buf()),
    }
}

/// Whether systemd marked `dir` delegated (systemd 251 and later).
pub fn marked_delegated(dir: &Path) -> bool {
    ["trusted.delegate", "user.delegate"].iter().any(|name| {
        let mut buf = [0u8; 8];
        rustix::fs::getxattr(dir, *name, &mut buf[..]).is_ok_and(|n| buf[..n].starts_with(b"1"))
    })
}

/// Moves process `pid` (the broker) into the broker's leaf, creating it,
/// so that the subtree may enable controllers for the cells. Nothing else
/// is moved: a process of someone else's left in the delegated cgroup
/// makes enabling the controllers fail, and that error names the cgroup.
pub fn settle(fs: &dyn CgroupFs, layout: &Layout, pid: u32) -> std::io::Result<bool> {
    let Layout::Delegated {
        broker: Some(leaf), ..
    } = layout
    else {
        return Ok(false);
    };
    if !fs.exists(leaf) {
        fs.mkdir(leaf)?;
    }
    fs.write(&leaf.join("cgroup.procs"), &pid.to_string())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cgroupfs::{FixtureFs, FixtureLayout};

    fn facts(systemd: bool, own: &str) -> Facts {
        Facts {
            systemd,
            mount: "/sys/fs/cgroup".into(),
            own: Some(own.into()),
        }
    }

    #[test]
    fn own_cgroup_is_the_v2_line() {
        let text = "12:cpuset:/\n1:name=systemd:/init.scope\n0::/system.slice/allotd.service\n";
        assert_eq!(
            own_cgroup(text).as_deref(),
            Some("/system.slice/allotd.service")
        );
        assert_eq!(own_cgroup("4:cpu:/x\n"), None, "a pure v1 machine");
    }

    #[test]
    fn without_systemd_the_cells_stay_where_they_always_were() {
        let l = place(&facts(false, "/"), "allot", |_| false).unwrap();
        assert_eq!(l, Layout::Plain("/sys/fs/cgroup/allot".into()));
    }

    #[test]
    fn under_systemd_the_cells_go_into_the_delegated_unit_and_the_broker_into_a_leaf() {
        let unit = Path::new("/sys/fs/cgroup/system.slice/allotd.service");
        let l = place(&facts(true, "/system.slice/allotd.service"), "allot", |d| {
            d == unit
        })
        .unwrap();
        assert_eq!(
            l,
            Layout::Delegated {
                unit: unit.into(),
                cells: unit.join("cells"),
                broker: Some(unit.join("broker")),
            }
        );
        assert_eq!(l.cells(), unit.join("cells"));
    }

    #[test]
    fn a_broker_started_in_a_subgroup_stays_there() {
        let unit = Path::new("/sys/fs/cgroup/system.slice/allotd.service");
        let l = place(
            &facts(true, "/system.slice/allotd.service/supervisor"),
            "allot",
            |d| d == unit,
        )
        .unwrap();
        let Layout::Delegated { broker, cells, .. } = l else {
            panic!("{l:?}")
        };
        assert_eq!(broker, None);
        assert_eq!(cells, unit.join("cells"));
    }

    #[test]
    fn under_systemd_without_delegation_it_refuses_and_says_how() {
        let e = place(
            &facts(true, "/user.slice/user-1000.slice/session-3.scope"),
            "allot",
            |_| false,
        )
        .unwrap_err();
        assert!(e.contains("session-3.scope"), "{e}");
        assert!(e.contains("Delegate=yes"), "{e}");
        let e = place(
            &Facts {
                own: None,
                ..facts(true, "/")
            },
            "allot",
            |_| true,
        )
        .unwrap_err();
        assert!(e.contains("/proc/self/cgroup"), "{e}");
        // The mount's root itself is never taken as delegated.
        assert!(place(&facts(true, "/"), "allot", |_| true).is_err());
    }

    #[test]
    fn an_explicit_root_beside_the_broker_moves_the_broker_out_of_their_parent() {
        let f = facts(true, "/system.slice/allotd.service");
        let unit = Path::new("/sys/fs/cgroup/system.slice/allotd.service");
        assert_eq!(
            explicit(&unit.join("mine"), &f),
            Layout::Delegated {
                unit: unit.into(),
                cells: unit.join("mine"),
                broker: Some(unit.join("broker")),
            }
        );
        let elsewhere = Path::new("/sys/fs/cgroup/allot");
        assert_eq!(explicit(elsewhere, &f), Layout::Plain(elsewhere.into()));
    }

    #[test]
    fn settle_moves_only_the_broker_into_its_leaf() {
        let dir = tempfile::tempdir().unwrap();
        let fs = FixtureFs::new(FixtureLayout::V2);
        let root = dir.path().join("cg");
        fs.populate(&root).unwrap();
        let unit = root.join("allotd.service");
        fs.mkdir(&unit).unwrap();
        fs.write(&unit.join("cgroup.procs"), "100").unwrap();
        fs.write(&unit.join("cgroup.procs"), "101").unwrap();
        let layout = Layout::Delegated {
            unit: unit.clone(),
            cells: unit.join(CELLS),
            broker: Some(unit.join(BROKER)),
        };
        assert!(settle(&fs, &layout, 100).unwrap());
        let read = |d: &Path| {
            std::fs::read_to_string(d.join("cgroup.procs"))
                .unwrap()
                .split_whitespace()
                .map(str::to_string)
                .collect::<Vec<_>>()
        };
        assert_eq!(read(&unit.join("broker")), ["100"]);
        assert_eq!(
            read(&unit),
            ["101"],
            "another process is not the broker's to move"
        );
        assert!(
            settle(&fs, &layout, 100).unwrap(),
            "moving again is harmless"
        );
        assert!(!settle(&fs, &Layout::Plain(root.clone()), 100).unwrap());
    }

    #[test]
    fn cells_are_made_in_the_delegated_subtree_once_the_broker_left_its_top() {
        let dir = tempfile::tempdir().unwrap();
        let fs = std::sync::Arc::new(FixtureFs::new(FixtureLayout::V2));
        let mount = dir.path().join("cg");
        fs.populate(&mount).unwrap();
        let slice = mount.join("system.slice");
        fs.mkdir(&slice).unwrap();
        let unit = slice.join("allotd.service");
        fs.mkdir(&unit).unwrap();
        fs.write(&unit.join("cgroup.procs"), "100").unwrap();
        let f = Facts {
            systemd: true,
            mount: mount.clone(),
            own: Some("/system.slice/allotd.service".into()),
        };
        let layout = place(&f, "allot", |d| d == unit).unwrap();
        settle(fs.as_ref(), &layout, 100).unwrap();
        let usable: allot_topo::CpuSet = "0-3".parse().unwrap();
        let mut b =
            crate::cgroup2::Cgroup2::new(fs.clone(), layout.cells().into(), usable).unwrap();
        use crate::Enforcer;
        b.create(1).unwrap();
        b.attach(1, 200).unwrap();
        let procs = std::fs::read_to_string(unit.join("cells/cell-1/cgroup.procs")).unwrap();
        assert_eq!(procs.trim(), "200");
        let enabled = std::fs::read_to_string(unit.join("cgroup.subtree_control")).unwrap();
        assert!(
            enabled.contains("cpuset") && enabled.contains("cpu"),
            "{enabled}"
        );
        assert_eq!(
            std::fs::read_to_string(slice.join("cgroup.subtree_control")).unwrap(),
            "",
            "systemd's own slice is left as it was"
        );
        assert!(
            !mount.join("allot").exists(),
            "nothing beside systemd's cgroups"
        );
    }

    #[test]
    fn the_machines_root_cgroup_is_never_taken_for_a_unit() {
        let f = facts(false, "/");
        let root = Path::new("/sys/fs/cgroup/allot-test");
        assert_eq!(explicit(root, &f), Layout::Plain(root.into()));
    }
}
