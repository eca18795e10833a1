//! The soak's view of processes: which live, whose children they are,
//! what descriptors they hold, and stopping a process group.

use std::collections::BTreeMap;

pub(super) fn kill_group(pgid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pgid as i32) {
        let _ = rustix::process::kill_process_group(p, sig);
    }
}

/// The processes whose parent is `pid` (its children, and for a subreaper
/// the orphans it adopted).
pub(super) fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let ppid = stat
            .rfind(')')
            .and_then(|i| stat[i + 2..].split_whitespace().nth(1))
            .and_then(|x| x.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
}

pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .is_ok_and(|s| s.rfind(')').is_some_and(|i| !s[i + 2..].starts_with('Z')))
}

/// The open descriptors of `pid`, by number, with what each refers to
/// (a path, `socket`, `pipe`, `anon_inode:[pidfd]`...).
pub(super) fn open_fds(pid: u32) -> BTreeMap<u32, String> {
    let dir = format!("/proc/{pid}/fd");
    std::fs::read_dir(&dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let fd = e.file_name().to_str()?.parse().ok()?;
            let target = std::fs::read_link(e.path())
                .map_or_else(|_| "?".into(), |t| t.display().to_string());
            // A restarted broker's socket or pipe is another inode.
            let kind = match target.split_once(":[") {
                Some((k @ ("socket" | "pipe"), _)) => k.to_string(),
                _ => target,
            };
            Some((fd, kind))
        })
        .collect()
}

/// The descriptors of `now` that `start` did not have (by what they refer
/// to: a number may be reused), or "none" when only the count grew.
pub(super) fn extra_fds(start: &BTreeMap<u32, String>, now: &BTreeMap<u32, String>) -> String {
    let mut seen: Vec<&String> = start.values().collect();
    let mut extra = Vec::new();
    for (fd, target) in now {
        match seen.iter().position(|s| *s == target) {
            Some(i) => {
                seen.swap_remove(i);
            }
            None => extra.push(format!("{fd} -> {target}")),
        }
    }
    if extra.is_empty() {
        "none by what they refer to".into()
    } else {
        extra.join(", ")
    }
}
