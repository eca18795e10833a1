//! Admission control: whether a new cell's guarantee can be given without
//! breaking the guarantees already given.
//!
//! The rule: the guaranteed CPUs of all admitted cells, plus one CPU for the
//! best-effort cells if there are any, never exceed the capacity (usable CPUs
//! minus the reserve). Best-effort cells (no minimum, not exclusive) are
//! admitted whenever at least one CPU is not guaranteed to anyone; they share
//! whatever the guarantees leave.
//!
//! A request that no state of the machine could satisfy is [`Admission::Never`];
//! one that the current guarantees block is [`Admission::NotNow`], and the
//! broker either refuses it or queues it if the cell asked to wait. Both carry
//! a reason that names the limit.

use crate::spec::{CellSpec, Placement, SpecError};
use allot_topo::Machine;

/// The verdict on a new cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Admit now.
    Admit,
    /// Blocked by current guarantees; may succeed later.
    NotNow(String),
    /// Can never succeed on this machine and configuration.
    Never(String),
}

/// An admitted cell, as admission sees it.
#[derive(Debug, Clone, Copy)]
pub struct Admitted<'a> {
    /// Its name, for the reason text.
    pub name: &'a str,
    /// What it asked for.
    pub spec: &'a CellSpec,
}

/// Decides on `new` given the cells already admitted.
pub fn admit(
    machine: &Machine,
    reserve: u32,
    admitted: &[Admitted<'_>],
    new: &CellSpec,
) -> Admission {
    if let Err(e) = new.validate() {
        return Admission::Never(invalid(e));
    }
    let usable = machine.num_cpus() as u32;
    let capacity = usable.saturating_sub(reserve);
    let want = new.guaranteed();
    if want > capacity {
        return Admission::Never(format!(
            "asks for at least {want} CPUs but only {capacity} are available to cells on this machine \
             ({usable} usable, {reserve} reserved for other processes)"
        ));
    }
    let (domain, largest) = match new.placement {
        Placement::Any => ("", u32::MAX),
        Placement::Llc => ("last-level-cache domain", machine.largest_llc() as u32),
        Placement::Numa => ("NUMA node", machine.largest_node() as u32),
    };
    if want > largest {
        return Admission::Never(format!(
            "asks for at least {want} CPUs within one {domain} but the largest has {largest}; \
             lower --min or use --place any"
        ));
    }
    let held: u32 = admitted.iter().map(|a| a.spec.guaranteed()).sum();
    let best_effort = admitted.iter().any(|a| !a.spec.is_guaranteed()) || !new.is_guaranteed();
    let needed = held + want + u32::from(best_effort);
    if needed <= capacity {
        return Admission::Admit;
    }
    let holders: Vec<String> = admitted
        .iter()
        .filter(|a| a.spec.is_guaranteed())
        .map(|a| format!("{} ({})", a.name, a.spec.guaranteed()))
        .collect();
    let holders = if holders.is_empty() {
        "none".to_string()
    } else {
        holders.join(", ")
    };
    Admission::NotNow(if new.is_guaranteed() {
        format!(
            "asks for {want} guaranteed CPUs but only {} of {capacity} are unguaranteed now \
             (guarantees held by: {holders}{}); retry later or pass --wait to queue",
            capacity.saturating_sub(
                held + u32::from(best_effort && admitted.iter().any(|a| !a.spec.is_guaranteed()))
            ),
            if admitted.iter().any(|a| !a.spec.is_guaranteed()) {
                "; one CPU stays with the best-effort cells"
            } else {
                ""
            },
        )
    } else {
        format!(
            "all {capacity} CPUs are guaranteed to other cells (guarantees held by: {holders}); \
             a best-effort cell needs one unguaranteed CPU; retry later or pass --wait to queue"
        )
    })
}

fn invalid(e: SpecError) -> String {
    format!("invalid request: {e}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(min: u32, exclusive: bool) -> CellSpec {
        CellSpec {
            min,
            exclusive,
            ..Default::default()
        }
    }

    #[test]
    fn best_effort_cells_always_fit_when_a_cpu_is_unguaranteed() {
        let m = Machine::uniform(2);
        let be = spec(0, false);
        let others = [be; 10];
        let adm: Vec<Admitted> = others
            .iter()
            .map(|s| Admitted { name: "x", spec: s })
            .collect();
        assert_eq!(admit(&m, 0, &adm, &be), Admission::Admit);
    }

    #[test]
    fn guarantees_add_up() {
        let m = Machine::uniform(2);
        let a = spec(1, true);
        let adm = [Admitted {
            name: "a",
            spec: &a,
        }];
        assert_eq!(admit(&m, 0, &adm, &spec(1, true)), Admission::Admit);
        let b = spec(1, true);
        let adm = [
            Admitted {
                name: "a",
                spec: &a,
            },
            Admitted {
                name: "b",
                spec: &b,
            },
        ];
        match admit(&m, 0, &adm, &spec(1, false)) {
            Admission::NotNow(r) => assert!(r.contains("a (1), b (1)"), "{r}"),
            other => panic!("{other:?}"),
        }
        // A best-effort cell now would leave no CPU for it.
        match admit(&m, 0, &adm, &spec(0, false)) {
            Admission::NotNow(r) => assert!(r.contains("all 2 CPUs are guaranteed"), "{r}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn exclusive_cannot_take_the_last_cpu_from_best_effort_cells() {
        let m = Machine::uniform(2);
        let be = spec(0, false);
        let adm = [Admitted {
            name: "be",
            spec: &be,
        }];
        assert_eq!(admit(&m, 0, &adm, &spec(1, true)), Admission::Admit);
        assert!(matches!(
            admit(&m, 0, &adm, &spec(2, true)),
            Admission::NotNow(_)
        ));
    }

    #[test]
    fn impossible_requests_name_the_limit() {
        let m = Machine::uniform(2);
        match admit(&m, 0, &[], &spec(4, false)) {
            Admission::Never(r) => {
                assert!(r.contains("at least 4 CPUs") && r.contains("only 2"), "{r}")
            }
            other => panic!("{other:?}"),
        }
        match admit(&m, 1, &[], &spec(2, false)) {
            Admission::Never(r) => assert!(r.contains("1 reserved"), "{r}"),
            other => panic!("{other:?}"),
        }
        let bad = CellSpec {
            weight: 0,
            ..Default::default()
        };
        assert!(matches!(admit(&m, 0, &[], &bad), Admission::Never(_)));
    }

    #[test]
    fn placement_limits() {
        let m = allot_topo::fixture("opteron6276-4s").unwrap();
        let s = CellSpec {
            min: 12,
            placement: Placement::Numa,
            ..Default::default()
        };
        match admit(&m, 0, &[], &s) {
            Admission::Never(r) => assert!(r.contains("NUMA node but the largest has 8"), "{r}"),
            other => panic!("{other:?}"),
        }
        let s = CellSpec {
            min: 8,
            placement: Placement::Llc,
            ..Default::default()
        };
        assert_eq!(admit(&m, 0, &[], &s), Admission::Admit);
    }
}
