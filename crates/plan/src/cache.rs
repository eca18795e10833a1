//! How cells' asks for cache ways and memory bandwidth become classes of
//! service (the policy; `allot_enforce::resctrl` writes them, admission
//! asks [`allocate`] whether a cell's ask fits).
//!
//! Invariants:
//! - **Classes are scarce**: at most `closids - 1` cells have a class (the
//!   default group keeps one); an ask past that is refused with the reason,
//!   never given a shared class silently.
//! - **Ways are exclusive and contiguous**: a cell's ways are a contiguous
//!   range no other group's mask covers (CAT requires contiguous masks);
//!   cells are packed from the highest way down in cell order, and the
//!   default group keeps the lowest ways, at least `min_bits` of them. So
//!   asks never sum past `ways - min_bits`.
//! - Bandwidth is a per-domain ceiling, rounded up to the hardware's
//!   granularity and never below its minimum; it is not exclusive (MBA
//!   throttles, it does not reserve).

use allot_topo::resctrl::{Class, Offer};

/// What a cell asks for: L3 ways of its own (0: none) and a bandwidth
/// ceiling, percent (0: none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub cell: u64,
    /// Ways of every cache domain it alone may fill.
    pub ways: u32,
    /// Its memory bandwidth ceiling, percent.
    pub bandwidth: u32,
}

/// Classes for every cell of `asks` and the default group's mask
/// (see the module's invariants), or why they cannot be had.
pub fn allocate(f: &Offer, asks: &[Ask]) -> Result<(Vec<Class>, u64), String> {
    let mut asks: Vec<Ask> = asks
        .iter()
        .copied()
        .filter(|a| a.ways > 0 || a.bandwidth > 0)
        .collect();
    asks.sort_by_key(|a| a.cell);
    if asks.len() as u32 > f.classes_for_cells() {
        return Err(format!(
            "{} cells ask for cache ways or memory bandwidth, and the hardware has classes of \
             service for {} besides the default group",
            asks.len(),
            f.classes_for_cells()
        ));
    }
    let full = f.l3.map_or(0, |l| (1u64 << l.ways) - 1);
    let mut next_top = f.l3.map_or(0, |l| l.ways);
    let mut out = Vec::with_capacity(asks.len());
    let asked_ways: u32 = asks.iter().map(|a| a.ways).sum();
    if asked_ways > 0 {
        let Some(l3) = f.l3 else {
            return Err("this CPU has no L3 cache allocation (resctrl offers no L3)".into());
        };
        if asked_ways > l3.ways - l3.min_bits {
            return Err(format!(
                "cells ask for {asked_ways} L3 ways of their own; {} of the {} may be given, \
                 the default group keeping {}",
                l3.ways - l3.min_bits,
                l3.ways,
                l3.min_bits
            ));
        }
        if let Some(a) = asks.iter().find(|a| a.ways > 0 && a.ways < l3.min_bits) {
            return Err(format!(
                "cell {} asks for {} L3 ways; a mask has at least {}",
                a.cell, a.ways, l3.min_bits
            ));
        }
    }
    if asks.iter().any(|a| a.bandwidth > 100) {
        return Err("a bandwidth ceiling is a percentage, 1 to 100".into());
    }
    if asks.iter().any(|a| a.bandwidth > 0) && f.mb.is_none() {
        return Err("this CPU has no memory bandwidth allocation (resctrl offers no MB)".into());
    }
    let mut taken = 0u64;
    for a in &asks {
        let mask = if a.ways > 0 {
            next_top -= a.ways;
            let m = ((1u64 << a.ways) - 1) << next_top;
            taken |= m;
            Some(m)
        } else {
            None
        };
        let bandwidth = match (a.bandwidth, f.mb) {
            (0, _) | (_, None) => 100,
            (b, Some(mb)) => b
                .div_ceil(mb.gran)
                .saturating_mul(mb.gran)
                .clamp(mb.min, 100),
        };
        out.push((a.cell, mask, bandwidth));
    }
    let default = full & !taken;
    Ok((
        out.into_iter()
            .map(|(cell, mask, bandwidth)| Class {
                cell,
                mask: mask.unwrap_or(default),
                bandwidth,
            })
            .collect(),
        default,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use allot_topo::resctrl::{L3, Mb};

    fn offer(ways: u32, min_bits: u32, closids: u32, mb: bool) -> Offer {
        Offer {
            l3: Some(L3 {
                ways,
                min_bits,
                closids,
            }),
            mb: mb.then_some(Mb {
                min: 10,
                gran: 10,
                closids,
            }),
        }
    }

    fn ask(cell: u64, ways: u32, bandwidth: u32) -> Ask {
        Ask {
            cell,
            ways,
            bandwidth,
        }
    }

    #[test]
    fn ways_are_exclusive_contiguous_and_packed_from_the_top() {
        let f = offer(12, 1, 16, true);
        let (classes, default) =
            allocate(&f, &[ask(3, 4, 0), ask(1, 2, 0), ask(7, 0, 35)]).unwrap();
        // Cell order: 1 takes the top two ways, 3 the next four; 7 shares
        // the default group's ways with a 40 % ceiling (35 rounded up).
        let class = |cell, mask, bandwidth| Class {
            cell,
            mask,
            bandwidth,
        };
        assert_eq!(classes[0], class(1, 0xc00, 100));
        assert_eq!(classes[1], class(3, 0x3c0, 100));
        assert_eq!(default, 0x03f);
        assert_eq!(classes[2], class(7, 0x03f, 40));
        let masks: Vec<u64> = classes.iter().take(2).map(|c| c.mask).collect();
        assert_eq!(masks[0] & masks[1], 0);
        assert_eq!((masks[0] | masks[1]) & default, 0);
    }

    #[test]
    fn scarce_classes_and_ways_are_refused_with_the_reason() {
        let f = offer(12, 2, 3, true);
        let e = allocate(&f, &[ask(1, 2, 0), ask(2, 2, 0), ask(3, 2, 0)]).unwrap_err();
        assert!(
            e.contains("classes of service for 2 besides the default group"),
            "{e}"
        );
        let e = allocate(&f, &[ask(1, 6, 0), ask(2, 5, 0)]).unwrap_err();
        assert!(e.contains("10 of the 12 may be given"), "{e}");
        let e = allocate(&f, &[ask(1, 1, 0)]).unwrap_err();
        assert!(e.contains("a mask has at least 2"), "{e}");
        let e = allocate(&offer(12, 1, 16, false), &[ask(1, 0, 50)]).unwrap_err();
        assert!(e.contains("no memory bandwidth allocation"), "{e}");
        let mb_only = Offer {
            l3: None,
            ..offer(12, 1, 4, true)
        };
        let e = allocate(&mb_only, &[ask(1, 2, 0)]).unwrap_err();
        assert!(e.contains("no L3 cache allocation"), "{e}");
        // Nothing asked: no class, the default group keeps everything.
        let (classes, default) = allocate(&f, &[ask(1, 0, 0)]).unwrap();
        assert!(classes.is_empty());
        assert_eq!(default, 0xfff);
        // A tiny ceiling is raised to the hardware's minimum.
        let (classes, _) = allocate(&f, &[ask(1, 0, 1)]).unwrap();
        assert_eq!(classes[0].bandwidth, 10);
    }
}
