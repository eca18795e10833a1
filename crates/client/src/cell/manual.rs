//! Manual cells: the caller publishes the grants itself (tests,
//! simulations, a runtime embedded under another resource manager). The
//! page is a private one of this process; [`GrantWriter`] is its only
//! writer, so generations count up by one per publication from 1.

use super::{Cell, Link, Mode, local_page};
use crate::conn::ClientError;
use allot_proto::{Grant, PageMap};
use allot_topo::CpuSet;
use std::sync::Arc;

impl Cell {
    /// A cell whose grants the caller publishes through the returned
    /// [`GrantWriter`]. Starts with `cpus`.
    pub fn manual(cpus: CpuSet) -> Result<(Cell, GrantWriter), ClientError> {
        let g = Grant {
            generation: 1,
            threads: cpus.len() as u32,
            entitled: cpus.len() as u32,
            cpus,
            ..Grant::default()
        };
        let page = local_page(&g)?;
        let cell = Cell::from_parts(Mode::Manual, page.clone(), Link::default(), None, None);
        Ok((
            cell,
            GrantWriter {
                page,
                generation: 1,
            },
        ))
    }
}

/// Publishes grants to a manual cell.
#[derive(Debug)]
pub struct GrantWriter {
    page: Arc<PageMap>,
    generation: u64,
}

impl GrantWriter {
    /// Publishes `cpus` (with `lent` marked) as the next generation; the
    /// recommended thread count is the number of CPUs.
    pub fn publish(&mut self, cpus: CpuSet, lent: CpuSet) -> u64 {
        self.generation += 1;
        self.page.page().publish(&Grant {
            generation: self.generation,
            threads: cpus.len().max(1) as u32,
            entitled: cpus.difference(&lent).len() as u32,
            cpus,
            lent,
            ..Grant::default()
        });
        self.generation
    }

    /// Publishes the current grant with `window` as the cell's windows
    /// (as the broker does for a time-triggered cell); an unset window
    /// lifts them.
    pub fn publish_window(&mut self, window: allot_proto::Window) -> u64 {
        self.generation += 1;
        let g = Grant {
            generation: self.generation,
            window,
            ..self.page.page().read()
        };
        self.page.page().publish(&g);
        self.generation
    }
}
