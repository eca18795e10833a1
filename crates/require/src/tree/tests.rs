//! The allocation-tree transitions of Poli-C's walk-through, and the
//! invariants under random operation sequences.

use super::*;

const R: Dev = (0, 0);
const G: f64 = 1.0;

fn ask(amount: f64) -> Ask {
    Ask {
        dev: R,
        amount,
        own: Ownership::Default,
    }
}

fn trees() -> Trees {
    let mut t = Trees::new();
    t.set_root(R, G);
    t
}

fn root_free(t: &Trees) -> f64 {
    t.root(R).unwrap().1
}

#[test]
fn the_papers_walkthrough() {
    let (a, b, c) = (0.6, 0.25, 0.2);
    let mut t = trees();
    // 1: thread 1 requires a from the root.
    let na = t.acquire(1, &[ask(a)], false).unwrap()[0];
    assert!((root_free(&t) - (G - a)).abs() < 1e-9);
    // 2: thread 1 spawns thread 2, which shares the allocation.
    t.spawn(1, 2);
    t.unblock(2).unwrap();
    // Thread 2 cannot nest while thread 1 also runs in the same allocation.
    assert!(matches!(
        t.acquire(2, &[ask(b)], false),
        Err(Refusal::Wait { .. })
    ));
    // 3: thread 1 blocks; the allocation stays (thread 2 uses it).
    t.block(1);
    assert!((root_free(&t) - (G - a)).abs() < 1e-9);
    // 4: thread 2 requires b inside a.
    let nb = t.acquire(2, &[ask(b)], false).unwrap()[0];
    t.check().unwrap();
    // 5: thread 2 blocks: b goes back to a, a (unused) goes back to the root.
    t.block(2);
    assert!((root_free(&t) - G).abs() < 1e-9, "root back to G");
    t.check().unwrap();
    // 6 & 7: thread 1 resumes (retakes a) and requires c.
    t.unblock(1).unwrap();
    assert!((root_free(&t) - (G - a)).abs() < 1e-9);
    let _nc = t.acquire(1, &[ask(c)], false).unwrap()[0];
    // 8: thread 2 resumes: a − c = 0.4 ≥ b, so it retakes b.
    t.unblock(2).unwrap();
    t.check().unwrap();
    assert_eq!(t.holding(2, R), Holding::Amount(b));
    // Epilogue: leaving scopes frees everything.
    assert!(t.release(2, &[(R, nb)]));
    t.thread_exit(2);
    let top1 = t.top(1, R).unwrap();
    assert!(t.release(1, &[(R, top1)]));
    assert!(t.release(1, &[(R, na)]));
    t.check().unwrap();
    assert!((root_free(&t) - G).abs() < 1e-9);
    assert!(t.root_idle(R));
}

#[test]
fn blocked_resume_waits_until_the_space_returns() {
    let mut t = trees();
    let _na = t.acquire(1, &[ask(0.7)], false).unwrap();
    t.block(1);
    // Another thread takes most of the root meanwhile.
    let nb = t.acquire(2, &[ask(0.5)], false).unwrap()[0];
    assert_eq!(t.unblock(1), Err(vec![R]), "0.5 free < 0.7 needed");
    assert!(t.release(2, &[(R, nb)]));
    assert_eq!(t.unblock(1), Ok(()));
    t.check().unwrap();
}

#[test]
fn nested_requests_larger_than_their_scope_are_errors() {
    let mut t = trees();
    t.acquire(1, &[ask(0.25)], false).unwrap();
    assert!(matches!(
        t.acquire(1, &[ask(0.5)], false),
        Err(Refusal::TooLarge { .. })
    ));
    assert!(t.acquire(1, &[ask(0.1)], false).is_ok());
}

#[test]
fn children_keep_their_allocation_after_the_parent_leaves() {
    let mut t = trees();
    let na = t.acquire(1, &[ask(1.0)], false).unwrap()[0];
    t.spawn(1, 2);
    t.unblock(2).unwrap();
    assert!(t.release(1, &[(R, na)]));
    // The parent is back at the root, which has nothing free: the child
    // still holds the whole device.
    assert_eq!(t.holding(2, R), Holding::Amount(1.0));
    assert!(matches!(
        t.acquire(1, &[ask(0.5)], false),
        Err(Refusal::Wait { .. })
    ));
    t.thread_exit(2);
    assert!(t.acquire(1, &[ask(0.5)], false).is_ok());
    t.check().unwrap();
}

#[test]
fn private_allocations_are_not_inherited() {
    let mut t = trees();
    let outer = t.acquire(1, &[ask(1.0)], false).unwrap()[0];
    let inner = t
        .acquire(
            1,
            &[Ask {
                dev: R,
                amount: 0.5,
                own: Ownership::Private,
            }],
            false,
        )
        .unwrap()[0];
    let _ = inner;
    t.spawn(1, 2);
    t.unblock(2).unwrap();
    // The child shares the outer allocation, not the private one.
    assert_eq!(t.holding(2, R), Holding::Amount(1.0));
    assert_eq!(t.top(2, R), Some(outer));
    t.check().unwrap();
}

#[test]
fn shared_allocations_coexist_and_exclude_exclusive_ones() {
    let mut t = trees();
    let sh = Ask {
        dev: R,
        amount: 1.0,
        own: Ownership::Shared,
    };
    t.acquire(1, &[sh], false).unwrap();
    t.acquire(2, &[sh], false).unwrap();
    assert!(matches!(
        t.acquire(3, &[ask(0.1)], false),
        Err(Refusal::Wait { .. })
    ));
    t.check().unwrap();
}

#[test]
fn a_policy_unit_is_given_back_as_a_unit() {
    let mut t = trees();
    let s: Dev = (0, 1);
    t.set_root(s, 1.0);
    let made = t
        .acquire(
            1,
            &[
                ask(1.0),
                Ask {
                    dev: s,
                    amount: 1.0,
                    own: Ownership::Default,
                },
            ],
            true,
        )
        .unwrap();
    assert_eq!(made.len(), 2);
    t.block(1);
    assert_eq!(t.root(R).unwrap().1, 1.0);
    assert_eq!(t.root(s).unwrap().1, 1.0);
    t.unblock(1).unwrap();
    assert_eq!(t.root(R).unwrap().1, 0.0);
    t.check().unwrap();
}

#[test]
fn leaving_out_of_order_is_refused() {
    let mut t = trees();
    let a = t.acquire(1, &[ask(0.5)], false).unwrap()[0];
    let _b = t.acquire(1, &[ask(0.25)], false).unwrap()[0];
    assert!(
        !t.release(1, &[(R, a)]),
        "the inner scope must be left first"
    );
    t.check().unwrap();
}

/// Random sequences of operations keep the invariants and never hand out
/// more than a root holds.
#[test]
fn invariants_under_random_operations() {
    use proptest::prelude::*;
    proptest!(ProptestConfig::with_cases(300), |(ops in prop::collection::vec((0u8..6, 0u64..4, 1u32..9), 1..60))| {
        let mut t = trees();
        let mut scopes: HashMap<Tid, Vec<NodeId>> = HashMap::new();
        t.thread_start(0);
        for (op, tid, amt) in ops {
            let amount = amt as f64 / 8.0;
            match op {
                0 | 1 => {
                    if (t.threads.get(&tid).is_some_and(|x| x.running) || !t.threads.contains_key(&tid))
                        && let Ok(made) = t.acquire(tid, &[ask(amount)], false) {
                            scopes.entry(tid).or_default().push(made[0]);
                        }
                }
                2 => {
                    if let Some(n) = scopes.get_mut(&tid).and_then(|s| s.pop()) {
                        if t.threads.get(&tid).is_some_and(|x| x.running) {
                            prop_assert!(t.release(tid, &[(R, n)]));
                        } else {
                            scopes.get_mut(&tid).unwrap().push(n);
                        }
                    }
                }
                3 => t.block(tid),
                4 => { let _ = t.unblock(tid); }
                _ => {
                    let child = 100 + tid * 10 + amt as u64;
                    if !t.threads.contains_key(&child) && t.threads.get(&tid).is_some_and(|x| x.running) {
                        t.spawn(tid, child);
                        let _ = t.unblock(child);
                    }
                }
            }
            prop_assert_eq!(t.check(), Ok(()));
            let (amount_r, free) = t.root(R).unwrap();
            prop_assert!(free >= -1e-9 && free <= amount_r + 1e-9);
        }
    });
}

#[test]
fn deny_frames_restrict_without_taking() {
    let mut t = trees();
    let d = t.acquire(1, &[ask(0.0)], false).unwrap()[0];
    assert_eq!(t.holding(1, R), Holding::Amount(0.0));
    assert_eq!(root_free(&t), G, "a denial takes nothing");
    assert!(
        matches!(
            t.acquire(1, &[ask(0.5)], false),
            Err(Refusal::TooLarge { .. })
        ),
        "nothing can be carved from a denial"
    );
    t.spawn(1, 2);
    t.unblock(2).unwrap();
    assert_eq!(
        t.holding(2, R),
        Holding::Amount(0.0),
        "children inherit the denial"
    );
    assert!(t.release(1, &[(R, d)]));
    assert_eq!(t.holding(1, R), Holding::Unconstrained);
    t.check().unwrap();
}

#[test]
fn repeated_scopes_reuse_their_slots() {
    const M: Dev = (1, 0);
    let mut t = trees();
    t.set_root(M, G);
    let asks = [
        ask(0.5),
        Ask {
            dev: M,
            amount: 0.25,
            own: Ownership::Default,
        },
    ];
    let mut made = Vec::new();
    for _ in 0..1000 {
        t.acquire_into(1, &asks, true, &mut made).unwrap();
        let frames = [(R, made[0]), (M, made[1])];
        assert!(t.release(1, &frames));
    }
    t.check().unwrap();
    assert!((root_free(&t) - G).abs() < 1e-9);
    // Node and unit slots are recycled (two roots, two scope nodes).
    assert!(t.nodes.len() <= 4, "{} node slots", t.nodes.len());
    assert!(t.units.len() <= 1, "{} unit slots", t.units.len());
}

#[test]
fn entered_counts_each_outermost_allocation_once_held_or_waiting() {
    let mut t = trees();
    assert_eq!(t.entered(R), 0.0);
    let a = t.acquire(1, &[ask(0.5)], false).unwrap();
    // A nested allocation is part of its parent's, and a team member
    // shares the parent's: neither adds.
    let b = t.acquire(1, &[ask(0.2)], false).unwrap();
    t.spawn(1, 2);
    assert!((t.entered(R) - 0.5).abs() < 1e-9);
    let c = t.acquire(3, &[ask(0.3)], false).unwrap();
    assert!((t.entered(R) - 0.8).abs() < 1e-9);
    // Thread 3 waits: its allocation goes back to the root but still counts.
    t.block(3);
    assert!((root_free(&t) - 0.5).abs() < 1e-9);
    assert!((t.entered(R) - 0.8).abs() < 1e-9);
    t.unblock(3).unwrap();
    assert!(t.release(3, &[(R, c[0])]));
    assert!((t.entered(R) - 0.5).abs() < 1e-9);
    t.thread_exit(2);
    assert!(t.release(1, &[(R, b[0])]));
    assert!(t.release(1, &[(R, a[0])]));
    assert_eq!(t.entered(R), 0.0, "every scope left: nothing");
    assert_eq!(t.entered((0, 9)), 0.0, "a device without a root");
}
