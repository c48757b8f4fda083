//! Fuzzing of the opaque strings clients hand back to the broker: receipts, browse cursors,
//! queue-listing cursors, message and redrive ids. Each is parsed from whatever a client
//! sends, so parsing must refuse every string it did not hand out, without panicking, and
//! every string it hands out must parse back to what it encoded.
//!
//! Property tests stand in for a coverage-guided fuzzer (stable toolchain only). Each runs a
//! few thousand cases in the ordinary suite; `SLUICE_FUZZ_CASES=N` runs N instead:
//!
//! ```sh
//! SLUICE_FUZZ_CASES=1000000 cargo test --release -p sluice-core --test fuzz_cursors
//! ```

use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use sluice_core::message::MessageId;
use sluice_core::receipt::Receipt;
use sluice_core::store::{BrowseCursor, QueuePageRequest, queue_cursor};
use sluice_core::{QueueName, RedriveId};

/// `cases` in the ordinary suite, or `SLUICE_FUZZ_CASES` for a long run.
fn config(cases: u32) -> ProptestConfig {
    let cases = std::env::var("SLUICE_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(cases);
    ProptestConfig {
        cases,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Strings a client might send: anything, and near misses of the real alphabets.
fn garbage() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[0-9a-fA-F.+-]{0,40}",
        "[A-Za-z0-9_-]{0,30}",
        "[0-9]{0,3}\\.[+-]?[0-9]{0,25}\\.[+-]?[0-9a-fA-F]{0,20}",
    ]
}

/// A change to a valid string: replace, insert or remove one character, or cut it short.
fn mutate(s: &str, at: usize, c: char, how: u8) -> String {
    let mut chars: Vec<char> = s.chars().collect();
    let n = chars.len();
    match how % 4 {
        0 if n > 0 => chars[at % n] = c,
        1 => chars.insert(at % (n + 1), c),
        2 if n > 0 => {
            chars.remove(at % n);
        }
        _ => chars.truncate(at % (n + 1)),
    }
    chars.into_iter().collect()
}

fn queue_name() -> impl Strategy<Value = QueueName> {
    "[a-zA-Z0-9_][a-zA-Z0-9_.-]{0,79}".prop_map(|s| QueueName::new(s).expect("a valid name"))
}

fn page(cursor: Option<String>) -> QueuePageRequest {
    QueuePageRequest {
        prefix: String::new(),
        limit: 10,
        cursor,
    }
}

proptest! {
    #![proptest_config(config(3000))]

    #[test]
    fn receipts_round_trip_and_garbage_is_refused(
        id: u64, token: u64, s in garbage(), at: usize, c: char, how: u8,
    ) {
        let r = Receipt { id: MessageId(id), token };
        let text = r.to_string();
        prop_assert_eq!(text.parse::<Receipt>().expect("parses"), r);
        for s in [s, mutate(&text, at, c, how)] {
            // Whatever parses is a receipt that prints as the string it came from: exactly
            // one string names each receipt.
            if let Ok(p) = s.parse::<Receipt>() {
                prop_assert_eq!(p.to_string(), s);
            }
        }
    }

    #[test]
    fn browse_cursors_round_trip_and_garbage_is_refused(
        part in 0u8..3, at: i64, id: u64, s in garbage(), pos: usize, c: char, how: u8,
    ) {
        let cursor = BrowseCursor { part, at, id };
        let text = cursor.to_string();
        prop_assert_eq!(text.parse::<BrowseCursor>().expect("parses"), cursor);
        for s in [s, mutate(&text, pos, c, how)] {
            if let Ok(p) = s.parse::<BrowseCursor>() {
                // Lenient about signs and leading zeros, but what it reads is a cursor it
                // could have handed out, and stable.
                prop_assert!(p.part <= 2);
                prop_assert_eq!(p.to_string().parse::<BrowseCursor>().expect("re-parses"), p);
            }
        }
    }

    #[test]
    fn queue_page_cursors_round_trip_and_garbage_is_refused(
        name in queue_name(), s in garbage(), at: usize, c: char, how: u8,
    ) {
        let cursor = queue_cursor(&name);
        let range = page(Some(cursor.clone())).range().expect("a cursor handed out");
        prop_assert_eq!(range.after.as_ref(), Some(&name));
        for s in [s, mutate(&cursor, at, c, how)] {
            if let Ok(range) = page(Some(s.clone())).range() {
                // Exactly the cursors `queue_cursor` hands out are read.
                let after = range.after.expect("a cursor names a queue");
                prop_assert_eq!(queue_cursor(&after), s);
            }
        }
    }

    #[test]
    fn ids_round_trip_and_garbage_is_refused(
        id: u64, s in garbage(), at: usize, c: char, how: u8,
    ) {
        let text = MessageId(id).to_string();
        prop_assert_eq!(text.parse::<MessageId>().expect("parses"), MessageId(id));
        let redrive = RedriveId(id).to_string();
        prop_assert_eq!(redrive.parse::<RedriveId>().expect("parses"), RedriveId(id));
        for s in [s, mutate(&text, at, c, how), mutate(&redrive, at, c, how)] {
            if let Ok(p) = s.parse::<MessageId>() {
                prop_assert_eq!(p.to_string(), s.to_ascii_lowercase());
            }
            if let Ok(p) = s.parse::<RedriveId>() {
                prop_assert_eq!(p.to_string().parse::<RedriveId>().expect("re-parses"), p);
            }
        }
    }
}

#[test]
fn cursors_at_the_edges_of_their_numbers_parse_or_are_refused() {
    for s in [
        "2.-9223372036854775808.ffffffffffffffff",
        "2.9223372036854775807.0",
        "0.9223372036854775808.0",
        "0.0.10000000000000000",
        "3.0.0",
        "256.0.0",
        "0.0.",
        "..",
        "0.0.0.0",
    ] {
        let _ = s.parse::<BrowseCursor>();
    }
    // A queue cursor of the longest name, one longer, and odd or non-hex lengths.
    let long = "61".repeat(200);
    for s in [long.as_str(), "6", "zz", "c3a9", "00", ""] {
        let _ = page(Some(s.to_owned())).range();
    }
}
