//! Queue names: 1–80 characters of `[A-Za-z0-9_.-]`. A new queue's name is also made of
//! dot-separated parts (it does not start or end with `.` nor hold `..`): HTTP clients and
//! proxies rewrite paths such as `/v1/queues/..`, so such a queue could not be addressed.
//! Queues created under the older rule keep their names and stay reachable.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// Longest queue name accepted.
pub const MAX_QUEUE_NAME_LEN: usize = 80;

/// Queue (and schedule) names as a regular expression: what [`QueueName::new`] accepts,
/// for schemas; the length is [`MAX_QUEUE_NAME_LEN`].
pub const NAME_PATTERN: &str = "^[A-Za-z0-9_.-]+$";
/// Names as new queues may have them ([`QueueName::check_new`]): dot-separated parts.
pub const NEW_NAME_PATTERN: &str = "^[A-Za-z0-9_-]+(\\.[A-Za-z0-9_-]+)*$";
/// A name prefix (listings): what a queue name may start with, the empty prefix included.
pub const PREFIX_PATTERN: &str = "^[A-Za-z0-9_.-]*$";

/// Whether `c` may appear in a queue name: an ASCII letter or digit, `_`, `.` or `-`.
pub fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')
}

/// A validated queue name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct QueueName(String);

impl QueueName {
    /// Validates `name`.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] when the name is empty, longer than 80 characters, or
    /// holds a character outside `[A-Za-z0-9_.-]`.
    pub fn new(name: impl Into<String>) -> Result<Self, StoreError> {
        let name = name.into();
        if name.is_empty() || name.len() > MAX_QUEUE_NAME_LEN {
            return Err(StoreError::invalid(format!(
                "queue name must be 1 to {MAX_QUEUE_NAME_LEN} characters long, got {}",
                name.len()
            )));
        }
        if let Some(bad) = name.chars().find(|c| !is_name_char(*c)) {
            return Err(StoreError::invalid(format!(
                "queue name \"{name}\" contains '{bad}'; use only letters, digits, '_', '.' and '-'"
            )));
        }
        Ok(QueueName(name))
    }

    /// Checks the rule for names of new queues: besides the alphabet, no `.` at the start or
    /// the end and no `..`, which HTTP clients and proxies rewrite as path segments.
    ///
    /// # Errors
    /// [`StoreError::InvalidArgument`] naming the rule.
    pub fn check_new(&self) -> Result<(), StoreError> {
        let n = &self.0;
        if n.starts_with('.') || n.ends_with('.') || n.contains("..") {
            return Err(StoreError::invalid(format!(
                "queue name \"{n}\" cannot be given to a new queue: names are dot-separated parts \
                 (no '.' at the start or the end, no '..'), since HTTP clients and proxies \
                 rewrite such paths; use a name like \"orders.v2\""
            )));
        }
        Ok(())
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The default dead-letter queue name for this queue: `<name>.dlq`, cut to the length
    /// limit when the source name is already long.
    pub fn default_dlq(&self) -> QueueName {
        let mut s = format!("{}.dlq", self.0);
        if s.len() > MAX_QUEUE_NAME_LEN {
            s = format!("{}.dlq", &self.0[..MAX_QUEUE_NAME_LEN - 4]);
        }
        if s == self.0 {
            // A full-length name ending in `.dlq` would be its own DLQ: the character before
            // the suffix changes instead (names are ASCII).
            let keep = &self.0[..MAX_QUEUE_NAME_LEN - 5];
            let other = if self.0.as_bytes()[MAX_QUEUE_NAME_LEN - 5] == b'_' {
                '-'
            } else {
                '_'
            };
            s = format!("{keep}{other}.dlq");
        }
        QueueName(s)
    }
}

impl TryFrom<String> for QueueName {
    type Error = StoreError;
    fn try_from(s: String) -> Result<Self, StoreError> {
        QueueName::new(s)
    }
}

impl From<QueueName> for String {
    fn from(q: QueueName) -> String {
        q.0
    }
}

/// A name orders, compares and hashes as its text, so maps keyed by names can be searched
/// and ranged by `&str` (a page of a listing starts at a prefix that need not be a name).
impl std::borrow::Borrow<str> for QueueName {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for QueueName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_alphabet() {
        assert!(QueueName::new("orders.v2_high-prio").is_ok());
        assert!(QueueName::new("a".repeat(80)).is_ok());
    }

    #[test]
    fn new_queues_have_dot_separated_names() {
        for bad in [".", "..", "...", "a..b", ".hidden", "trailing."] {
            let name = QueueName::new(bad).expect("an existing queue may have it");
            let e = name
                .check_new()
                .expect_err("refused for a new queue")
                .to_string();
            assert!(e.contains("no '..'"), "{e}");
        }
        for good in ["orders", "orders.v2", "a.b.c", "x_y-z.dlq"] {
            QueueName::new(good).unwrap().check_new().expect(good);
        }
    }

    #[test]
    fn refuses_empty_long_and_odd_names() {
        for bad in ["", "has space", "slash/y", "ünicode", &"a".repeat(81)] {
            assert!(QueueName::new(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn default_dlq_stays_within_the_limit() {
        let long = QueueName::new("q".repeat(80)).unwrap();
        assert!(long.default_dlq().as_str().len() <= MAX_QUEUE_NAME_LEN);
        for stem in ["q".repeat(76), format!("{}_", "q".repeat(75))] {
            let q = QueueName::new(format!("{stem}.dlq")).unwrap();
            let dlq = q.default_dlq();
            assert_ne!(dlq, q, "a queue is never its own default DLQ");
            assert!(dlq.as_str().len() <= MAX_QUEUE_NAME_LEN && dlq.as_str().ends_with(".dlq"));
        }
        assert_eq!(
            QueueName::new("jobs").unwrap().default_dlq().as_str(),
            "jobs.dlq"
        );
    }

    #[test]
    fn the_patterns_say_what_the_checks_do() {
        let class = |p: &str| {
            p.trim_start_matches('^')
                .split(['+', '*'])
                .next()
                .unwrap()
                .to_owned()
        };
        assert_eq!(class(NAME_PATTERN), "[A-Za-z0-9_.-]");
        assert_eq!(class(PREFIX_PATTERN), "[A-Za-z0-9_.-]");
        for c in (0u8..=127).map(char::from) {
            let in_class = c.is_ascii_alphanumeric() || "_.-".contains(c);
            assert_eq!(is_name_char(c), in_class, "{c:?}");
        }
        assert!(NEW_NAME_PATTERN.starts_with("^[A-Za-z0-9_-]+"));
    }
}
