//! Admission of what a cell asks for besides CPUs: a memory guarantee and
//! a class of service (L3 ways of its own, a memory bandwidth ceiling).
//! Pure, like the CPU rule beside it; [`super::admit_cell`] joins the
//! three verdicts.
//!
//! Invariants:
//! - **Memory is never promised twice**: the guarantees of admitted cells
//!   (their `memory.min`) sum to at most the capacity (the machine's
//!   memory, or an enclosing memory group's limit when lower) less the
//!   reserve. A guarantee that can never fit is refused for good
//!   ([`Admission::Never`]); one that fits once others end, for now.
//! - Memory asked of a backend without memory control, or a class of
//!   service asked of a machine without resctrl, is refused for good with
//!   the reason: nothing would enforce it.
//! - **Classes of service are admitted like guarantees**: an ask that
//!   cannot have a class beside the admitted cells' is refused for now,
//!   one that cannot have one alone, for good ([`crate::cache::allocate`]
//!   decides both).

use super::Admission;
use crate::cache::{self, Ask};
use allot_spec::{CellSpec, Memory, Size};
use allot_topo::resctrl::Offer;

/// What the cells may be given beside CPUs.
#[derive(Debug, Clone, Copy)]
pub struct Room<'a> {
    /// Bytes of memory the cells live within; `None`: the backend has no
    /// memory control.
    pub memory: Option<u64>,
    /// Bytes never guaranteed to cells.
    pub memory_reserve: u64,
    /// What the machine offers for classes of service, or why it offers
    /// none.
    pub cache: Result<&'a Offer, &'a str>,
}

impl Room<'static> {
    /// CPUs only: no memory control and no classes of service (a cell
    /// asking for either is refused).
    pub fn cpus_only() -> Room<'static> {
        Room {
            memory: None,
            memory_reserve: 0,
            cache: Err("no classes of service here"),
        }
    }
}

/// Admission of memory `asked` beside `guaranteed` bytes guaranteed to
/// the admitted cells.
pub fn memory(room: &Room<'_>, guaranteed: u64, asked: &Memory) -> Admission {
    if asked.is_none() {
        return Admission::Admit;
    }
    let Some(capacity) = room.memory else {
        return Admission::Never(
            "the broker's backend has no memory control (it needs cgroup v2 with the memory \
             controller, or the cgroup v1 memory hierarchy). Without root: run it in a systemd \
             user scope that limits its memory (systemd-run --user --scope -p MemoryMax=SIZE \
             -- allot run …), or start your own broker on a cgroup v2 subtree delegated to you \
             (cgroup2_root, see docs/operations.md); as root: start the broker with such a \
             backend. Or ask for no memory"
                .to_string(),
        );
    };
    let reserve = room.memory_reserve;
    let promisable = capacity.saturating_sub(reserve);
    if asked.min > promisable {
        return Admission::Never(format!(
            "a memory guarantee of {} is more than the {} cells may be guaranteed here \
             ({} less a reserve of {})",
            Size(asked.min),
            Size(promisable),
            Size(capacity),
            Size(reserve)
        ));
    }
    if guaranteed.saturating_add(asked.min) > promisable {
        return Admission::NotNow(format!(
            "asks for {} of memory guaranteed but only {} of {} is unguaranteed now",
            Size(asked.min),
            Size(promisable.saturating_sub(guaranteed)),
            Size(promisable)
        ));
    }
    Admission::Admit
}

/// Admission of `new`'s class of service beside the admitted cells'
/// `others` (read only when `new` asks for one).
pub fn class(room: &Room<'_>, others: impl IntoIterator<Item = Ask>, new: Ask) -> Admission {
    if new.ways == 0 && new.bandwidth == 0 {
        return Admission::Admit;
    }
    let offer = match room.cache {
        Ok(o) => o,
        Err(why) => return Admission::Never(why.to_string()),
    };
    if let Err(why) = cache::allocate(offer, &[new]) {
        return Admission::Never(why);
    }
    let all: Vec<Ask> = others.into_iter().chain([new]).collect();
    match cache::allocate(offer, &all) {
        Ok(_) => Admission::Admit,
        Err(why) => Admission::NotNow(why),
    }
}

/// The class `spec` asks for, as cell `cell`'s.
pub fn ask_of(cell: u64, spec: &CellSpec) -> Ask {
    Ask {
        cell,
        ways: spec.cache.ways,
        bandwidth: spec.cache.bandwidth,
    }
}

/// The verdicts on CPUs, memory and class joined: never when one says
/// never (the first such reason), else not now with every reason that
/// says so, else admit.
pub fn join(verdicts: impl IntoIterator<Item = Admission>) -> Admission {
    let mut out = Admission::Admit;
    for v in verdicts {
        out = match (out, v) {
            (Admission::Never(r), _) => Admission::Never(r),
            (_, Admission::Never(r)) => Admission::Never(r),
            (out, Admission::Admit) => out,
            (Admission::NotNow(a), Admission::NotNow(b)) => {
                Admission::NotNow(format!("{a}; and {b}"))
            }
            (Admission::Admit, not_now) => not_now,
        };
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_topo::resctrl::L3;

    const G: u64 = 1 << 30;

    fn asked(min: u64, max: u64) -> Memory {
        Memory { min, max }
    }

    fn room(capacity: Option<u64>, reserve: u64) -> Room<'static> {
        Room {
            memory: capacity,
            memory_reserve: reserve,
            ..Room::cpus_only()
        }
    }

    #[test]
    fn guarantees_never_sum_past_the_capacity_less_the_reserve() {
        let r = room(Some(16 * G), G);
        assert_eq!(memory(&r, 0, &asked(0, 0)), Admission::Admit);
        assert_eq!(memory(&r, 10 * G, &asked(5 * G, 0)), Admission::Admit);
        let Admission::NotNow(why) = memory(&r, 11 * G, &asked(5 * G, 0)) else {
            panic!()
        };
        assert_eq!(
            why,
            "asks for 5G of memory guaranteed but only 4G of 15G is unguaranteed now"
        );
        let Admission::Never(why) = memory(&r, 0, &asked(16 * G, 0)) else {
            panic!()
        };
        assert!(why.contains("more than the 15G"), "{why}");
        // A limit alone guarantees nothing: it always fits.
        assert_eq!(memory(&r, 15 * G, &asked(0, 64 * G)), Admission::Admit);
    }

    #[test]
    fn memory_without_memory_control_is_refused_and_none_is_fine() {
        let r = room(None, 0);
        assert_eq!(memory(&r, 0, &asked(0, 0)), Admission::Admit);
        let Admission::Never(why) = memory(&r, 0, &asked(0, G)) else {
            panic!()
        };
        assert!(why.contains("no memory control"), "{why}");
    }

    #[test]
    fn a_class_fits_alone_beside_others_or_never() {
        let offer = Offer {
            l3: Some(L3 {
                ways: 12,
                min_bits: 1,
                closids: 3,
            }),
            mb: None,
        };
        let r = Room {
            cache: Ok(&offer),
            ..Room::cpus_only()
        };
        let ask = |cell, ways| Ask {
            cell,
            ways,
            bandwidth: 0,
        };
        assert_eq!(class(&r, [], ask(1, 0)), Admission::Admit, "none asked");
        assert_eq!(class(&r, [ask(1, 4)], ask(2, 4)), Admission::Admit);
        let Admission::NotNow(why) = class(&r, [ask(1, 4), ask(2, 4)], ask(3, 2)) else {
            panic!("two classes for cells: a third waits")
        };
        assert!(why.contains("classes of service for 2"), "{why}");
        let Admission::Never(why) = class(&r, [], ask(3, 12)) else {
            panic!("more ways than may ever be given")
        };
        assert!(why.contains("11 of the 12"), "{why}");
        let none = Room {
            cache: Err("no resctrl here"),
            ..Room::cpus_only()
        };
        assert_eq!(
            class(&none, [], ask(1, 2)),
            Admission::Never("no resctrl here".into())
        );
    }

    #[test]
    fn verdicts_join_never_first_then_every_not_now() {
        use Admission::*;
        let n = |s: &str| NotNow(s.into());
        assert_eq!(join([Admit, Admit, Admit]), Admit);
        assert_eq!(join([n("cpus"), Admit, n("memory")]), n("cpus; and memory"));
        assert_eq!(
            join([n("cpus"), Never("class".into()), n("memory")]),
            Never("class".into())
        );
        assert_eq!(
            join([Never("cpus".into()), Never("class".into())]),
            Never("cpus".into())
        );
    }
}
