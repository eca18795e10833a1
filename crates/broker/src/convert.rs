//! Conversions at the broker's edges: the planner's [`CellSpec`] and
//! [`Grant`] are what the broker decides with; the wire ([`SpecWire`]), the
//! journal ([`SpecRec`], [`GrantRec`]) and the status document
//! ([`SpecStatus`]) each have their own types, so a change to one
//! audience's format never silently changes another's.

use crate::journal::{GrantRec, PlacementRec, SpecRec};
use allot_plan::{CellSpec, Grant, Placement};
use allot_proto::status::{self, SpecStatus};
use allot_proto::{PlacementWire, SpecWire};

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
            };
            assert_eq!(from_record(&to_record(&s)), s);
            let w = SpecWire {
                min: 2,
                max: 7,
                weight: 3,
                exclusive: true,
                placement: wire,
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
        };
        let r = grant_to_record(&g, 7, Some(3));
        assert_eq!((r.generation, r.demand), (7, Some(3)));
        assert_eq!(grant_from_record(&r), g);
    }
}
