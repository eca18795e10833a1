//! `allot status`: the broker's state as the typed document of
//! [`allot_proto::status`], as one peer may see it.

use crate::convert;
use crate::core::{Core, Peer};
use allot_proto::status::{
    BrokerStatus, CellStatus, MachineStatus, QueuedStatus, STATUS_VERSION, Status,
};
use allot_proto::wire::MAX_STR;
use allot_topo::CpuSet;

fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

impl Core {
    /// The status document for `peer`: other users' cell names and pids
    /// are left out unless the peer is root or the broker's owner, or the
    /// configuration shows them (`show_other_users`).
    pub fn status(&self, peer: Peer) -> Status {
        let all = self.sees_everything(peer);
        let hidden = |uid: u32| !all && uid != peer.uid;
        let used = self
            .plan
            .cells
            .values()
            .fold(self.plan.reserve, |acc, g| acc.union(&g.cpus));
        let idle: CpuSet = self.machine.usable().difference(&used);
        let cells = self
            .cells
            .iter()
            .map(|(&id, c)| {
                let g = c.published.as_ref();
                let private = hidden(c.uid);
                CellStatus {
                    id,
                    name: if private {
                        String::new()
                    } else {
                        c.name.clone()
                    },
                    uid: c.uid,
                    private,
                    pids: if private {
                        vec![]
                    } else {
                        c.members.iter().map(|m| m.pid).collect()
                    },
                    cpus: g.map(|g| g.cpus.to_string()).unwrap_or_default(),
                    lent: g.map(|g| g.lent.to_string()).unwrap_or_default(),
                    entitled: g.map(|g| g.entitled.to_string()).unwrap_or_default(),
                    threads: g.map_or(0, |g| g.threads),
                    generation: c.generation,
                    stacked: g.is_some_and(|g| g.stacked),
                    share: g.map_or(0.0, |g| round(g.share, 3)),
                    demand: c.est.demand(),
                    busy: round(c.est.busy(), 2),
                    progress: c.progress,
                    busy_reported: c.busy_reported,
                    spec: convert::to_status(&c.spec),
                }
            })
            .collect();
        let queue = self
            .queue
            .iter()
            .enumerate()
            .map(|(i, q)| {
                let private = hidden(q.uid);
                QueuedStatus {
                    id: q.id,
                    name: if private {
                        String::new()
                    } else {
                        q.name.clone()
                    },
                    uid: q.uid,
                    private,
                    position: i as u32 + 1,
                    reason: if private {
                        String::new()
                    } else {
                        q.reason.clone()
                    },
                    spec: convert::to_status(&q.spec),
                }
            })
            .collect();
        Status {
            version: STATUS_VERSION,
            broker: BrokerStatus {
                pid: std::process::id(),
                instance: self.instance,
                backend: self.backend(),
                policy: self.planner.config().policy.to_string(),
                lend: self.planner.config().lend,
                uptime_s: round(self.started.elapsed().as_secs_f64(), 1),
                notes: self.backend_notes.clone(),
                journal_problem: self.journal_problem().map(str::to_string),
            },
            machine: MachineStatus {
                name: self.machine.name().to_string(),
                summary: self.machine.summary(),
                usable: self.machine.usable().to_string(),
                capacity: self.planner.capacity(),
                reserve: self.plan.reserve.to_string(),
                pool: self.plan.pool.to_string(),
                idle: idle.to_string(),
            },
            cells,
            queue,
        }
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
