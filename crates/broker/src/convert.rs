//! Conversions at the broker's edges: the planner's [`CellSpec`] and
//! [`Grant`] are what the broker decides with; the wire ([`SpecWire`]), the
//! journal ([`SpecRec`], [`GrantRec`]) and the status document
//! ([`SpecStatus`]) each have their own types, so a change to one
//! audience's format never silently changes another's.

use crate::journal::{GoalRec, GrantRec, PlacementRec, SpecRec, TimeRec};
use allot_plan::{CellSpec, Goal, Grant, Placement, TimeContract};
use allot_proto::status::{self, GoalStatus, SpecStatus, TimeStatus};
use allot_proto::{GoalWire, PlacementWire, SpecWire, TimeWire};

/// A goal as it arrived on the wire. Validation is the caller's.
pub fn goal_from_wire(g: GoalWire) -> Goal {
    match g {
        GoalWire::None => Goal::None,
        GoalWire::Rate { milli_per_s } => Goal::Rate { milli_per_s },
        GoalWire::P99 { us } => Goal::P99 { us },
    }
}

/// A spec as it arrived on the wire. Validation is the caller's.
pub fn from_wire(w: &SpecWire) -> CellSpec {
    CellSpec {
        min: w.min,
        max: w.max,
        weight: w.weight,
        exclusive: w.exclusive,
        placement: match w.placement {
            PlacementWire::Any => Placement::Any,
            PlacementWire::Llc => Placement::Llc,
            PlacementWire::Numa => Placement::Numa,
        },
        time: match w.time {
            TimeWire::Space => TimeContract::Space,
            TimeWire::Fraction { ppm, slice_us } => TimeContract::Fraction { ppm, slice_us },
            TimeWire::Triggered {
                period_us,
                budget_us,
            } => TimeContract::Triggered {
                period_us,
                budget_us,
            },
            TimeWire::Message { idle_ms } => TimeContract::Message { idle_ms },
        },
        goal: goal_from_wire(w.goal),
    }
}

/// A spec for the journal.
pub fn to_record(s: &CellSpec) -> SpecRec {
    SpecRec {
        min: s.min,
        max: s.max,
        weight: s.weight,
        exclusive: s.exclusive,
        placement: match s.placement {
            Placement::Any => PlacementRec::Any,
            Placement::Llc => PlacementRec::Llc,
            Placement::Numa => PlacementRec::Numa,
        },
        time: match s.time {
            TimeContract::Space => TimeRec::Space,
            TimeContract::Fraction { ppm, slice_us } => TimeRec::Fraction { ppm, slice_us },
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => TimeRec::Triggered {
                period_us,
                budget_us,
            },
            TimeContract::Message { idle_ms } => TimeRec::Message { idle_ms },
        },
        goal: match s.goal {
            Goal::None => GoalRec::None,
            Goal::Rate { milli_per_s } => GoalRec::Rate { milli_per_s },
            Goal::P99 { us } => GoalRec::P99 { us },
        },
    }
}

/// A spec from the journal.
pub fn from_record(r: &SpecRec) -> CellSpec {
    CellSpec {
        min: r.min,
        max: r.max,
        weight: r.weight,
        exclusive: r.exclusive,
        placement: match r.placement {
            PlacementRec::Any => Placement::Any,
            PlacementRec::Llc => Placement::Llc,
            PlacementRec::Numa => Placement::Numa,
        },
        time: match r.time {
            TimeRec::Space => TimeContract::Space,
            TimeRec::Fraction { ppm, slice_us } => TimeContract::Fraction { ppm, slice_us },
            TimeRec::Triggered {
                period_us,
                budget_us,
            } => TimeContract::Triggered {
                period_us,
                budget_us,
            },
            TimeRec::Message { idle_ms } => TimeContract::Message { idle_ms },
        },
        goal: match r.goal {
            GoalRec::None => Goal::None,
            GoalRec::Rate { milli_per_s } => Goal::Rate { milli_per_s },
            GoalRec::P99 { us } => Goal::P99 { us },
        },
    }
}

/// A spec for the status document.
pub fn to_status(s: &CellSpec) -> SpecStatus {
    SpecStatus {
        min: s.min,
        max: s.max,
        weight: s.weight,
        exclusive: s.exclusive,
        placement: match s.placement {
            Placement::Any => status::Placement::Any,
            Placement::Llc => status::Placement::Llc,
            Placement::Numa => status::Placement::Numa,
        },
        contract: s.kind_name().to_string(),
        time: match s.time {
            TimeContract::Space => TimeStatus::Space,
            TimeContract::Fraction { .. } => TimeStatus::TimeFraction {
                ppm: s.time.ppm(),
                slice_us: s.time.slice_us(),
            },
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => TimeStatus::TimeTriggered {
                period_us,
                budget_us,
            },
            TimeContract::Message { idle_ms } => TimeStatus::MessageTriggered { idle_ms },
        },
        goal: match s.goal {
            Goal::None => GoalStatus::None,
            Goal::Rate { milli_per_s } => GoalStatus::Rate { milli_per_s },
            Goal::P99 { us } => GoalStatus::P99 { us },
        },
    }
}

/// A grant for the journal, with its generation and the demand estimate.
pub fn grant_to_record(g: &Grant, generation: u64, demand: Option<u32>) -> GrantRec {
    GrantRec {
        generation,
        cpus: g.cpus,
        lent: g.lent,
        entitled: g.entitled,
        threads: g.threads,
        stacked: g.stacked,
        home: g.home,
        share: g.share,
        demand,
    }
}

/// A grant from the journal.
pub fn grant_from_record(r: &GrantRec) -> Grant {
    Grant {
        cpus: r.cpus,
        lent: r.lent,
        entitled: r.entitled,
        threads: r.threads,
        stacked: r.stacked,
        home: r.home,
        share: r.share,
        // The ledger is not journaled: a restarted broker holds nothing
        // for `require` until processes ask again.
        held: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_placement_round_trips_through_every_audience() {
        let wires = [PlacementWire::Any, PlacementWire::Llc, PlacementWire::Numa];
        for (placement, wire) in [Placement::Any, Placement::Llc, Placement::Numa]
            .into_iter()
            .zip(wires)
        {
            let s = CellSpec {
                min: 2,
                max: 7,
                weight: 3,
                exclusive: true,
                placement,
                time: TimeContract::Space,
                goal: Goal::None,
            };
            assert_eq!(from_record(&to_record(&s)), s);
            let w = SpecWire {
                min: 2,
                max: 7,
                weight: 3,
                exclusive: true,
                placement: wire,
                time: TimeWire::Space,
                goal: GoalWire::None,
            };
            assert_eq!(from_wire(&w), s);
            let shown = serde_json::to_value(to_status(&s).placement).unwrap();
            assert_eq!(
                shown,
                serde_json::to_value(to_record(&s).placement).unwrap()
            );
            assert_eq!(shown.as_str().unwrap(), placement.to_string());
        }
    }

    #[test]
    fn grants_round_trip_through_the_journal() {
        let g = Grant {
            cpus: allot_topo::CpuSet::parse_list("0-3").unwrap(),
            lent: allot_topo::CpuSet::parse_list("3").unwrap(),
            entitled: allot_topo::CpuSet::parse_list("0-2").unwrap(),
            threads: 4,
            stacked: false,
            home: 1,
            share: 2.5,
            held: Default::default(),
        };
        let r = grant_to_record(&g, 7, Some(3));
        assert_eq!((r.generation, r.demand), (7, Some(3)));
        assert_eq!(grant_from_record(&r), g);
    }

    #[test]
    fn every_goal_round_trips_through_every_audience() {
        let triples = [
            (Goal::None, GoalWire::None, r#"{"kind":"none"}"#),
            (
                Goal::Rate {
                    milli_per_s: 12_500,
                },
                GoalWire::Rate {
                    milli_per_s: 12_500,
                },
                r#"{"kind":"rate","milli_per_s":12500}"#,
            ),
            (
                Goal::P99 { us: 5_000 },
                GoalWire::P99 { us: 5_000 },
                r#"{"kind":"p99","us":5000}"#,
            ),
        ];
        for (goal, wire, shown) in triples {
            let s = CellSpec {
                goal,
                ..CellSpec::default()
            };
            assert_eq!(from_record(&to_record(&s)), s);
            let w = SpecWire {
                goal: wire,
                ..SpecWire::default()
            };
            assert_eq!(from_wire(&w), s);
            assert_eq!(serde_json::to_string(&to_status(&s).goal).unwrap(), shown);
        }
    }

    #[test]
    fn every_time_contract_round_trips_through_every_audience() {
        let pairs = [
            (TimeContract::Space, TimeWire::Space, "space"),
            (
                TimeContract::Fraction {
                    ppm: 250_000,
                    slice_us: 0,
                },
                TimeWire::Fraction {
                    ppm: 250_000,
                    slice_us: 0,
                },
                "time-fraction",
            ),
            (
                TimeContract::Triggered {
                    period_us: 10_000,
                    budget_us: 3_000,
                },
                TimeWire::Triggered {
                    period_us: 10_000,
                    budget_us: 3_000,
                },
                "time-triggered",
            ),
            (
                TimeContract::Message { idle_ms: 40 },
                TimeWire::Message { idle_ms: 40 },
                "message-triggered",
            ),
        ];
        for (time, wire, name) in pairs {
            let s = CellSpec {
                min: 1,
                time,
                ..Default::default()
            };
            assert_eq!(from_record(&to_record(&s)), s);
            let w = SpecWire {
                min: 1,
                time: wire,
                ..Default::default()
            };
            assert_eq!(from_wire(&w), s);
            let shown = serde_json::to_value(to_status(&s).time).unwrap();
            assert_eq!(shown["kind"], name);
            let journaled = serde_json::to_value(to_record(&s).time).unwrap();
            let back: TimeRec = serde_json::from_value(journaled).unwrap();
            assert_eq!(back, to_record(&s).time);
        }
        // The status shows the default slice filled in.
        let f = CellSpec {
            min: 1,
            time: TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 0,
            },
            ..Default::default()
        };
        assert_eq!(
            to_status(&f).time,
            TimeStatus::TimeFraction {
                ppm: 250_000,
                slice_us: 2_000
            }
        );
        assert_eq!(to_status(&f).contract, "time-fraction");
    }
}
