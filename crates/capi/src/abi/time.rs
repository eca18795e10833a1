//! `allot_cell_register_timed`, `allot_cell_window` and
//! `allot_cell_wait_window`: time contracts from C (`include/allot/time.h`).
//!
//! `allot_time_t` is a flat struct with one field per parameter of every
//! kind; a field the kind does not use must be 0, so each contract has one
//! C spelling, as it has one on the wire ([`allot_proto::msg::spec::time_fields`]).
//! The kinds' numbers are the wire's (checked by `tests/c_layout.rs`).
//! `allot_spec_t` is not grown: the CPU count of a time contract is its
//! `min`, as in [`CellSpec::time_cpus`].

use super::cell::{read_spec, register_spec, spec_from_c};
use super::status::{Error, Result, entry};
use super::{CELLS, CellHandle, Spec, need_out, write_out};
use allot_proto::window::{Phase, monotonic_ns};
use allot_spec::{CellSpec, TimeContract};
use std::ffi::{c_char, c_int};

/// `ALLOT_TIME_SPACE`.
pub const TIME_SPACE: u32 = 0;
/// `ALLOT_TIME_FRACTION`.
pub const TIME_FRACTION: u32 = 1;
/// `ALLOT_TIME_TRIGGERED`.
pub const TIME_TRIGGERED: u32 = 2;
/// `ALLOT_TIME_MESSAGE`.
pub const TIME_MESSAGE: u32 = 3;

/// `allot_time_t`: when a cell runs.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TimeC {
    /// `ALLOT_TIME_*`.
    pub kind: u32,
    /// Fraction: millionths of each CPU.
    pub fraction_ppm: u32,
    /// Fraction: shortest piece, µs (0: default).
    pub slice_us: u32,
    /// Triggered: period, µs.
    pub period_us: u32,
    /// Triggered: budget per period, µs.
    pub budget_us: u32,
    /// Message: idle time before the grant goes back, ms.
    pub idle_ms: u32,
}

/// `allot_window_t`: a cell's windows and where now falls in them.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowC {
    /// When window 0 opens (`CLOCK_MONOTONIC`, ns).
    pub origin_ns: u64,
    /// Open: when this window closes; closed: when the next opens.
    pub edge_ns: u64,
    /// 0: no windows.
    pub period_us: u32,
    /// Window length, µs.
    pub budget_us: u32,
    /// Nonzero inside a window (or without windows).
    pub open: c_int,
}

const _: () = assert!(std::mem::size_of::<TimeC>() == 24);
const _: () = assert!(std::mem::size_of::<WindowC>() == 32);

impl TimeC {
    /// The C spelling of `c` (its unused fields 0).
    pub fn of(c: &TimeContract) -> TimeC {
        match *c {
            TimeContract::Space => TimeC::default(),
            TimeContract::Fraction { ppm, slice_us } => TimeC {
                kind: TIME_FRACTION,
                fraction_ppm: ppm,
                slice_us,
                ..TimeC::default()
            },
            TimeContract::Triggered {
                period_us,
                budget_us,
            } => TimeC {
                kind: TIME_TRIGGERED,
                period_us,
                budget_us,
                ..TimeC::default()
            },
            TimeContract::Message { idle_ms } => TimeC {
                kind: TIME_MESSAGE,
                idle_ms,
                ..TimeC::default()
            },
        }
    }

    /// The contract this asks for, or why it is not one: the kind reads
    /// its own fields, and spelling the contract back ([`TimeC::of`])
    /// must give `self` again, so a field the kind does not use is 0.
    pub fn contract(&self) -> Result<TimeContract> {
        let t = self;
        let c = match t.kind {
            TIME_SPACE => TimeContract::Space,
            TIME_FRACTION => TimeContract::Fraction {
                ppm: t.fraction_ppm,
                slice_us: t.slice_us,
            },
            TIME_TRIGGERED => TimeContract::Triggered {
                period_us: t.period_us,
                budget_us: t.budget_us,
            },
            TIME_MESSAGE => TimeContract::Message { idle_ms: t.idle_ms },
            k => {
                return Err(Error::invalid(format!(
                    "time.kind {k} is unknown: use ALLOT_TIME_SPACE (0), _FRACTION (1), \
                     _TRIGGERED (2) or _MESSAGE (3)"
                )));
            }
        };
        let back = TimeC::of(&c);
        let fields = [
            ("fraction_ppm", t.fraction_ppm, back.fraction_ppm),
            ("slice_us", t.slice_us, back.slice_us),
            ("period_us", t.period_us, back.period_us),
            ("budget_us", t.budget_us, back.budget_us),
            ("idle_ms", t.idle_ms, back.idle_ms),
        ];
        match fields.iter().find(|(_, given, read)| given != read) {
            Some((name, v, _)) => Err(Error::invalid(format!(
                "time.{name} is {v} but a {} contract does not use it: set it to 0",
                c.name()
            ))),
            None => Ok(c),
        }
    }
}

/// The spec `spec` and `time` ask for together.
pub fn spec_with_time(spec: &Spec, time: &TimeC) -> Result<CellSpec> {
    spec_from_c(spec, time.contract()?)
}

/// `int allot_cell_register_timed(const char *socket, const char *name,
/// const allot_spec_t *spec, const allot_time_t *time, int wait,
/// allot_cell_t *out)`.
///
/// # Safety
/// `socket` and `name` are null or NUL-terminated strings; `spec` and
/// `time` are null or valid for a read; `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_register_timed(
    socket: *const c_char,
    name: *const c_char,
    spec: *const Spec,
    time: *const TimeC,
    wait: c_int,
    out: *mut CellHandle,
) -> c_int {
    entry("allot_cell_register_timed", || {
        super::ensure_live()?;
        need_out(out, "out")?;
        // SAFETY: per the contract.
        let spec = unsafe { read_spec(spec) }?;
        let time = if time.is_null() {
            TimeC::default()
        } else {
            // SAFETY: non-null, and valid for a read by the contract.
            unsafe { *time }
        };
        let spec = spec_with_time(spec, &time)?;
        // SAFETY: per the contract.
        unsafe { register_spec(socket, name, spec, wait, false, out) }
    })
}

/// The C view of `w` at `now_ns`.
pub fn window_at(w: &allot_proto::Window, now_ns: u64) -> WindowC {
    if !w.is_set() {
        return WindowC {
            edge_ns: u64::MAX,
            open: 1,
            ..WindowC::default()
        };
    }
    let (open, edge_ns) = match w.phase(now_ns) {
        Phase::Open { closes_ns } => (1, closes_ns),
        Phase::Closed { opens_ns } => (0, opens_ns),
    };
    WindowC {
        origin_ns: w.origin_ns,
        edge_ns,
        period_us: w.period_us,
        budget_us: w.budget_us,
        open,
    }
}

/// `int allot_cell_window(allot_cell_t cell, allot_window_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_window(cell: CellHandle, out: *mut WindowC) -> c_int {
    entry("allot_cell_window", || {
        need_out(out, "out")?;
        let w = CELLS.with(cell.id, |c| c.grant().window)?;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, window_at(&w, monotonic_ns())) };
        Ok(())
    })
}

/// `int allot_cell_wait_window(allot_cell_t cell, allot_window_t *out)`.
///
/// # Safety
/// `out` is null or valid for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn allot_cell_wait_window(cell: CellHandle, out: *mut WindowC) -> c_int {
    entry("allot_cell_wait_window", || {
        need_out(out, "out")?;
        // The handle is held, not the table: other calls go on meanwhile.
        let c = CELLS.get(cell.id)?;
        c.wait_window();
        let w = c.grant().window;
        // SAFETY: checked non-null above.
        unsafe { write_out(out, window_at(&w, monotonic_ns())) };
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_reads_its_own_fields_and_refuses_the_others() {
        let t = TimeC {
            kind: TIME_TRIGGERED,
            period_us: 10_000,
            budget_us: 3_000,
            ..TimeC::default()
        };
        assert_eq!(
            t.contract().unwrap(),
            TimeContract::Triggered {
                period_us: 10_000,
                budget_us: 3_000
            }
        );
        let e = TimeC { idle_ms: 5, ..t }.contract().unwrap_err();
        assert!(e.to_string().contains("idle_ms"), "{e}");
        let f = TimeC {
            kind: TIME_FRACTION,
            fraction_ppm: 250_000,
            slice_us: 2_000,
            ..TimeC::default()
        };
        assert_eq!(
            f.contract().unwrap(),
            TimeContract::Fraction {
                ppm: 250_000,
                slice_us: 2_000
            }
        );
        assert!(
            TimeC { period_us: 1, ..f }
                .contract()
                .unwrap_err()
                .to_string()
                .contains("period_us")
        );
        assert_eq!(TimeC::default().contract().unwrap(), TimeContract::Space);
        let m = TimeC {
            kind: TIME_MESSAGE,
            idle_ms: 100,
            ..TimeC::default()
        };
        assert_eq!(
            m.contract().unwrap(),
            TimeContract::Message { idle_ms: 100 }
        );
        let e = TimeC {
            kind: 9,
            ..TimeC::default()
        }
        .contract()
        .unwrap_err();
        assert!(e.to_string().contains("unknown"), "{e}");
    }

    #[test]
    fn a_spec_the_contract_does_not_allow_is_refused_with_the_reason() {
        let t = TimeC {
            kind: TIME_TRIGGERED,
            period_us: 10_000,
            budget_us: 3_000,
            ..TimeC::default()
        };
        let none = Spec::default();
        let e = spec_with_time(&none, &t).unwrap_err();
        assert!(e.to_string().contains("CPU"), "{e}");
        let one = Spec {
            min: 1,
            ..Spec::default()
        };
        let spec = spec_with_time(&one, &t).unwrap();
        assert_eq!(spec.time_cpus(), 1);
        let over = TimeC {
            budget_us: 20_000,
            ..t
        };
        assert!(spec_with_time(&one, &over).is_err());
        let excl = Spec {
            exclusive: 1,
            ..one
        };
        assert!(spec_with_time(&excl, &t).is_err());
    }

    #[test]
    fn the_window_view_says_open_or_closed_and_the_next_edge() {
        let w = allot_proto::Window {
            origin_ns: 1_000_000,
            period_us: 10_000,
            budget_us: 3_000,
        };
        let open = window_at(&w, 1_000_000 + 10_000_000 + 1);
        assert_eq!(open.open, 1);
        assert_eq!(open.edge_ns, 1_000_000 + 13_000_000);
        let closed = window_at(&w, 1_000_000 + 5_000_000);
        assert_eq!(closed.open, 0);
        assert_eq!(closed.edge_ns, 11_000_000);
        assert_eq!((closed.period_us, closed.budget_us), (10_000, 3_000));
        let none = window_at(&allot_proto::Window::default(), 5);
        assert_eq!((none.open, none.edge_ns, none.period_us), (1, u64::MAX, 0));
    }
}
