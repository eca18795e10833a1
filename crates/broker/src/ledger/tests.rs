//! The ledger's accounting, limits and turns.

use super::*;

fn item(dev: u32, amount: f64, shared: bool) -> LedgerItem {
    LedgerItem {
        kind: "cpu".into(),
        dev,
        amount,
        shared,
    }
}

#[test]
fn exclusive_and_shared_accounting() {
    let mut l = Ledger::new(&Machine::uniform(2), Limits::default());
    l.acquire(10, 0, &[item(0, 1.0, false)]).unwrap();
    assert!(
        l.acquire(11, 0, &[item(0, 0.1, false)]).is_err(),
        "CPU 0 is taken"
    );
    // All or nothing: CPU 1 is not taken when CPU 0 fails.
    assert!(
        l.acquire(11, 0, &[item(1, 1.0, false), item(0, 1.0, false)])
            .is_err()
    );
    l.acquire(11, 0, &[item(1, 1.0, true)]).unwrap();
    l.acquire(12, 0, &[item(1, 1.0, true)]).unwrap();
    assert!(
        l.acquire(13, 0, &[item(1, 0.5, false)]).is_err(),
        "shared holders keep exclusive ones out"
    );
    let e0 = l.epoch();
    assert!(l.forget(10));
    assert!(l.epoch() > e0);
    l.acquire(13, 0, &[item(0, 0.5, false)]).unwrap();
}

#[test]
fn minimums_stay_with_processes_that_asked_nothing() {
    let mut l = Ledger::new(&Machine::uniform(1), Limits::default());
    l.set_min("cpu", 0.25);
    assert!(l.acquire(1, 0, &[item(0, 1.0, false)]).is_err());
    l.acquire(1, 0, &[item(0, 0.75, false)]).unwrap();
}

#[test]
fn virtual_kinds() {
    let mut l = Ledger::new(&Machine::uniform(1), Limits::default());
    let devs = vec![DeviceDef {
        name: "0".into(),
        min: 0.0,
        max: 2.0,
    }];
    l.define(1, 0, "StrongCore", &devs).unwrap();
    l.define(1, 0, "StrongCore", &devs).unwrap();
    assert!(
        l.define(
            1,
            0,
            "StrongCore",
            &[DeviceDef {
                name: "0".into(),
                min: 0.0,
                max: 3.0
            }]
        )
        .is_err()
    );
    assert!(l.define(1, 0, "cpu", &devs).is_err());
    let s = LedgerItem {
        kind: "StrongCore".into(),
        dev: 0,
        amount: 1.0,
        shared: false,
    };
    l.acquire(1, 0, std::slice::from_ref(&s)).unwrap();
    l.acquire(2, 0, std::slice::from_ref(&s)).unwrap();
    assert!(matches!(
        l.acquire(3, 0, &[s]),
        Err(LedgerError::Refused(_))
    ));
}

#[test]
fn wrong_requests_are_invalid_not_refused() {
    let mut l = Ledger::new(&Machine::uniform(1), Limits::default());
    let unknown = LedgerItem {
        kind: "nope".into(),
        dev: 0,
        amount: 1.0,
        shared: false,
    };
    match l.acquire(3, 0, &[unknown]) {
        Err(LedgerError::Invalid(m)) => assert!(m.contains("unknown resource kind"), "{m}"),
        other => panic!("{other:?}"),
    }
    for amount in [-1.0, 0.0] {
        assert!(matches!(
            l.acquire(3, 0, &[item(0, amount, false)]),
            Err(LedgerError::Invalid(_))
        ));
    }
    assert!(matches!(
        l.acquire(3, 0, &[item(9, 1.0, false)]),
        Err(LedgerError::Invalid(_))
    ));
    assert!(!l.holds(3), "nothing was taken");
}

fn devs(n: usize, name_len: usize) -> Vec<DeviceDef> {
    (0..n)
        .map(|i| DeviceDef {
            name: format!("{i:0name_len$}"),
            min: 0.0,
            max: 1.0,
        })
        .collect()
}

#[test]
fn what_a_user_defines_is_bounded_and_dies_with_its_definers() {
    let limits = Limits {
        kinds: 2,
        devices: 4,
        kinds_total: 3,
        ..Limits::default()
    };
    let mut l = Ledger::new(&Machine::uniform(1), limits);
    let nobody = 65534;
    assert!(matches!(
        l.define(100, nobody, "big", &devs(5, 1)),
        Err(LedgerError::Limit(_))
    ));
    assert!(matches!(
        l.define(100, nobody, &"k".repeat(100), &devs(1, 1)),
        Err(LedgerError::Invalid(_))
    ));
    assert!(matches!(
        l.define(100, nobody, "a", &devs(1, 100)),
        Err(LedgerError::Invalid(_))
    ));
    assert!(l.define(100, nobody, "a", &devs(1, 1)).unwrap());
    assert!(l.define(101, nobody, "b", &devs(1, 1)).unwrap());
    match l.define(100, nobody, "c", &devs(1, 1)) {
        Err(LedgerError::Limit(m)) => assert!(m.contains("limits.kinds"), "{m}"),
        other => panic!("{other:?}"),
    }
    // Another user still may, up to the total.
    assert!(l.define(200, 1000, "c", &devs(1, 1)).unwrap());
    assert!(matches!(
        l.define(0, 0, "d", &devs(1, 1)),
        Err(LedgerError::Limit(_))
    ));
    // A second process defining the same kind keeps it alive.
    assert!(l.define(102, nobody, "a", &devs(1, 1)).unwrap());
    assert!(
        !l.define(102, nobody, "a", &devs(1, 1)).unwrap(),
        "already a definer"
    );
    assert!(l.involves(100));
    l.forget(100);
    assert_eq!(l.virtual_kinds(), 3, "102 still defines a");
    // A holder keeps a kind whose definers are all gone.
    let a = LedgerItem {
        kind: "a".into(),
        dev: 0,
        amount: 1.0,
        shared: false,
    };
    l.acquire(300, 1000, std::slice::from_ref(&a)).unwrap();
    l.forget(102);
    assert_eq!(l.virtual_kinds(), 3, "held by 300");
    l.forget(300);
    assert_eq!(l.virtual_kinds(), 2, "a is gone");
    l.forget(101);
    l.forget(200);
    assert_eq!(l.virtual_kinds(), 0);
    assert!(!l.involves(101));
}

#[test]
fn holdings_per_process_are_bounded() {
    let limits = Limits {
        holdings: 3,
        ..Limits::default()
    };
    let mut l = Ledger::new(&Machine::uniform(2), limits);
    l.acquire(1, 0, &[item(0, 0.1, true), item(0, 0.1, true)])
        .unwrap();
    assert!(matches!(
        l.acquire(1, 0, &[item(1, 0.1, true), item(1, 0.1, true)]),
        Err(LedgerError::Limit(_))
    ));
    l.acquire(1, 0, &[item(1, 0.1, true)]).unwrap();
}

/// Each process that defines a kind or holds items is watched by the
/// broker (a descriptor each): one user has at most `limits.processes` of
/// them, another definer of the same kind included; a process that is
/// gone frees its place; root is exempt.
#[test]
fn the_processes_one_user_has_watched_are_bounded() {
    let limits = Limits {
        processes: 2,
        ..Limits::default()
    };
    let mut l = Ledger::new(&Machine::uniform(2), limits);
    let user = 1000;
    assert!(l.define(10, user, "gpu", &devs(1, 1)).unwrap());
    assert!(
        l.define(11, user, "gpu", &devs(1, 1)).unwrap(),
        "a second definer"
    );
    let e = l.define(12, user, "gpu", &devs(1, 1)).unwrap_err();
    assert!(
        matches!(&e, LedgerError::Limit(m) if m.contains("limits.processes")),
        "{e:?}"
    );
    assert!(matches!(
        l.acquire(13, user, &[item(0, 0.1, true)]),
        Err(LedgerError::Limit(_))
    ));
    // A watched process asks again: not one more.
    l.acquire(10, user, &[item(0, 0.1, true)]).unwrap();
    // Another user, and root, are not counted against this one.
    l.acquire(20, 1001, &[item(1, 0.1, true)]).unwrap();
    for pid in 30..40 {
        l.acquire(pid, 0, &[item(1, 0.01, true)]).unwrap();
    }
    // One gone frees a place.
    l.forget(11);
    l.define(12, user, "gpu", &devs(1, 1)).unwrap();
}
