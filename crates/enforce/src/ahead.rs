//! A cell's directories made ahead of its registration
//! ([`Enforcer::make_ahead`]), for the backends whose cells are cgroup
//! directories: the steps once, each backend saying only how its
//! directories are made, removed and opened ([`Directories`]).
//!
//! Invariant: the id a backend holds as made ahead is one no cell holds,
//! whose directories the backend made itself (none of them existed
//! before); so removing them unused removes nothing of anyone else's.
//!
//! [`Enforcer::make_ahead`]: crate::Enforcer::make_ahead

use crate::Result;

/// What a cgroup backend does with a cell's directories.
pub(crate) trait Directories {
    /// The id whose directories are made ahead, if any.
    fn ahead(&mut self) -> &mut Option<u64>;
    /// Makes cell `cell`'s directories (and what they need written).
    fn make(&self, cell: u64) -> Result<()>;
    /// Removes cell `cell`'s empty directories; what cannot be removed is
    /// left as it is.
    fn unmake(&self, cell: u64);
    /// Whether no cell holds `cell` and none of its directories exists.
    fn free(&self, cell: u64) -> bool;
    /// Opens cell `cell`'s files (its directories exist).
    fn open(&mut self, cell: u64) -> Result<()>;
}

/// [`crate::Enforcer::create`]: takes the directories made ahead for
/// `cell`, or makes them.
pub(crate) fn create(b: &mut impl Directories, cell: u64) -> Result<()> {
    if b.ahead().take_if(|a| *a == cell).is_some() && b.open(cell).is_ok() {
        return Ok(());
    }
    // Not made ahead, or removed meanwhile (with allot's directory, by
    // someone): made now.
    b.make(cell)?;
    b.open(cell)
}

/// [`crate::Enforcer::make_ahead`]: makes `cell`'s directories, after
/// removing those made for an earlier id no cell took.
pub(crate) fn make_ahead(b: &mut impl Directories, cell: u64) -> Result<bool> {
    if *b.ahead() == Some(cell) {
        return Ok(true);
    }
    if let Some(old) = b.ahead().take() {
        b.unmake(old);
    }
    if !b.free(cell) {
        return Ok(false);
    }
    if let Err(e) = b.make(cell) {
        b.unmake(cell);
        return Err(e);
    }
    *b.ahead() = Some(cell);
    Ok(true)
}

/// At cleanup: removes the directories made ahead, if any.
pub(crate) fn discard(b: &mut impl Directories) {
    if let Some(old) = b.ahead().take() {
        b.unmake(old);
    }
}
