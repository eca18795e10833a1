//! `allot status`: what the broker has decided.
//!
//! The document is `allot_proto::status::Status`, the broker's own type;
//! this module only fetches and prints it. Every name a client chose is
//! escaped before it reaches the terminal (the broker refuses control
//! characters in new names, but a journal from an older broker may hold
//! them).

use allot_proto::status::{CellStatus, Status, TimeStatus};
use anyhow::Context;
use std::path::PathBuf;

/// Arguments of `allot status`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Broker socket [default: $ALLOT_SOCKET or the per-user default].
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Print the broker's status document as JSON (see docs/operations.md).
    #[arg(long)]
    json: bool,
}

/// Fetches the status document from the broker at `socket`.
pub fn fetch(socket: &std::path::Path) -> anyhow::Result<Status> {
    let mut client = allot_client::Client::connect(socket).with_context(|| {
        format!(
            "cannot reach a broker on {} (start one with `allot daemon`, or let `allot run` start one)",
            socket.display()
        )
    })?;
    client.set_timeout(Some(std::time::Duration::from_secs(10)))?;
    client
        .status()
        .context("the broker did not send its status")
}

/// `s` safe for a terminal (`allot_broker::names::shown`), `-` for nothing.
pub(crate) fn cell_text(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        allot_broker::names::shown(s).into_owned()
    }
}

/// Rows printed as a table whose columns fit their longest value.
struct Table {
    head: Vec<&'static str>,
    right: Vec<bool>,
    rows: Vec<Vec<String>>,
}

impl Table {
    fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let width = |i: usize| {
            self.rows
                .iter()
                .map(|r| r[i].chars().count())
                .chain([self.head[i].len()])
                .max()
                .unwrap_or(0)
        };
        let widths: Vec<usize> = (0..self.head.len()).map(width).collect();
        let line = |cells: Vec<&str>, out: &mut String| {
            let mut l = String::new();
            for (i, c) in cells.iter().enumerate() {
                let pad = widths[i].saturating_sub(c.chars().count());
                if i > 0 {
                    l.push_str("  ");
                }
                if self.right[i] {
                    l.push_str(&" ".repeat(pad));
                    l.push_str(c);
                } else {
                    l.push_str(c);
                    l.push_str(&" ".repeat(pad));
                }
            }
            let _ = writeln!(out, "{}", l.trim_end());
        };
        line(self.head.clone(), out);
        for r in &self.rows {
            line(r.iter().map(String::as_str).collect(), out);
        }
    }
}

pub(crate) fn name_of(c: &CellStatus) -> String {
    if c.private {
        format!("(uid {})", c.uid)
    } else {
        cell_text(&c.name)
    }
}

/// `name:how` for each runtime found in the cell (`-` for none), and how
/// many of its processes the broker has not read yet.
pub(crate) fn runtimes_text(c: &CellStatus) -> String {
    let mut each: Vec<String> = c
        .runtimes
        .iter()
        .map(|r| format!("{}:{}", r.name, r.follows.as_str()))
        .collect();
    if c.runtimes_unread > 0 {
        each.push(format!("({} processes not read yet)", c.runtimes_unread));
    }
    cell_text(&each.join(" "))
}

/// One line on the cell's runtime pool statistics, if it reported any.
fn pool_line(c: &CellStatus) -> Option<String> {
    let p = c.pool_stats?;
    let total = p.ns_awake.saturating_add(p.ns_asleep);
    let awake = if total == 0 {
        0.0
    } else {
        100.0 * p.ns_awake as f64 / total as f64
    };
    Some(format!(
        "{} {}: {} workers, {} tasks run, {} created, {} stolen ({} migrated), \
         {} suspended, {} resumed, {} yields, awake {awake:.0} %, queue high-water {}",
        c.id,
        name_of(c),
        p.workers,
        p.tasks_run,
        p.tasks_created,
        p.tasks_stolen,
        p.tasks_migrated,
        p.tasks_suspended,
        p.tasks_resumed,
        p.yields,
        p.queue_high_water
    ))
}

/// `v` as a number with two decimals, `-` for none.
/// Which CPUs `require` holds exclusively, and for whom (the one
/// account), if any.
fn held_line(v: &Status) -> Option<String> {
    let mut each: Vec<String> = v
        .cells
        .iter()
        .filter(|c| !c.held.is_empty())
        .map(|c| format!("{} by cell {} {}", cell_text(&c.held), c.id, name_of(c)))
        .collect();
    if !v.machine.held_outside.is_empty() {
        each.push(format!(
            "{} outside every cell",
            cell_text(&v.machine.held_outside)
        ));
    }
    (!each.is_empty()).then(|| format!("held through require: {}", each.join("; ")))
}

/// What the cells weigh together against work outside them, and why.
fn weight_line(b: &allot_proto::status::BrokerStatus) -> Option<String> {
    let how = match b.weigh.as_str() {
        "" => return None,
        "threads" => "as their programs' threads would",
        "group" => "together as one process",
        other => other,
    };
    Some(match b.together_weight {
        Some(w) => format!(
            "weight against work outside the cells: {} ordinary threads' worth (weigh = {}: {how})",
            f64::from(w) / 100.0,
            cell_text(&b.weigh)
        ),
        None if b.backend == "affinity" => {
            "weight against work outside the cells: none (the affinity backend sets no weights)"
                .to_string()
        }
        None => format!(
            "weight against work outside the cells: not set by allot (a delegated subtree's \
             is its owner's, as a systemd unit's CPUWeight=; without a cpu controller there \
             is none; docs/operations.md); weigh = {} would make it {} ordinary threads' worth",
            cell_text(&b.weigh),
            f64::from(b.weight_wanted) / 100.0
        ),
    })
}

/// One line on the work outside every cell that ran on a cell's CPUs,
/// where there was any or its team is smaller for it.
fn outside_line(c: &CellStatus) -> Option<String> {
    let o = c.outside?;
    if o.used < 0.05 && o.taken == 0 {
        return None;
    }
    let granted = if c.stacked {
        format!("the stacked pool {}", cell_text(&c.cpus))
    } else {
        format!("CPUs {}", cell_text(&c.cpus))
    };
    let mut line = format!(
        "{} {}: {granted}; it used {} CPUs (last second), outside work {:.2}",
        c.id,
        name_of(c),
        num(c.perf.as_ref().and_then(|p| p.cpu_used)),
        o.used
    );
    if let Some(w) = o.waiting {
        line.push_str(&format!(", its threads waited {w:.2}"));
    }
    if o.taken > 0 {
        let of = if c.stacked { " of the pool" } else { "" };
        line.push_str(&format!(
            "; {} CPU(s){of} left to that work: a team of {}",
            o.taken, c.threads
        ));
    }
    Some(line)
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.2}"))
}

/// One line on the cell's goal and what it achieved, if it has a goal or
/// reports its work.
fn goal_line(c: &CellStatus) -> Option<String> {
    use allot_proto::status::GoalStatus;
    let p = c.perf.as_ref();
    let reports = p.is_some_and(|p| p.rate_per_s.is_some() || p.p99_us.is_some());
    if c.spec.goal == GoalStatus::None && !reports {
        return None;
    }
    let goal = match c.spec.goal {
        GoalStatus::None => "no goal".to_string(),
        GoalStatus::Rate { milli_per_s } => format!("goal rate={}/s", milli_per_s as f64 / 1000.0),
        GoalStatus::P99 { us } => format!("goal p99={:.3}ms", f64::from(us) / 1000.0),
    };
    let Some(p) = p else {
        return Some(format!("{} {}: {goal}, not measured yet", c.id, name_of(c)));
    };
    let mut line = format!("{} {}: {goal}", c.id, name_of(c));
    if let Some(r) = p.rate_per_s {
        line.push_str(&format!(", {r:.1}/s"));
    }
    if let Some(us) = p.p99_us {
        line.push_str(&format!(
            ", p99 {:.3}ms ({} latencies in {:.1} s)",
            us as f64 / 1000.0,
            p.latencies,
            p.latency_window_s
        ));
    }
    match p.goal_met {
        Some(true) => line.push_str(": met"),
        Some(false) => line.push_str(": NOT met"),
        None => {}
    }
    line.push_str(&format!(
        "; {} CPUs held, {} used, {} threads waiting",
        num(Some(p.cpus)),
        num(p.cpu_used),
        num(p.waiting)
    ));
    if let Some(ipc) = p.ipc {
        line.push_str(&format!(", {ipc:.2} instructions per cycle"));
    }
    if !p.goal_note.is_empty() {
        line.push_str(&format!(" ({})", cell_text(&p.goal_note)));
    }
    Some(line)
}

/// A paused cell: for how long, and why.
fn paused_line(c: &CellStatus) -> Option<String> {
    let p = c.paused.as_ref()?;
    Some(format!(
        "{} {}: paused for {:.1} s: {}",
        c.id,
        name_of(c),
        p.for_s,
        cell_text(&p.reason)
    ))
}

/// An exclusive cell: whether the kernel keeps its CPUs apart as a
/// partition, or why not.
fn partition_line(c: &CellStatus) -> Option<String> {
    let p = c.partition.as_ref()?;
    Some(if p.isolated {
        format!(
            "{} {}: CPUs {}, an isolated cpuset partition",
            c.id,
            name_of(c),
            cell_text(&c.cpus)
        )
    } else {
        format!(
            "{} {}: CPUs {}, exclusive, not a partition: {}",
            c.id,
            name_of(c),
            cell_text(&c.cpus),
            cell_text(&p.why_not)
        )
    })
}

/// One line on the cell's memory, for a cell that asked for memory or
/// met a limit.
fn memory_line(c: &CellStatus) -> Option<String> {
    use allot_spec::Size;
    let m = c.memory.as_ref();
    let asked = c.spec.memory_min != 0 || c.spec.memory_max != 0;
    let struck = m.is_some_and(|m| m.at_limit > 0 || m.oom_kills > 0);
    if !asked && !struck {
        return cache_line(c);
    }
    let mut line = format!("{} {}:", c.id, name_of(c));
    match m {
        Some(m) if m.limit != 0 => {
            line.push_str(&format!(" {} used of {}", Size(m.current), Size(m.limit)))
        }
        Some(m) => line.push_str(&format!(" {} used, no limit of its own", Size(m.current))),
        None => line.push_str(" use not known yet"),
    }
    if c.spec.memory_min != 0 {
        line.push_str(&format!(" ({} guaranteed)", Size(c.spec.memory_min)));
    }
    if let Some(m) = m {
        if m.at_limit > 0 {
            line.push_str(&format!("; at its limit {} times", m.at_limit));
        }
        if m.oom_kills > 0 {
            line.push_str(&format!(
                "; {} of its processes killed for want of memory",
                m.oom_kills
            ));
        }
        if let Some(p) = m.pressure.filter(|p| *p >= 1.0) {
            line.push_str(&format!("; waited for memory {p:.0} % of the last 10 s"));
        }
    }
    if let Some(k) = &c.cache {
        line.push_str(&format!("; {}", class_text(k)));
    }
    Some(line)
}

/// A cell's class of service alone, for a cell that asked for no memory.
fn cache_line(c: &CellStatus) -> Option<String> {
    Some(format!(
        "{} {}: {}",
        c.id,
        name_of(c),
        class_text(c.cache.as_ref()?)
    ))
}

fn class_text(k: &allot_proto::status::CellCache) -> String {
    use allot_spec::Size;
    let mut t = format!(
        "L3 ways {} of its own, bandwidth at most {} %",
        cell_text(&k.mask),
        k.bandwidth
    );
    if let Some(b) = k.llc_bytes {
        t.push_str(&format!(", {} in the cache now", Size(b)));
    }
    t
}

/// One line on the cell's time contract, if it has one.
fn contract_line(c: &CellStatus) -> Option<String> {
    let ms = |us: u32| format!("{}ms", f64::from(us) / 1000.0);
    let terms = match c.spec.time {
        TimeStatus::Space => return None,
        TimeStatus::TimeFraction { ppm, slice_us } => format!(
            "{:.1} % of each CPU, slices of at least {}",
            f64::from(ppm) / 1e4,
            ms(slice_us)
        ),
        TimeStatus::TimeTriggered {
            period_us,
            budget_us,
        } => format!("{} every {}, gang", ms(budget_us), ms(period_us)),
        TimeStatus::MessageTriggered { idle_ms } => format!("on message, idle {idle_ms}ms"),
    };
    let mut line = if c.waiting_for_message {
        format!(
            "{} {}: {} {terms}, waiting for a message (suspended, holds no CPU)",
            c.id,
            name_of(c),
            c.spec.contract
        )
    } else {
        format!(
            "{} {}: {} {terms} on CPUs {}",
            c.id,
            name_of(c),
            c.spec.contract,
            cell_text(&c.cpus)
        )
    };
    if let Some(d) = &c.delivery {
        line.push_str(&format!(
            "\n    delivered: {} periods, last {:.2}ms of {:.2}ms, mean error {:.1} %, \
             {} under / {} over budget, {} missed, {} suspensions resent; window opens \
             {:.0}/{:.0} µs late (p50/p99)",
            d.periods,
            d.last_used_us as f64 / 1000.0,
            d.budget_us as f64 / 1000.0,
            d.mean_error * 100.0,
            d.under,
            d.over,
            d.missed,
            d.resent,
            d.open_latency_p50_us,
            d.open_latency_p99_us
        ));
    }
    Some(line)
}

/// Human-readable rendering.
pub fn render(v: &Status) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let (b, m) = (&v.broker, &v.machine);
    let _ = writeln!(
        out,
        "broker pid {} ({} backend, {} policy), up {} s on {}: {}",
        b.pid,
        b.backend,
        b.policy,
        b.uptime_s,
        cell_text(&m.name),
        m.summary
    );
    if let Some(p) = &b.journal_problem {
        let _ = writeln!(
            out,
            "WARNING: the broker cannot write its journal ({}); it admits no new cell until it can",
            cell_text(p)
        );
    }
    let _ = writeln!(
        out,
        "CPUs for cells: {}   reserve: {}   stacked pool: {}   idle: {}",
        m.capacity,
        cell_text(&m.reserve),
        cell_text(&m.pool),
        cell_text(&m.idle)
    );
    if !m.time.is_empty() {
        let _ = writeln!(
            out,
            "time region: {} (promised to time cells; best-effort cells use what is left; \
             {:.0} % of each CPU is never promised)",
            cell_text(&m.time),
            m.time_reserve * 100.0
        );
    }
    if let Some(mm) = &m.memory {
        use allot_spec::Size;
        let _ = writeln!(
            out,
            "memory for cells: {}   reserve: {}   guaranteed: {}",
            Size(mm.capacity),
            Size(mm.reserve),
            Size(mm.guaranteed)
        );
    }
    if let Some(l) = &v.load {
        let mut line = format!("load: {:.2} CPUs busy", l.busy);
        if let (Some(c), Some(u)) = (l.cells, l.unmanaged) {
            line.push_str(&format!(", {c:.2} in cells, {u:.2} outside any cell"));
        }
        if let Some(p) = l.pressure {
            line.push_str(&format!(
                "; a runnable thread waited {:.0} % of the time",
                p * 100.0
            ));
        }
        let _ = writeln!(out, "{line}; {} runnable now", l.running);
        // Counters matter for goal cells only: said where one runs.
        let goals = v
            .cells
            .iter()
            .any(|c| c.spec.goal != allot_proto::status::GoalStatus::None);
        if let Some(why) = l.counters.as_ref().filter(|_| goals) {
            let _ = writeln!(out, "hardware counters: not counted ({})", cell_text(why));
        }
    }
    if let Some(l) = weight_line(b) {
        let _ = writeln!(out, "{l}");
    }
    if v.cells.is_empty() {
        let _ = writeln!(out, "no cells");
    } else {
        let table = Table {
            head: vec![
                "ID", "NAME", "PIDS", "CPUS", "LENT", "THREADS", "GEN", "SHARE", "BUSY", "RUNTIMES",
            ],
            right: vec![
                true, false, false, false, false, true, true, true, true, false,
            ],
            rows: v
                .cells
                .iter()
                .map(|c| {
                    let pids: Vec<String> = c.pids.iter().map(u32::to_string).collect();
                    vec![
                        c.id.to_string(),
                        name_of(c),
                        cell_text(&pids.join(",")),
                        if c.waiting_for_message {
                            "(asleep)".into()
                        } else if c.paused.is_some() {
                            "(paused)".into()
                        } else {
                            cell_text(&c.cpus)
                        },
                        cell_text(&c.lent),
                        c.threads.to_string(),
                        c.generation.to_string(),
                        format!("{:.2}", c.share),
                        format!("{:.2}", c.busy),
                        runtimes_text(c),
                    ]
                })
                .collect(),
        };
        table.render(&mut out);
        let paused: Vec<String> = v.cells.iter().filter_map(paused_line).collect();
        if !paused.is_empty() {
            let _ = writeln!(out, "paused:");
            for l in paused {
                let _ = writeln!(out, "  {l}");
            }
        }
        let exclusive: Vec<String> = v.cells.iter().filter_map(partition_line).collect();
        if !exclusive.is_empty() {
            let _ = writeln!(out, "exclusive:");
            for l in exclusive {
                let _ = writeln!(out, "  {l}");
            }
        }
        let memory: Vec<String> = v.cells.iter().filter_map(memory_line).collect();
        if !memory.is_empty() {
            let _ = writeln!(out, "memory:");
            for l in memory {
                let _ = writeln!(out, "  {l}");
            }
        }
        let contracts: Vec<String> = v.cells.iter().filter_map(contract_line).collect();
        if !contracts.is_empty() {
            let _ = writeln!(out, "time contracts:");
            for l in contracts {
                let _ = writeln!(out, "  {l}");
            }
        }
        if let Some(l) = held_line(v) {
            let _ = writeln!(out, "{l}");
        }
        let outside: Vec<String> = v.cells.iter().filter_map(outside_line).collect();
        if !outside.is_empty() {
            let _ = writeln!(out, "work outside the cells on their CPUs (last tick):");
            for l in outside {
                let _ = writeln!(out, "  {l}");
            }
        }
        let goals: Vec<String> = v.cells.iter().filter_map(goal_line).collect();
        if !goals.is_empty() {
            let _ = writeln!(out, "goals and performance (last second):");
            for l in goals {
                let _ = writeln!(out, "  {l}");
            }
        }
        let pools: Vec<String> = v.cells.iter().filter_map(pool_line).collect();
        if !pools.is_empty() {
            let _ = writeln!(out, "runtime pools (per-worker statistics, summed):");
            for l in pools {
                let _ = writeln!(out, "  {l}");
            }
        }
    }
    if !v.queue.is_empty() {
        let _ = writeln!(out, "waiting:");
        for e in &v.queue {
            let name = if e.private {
                format!("(uid {})", e.uid)
            } else {
                cell_text(&e.name)
            };
            let _ = writeln!(
                out,
                "  {}. cell {} ({}): {}",
                e.position,
                e.id,
                name,
                cell_text(&e.reason)
            );
        }
    }
    if !v.channels.is_empty() {
        let _ = writeln!(out, "channels:");
        for c in &v.channels {
            let _ = writeln!(
                out,
                "  {} (uid {}): {} sender(s), {}; {} of {} slots waiting, messages up to {} B",
                cell_text(&c.name),
                c.uid,
                c.senders,
                if c.receiver {
                    "receiver open"
                } else {
                    "no receiver"
                },
                c.waiting,
                c.slots,
                c.message_max
            );
        }
    }
    out
}

/// Runs `allot status`.
pub fn run(a: Args) -> i32 {
    let socket = a.socket.unwrap_or_else(allot_proto::default_socket_path);
    match fetch(&socket) {
        Ok(v) if a.json => {
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            0
        }
        Ok(v) => {
            print!("{}", render(&v));
            0
        }
        Err(e) => super::fail(e),
    }
}

#[cfg(test)]
mod tests;
