//! Handle tables: what the C side's `allot_*_t` ids name.
//!
//! A C program never sees a pointer into the library. It holds a 64-bit id
//! that names a slot in one table per object type:
//!
//! ```text
//!  63      56 55                            24 23                 0
//! +----------+--------------------------------+--------------------+
//! |   tag    |           generation           |        slot        |
//! +----------+--------------------------------+--------------------+
//!    8 bits              32 bits                      24 bits
//! ```
//!
//! - **tag**: the object type (`'c'` cell, `'p'` pool, `'t'` task), so an
//!   id of one type passed as another is recognised and named.
//! - **generation**: the slot's current generation. Removing an object
//!   bumps it, so every id issued for the old object is stale from then on.
//!   A slot's first generation is drawn from a per-process random seed:
//!   an id from another process (or made up) matches a live object with
//!   probability about 2^-32.
//! - **slot**: the index in the table. Freed slots are reused (the most
//!   recently freed first); a slot that has gone through 2^32 - 1
//!   generations is retired instead, so a stale id can never come back to
//!   life by wrap-around.
//!
//! Id 0 is never issued (its tag is 0): `{0}` means "no handle".
//!
//! # Invariants
//!
//! - An id resolves iff its tag is the table's, its slot exists, the slot
//!   holds an object, and its generation is the slot's.
//! - A slot's generation changes exactly when its object is removed.
//! - Once [`Table::close`] ran, nothing is inserted and nothing resolves.
//!
//! All operations take the table's mutex for a few dozen instructions; the
//! objects themselves are used outside it (callers clone an `Arc` or a
//! cheap handle out of the table).

use super::status::{Code, Error, Result};
use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, OnceLock};

/// The object types with a table, and their tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `allot_cell_t`.
    Cell,
    /// `allot_pool_t`.
    Pool,
    /// `allot_task_t`.
    Task,
    /// `allot_resumer_t`.
    Resumer,
    /// `allot_channel_t`.
    Channel,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::Cell,
        Kind::Pool,
        Kind::Task,
        Kind::Resumer,
        Kind::Channel,
    ];

    /// The tag byte in the id.
    pub const fn tag(self) -> u8 {
        match self {
            Kind::Cell => b'c',
            Kind::Pool => b'p',
            Kind::Task => b't',
            Kind::Resumer => b'r',
            Kind::Channel => b'h',
        }
    }

    /// How the C API names the type.
    pub const fn c_name(self) -> &'static str {
        match self {
            Kind::Cell => "allot_cell_t",
            Kind::Pool => "allot_pool_t",
            Kind::Task => "allot_task_t",
            Kind::Resumer => "allot_resumer_t",
            Kind::Channel => "allot_channel_t",
        }
    }

    fn from_tag(tag: u8) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.tag() == tag)
    }
}

const SLOT_BITS: u32 = 24;
const GEN_BITS: u32 = 32;
/// Most slots a table can have (ids are full beyond it).
pub const MAX_SLOTS: usize = (1 << SLOT_BITS) - 1;

/// The parts of an id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    /// The top byte: which table the id belongs to (`Kind::tag`).
    pub tag: u8,
    /// The slot's generation when the id was made; a freed slot's ids go stale.
    pub generation: u32,
    /// Index into the table (24 bits, below `MAX_SLOTS`).
    pub slot: u32,
}

/// Packs an id.
pub const fn encode(kind: Kind, generation: u32, slot: u32) -> u64 {
    ((kind.tag() as u64) << (GEN_BITS + SLOT_BITS))
        | ((generation as u64) << SLOT_BITS)
        | (slot as u64 & ((1 << SLOT_BITS) - 1))
}

/// Unpacks an id.
pub const fn decode(id: u64) -> Parts {
    Parts {
        tag: (id >> (GEN_BITS + SLOT_BITS)) as u8,
        generation: (id >> SLOT_BITS) as u32,
        slot: (id & ((1 << SLOT_BITS) - 1)) as u32,
    }
}

/// The first generation of slot `slot`: seeded per process, never 0.
fn first_generation(slot: usize) -> u32 {
    static SEED: OnceLock<RandomState> = OnceLock::new();
    let h = SEED.get_or_init(RandomState::new).hash_one(slot);
    ((h >> 32) as u32 ^ h as u32).max(1)
}

#[derive(Debug)]
struct Entry<T> {
    generation: u32,
    /// Generations this slot has gone through.
    uses: u32,
    value: Option<T>,
}

#[derive(Debug)]
struct Slots<T> {
    closed: bool,
    entries: Vec<Entry<T>>,
    /// Empty slots that may be reused.
    free: Vec<u32>,
}

/// A table of objects of one [`Kind`], addressed by generation-checked ids.
#[derive(Debug)]
pub struct Table<T> {
    kind: Kind,
    slots: Mutex<Slots<T>>,
}

impl<T> Table<T> {
    /// An empty, open table.
    pub const fn new(kind: Kind) -> Table<T> {
        Table {
            kind,
            slots: Mutex::new(Slots {
                closed: false,
                entries: Vec::new(),
                free: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Slots<T>> {
        // Nothing panics while holding the lock except allocation failure,
        // which aborts; a poisoned table is still consistent.
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Stores the value `make(id)` under a new id and returns the id. `make`
    /// runs under the table's lock, only once the id is certain to be
    /// issued (so it may start work that refers to its own id).
    pub fn insert_with(&self, make: impl FnOnce(u64) -> T) -> Result<u64> {
        let mut s = self.lock();
        if s.closed {
            return Err(Error::shut_down());
        }
        let slot = match s.free.pop() {
            Some(i) => i as usize,
            None => {
                if s.entries.len() >= MAX_SLOTS {
                    return Err(Error::new(
                        Code::Os,
                        format!(
                            "{MAX_SLOTS} live {} handles: the table is full; free (or join) some",
                            self.kind.c_name()
                        ),
                    ));
                }
                let i = s.entries.len();
                s.entries.push(Entry {
                    generation: first_generation(i),
                    uses: 0,
                    value: None,
                });
                i
            }
        };
        let e = &mut s.entries[slot];
        let id = encode(self.kind, e.generation, slot as u32);
        e.value = Some(make(id));
        Ok(id)
    }

    /// Stores `value` under a new id.
    pub fn insert(&self, value: T) -> Result<u64> {
        self.insert_with(|_| value)
    }

    /// Why `id` does not name a live object of this table, or its slot.
    fn resolve(&self, s: &Slots<T>, id: u64) -> Result<usize> {
        if s.closed {
            return Err(Error::shut_down());
        }
        let name = self.kind.c_name();
        if id == 0 {
            return Err(Error::new(Code::Handle, format!("null {name} (id 0)")));
        }
        let p = decode(id);
        if p.tag != self.kind.tag() {
            return Err(Error::new(
                Code::Handle,
                match Kind::from_tag(p.tag) {
                    Some(other) => format!(
                        "{id:#018x} is an {} passed where an {name} is expected",
                        other.c_name()
                    ),
                    None => format!("{id:#018x} is not an allot handle (expected an {name})"),
                },
            ));
        }
        match s.entries.get(p.slot as usize) {
            Some(e) if e.generation == p.generation && e.value.is_some() => Ok(p.slot as usize),
            _ => Err(Error::new(
                Code::Handle,
                format!(
                    "stale {name} {id:#018x}: it was freed (or joined) already, or was never issued by this process"
                ),
            )),
        }
    }

    /// Runs `f` on the object `id` names, under the lock.
    pub fn with<R>(&self, id: u64, f: impl FnOnce(&T) -> R) -> Result<R> {
        let s = self.lock();
        let i = self.resolve(&s, id)?;
        Ok(f(s.entries[i].value.as_ref().expect("resolved")))
    }

    /// A clone of the object `id` names.
    pub fn get(&self, id: u64) -> Result<T>
    where
        T: Clone,
    {
        self.with(id, T::clone)
    }

    /// Checks that `id` names a live object.
    pub fn check(&self, id: u64) -> Result<()> {
        self.with(id, |_| ())
    }

    /// Takes the object `id` names out of the table; every id for it is
    /// stale from now on.
    pub fn remove(&self, id: u64) -> Result<T> {
        let mut s = self.lock();
        let i = self.resolve(&s, id)?;
        let e = &mut s.entries[i];
        let value = e.value.take().expect("resolved");
        e.generation = e.generation.wrapping_add(1).max(1);
        e.uses += 1;
        if e.uses < u32::MAX {
            s.free.push(i as u32);
        }
        Ok(value)
    }

    /// Closes the table for good and returns every object it held.
    pub fn close(&self) -> Vec<T> {
        let mut s = self.lock();
        s.closed = true;
        s.free.clear();
        s.entries
            .iter_mut()
            .filter_map(|e| e.value.take())
            .collect()
    }

    /// Objects held now.
    pub fn len(&self) -> usize {
        self.lock()
            .entries
            .iter()
            .filter(|e| e.value.is_some())
            .count()
    }

    /// Whether the table holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_never_zero() {
        for (k, g, s) in [
            (Kind::Cell, 1, 0),
            (Kind::Pool, u32::MAX, 0xff_ffff),
            (Kind::Task, 7, 42),
        ] {
            let id = encode(k, g, s);
            assert_ne!(id, 0);
            assert_eq!(
                decode(id),
                Parts {
                    tag: k.tag(),
                    generation: g,
                    slot: s
                }
            );
        }
        assert_eq!(
            encode(Kind::Pool, 0x1234_5678, 0x9a_bcde) >> 56,
            u64::from(b'p')
        );
        assert_eq!(
            encode(Kind::Pool, 0x1234_5678, 0x9a_bcde) & 0x00ff_ffff_ffff_ffff,
            0x0012_3456_789a_bcde
        );
    }

    #[test]
    fn removal_makes_every_old_id_stale_and_slots_are_reused() {
        let t: Table<&str> = Table::new(Kind::Cell);
        let a = t.insert("a").unwrap();
        assert_eq!(t.get(a).unwrap(), "a");
        assert_eq!(t.remove(a).unwrap(), "a");
        assert_eq!(t.get(a).unwrap_err().status, Code::Handle);
        assert_eq!(t.remove(a).unwrap_err().status, Code::Handle, "double free");
        let b = t.insert("b").unwrap();
        assert_eq!(decode(a).slot, decode(b).slot, "the slot is reused");
        assert_ne!(a, b, "under a new generation");
        assert_eq!(t.get(a).unwrap_err().status, Code::Handle);
        assert_eq!(t.get(b).unwrap(), "b");
    }

    #[test]
    fn wrong_type_null_and_garbage_ids_are_named() {
        let cells: Table<u8> = Table::new(Kind::Cell);
        let pools: Table<u8> = Table::new(Kind::Pool);
        let c = cells.insert(1).unwrap();
        let p = pools.insert(2).unwrap();
        let e = cells.get(p).unwrap_err();
        assert_eq!(e.status, Code::Handle);
        assert!(
            e.detail
                .contains("allot_pool_t passed where an allot_cell_t"),
            "{}",
            e.detail
        );
        assert!(
            pools
                .get(c)
                .unwrap_err()
                .detail
                .contains("allot_cell_t passed")
        );
        assert!(cells.get(0).unwrap_err().detail.contains("null"));
        assert!(
            cells
                .get(0xdead_beef)
                .unwrap_err()
                .detail
                .contains("not an allot handle")
        );
        let beyond = encode(Kind::Cell, decode(c).generation, 5);
        assert_eq!(cells.get(beyond).unwrap_err().status, Code::Handle);
        let wrong_gen = encode(Kind::Cell, decode(c).generation ^ 1, decode(c).slot);
        assert_eq!(cells.get(wrong_gen).unwrap_err().status, Code::Handle);
    }

    #[test]
    fn a_closed_table_says_shutdown() {
        let t: Table<u8> = Table::new(Kind::Task);
        let a = t.insert(1).unwrap();
        let _b = t.insert(2).unwrap();
        let mut all = t.close();
        all.sort();
        assert_eq!(all, vec![1, 2]);
        assert_eq!(t.get(a).unwrap_err().status, Code::Shutdown);
        assert_eq!(t.insert(3).unwrap_err().status, Code::Shutdown);
        assert!(t.is_empty());
    }

    #[test]
    fn insert_with_sees_its_own_id() {
        let t: Table<u64> = Table::new(Kind::Task);
        let id = t.insert_with(|id| id).unwrap();
        assert_eq!(t.get(id).unwrap(), id);
    }

    #[test]
    fn a_worn_out_slot_is_retired() {
        let t: Table<u8> = Table::new(Kind::Cell);
        let a = t.insert(1).unwrap();
        t.lock().entries[0].uses = u32::MAX - 1;
        t.remove(a).unwrap();
        let b = t.insert(2).unwrap();
        assert_eq!(decode(b).slot, 1, "slot 0 is not reused");
    }
}
