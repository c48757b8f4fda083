//! Paged queue listings: a page of queues in name order, narrowed to a prefix, continuing
//! after an opaque cursor.
//!
//! Paging is by key: a cursor names the last queue a page returned, and the next page starts
//! at the first name after it. So a walk over every page returns each queue that exists for the
//! whole walk exactly once, whatever is created or deleted meanwhile (a queue created or
//! deleted during the walk may or may not appear, and never twice), and a page costs the same
//! however many queues there are.

use crate::config::QueueInfo;
use crate::error::StoreError;
use crate::name::{MAX_QUEUE_NAME_LEN, QueueName};

/// Page size of a queue listing when none is asked for. SQS's `ListQueues` answers at most
/// this many too.
pub const DEFAULT_QUEUE_PAGE: u32 = 1000;

/// Largest page of a queue listing.
pub const MAX_QUEUE_PAGE: u32 = 1000;

/// Every cursor a listing hands out and accepts, as a regular expression: lower-case hex of
/// a queue name's bytes (each one of `[A-Za-z0-9_.-]`), 1 to 80 of them. Clients treat the
/// cursor as opaque; the API document states the pattern so that what it allows is exactly
/// what the broker accepts.
pub const QUEUE_CURSOR_PATTERN: &str =
    "^(?:2[de]|3[0-9]|4[1-9a-f]|5[0-9af]|6[1-9a-f]|7[0-9a]){1,80}$";

/// A page request for listing queues.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePageRequest {
    /// Only queues whose name starts with this (empty: every queue).
    pub prefix: String,
    /// Most queues in the page (1–1000).
    pub limit: u32,
    /// `next_cursor` of the previous page; `None` starts at the first name.
    pub cursor: Option<String>,
}

impl Default for QueuePageRequest {
    fn default() -> Self {
        QueuePageRequest {
            prefix: String::new(),
            limit: DEFAULT_QUEUE_PAGE,
            cursor: None,
        }
    }
}

/// One page of queues, by name.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePage {
    /// The queues, in name order (bytewise).
    pub queues: Vec<QueueInfo>,
    /// Pass this as the next request's cursor while more queues remain; `None` at the end.
    pub next_cursor: Option<String>,
}

/// A page request checked and decoded: what an engine reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRange {
    /// Only names starting with this.
    pub prefix: String,
    /// Only names after this one (the last of the previous page).
    pub after: Option<QueueName>,
    /// Most queues in the page.
    pub limit: usize,
}

impl QueuePageRequest {
    /// The request checked and its cursor decoded (run by `Checked`, and by every engine to
    /// read the cursor, so both refuse the same input).
    ///
    /// # Errors
    /// `InvalidArgument` for a limit outside 1–1000, a prefix no queue name can start with,
    /// or a cursor that is not one a page handed out.
    pub fn range(&self) -> Result<QueueRange, StoreError> {
        if self.limit == 0 || self.limit > MAX_QUEUE_PAGE {
            return Err(StoreError::invalid(format!(
                "limit must be 1 to {MAX_QUEUE_PAGE}, got {}",
                self.limit
            )));
        }
        check_prefix(&self.prefix)?;
        let after = self.cursor.as_deref().map(decode_cursor).transpose()?;
        Ok(QueueRange {
            prefix: self.prefix.clone(),
            after,
            limit: self.limit as usize,
        })
    }
}

impl QueueRange {
    /// The first name past every name with the prefix, for a range scan (`None` for the empty
    /// prefix). Names are ASCII, so the prefix with its last byte raised by one is it.
    pub fn prefix_end(&self) -> Option<String> {
        let mut bytes = self.prefix.clone().into_bytes();
        let last = bytes.pop()?;
        bytes.push(last + 1);
        // Every byte of a checked prefix is ASCII below 0x7f, so the raised one is too.
        String::from_utf8(bytes).ok()
    }

    /// The page out of the first queues of the range, in order: an engine reads up to
    /// `limit + 1` of them, and the one past the page only tells that more remain.
    pub fn page(&self, mut found: Vec<QueueInfo>) -> QueuePage {
        let more = found.len() > self.limit;
        found.truncate(self.limit);
        let next_cursor = if more {
            found.last().map(|q| queue_cursor(&q.name))
        } else {
            None
        };
        QueuePage {
            queues: found,
            next_cursor,
        }
    }
}

/// The cursor that continues a listing after `last`: the name's bytes in lower-case hex
/// ([`QUEUE_CURSOR_PATTERN`]). Clients treat it as opaque.
pub fn queue_cursor(last: &QueueName) -> String {
    use std::fmt::Write as _;
    last.as_str().bytes().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// The queue name a cursor continues after; anything [`queue_cursor`] does not hand out is
/// refused (upper-case hex too, so the document's pattern is exact).
fn decode_cursor(cursor: &str) -> Result<QueueName, StoreError> {
    let bad = || StoreError::bad_cursor(", or leave it out to start at the first queue");
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    if !cursor.len().is_multiple_of(2) {
        return Err(bad());
    }
    let bytes = cursor
        .as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(bad)?;
    let name = String::from_utf8(bytes).map_err(|_| bad())?;
    QueueName::new(name).map_err(|_| bad())
}

fn check_prefix(prefix: &str) -> Result<(), StoreError> {
    if prefix.len() > MAX_QUEUE_NAME_LEN {
        return Err(StoreError::invalid(format!(
            "prefix is {} characters long, but queue names have at most {MAX_QUEUE_NAME_LEN}",
            prefix.len()
        )));
    }
    if let Some(bad) = prefix.chars().find(|c| !crate::name::is_name_char(*c)) {
        return Err(StoreError::invalid(format!(
            "prefix \"{prefix}\" contains '{bad}', which no queue name holds; use only letters, \
             digits, '_', '.' and '-'"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;

    fn req(prefix: &str, limit: u32, cursor: Option<&str>) -> QueuePageRequest {
        QueuePageRequest {
            prefix: prefix.to_owned(),
            limit,
            cursor: cursor.map(str::to_owned),
        }
    }

    #[test]
    fn cursors_round_trip_and_garbage_is_refused() {
        let name = QueueName::new("orders.v2_high-prio").unwrap();
        let c = queue_cursor(&name);
        assert_eq!(req("", 10, Some(&c)).range().unwrap().after, Some(name));
        assert_eq!(c, "6f72646572732e76325f686967682d7072696f");
        // Not hex, odd, upper case, bytes that are not text, text that is no queue name
        // ("a b"), too long a name, nothing.
        let long = "61".repeat(81);
        for bad in ["!!", "a", "6F", "fffe", "612062", long.as_str(), ""] {
            let e = req("", 10, Some(bad)).range().expect_err(bad);
            assert_eq!(e.code(), ErrorCode::InvalidArgument, "{bad}");
            assert!(e.to_string().contains("next_cursor"), "{e}");
        }
    }

    #[test]
    fn the_pattern_admits_exactly_the_bytes_of_names() {
        // Each byte's two digits as the pattern's alternatives spell them.
        let admitted = |b: u8| {
            let (hi, lo) = (b >> 4, b & 15);
            match hi {
                2 => lo == 0xd || lo == 0xe,
                3 => lo <= 9,
                4 | 6 => lo >= 1,
                5 => lo <= 0xa || lo == 0xf,
                7 => lo <= 0xa,
                _ => false,
            }
        };
        for b in 0..=255u8 {
            let in_names = b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-');
            assert_eq!(admitted(b), in_names, "byte {b:#x}");
            let cursor = format!("{b:02x}");
            assert_eq!(
                req("", 1, Some(&cursor)).range().is_ok(),
                in_names,
                "cursor {cursor}"
            );
        }
        assert!(QUEUE_CURSOR_PATTERN.ends_with("){1,80}$"));
    }

    #[test]
    fn limits_and_prefixes_are_checked() {
        for limit in [0, 1001] {
            let e = req("", limit, None).range().expect_err("limit");
            assert!(e.to_string().contains("limit must be 1 to 1000"), "{e}");
        }
        assert!(req("", 1, None).range().is_ok() && req("", 1000, None).range().is_ok());
        let e = req("a b", 10, None).range().expect_err("space");
        assert!(e.to_string().contains("contains ' '"), "{e}");
        let e = req(&"a".repeat(81), 10, None).range().expect_err("long");
        assert!(e.to_string().contains("at most 80"), "{e}");
    }

    #[test]
    fn the_prefix_end_is_past_every_name_with_the_prefix() {
        let end = |p: &str| req(p, 1, None).range().unwrap().prefix_end();
        assert_eq!(end(""), None);
        assert_eq!(end("ab").as_deref(), Some("ac"));
        assert_eq!(end("z").as_deref(), Some("{"));
        // '-' is followed by '.' in byte order: "a.x" has no "a-" prefix and is past the end.
        assert_eq!(end("a-").as_deref(), Some("a."));
        assert!("a-zzzz" < "a.");
    }
}
