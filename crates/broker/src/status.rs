//! `allot status`: the broker's state as the typed document of
//! [`allot_proto::status`], as one peer may see it.

use crate::core::Engine;
use crate::metrics::{CellGauges, Snapshot};
use crate::peer::Peer;
use allot_proto::status::{
    BrokerStatus, CellStatus, LoadStatus, MachineMemory, MachineStatus, OutsideStatus,
    PartitionStatus, PausedStatus, PerfStatus, QueuedStatus, STATUS_VERSION, SpecStatus, Status,
};
use allot_topo::CpuSet;
use std::collections::BTreeMap;

fn round(v: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (v * f).round() / f
}

impl Engine {
    /// Usable CPUs that neither a cell nor the reserve holds.
    fn idle_cpus(&self) -> CpuSet {
        let used = self
            .plan
            .cells
            .values()
            .fold(self.plan.reserve, |acc, g| acc.union(&g.cpus));
        self.machine.usable().difference(&used)
    }

    /// The status document for `peer`: other users' cell names and pids
    /// are left out unless the peer is root or the broker's owner, or the
    /// configuration shows them (`show_other_users`).
    pub fn status(&self, peer: Peer) -> Status {
        let all = self.sees_everything(peer);
        let hidden = |uid: u32| !all && uid != peer.uid;
        let idle = self.idle_cpus();
        let now = std::time::Instant::now();
        let mut cache = self.runtime_cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.expire(now);
        let until = now + crate::cell_runtimes::STATUS_WAIT;
        // A cell shows once its processes joined (`core::arrival`).
        let cells = self
            .cells
            .iter()
            .filter(|(id, _)| !self.is_arriving(**id))
            .map(|(&id, c)| {
                let g = c.published.as_ref();
                let private = hidden(c.uid);
                let runtimes = (!private).then(|| {
                    let pids: Vec<u32> = c.members().iter().map(|m| m.pid).collect();
                    crate::cell_runtimes::runtimes_of(self.os(), &pids, &mut cache, now, until)
                });
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
                        c.members().iter().map(|m| m.pid).collect()
                    },
                    cpus: g.map(|g| g.cpus.to_string()).unwrap_or_default(),
                    lent: g.map(|g| g.lent.to_string()).unwrap_or_default(),
                    entitled: g.map(|g| g.entitled.to_string()).unwrap_or_default(),
                    held: self
                        .account
                        .held()
                        .get(&id)
                        .map(|s| s.to_string())
                        .unwrap_or_default(),
                    threads: g.map_or(0, |g| g.threads),
                    generation: c.generation,
                    stacked: g.is_some_and(|g| g.stacked),
                    share: g.map_or(0.0, |g| round(g.share, 3)),
                    demand: c.est.demand(),
                    busy: round(c.est.busy(), 2),
                    progress: c.progress,
                    busy_reported: c.busy_reported,
                    pool_stats: if private { None } else { c.pool_stats },
                    spec: SpecStatus::from(&c.spec),
                    runtimes_unread: runtimes.as_ref().map_or(0, |r| r.unread),
                    runtimes: runtimes.map(|r| r.runtimes).unwrap_or_default(),
                    delivery: self.windows.delivery(id).map(|d| delivery_status(&d)),
                    perf: perf_status(
                        &c.spec.goal,
                        &c.perf,
                        self.goal_note(c, g.map_or(0, |g| g.entitled.len() as u32)),
                    ),
                    waiting_for_message: !self.planned(id),
                    paused: self.paused_since(id).map(|since| PausedStatus {
                        reason: crate::core::PAUSED_WHY.to_string(),
                        for_s: round(since.elapsed().as_secs_f64(), 1),
                    }),
                    partition: c
                        .spec
                        .exclusive
                        .then(|| self.partition_of(id))
                        .flatten()
                        .map(|r| PartitionStatus {
                            isolated: r.is_ok(),
                            why_not: r.err().unwrap_or_default(),
                        }),
                    memory: self.memory.used(id),
                    cache: self.memory.cache_status(id),
                    timeline: (!private).then(|| c.timeline.doc()),
                    outside: g
                        .and_then(|g| self.outside.group_of(id, g.stacked))
                        .map(|o| OutsideStatus {
                            used: round(o.last().outside, 2),
                            waiting: o.last().waiting.map(|w| round(w, 2)),
                            taken: o.leaves(),
                        }),
                }
            })
            .collect();
        let queue = self
            .cells
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
                    spec: SpecStatus::from(q.spec.spec()),
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
                weigh: self.outside.weighing().to_string(),
                together_weight: self.together_weight(),
                weight_wanted: self.outside.weights().together,
                made_ahead: self.made_ahead(),
            },
            machine: MachineStatus {
                name: self.machine.name().to_string(),
                summary: self.machine.summary(),
                usable: self.machine.usable().to_string(),
                capacity: self.planner.capacity(),
                reserve: self.plan.reserve.to_string(),
                pool: self.plan.pool.to_string(),
                time: self.plan.time.to_string(),
                // Whole parts per million, then a fraction: 0.05, not
                // 1 - 0.95 = 0.050000000000000044.
                time_reserve: f64::from(allot_spec::PPM.saturating_sub(self.planner.time_limit()))
                    / f64::from(allot_spec::PPM),
                idle: idle.to_string(),
                held_outside: self.account.outside().to_string(),
                memory: self.memory.capacity().map(|capacity| MachineMemory {
                    capacity,
                    reserve: self.memory.reserve(),
                    guaranteed: self.memory_guaranteed(None),
                }),
            },
            cells,
            queue,
            load: self
                .measure
                .load()
                .over(crate::series::RATE_SPAN)
                .map(|w| LoadStatus {
                    window_s: round(w.secs, 2),
                    busy: round(w.busy, 2),
                    cells: w.cells.map(|v| round(v, 2)),
                    unmanaged: w.unmanaged.map(|v| round(v, 2)),
                    pressure: w.pressure.map(|v| round(v, 3)),
                    running: w.running,
                    counters: self.measure.counters_unavailable().map(str::to_string),
                }),
            channels: self
                .channels
                .shown((!all).then_some(peer.uid))
                .into_iter()
                .map(|c| allot_proto::status::ChannelStatus {
                    name: c.name,
                    uid: c.uid,
                    slots: c.geometry.slots as u32,
                    message_max: c.geometry.message_max() as u32,
                    senders: c.senders,
                    receiver: c.receiver,
                    waiting: c.waiting as u32,
                })
                .collect(),
        }
    }
}

impl Engine {
    /// What the status says of cell `c`'s goal beyond its measurements:
    /// what the goals policy does about it, or that another policy is in
    /// force.
    fn goal_note(&self, c: &crate::core::Cell, entitled: u32) -> String {
        if !c.spec.goal.is_some() {
            return String::new();
        }
        let policy = self.planner.config().policy;
        if policy != allot_plan::GlobalPolicy::Goals {
            return format!(
                "not acted on: the broker divides CPUs by {policy}; run it with --policy goals \
                 (or policy = \"goals\") to size cells to their goals"
            );
        }
        c.tracker.note(entitled)
    }
}

/// A cell's recent performance as the status document shows it; `note`
/// is what the policy does about its goal.
fn perf_status(
    goal: &allot_spec::Goal,
    perf: &crate::series::Perf,
    note: String,
) -> Option<PerfStatus> {
    let w = perf.over(crate::series::RATE_SPAN)?;
    let lat = perf.latency_stretch(crate::series::RATE_SPAN).unwrap_or(w);
    let goal_met = goal.met(w.rate_per_s, lat.p99_us);
    let goal_note = match (goal, goal_met) {
        (allot_spec::Goal::Rate { .. }, None) => {
            "no heartbeats yet: count work with heartbeat(n) (allot_heartbeat in C)".to_string()
        }
        (allot_spec::Goal::P99 { .. }, None) => {
            "no latencies yet: record them with report_latency (allot_report_latency in C)"
                .to_string()
        }
        _ => note,
    };
    Some(PerfStatus {
        window_s: round(w.secs, 2),
        cpus: round(w.cpus, 2),
        cpu_used: w.cpu_used.map(|v| round(v, 2)),
        waiting: w.waiting.map(|v| round(v, 2)),
        rate_per_s: w.rate_per_s.map(|v| round(v, 2)),
        latencies: lat.latencies,
        latency_window_s: round(lat.secs, 2),
        p99_us: lat.p99_us,
        ipc: w.ipc.map(|v| round(v, 2)),
        goal_met,
        goal_note,
    })
}

/// A cell's delivery as the status document shows it.
fn delivery_status(d: &crate::windows::Delivery) -> allot_proto::status::DeliveryStatus {
    let us = |ns: u64| round(ns as f64 / 1000.0, 1);
    allot_proto::status::DeliveryStatus {
        budget_us: d.budget_ns / 1000,
        periods: d.periods,
        last_used_us: d.last_used_ns / 1000,
        mean_error: round(d.mean_error(), 4),
        under: d.under,
        over: d.over,
        missed: d.missed,
        resent: d.resent,
        open_latency_p50_us: d.latency_quantile(0.5).map_or(0.0, us),
        open_latency_p99_us: d.latency_quantile(0.99).map_or(0.0, us),
    }
}

impl Engine {
    /// The metrics of this moment ([`crate::metrics`]). Names are included
    /// only when the configuration shows other users' names. Reads each
    /// cell's pressure from the backend and the broker's own process from
    /// `/proc/self`, so it costs only when a scrape asks.
    pub fn metrics_snapshot(&mut self) -> Snapshot {
        let ids: Vec<u64> = self.cells.keys().copied().collect();
        let pressure: BTreeMap<u64, u64> = ids
            .into_iter()
            .filter_map(|id| Some((id, self.cpu_pressure_us(id)?)))
            .collect();
        Snapshot {
            uptime_s: round(self.started.elapsed().as_secs_f64(), 3),
            capacity: self.planner.capacity(),
            idle: self.idle_cpus().len() as u32,
            queue: self.cells.queue.len() as u32,
            cells: self
                .cells
                .iter()
                .map(|(&id, c)| {
                    let g = c.published.as_ref();
                    CellGauges {
                        id,
                        uid: c.uid,
                        name: self.show_other_users.then(|| c.name.clone()),
                        cpus: g.map_or(0, |g| g.cpus.len() as u32),
                        lent: g.map_or(0, |g| g.lent.len() as u32),
                        threads: g.map_or(0, |g| g.threads),
                        busy: round(c.est.busy(), 3),
                        generation: c.generation,
                        members: c.members().len() as u32,
                        cpu_seconds: c.perf.used_ns().map(|ns| ns as f64 / 1e9),
                        cpu_pressure_seconds: pressure.get(&id).map(|&us| us as f64 / 1e6),
                        memory: self.memory.used(id),
                        outside: g
                            .and_then(|g| self.outside.group_of(id, g.stacked))
                            .map(|o| (round(o.last().outside, 3), o.leaves())),
                        partition: c
                            .spec
                            .exclusive
                            .then(|| self.partition_of(id))
                            .flatten()
                            .map(|r| r.is_ok()),
                    }
                })
                .collect(),
            outside_cpus: self
                .measure
                .load()
                .over(crate::series::RATE_SPAN)
                .and_then(|w| w.unmanaged)
                .map(|u| round(u, 3)),
            together_threads: self
                .together_weight()
                .map(|w| f64::from(w) / f64::from(allot_plan::weight::THREAD)),
            counters: self.counters.clone(),
            process: crate::metrics::ProcessGauges::read(),
        }
    }
}
