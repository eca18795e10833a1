//! One message of every kind, for the tests, the fuzz seeds
//! (`fuzz/src/seeds.rs`) and anyone checking an implementation of the
//! protocol against this one: every example round-trips.

use super::*;

/// A request of every kind (0x01 to 0x19).
pub fn example_requests() -> Vec<Request> {
    vec![
        Request::Hello {
            client: "test ✓".into(),
        },
        Request::Register {
            name: "make".into(),
            spec: CellSpec {
                min: 1,
                max: 4,
                weight: 2,
                exclusive: true,
                placement: Placement::Numa,
                time: TimeContract::Space,
                goal: Goal::Rate {
                    milli_per_s: 200_000,
                },
                memory: allot_spec::Memory {
                    min: 2 << 30,
                    max: 8 << 30,
                },
                cache: allot_spec::Cache {
                    ways: 4,
                    bandwidth: 50,
                },
            },
            wait: true,
            members: vec![1, 2, 3],
            joins_itself: true,
        },
        Request::Rejoin {
            cell: 7,
            token: u64::MAX,
        },
        Request::AddMember { cell: 7, pid: 42 },
        Request::Report {
            cell: 7,
            busy: 3,
            wanted: 4,
            progress: 99,
        },
        Request::PoolStats {
            cell: 7,
            stats: PoolStatsWire {
                workers: 2,
                tasks_run: 1000,
                tasks_created: 990,
                tasks_stolen: 40,
                tasks_migrated: 3,
                tasks_suspended: 5,
                tasks_resumed: 5,
                yields: 1,
                ns_awake: 9_000_000,
                ns_asleep: u64::MAX,
                queue_high_water: 17,
            },
        },
        Request::UpdateSpec {
            cell: 1,
            spec: CellSpec {
                min: 1,
                time: TimeContract::Triggered {
                    period_us: 10_000,
                    budget_us: 3_000,
                },
                ..CellSpec::default()
            },
        },
        Request::Release { cell: 9 },
        Request::SetGoal {
            cell: 9,
            goal: Goal::P99 { us: 5_000 },
        },
        Request::SetMemory {
            cell: 9,
            memory: allot_spec::Memory {
                min: 1 << 30,
                max: 8 << 30,
            },
        },
        Request::SetCache {
            cell: 9,
            cache: allot_spec::Cache {
                ways: 4,
                bandwidth: 30,
            },
        },
        Request::IncludeGroup {
            cell: 9,
            token: 77,
            dir: "/sys/fs/cgroup/system.slice/slurmstepd.scope/job_42/step_0/user".into(),
        },
        Request::Status,
        Request::Shutdown,
        Request::KindDefine {
            name: "StrongCore".into(),
            devices: vec![DeviceDef {
                name: "0".into(),
                min: 0.0,
                max: 2.0,
            }],
        },
        Request::KindList {
            kind: "StrongCore".into(),
        },
        Request::KindList {
            kind: String::new(),
        },
        Request::KindAcquire {
            items: vec![LedgerItem {
                kind: "cpu".into(),
                dev: 1,
                amount: 0.5,
                shared: true,
            }],
            place: 0,
            holding: false,
            any_device: false,
        },
        Request::KindAcquire {
            items: vec![LedgerItem {
                kind: "cpu".into(),
                dev: 0,
                amount: 1.0,
                shared: false,
            }],
            place: 3,
            holding: true,
            any_device: true,
        },
        Request::KindLeave { place: 3 },
        Request::KindGather {
            arrival: 2,
            window_us: 1000,
            sent_ns: 123_456_789,
        },
        Request::KindChosen { arrival: 2 },
        Request::KindRelease {
            items: vec![LedgerItem {
                kind: "cpu".into(),
                dev: 1,
                amount: 0.5,
                shared: false,
            }],
        },
        Request::KindWatch {
            epoch: 9,
            waiting: 2,
        },
        Request::ChannelOpen {
            name: "frames.in".into(),
            send: true,
            slots: 64,
            message_max: 4096,
        },
        Request::ChannelClose {
            name: "frames.in".into(),
            send: false,
        },
        Request::ChannelRejoin {
            name: "frames.in".into(),
            send: true,
        },
    ]
}

/// A reply of every kind (0x81 to 0x8B), in kind order.
pub fn example_replies() -> Vec<Reply> {
    vec![
        Reply::Welcome {
            broker_pid: 1,
            instance: 2,
            backend: "cgroup1".into(),
            machine: "m".into(),
            cpus: 2,
        },
        Reply::Registered {
            cell: 1,
            token: 2,
            generation: 3,
        },
        Reply::Queued {
            cell: 1,
            position: 2,
            reason: "busy".into(),
        },
        Reply::Ok,
        Reply::error(ErrorCode::Refused, 2, "no"),
        Reply::Status {
            more: true,
            json: "{}".into(),
        },
        Reply::Json {
            more: false,
            json: "[]".into(),
        },
        Reply::Changed {
            epoch: 7,
            waiters: 3,
            due: vec![
                DuePlace {
                    place: 4,
                    free: vec![LedgerItem {
                        kind: "cpu".into(),
                        dev: 1,
                        amount: 1.0,
                        shared: false,
                    }],
                },
                DuePlace {
                    place: 9,
                    free: vec![],
                },
            ],
        },
        Reply::Channel {
            slots: 64,
            message_max: 4080,
        },
        Reply::InLine {
            ahead: 2,
            free: vec![LedgerItem {
                kind: "cpu".into(),
                dev: 1,
                amount: 1.0,
                shared: false,
            }],
        },
        Reply::Gathered {
            arrival: 2,
            others: 3,
        },
    ]
}
