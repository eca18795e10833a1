//! What the machine offers to partition its last-level cache and memory
//! bandwidth (Intel RDT's CAT and MBA, AMD's QoS equivalents), as plain
//! facts: `allot_enforce::resctrl` reads them from the kernel's resctrl
//! mount, `allot_plan::cache` divides them among cells.
//!
//! A *class of service* is what a group of threads runs with: a bitmask of
//! L3 ways and a bandwidth ceiling. The default group keeps one class.

/// What the L3 cache allocation offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct L3 {
    /// Ways per cache domain (bits in `cbm_mask`).
    pub ways: u32,
    /// The fewest ways a mask may have.
    pub min_bits: u32,
    /// Classes of service.
    pub closids: u32,
}

/// What the memory bandwidth allocation offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mb {
    /// The lowest share, percent.
    pub min: u32,
    /// Shares are multiples of this, percent.
    pub gran: u32,
    /// Classes of service.
    pub closids: u32,
}

/// Cache and bandwidth allocation, each if the CPU has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Offer {
    /// L3 cache allocation.
    pub l3: Option<L3>,
    /// Memory bandwidth allocation.
    pub mb: Option<Mb>,
}

impl Offer {
    /// Classes of service cells may have (the default group keeps one).
    pub fn classes_for_cells(&self) -> u32 {
        let all = [self.l3.map(|l| l.closids), self.mb.map(|m| m.closids)];
        all.into_iter()
            .flatten()
            .min()
            .unwrap_or(1)
            .saturating_sub(1)
    }
}

/// A group's class of service, as written to the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// The cell the group is for.
    pub cell: u64,
    /// Its capacity bitmask of L3 ways (the default group's when it asked
    /// for no ways of its own).
    pub mask: u64,
    /// Its bandwidth ceiling, percent (100 when it asked for none).
    pub bandwidth: u32,
}
