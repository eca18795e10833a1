//! Tests of `allot status`'s rendering.

use super::*;
use allot_proto::status::{BrokerStatus, Follows, MachineStatus, RuntimeStatus, SpecStatus};
use allot_spec::Placement;

fn doc(names: &[&str]) -> Status {
    let cell = |i: usize, name: &str| CellStatus {
        id: i as u64 + 1,
        name: name.into(),
        uid: 0,
        private: false,
        pids: vec![100 + i as u32],
        cpus: "0-1".into(),
        lent: String::new(),
        entitled: "0-1".into(),
        held: String::new(),
        threads: 2,
        generation: 3,
        stacked: false,
        share: 2.0,
        demand: None,
        busy: 0.5,
        progress: 0,
        busy_reported: 0,
        pool_stats: None,
        spec: SpecStatus {
            min: 0,
            max: 0,
            weight: 1,
            exclusive: false,
            placement: Placement::Any,
            contract: "best-effort".into(),
            time: TimeStatus::Space,
            goal: Default::default(),
            memory_min: 0,
            memory_max: 0,
            cache_ways: 0,
            mem_bandwidth: 0,
        },
        runtimes: vec![RuntimeStatus {
            name: "openblas".into(),
            follows: Follows::RunTime,
        }],
        runtimes_unread: 0,
        delivery: None,
        perf: None,
        waiting_for_message: false,
        paused: None,
        partition: None,
        memory: None,
        cache: None,
        timeline: None,
        outside: None,
    };
    Status {
        version: allot_proto::status::STATUS_VERSION,
        broker: BrokerStatus {
            pid: 1,
            instance: 2,
            backend: "dry-run".into(),
            policy: "fair-share".into(),
            lend: true,
            uptime_s: 1.0,
            notes: vec![],
            journal_problem: None,
            weigh: String::new(),
            together_weight: None,
            weight_wanted: 0,
            made_ahead: None,
        },
        machine: MachineStatus {
            name: "m".into(),
            summary: "2 CPUs".into(),
            usable: "0-1".into(),
            capacity: 2,
            reserve: String::new(),
            pool: String::new(),
            time: String::new(),
            time_reserve: 0.05,
            idle: String::new(),
            held_outside: String::new(),
            memory: None,
        },
        cells: names.iter().enumerate().map(|(i, n)| cell(i, n)).collect(),
        queue: vec![],
        load: None,
        channels: vec![],
    }
}

#[test]
fn a_name_cannot_forge_a_row_or_drive_the_terminal() {
    let text = render(&doc(&["x\n  99  root  1  0-1", "\x1b[2J\x1b[H"]));
    assert!(!text.contains('\x1b'), "{text:?}");
    let rows: Vec<&str> = text.lines().collect();
    assert_eq!(
        rows.len(),
        2 + 1 + 2,
        "header lines, table head, two cells: {text}"
    );
    assert!(text.contains("x\\n  99"), "{text}");
}

#[test]
fn cpus_held_through_require_get_a_line() {
    let mut v = doc(&["a", "b"]);
    assert!(!render(&v).contains("held through require"));
    v.cells[1].held = "1".into();
    v.machine.held_outside = "3".into();
    let text = render(&v);
    assert!(
        text.contains("held through require: 1 by cell 2 b; 3 outside every cell"),
        "{text}"
    );
}

#[test]
fn goals_and_the_load_get_lines_and_cells_without_either_none() {
    use allot_proto::status::{GoalStatus, LoadStatus, PerfStatus};
    let mut v = doc(&["srv", "batch", "quiet"]);
    v.cells[0].spec.goal = GoalStatus::P99 { us: 5_000 };
    let perf = PerfStatus {
        window_s: 1.0,
        cpus: 2.0,
        cpu_used: Some(1.4),
        waiting: Some(0.2),
        rate_per_s: None,
        latencies: 812,
        latency_window_s: 1.0,
        p99_us: Some(6_144),
        ipc: Some(1.37),
        goal_met: Some(false),
        goal_note: "needs about 1 more CPU".into(),
    };
    v.cells[0].perf = Some(perf.clone());
    v.cells[1].perf = Some(PerfStatus {
        rate_per_s: Some(150.0),
        p99_us: None,
        goal_met: None,
        goal_note: String::new(),
        ..perf.clone()
    });
    v.cells[2].perf = Some(PerfStatus {
        rate_per_s: None,
        p99_us: None,
        goal_met: None,
        goal_note: String::new(),
        ..perf
    });
    v.load = Some(LoadStatus {
        window_s: 1.0,
        busy: 1.9,
        cells: Some(1.0),
        unmanaged: Some(0.9),
        pressure: Some(0.34),
        running: 5,
        counters: Some("this machine has no cycles counter".into()),
    });
    let text = render(&v);
    assert!(
        text.contains("load: 1.90 CPUs busy, 1.00 in cells, 0.90 outside any cell; a runnable thread waited 34 % of the time; 5 runnable now"),
        "{text}"
    );
    assert!(
        text.contains("1 srv: goal p99=5.000ms, p99 6.144ms (812 latencies in 1.0 s): NOT met; 2.00 CPUs held, 1.40 used, 0.20 threads waiting, 1.37 instructions per cycle (needs about 1 more CPU)"),
        "{text}"
    );
    assert!(
        text.contains("hardware counters: not counted (this machine has no cycles counter)"),
        "{text}"
    );
    assert!(text.contains("2 batch: no goal, 150.0/s;"), "{text}");
    assert!(!text.contains("3 quiet:"), "{text}");
    // Without a goal cell the counters matter to nothing shown: no line.
    v.cells[0].spec.goal = GoalStatus::None;
    let text = render(&v);
    assert!(!text.contains("hardware counters"), "{text}");
}

#[test]
fn reported_pool_statistics_get_a_line_per_cell() {
    let mut v = doc(&["a", "b"]);
    v.cells[1].pool_stats = Some(allot_proto::PoolStatsWire {
        workers: 2,
        tasks_run: 1234,
        tasks_stolen: 56,
        tasks_migrated: 3,
        tasks_resumed: 4,
        ns_awake: 3,
        ns_asleep: 1,
        ..Default::default()
    });
    let text = render(&v);
    let line = text
        .lines()
        .find(|l| l.contains("tasks run"))
        .unwrap_or_else(|| panic!("no pool line: {text}"));
    assert!(
        line.starts_with("  2 b: 2 workers, 1234 tasks run"),
        "{line}"
    );
    assert!(line.contains("56 stolen (3 migrated)"), "{line}");
    assert!(line.contains("4 resumed"), "{line}");
    assert!(line.contains("awake 75 %"), "{line}");
    assert_eq!(text.matches("tasks run").count(), 1, "{text}");
    assert!(!render(&doc(&["a"])).contains("runtime pools"));
}

#[test]
fn memory_and_classes_of_service_get_lines_and_other_cells_none() {
    use allot_proto::status::{CellCache, MachineMemory};
    use allot_spec::MemoryUse;
    let mut v = doc(&["db", "hog", "quiet"]);
    assert!(!render(&v).contains("memory"));
    v.machine.memory = Some(MachineMemory {
        capacity: 16 << 30,
        reserve: 1 << 30,
        guaranteed: 2 << 30,
    });
    v.cells[0].spec.memory_min = 2 << 30;
    v.cells[0].memory = Some(MemoryUse {
        current: 3 << 29,
        limit: 0,
        at_limit: 0,
        oom_kills: 0,
        pressure: Some(12.0),
    });
    v.cells[0].cache = Some(CellCache {
        mask: "f00".into(),
        bandwidth: 40,
        llc_bytes: Some(8 << 20),
    });
    v.cells[1].spec.memory_max = 64 << 20;
    v.cells[1].memory = Some(MemoryUse {
        current: 60 << 20,
        limit: 64 << 20,
        at_limit: 9,
        oom_kills: 1,
        pressure: None,
    });
    v.cells[2].memory = Some(MemoryUse {
        current: 1 << 20,
        limit: 0,
        at_limit: 0,
        oom_kills: 0,
        pressure: None,
    });
    let text = render(&v);
    assert!(
        text.contains("memory for cells: 16G   reserve: 1G   guaranteed: 2G"),
        "{text}"
    );
    assert!(
        text.contains(
            "memory:\n  1 db: 1.5G used, no limit of its own (2G guaranteed); waited for \
             memory 12 % of the last 10 s; L3 ways f00 of its own, bandwidth at most 40 %, \
             8M in the cache now\n  2 hog: 60M used of 64M; at its limit 9 times; 1 of its \
             processes killed for want of memory\n"
        ),
        "{text}"
    );
    assert!(!text.contains("3 quiet:"), "{text}");
}

#[test]
fn a_paused_cell_shows_paused_with_why_and_for_how_long() {
    let mut v = doc(&["make", "big"]);
    assert!(!render(&v).contains("paused"));
    v.cells[0].paused = Some(allot_proto::status::PausedStatus {
        reason: "every CPU is guaranteed to other cells".into(),
        for_s: 2.5,
    });
    let text = render(&v);
    assert!(text.contains("(paused)"), "{text}");
    assert!(
        text.contains("paused:\n  1 make: paused for 2.5 s: every CPU is guaranteed"),
        "{text}"
    );
}

#[test]
fn an_exclusive_cell_says_whether_it_is_a_partition_and_why_not() {
    use allot_proto::status::PartitionStatus;
    let mut v = doc(&["server", "bench"]);
    assert!(!render(&v).contains("exclusive:"));
    v.cells[0].partition = Some(PartitionStatus {
        isolated: true,
        why_not: String::new(),
    });
    v.cells[1].partition = Some(PartitionStatus {
        isolated: false,
        why_not: "this kernel has no cpuset.cpus.exclusive (before 6.7)".into(),
    });
    let text = render(&v);
    assert!(
        text.contains(
            "exclusive:\n  1 server: CPUs 0-1, an isolated cpuset partition\n  \
             2 bench: CPUs 0-1, exclusive, not a partition: this kernel has no \
             cpuset.cpus.exclusive (before 6.7)\n"
        ),
        "{text}"
    );
    // JSON keeps the reason; a partition's is left out.
    let json = serde_json::to_string(&v.cells[1]).unwrap();
    assert!(
        json.contains(r#""partition":{"isolated":false,"why_not":"this kernel"#),
        "{json}"
    );
    let json = serde_json::to_string(&v.cells[0]).unwrap();
    assert!(json.contains(r#""partition":{"isolated":true}"#), "{json}");
}

#[test]
fn columns_line_up_whatever_the_name_lengths() {
    let text = render(&doc(&["a", "a-much-longer-cell-name-than-usual"]));
    let table: Vec<&str> = text.lines().skip(2).collect();
    let col = |line: &str| line.find("0-1").unwrap();
    assert_eq!(col(table[1]), col(table[2]), "{text}");
    assert_eq!(table[0].find("CPUS").unwrap(), col(table[1]), "{text}");
    assert!(table[1].ends_with("openblas:run-time"), "{text}");
}

#[test]
fn the_cells_weight_and_outside_work_on_their_cpus_get_lines() {
    use allot_proto::status::{OutsideStatus, PerfStatus};
    let mut v = doc(&["team", "calm", "unread"]);
    v.broker.weigh = "threads".into();
    v.broker.together_weight = Some(200);
    v.cells[0].threads = 1;
    v.cells[0].outside = Some(OutsideStatus {
        used: 0.55,
        waiting: Some(0.6),
        taken: 1,
    });
    v.cells[0].perf = Some(PerfStatus {
        window_s: 1.0,
        cpus: 2.0,
        cpu_used: Some(1.45),
        waiting: None,
        rate_per_s: None,
        latencies: 0,
        latency_window_s: 1.0,
        p99_us: None,
        ipc: None,
        goal_met: None,
        goal_note: String::new(),
    });
    v.cells[1].outside = Some(OutsideStatus {
        used: 0.01,
        waiting: None,
        taken: 0,
    });
    let text = render(&v);
    assert!(
        text.contains(
            "weight against work outside the cells: 2 ordinary threads' worth (weigh = threads: \
             as their programs' threads would)"
        ),
        "{text}"
    );
    assert!(
        text.contains(
            "1 team: CPUs 0-1; it used 1.45 CPUs (last second), outside work 0.55, its threads \
             waited 0.60; 1 CPU(s) left to that work: a team of 1"
        ),
        "{text}"
    );
    // A few hundredths (the kernel's own work) and no reading: no line.
    assert!(!text.contains("2 calm:"), "{text}");
    assert!(!text.contains("3 unread:"), "{text}");
    // Where the weight is not allot's, what would match.
    v.broker.together_weight = None;
    v.broker.weight_wanted = 1_600;
    let text = render(&v);
    assert!(
        text.contains("not set by allot") && text.contains("16 ordinary threads' worth"),
        "{text}"
    );
    v.broker.backend = "affinity".into();
    assert!(render(&v).contains("none (the affinity backend sets no weights)"));
    // An older broker says nothing of it.
    v.broker.weigh = String::new();
    assert!(!render(&v).contains("weight against"));
}
