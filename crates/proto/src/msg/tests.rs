//! Round trips, decoder errors and properties of the wire format.

use super::*;
use proptest::prelude::*;

fn requests() -> Vec<Request> {
    example_requests()
}

#[test]
fn requests_roundtrip() {
    for r in requests() {
        assert_eq!(Request::decode(&r.encode()), Ok(r.clone()), "{r:?}");
    }
}

#[test]
fn replies_roundtrip() {
    for r in example_replies() {
        assert_eq!(Reply::decode(&r.encode()), Ok(r.clone()));
    }
}

/// Found by the `wire` fuzz target: an error reply with a code this
/// version does not define decoded as `Internal` and re-encoded as 10.
#[test]
fn fuzz_unknown_error_codes_are_malformed_not_rewritten() {
    let mut crash =
        b"\x10\xa1\x09\x00\x85\x00\x00\x00\x12\x00\x00\x00\x7e\x00\x02\x00\x0c\x00limits.cells"
            .to_vec();
    // Found at version 9; the same body under this version's header.
    crash[2..4].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    assert!(matches!(
        Reply::decode(&crash),
        Err(FrameError::Body {
            kind: 0x85,
            err: DecodeError::Malformed { field: "code", .. }
        })
    ));
    for code in 1..=12u16 {
        let c = ErrorCode::from_u16(code).expect("defined");
        assert_eq!(c as u16, code);
    }
    assert_eq!(ErrorCode::from_u16(0), None);
    assert_eq!(ErrorCode::from_u16(13), None);
}

#[test]
fn every_reply_kind_has_an_example() {
    let kinds: Vec<u16> = example_replies().iter().map(Reply::kind).collect();
    assert_eq!(kinds, (0x81..=0x8B).collect::<Vec<u16>>());
}

#[test]
fn every_kind_is_covered_by_the_roundtrip_tests() {
    let mut kinds: Vec<u16> = requests().iter().map(Request::kind).collect();
    kinds.sort();
    kinds.dedup();
    assert_eq!(kinds, (0x01..=0x19).collect::<Vec<u16>>());
}

#[test]
fn only_reports_releases_leaves_choices_pool_stats_and_channel_closes_are_one_way() {
    let one_way: Vec<u16> = requests()
        .iter()
        .filter(|r| !r.expects_reply())
        .map(Request::kind)
        .collect();
    assert_eq!(one_way, vec![0x05, 0x0F, 0x17, 0x19, 0x0D, 0x12]);
}

#[test]
fn non_finite_amounts_are_malformed() {
    let mut m = Request::KindRelease {
        items: vec![LedgerItem {
            kind: "cpu".into(),
            dev: 0,
            amount: 1.0,
            shared: false,
        }],
    }
    .encode();
    let at = m.len() - 9;
    m[at..at + 8].copy_from_slice(&f64::NAN.to_bits().to_le_bytes());
    assert!(matches!(
        Request::decode(&m),
        Err(FrameError::Body {
            err: DecodeError::Malformed { .. },
            ..
        })
    ));
}

#[test]
fn header_errors_are_specific() {
    let mut m = Request::Status.encode();
    m[2] = 99;
    assert!(matches!(
        Request::decode(&m),
        Err(FrameError::Version { got: 99 })
    ));
    assert_eq!(
        FrameError::Version { got: 99 }.code(),
        ErrorCode::UnsupportedVersion
    );
    let mut m = Request::Status.encode();
    m[0] = 0;
    assert!(matches!(Request::decode(&m), Err(FrameError::Magic(_))));
    let mut m = Request::Status.encode();
    m[4] = 0x70;
    assert_eq!(Request::decode(&m), Err(FrameError::Kind(0x70)));
    assert!(matches!(
        Request::decode(&[1, 2, 3]),
        Err(FrameError::Frame(_))
    ));
    let big = vec![0u8; MAX_MESSAGE + 1];
    assert_eq!(
        Request::decode(&big),
        Err(FrameError::Oversized(MAX_MESSAGE + 1))
    );
    // Truncated body: header length patched to match, body short.
    let full = Request::Release { cell: 9 }.encode();
    let mut cut = full[..full.len() - 3].to_vec();
    let n = (cut.len() - HEADER_LEN) as u32;
    cut[8..12].copy_from_slice(&n.to_le_bytes());
    assert!(matches!(
        Request::decode(&cut),
        Err(FrameError::Body {
            kind: 0x07,
            err: DecodeError::Truncated(_)
        })
    ));
    // Trailing bytes.
    let mut long = full.clone();
    long.push(0);
    let n = (long.len() - HEADER_LEN) as u32;
    long[8..12].copy_from_slice(&n.to_le_bytes());
    assert!(matches!(
        Request::decode(&long),
        Err(FrameError::Body {
            err: DecodeError::Trailing(1),
            ..
        })
    ));
}

proptest! {
    #[test]
    fn decoder_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let _ = Request::decode(&bytes);
        let _ = Reply::decode(&bytes);
    }

    #[test]
    fn decoder_survives_valid_headers_with_random_bodies(kind in 0u16..0x100, body in prop::collection::vec(any::<u8>(), 0..120)) {
        let mut m = Vec::new();
        m.extend_from_slice(&MAGIC.to_le_bytes());
        m.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        m.extend_from_slice(&kind.to_le_bytes());
        m.extend_from_slice(&0u16.to_le_bytes());
        m.extend_from_slice(&(body.len() as u32).to_le_bytes());
        m.extend_from_slice(&body);
        if let Ok(r) = Request::decode(&m) {
            // Whatever decodes re-encodes to the same bytes.
            prop_assert_eq!(r.encode(), m.clone());
        }
        if let Ok(r) = Reply::decode(&m) {
            prop_assert_eq!(r.encode(), m);
        }
    }

    /// A body cut short, with the header's length patched to match (so
    /// the frame check passes and the body decoder itself must notice).
    #[test]
    fn every_truncated_body_is_an_error(i in 0usize..14, cut in 0usize..64) {
        let m = requests()[i].encode();
        let body = m.len() - HEADER_LEN;
        prop_assume!(cut < body);
        let mut short = m[..HEADER_LEN + cut].to_vec();
        short[8..12].copy_from_slice(&(cut as u32).to_le_bytes());
        match Request::decode(&short) {
            Err(FrameError::Body { kind, err: DecodeError::Truncated(_) }) => {
                prop_assert_eq!(kind, requests()[i].kind());
            }
            other => prop_assert!(false, "cut {} of {:?}: {:?}", cut, requests()[i], other),
        }
    }

    /// A datagram cut anywhere without fixing the header is refused by
    /// the frame check.
    #[test]
    fn every_truncated_datagram_is_an_error(i in 0usize..14, cut in 0usize..64) {
        let m = requests()[i].encode();
        prop_assume!(cut < m.len());
        prop_assert!(Request::decode(&m[..cut]).is_err());
    }
}

#[test]
fn every_goal_round_trips_and_an_unknown_one_is_malformed() {
    for goal in [
        Goal::None,
        Goal::Rate {
            milli_per_s: 200_000,
        },
        Goal::Rate {
            milli_per_s: u64::MAX,
        },
        Goal::P99 { us: 5_000 },
        Goal::P99 { us: u32::MAX },
    ] {
        let (k, v) = spec::goal_fields(goal);
        assert_eq!(spec::goal_from_fields(k, v), Some(goal));
        let req = Request::UpdateSpec {
            cell: 3,
            spec: CellSpec {
                goal,
                ..CellSpec::default()
            },
        };
        assert_eq!(Request::decode(&req.encode()).unwrap(), req);
    }
    assert_eq!(spec::goal_from_fields(3, 0), None, "unknown kind");
    assert_eq!(spec::goal_from_fields(0, 1), None, "none carries no value");
    assert_eq!(
        spec::goal_from_fields(2, u64::from(u32::MAX) + 1),
        None,
        "a p99 bound fits 32 bits"
    );
    let mut bytes = Request::UpdateSpec {
        cell: 1,
        spec: CellSpec::default(),
    }
    .encode();
    // The goal kind follows the time contract (kind u8, a u32, b u32).
    let at = HEADER_LEN + 8 + 12 + 1 + 1 + 9;
    assert_eq!(bytes[at], 0);
    bytes[at] = 9;
    assert!(matches!(
        Request::decode(&bytes),
        Err(FrameError::Body {
            kind: 0x06,
            err: DecodeError::Malformed {
                field: "spec.goal.kind",
                ..
            }
        })
    ));
}

#[test]
fn every_time_contract_round_trips_and_an_unknown_one_is_malformed() {
    for time in [
        TimeContract::Space,
        TimeContract::Fraction {
            ppm: 250_000,
            slice_us: 2_000,
        },
        TimeContract::Triggered {
            period_us: 10_000,
            budget_us: 3_000,
        },
        TimeContract::Message { idle_ms: 50 },
    ] {
        let (k, a, b) = spec::time_fields(time);
        assert_eq!(spec::time_from_fields(k, a, b), Some(time));
        let req = Request::Register {
            name: "t".into(),
            spec: CellSpec {
                min: 1,
                time,
                ..CellSpec::default()
            },
            wait: false,
            members: vec![],
            joins_itself: false,
        };
        let bytes = req.encode();
        assert_eq!(Request::decode(&bytes).unwrap(), req);
    }
    assert_eq!(spec::time_from_fields(9, 0, 0), None);
    // Found by the `wire` fuzz target: unused fields must be 0, or two
    // encodings would decode to one message.
    assert_eq!(spec::time_from_fields(0, 1, 0), None);
    assert_eq!(spec::time_from_fields(0, 0, 1), None);
    assert_eq!(spec::time_from_fields(3, 5, 0x0100_000e), None);
    let mut bytes = Request::UpdateSpec {
        cell: 1,
        spec: CellSpec::default(),
    }
    .encode();
    // The time kind is the byte after cell, min, max, weight, exclusive, placement.
    let at = HEADER_LEN + 8 + 12 + 1 + 1;
    assert_eq!(bytes[at], 0);
    bytes[at] = 7;
    assert!(matches!(
        Request::decode(&bytes),
        Err(FrameError::Body {
            kind: 0x06,
            err: DecodeError::Malformed {
                field: "spec.time.kind",
                ..
            }
        })
    ));
}

#[test]
fn the_header_names_its_kind_as_far_as_the_magic_allows() {
    let mut m = Request::Report {
        cell: 1,
        busy: 1,
        wanted: 1,
        progress: 1,
    }
    .encode();
    assert_eq!(header_kind(&m), Some(0x05));
    m[2] = 0xee; // another version: still named
    assert_eq!(header_kind(&m), Some(0x05));
    assert_eq!(header_kind(&m[..6]), Some(0x05), "six bytes suffice");
    assert_eq!(header_kind(&m[..5]), None);
    m[0] = 0; // not our magic
    assert_eq!(header_kind(&m), None);
    assert_eq!(header_kind(b""), None);
}
