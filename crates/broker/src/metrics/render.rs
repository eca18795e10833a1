//! The Prometheus text exposition (format 0.0.4) of a [`Snapshot`]: one
//! family per metric, declared by `HELP` and `TYPE` before its samples and
//! only once; label values escaped. Every metric name and its meaning is
//! written here once (and listed for operators in docs/operations.md).

use super::{BUCKETS, CellGauges, Histogram, ProcessGauges, Snapshot};
use std::fmt::Write as _;

/// `v` escaped for a label value: backslash, double quote, newline.
fn label(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for ch in v.chars() {
        match ch {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

fn head(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn histogram(out: &mut String, name: &str, help: &str, h: &Histogram) {
    head(out, name, "histogram", help);
    let mut acc = 0;
    for (b, c) in BUCKETS.iter().zip(h.counts) {
        acc += c;
        let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {acc}");
    }
    let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", h.count());
    let _ = writeln!(out, "{name}_sum {}", h.sum);
    let _ = writeln!(out, "{name}_count {}", h.count());
}

/// The standard `process_*` families of the broker's own process.
fn process(out: &mut String, p: &ProcessGauges) {
    let one = |out: &mut String, name: &str, kind: &str, help: &str, v: f64| {
        head(out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    };
    one(
        out,
        "process_cpu_seconds_total",
        "counter",
        "User and system CPU time spent, seconds.",
        p.cpu_seconds,
    );
    one(
        out,
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size, bytes.",
        p.resident_bytes as f64,
    );
    one(
        out,
        "process_virtual_memory_bytes",
        "gauge",
        "Virtual memory size, bytes.",
        p.virtual_bytes as f64,
    );
    one(
        out,
        "process_open_fds",
        "gauge",
        "Open file descriptors.",
        p.open_fds as f64,
    );
    if let Some(max) = p.max_fds {
        one(
            out,
            "process_max_fds",
            "gauge",
            "Limit on open file descriptors.",
            max as f64,
        );
    }
    one(
        out,
        "process_start_time_seconds",
        "gauge",
        "Start time of the process, seconds since the Unix epoch.",
        p.start_time_seconds,
    );
}

/// The exposition text (format 0.0.4) of `s`.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::with_capacity(1024 + 512 * s.cells.len());
    let gauge = |out: &mut String, name: &str, help: &str, v: f64| {
        head(out, name, "gauge", help);
        let _ = writeln!(out, "{name} {v}");
    };
    let counter = |out: &mut String, name: &str, help: &str, v: u64| {
        head(out, name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    };
    head(
        &mut out,
        "allot_build_info",
        "gauge",
        "Always 1; the broker's version in its label.",
    );
    let _ = writeln!(
        out,
        "allot_build_info{{version=\"{}\"}} 1",
        label(env!("CARGO_PKG_VERSION"))
    );
    if let Some(p) = &s.process {
        process(&mut out, p);
    }
    gauge(
        &mut out,
        "allot_broker_uptime_seconds",
        "Seconds since the broker started.",
        s.uptime_s,
    );
    gauge(
        &mut out,
        "allot_machine_cpus",
        "CPUs the broker manages.",
        s.capacity.into(),
    );
    gauge(
        &mut out,
        "allot_machine_idle_cpus",
        "Managed CPUs no cell holds.",
        s.idle.into(),
    );
    gauge(
        &mut out,
        "allot_cells",
        "Admitted cells.",
        s.cells.len() as f64,
    );
    if let Some(v) = s.outside_cpus {
        gauge(
            &mut out,
            "allot_machine_outside_cpus",
            "CPUs' worth used outside every cell over the last second.",
            v,
        );
    }
    if let Some(v) = s.together_threads {
        gauge(
            &mut out,
            "allot_cells_weight_threads",
            "What the cells together weigh in the kernel's scheduler against work outside them, in ordinary threads.",
            v,
        );
    }
    gauge(
        &mut out,
        "allot_queue_length",
        "Cells waiting for admission.",
        s.queue.into(),
    );
    let c = &s.counters;
    counter(
        &mut out,
        "allot_admissions_total",
        "Cells admitted.",
        c.admitted,
    );
    counter(
        &mut out,
        "allot_queued_total",
        "Registrations that waited in the queue.",
        c.queued,
    );
    head(
        &mut out,
        "allot_refusals_total",
        "counter",
        "Registrations answered with an error, by error code.",
    );
    for (code, n) in &c.refused {
        let _ = writeln!(out, "allot_refusals_total{{code=\"{}\"}} {n}", label(code));
    }
    counter(&mut out, "allot_cells_ended_total", "Cells ended.", c.ended);
    counter(
        &mut out,
        "allot_grant_changes_total",
        "Grants published to cells.",
        c.grant_changes,
    );
    histogram(
        &mut out,
        "allot_reclaim_seconds",
        "From a cell's last process exit seen to the survivors' grants applied.",
        &c.reclaim,
    );
    histogram(
        &mut out,
        "allot_broker_turn_seconds",
        "Work of one event-loop turn.",
        &c.turn,
    );
    type Field = fn(&CellGauges) -> Option<f64>;
    let per_cell: [(&str, &str, &str, Field); 15] = [
        (
            "allot_cell_cpus",
            "gauge",
            "CPUs granted to the cell.",
            |c| Some(c.cpus.into()),
        ),
        (
            "allot_cell_lent_cpus",
            "gauge",
            "CPUs the cell holds on loan from idle cells.",
            |c| Some(c.lent.into()),
        ),
        (
            "allot_cell_threads",
            "gauge",
            "Threads the cell is told to run.",
            |c| Some(c.threads.into()),
        ),
        (
            "allot_cell_busy_cpus",
            "gauge",
            "CPUs the cell keeps busy (smoothed).",
            |c| Some(c.busy),
        ),
        (
            "allot_cell_grant_changes_total",
            "counter",
            "Grants published to the cell.",
            |c| Some(c.generation as f64),
        ),
        (
            "allot_cell_processes",
            "gauge",
            "Member processes the broker watches.",
            |c| Some(c.members.into()),
        ),
        (
            "allot_cell_cpu_seconds_total",
            "counter",
            "CPU time the cell's processes used (where the backend counts it).",
            |c| c.cpu_seconds,
        ),
        (
            "allot_cell_cpu_pressure_seconds_total",
            "counter",
            "Time some runnable thread of the cell waited for a CPU (cgroup v2 pressure).",
            |c| c.cpu_pressure_seconds,
        ),
        (
            "allot_cell_memory_bytes",
            "gauge",
            "Memory charged to the cell (where the backend has memory control).",
            |c| c.memory.map(|m| m.current as f64),
        ),
        (
            "allot_cell_memory_limit_bytes",
            "gauge",
            "The cell's own memory limit (absent: none).",
            |c| c.memory.filter(|m| m.limit != 0).map(|m| m.limit as f64),
        ),
        (
            "allot_cell_memory_oom_kills_total",
            "counter",
            "Processes of the cell the kernel killed for want of memory.",
            |c| c.memory.map(|m| m.oom_kills as f64),
        ),
        (
            "allot_cell_memory_pressure_ratio",
            "gauge",
            "Share of the last 10 s some thread of the cell waited for memory (cgroup v2 pressure).",
            |c| c.memory.and_then(|m| m.pressure).map(|p| p / 100.0),
        ),
        (
            "allot_cell_outside_cpus",
            "gauge",
            "CPUs' worth of work outside every cell on the cell's CPUs (the stacked pool's for a stacked cell), last tick.",
            |c| c.outside.map(|(used, _)| used),
        ),
        (
            "allot_cell_outside_taken_cpus",
            "gauge",
            "CPUs of the cell's the broker counts as outside work's: its team is that much smaller.",
            |c| c.outside.map(|(_, taken)| taken.into()),
        ),
        (
            "allot_cell_partition",
            "gauge",
            "1 when the kernel isolates the exclusive cell as a cpuset partition, 0 when it is exclusive by its cpuset alone (allot status says why); absent for other cells.",
            |c| c.partition.map(|p| if p { 1.0 } else { 0.0 }),
        ),
    ];
    for (name, kind, help, field) in per_cell {
        head(&mut out, name, kind, help);
        for cell in &s.cells {
            let Some(v) = field(cell) else {
                continue;
            };
            let _ = write!(out, "{name}{{cell=\"{}\",uid=\"{}\"", cell.id, cell.uid);
            if let Some(n) = &cell.name {
                let _ = write!(out, ",name=\"{}\"", label(n));
            }
            let _ = writeln!(out, "}} {v}");
        }
    }
    out
}
