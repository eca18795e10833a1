//! `allot status`: the broker's state as JSON.
//!
//! Shape (stable; scripts read it):
//!
//! ```json
//! { "broker":  { "pid": 1, "instance": 2, "backend": "cgroup1", "policy": "fair-share",
//!                "uptime_s": 3.5, "notes": [] },
//!   "machine": { "name": "this machine", "summary": "2 CPUs, …", "usable": "0-1",
//!                "capacity": 2, "reserve": "", "pool": "", "idle": "" },
//!   "cells":   [ { "id": 1, "name": "make", "uid": 0, "pids": [42], "cpus": "0",
//!                  "lent": "", "entitled": "0", "threads": 1, "generation": 3,
//!                  "stacked": false, "share": 1.0, "demand": null, "busy": 0.98,
//!                  "progress": 0, "spec": { "min": 0, "max": 0, "weight": 1,
//!                  "exclusive": false, "placement": "any" } } ],
//!   "queue":   [ { "id": 4, "name": "x", "position": 1, "reason": "…", "spec": { … } } ] }
//! ```

use crate::core::Core;
use allot_proto::wire::MAX_STR;
use allot_topo::CpuSet;
use serde_json::json;

impl Core {
    /// The status document.
    pub fn status_json(&self) -> String {
        let used = self
            .plan
            .cells
            .values()
            .fold(self.plan.reserve, |acc, g| acc.union(&g.cpus));
        let idle: CpuSet = self.machine.usable().difference(&used);
        let cells: Vec<_> = self
            .cells
            .iter()
            .map(|(id, c)| {
                let g = c.published.as_ref();
                json!({
                    "id": id,
                    "name": c.name,
                    "uid": c.uid,
                    "pids": c.members.iter().map(|m| m.pid).collect::<Vec<_>>(),
                    "cpus": g.map(|g| g.cpus.to_string()).unwrap_or_default(),
                    "lent": g.map(|g| g.lent.to_string()).unwrap_or_default(),
                    "entitled": g.map(|g| g.entitled.to_string()).unwrap_or_default(),
                    "threads": g.map_or(0, |g| g.threads),
                    "generation": c.generation,
                    "stacked": g.is_some_and(|g| g.stacked),
                    "share": g.map_or(0.0, |g| (g.share * 1000.0).round() / 1000.0),
                    "demand": c.est.demand(),
                    "busy": (c.est.busy() * 100.0).round() / 100.0,
                    "progress": c.progress,
                    "busy_reported": c.busy_reported,
                    "spec": c.spec,
                })
            })
            .collect();
        let queue: Vec<_> = self
            .queue
            .iter()
            .enumerate()
            .map(|(i, q)| json!({ "id": q.id, "name": q.name, "uid": q.uid, "position": i + 1, "reason": q.reason, "spec": q.spec }))
            .collect();
        let doc = json!({
            "broker": {
                "pid": std::process::id(),
                "instance": self.instance,
                "backend": self.backend(),
                "policy": self.planner.config().policy.to_string(),
                "lend": self.planner.config().lend,
                "uptime_s": (self.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
                "notes": self.backend_notes,
            },
            "machine": {
                "name": self.machine.name(),
                "summary": self.machine.summary(),
                "usable": self.machine.usable().to_string(),
                "capacity": self.planner.capacity(),
                "reserve": self.plan.reserve.to_string(),
                "pool": self.plan.pool.to_string(),
                "idle": idle.to_string(),
            },
            "cells": cells,
            "queue": queue,
        });
        doc.to_string()
    }
}

/// Splits `json` into pieces that fit a string field, at char boundaries.
pub fn chunks(json: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = json;
    while !rest.is_empty() {
        let mut end = rest.len().min(MAX_STR);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(rest[..end].to_string());
        rest = &rest[end..];
    }
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn chunks_reassemble() {
        let s = "é".repeat(5000);
        let c = super::chunks(&s);
        assert!(c.len() > 1);
        assert!(c.iter().all(|p| p.len() <= super::MAX_STR));
        assert_eq!(c.concat(), s);
        assert_eq!(super::chunks(""), vec![String::new()]);
    }
}
