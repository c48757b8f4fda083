//! Queue summaries: every message of a queue (typically a DLQ) counted by one key — its last
//! error, its dead-letter reason, its source queue, its message key or one attribute — however
//! many there are.
//!
//! Rules every engine follows:
//! - a message's key is `None` (JSON `null`) when it has no value for it: no last error, no
//!   dead-letter information, no source queue, no message key, no such attribute. `None` is
//!   its own group; an empty error string is the group `""`, distinct from it;
//! - a message's time is when it was dead-lettered, or, without dead-letter information, when
//!   it was first sent; a group's `first_at` and `last_at` are the earliest and latest of these;
//! - a group's `sample_id` is its smallest message id (ids grow with send time);
//! - groups are ordered by count, largest first, ties by key (`null` after every string), and
//!   at most `limit` are answered; `group_count` says how many there are.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::StoreError;
use crate::message::{Message, MessageId};
use crate::redrive::RedriveFilter;
use crate::time::Timestamp;

/// Groups answered when the request names no limit.
pub const DEFAULT_GROUP_LIMIT: u32 = 100;
/// The most groups one answer holds.
pub const MAX_GROUP_LIMIT: u32 = 1000;

/// What a summary groups by.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum GroupBy {
    /// The last error reported.
    Error,
    /// The dead-letter reason (`exhausted`, `rejected`, `lease_expired`, `expired`).
    Reason,
    /// The queue it was dead-lettered or moved from.
    Source,
    /// The key it was sent with (its tenant, customer or account).
    Key,
    /// The value of this attribute.
    Attribute(String),
}

impl GroupBy {
    /// The key of `m` under this grouping.
    pub fn key_of(&self, m: &Message) -> Option<String> {
        match self {
            GroupBy::Error => m.last_error.clone(),
            GroupBy::Reason => m.dead_letter.as_ref().map(|d| d.reason.as_str().to_owned()),
            GroupBy::Source => m.source_queue.as_ref().map(|q| q.as_str().to_owned()),
            GroupBy::Key => m.key.as_ref().map(|k| k.as_str().to_owned()),
            GroupBy::Attribute(name) => m.attributes.get(name).cloned(),
        }
    }
}

impl fmt::Display for GroupBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GroupBy::Error => f.write_str("error"),
            GroupBy::Reason => f.write_str("reason"),
            GroupBy::Source => f.write_str("source"),
            GroupBy::Key => f.write_str("key"),
            GroupBy::Attribute(name) => write!(f, "attribute:{name}"),
        }
    }
}

impl FromStr for GroupBy {
    type Err = StoreError;
    fn from_str(s: &str) -> Result<Self, StoreError> {
        match s {
            "error" => Ok(GroupBy::Error),
            "reason" => Ok(GroupBy::Reason),
            "source" => Ok(GroupBy::Source),
            "key" => Ok(GroupBy::Key),
            _ => match s.strip_prefix("attribute:") {
                Some(name) if !name.is_empty() => Ok(GroupBy::Attribute(name.to_owned())),
                Some(_) => Err(StoreError::invalid(
                    "group_by attribute:NAME needs the attribute's name, e.g. attribute:tenant",
                )),
                None => Err(StoreError::invalid(format!(
                    "group_by must be error, reason, source, key or attribute:NAME, got {s:?}"
                ))),
            },
        }
    }
}

/// What to count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRequest {
    /// The key.
    pub group_by: GroupBy,
    /// Only messages passing this filter are counted.
    pub filter: RedriveFilter,
    /// Answer at most this many groups, 1 – [`MAX_GROUP_LIMIT`].
    pub limit: u32,
}

impl SummaryRequest {
    /// Checks the limit and the filter's texts.
    ///
    /// # Errors
    /// `InvalidArgument` for a limit out of range or a text holding U+0000.
    pub fn validate(&self) -> Result<(), StoreError> {
        self.filter.validate()?;
        if let GroupBy::Attribute(name) = &self.group_by {
            crate::text::refuse_nul("group_by attribute", name)?;
        }
        if self.limit == 0 || self.limit > MAX_GROUP_LIMIT {
            return Err(StoreError::invalid(format!(
                "limit must be 1 to {MAX_GROUP_LIMIT} groups, got {}",
                self.limit
            )));
        }
        Ok(())
    }
}

/// One group of messages sharing a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryGroup {
    /// The key; `None` for messages without a value.
    pub key: Option<String>,
    /// Messages in the group.
    pub count: u64,
    /// The earliest time of its messages.
    pub first_at: Timestamp,
    /// The latest time of its messages.
    pub last_at: Timestamp,
    /// Its smallest message id.
    pub sample_id: MessageId,
}

impl SummaryGroup {
    /// A group of one message.
    pub fn one(key: Option<String>, at: Timestamp, id: MessageId) -> Self {
        SummaryGroup {
            key,
            count: 1,
            first_at: at,
            last_at: at,
            sample_id: id,
        }
    }

    /// Adds `other` (a group with the same key) to this one.
    pub fn absorb(&mut self, other: &SummaryGroup) {
        self.count += other.count;
        self.first_at = self.first_at.min(other.first_at);
        self.last_at = self.last_at.max(other.last_at);
        self.sample_id = self.sample_id.min(other.sample_id);
    }
}

/// The answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    /// Messages counted (in every group, answered or not).
    pub total: u64,
    /// Distinct groups (answered or not).
    pub group_count: u64,
    /// The largest groups, at most the request's limit, in order.
    pub groups: Vec<SummaryGroup>,
}

impl Summary {
    /// Orders `groups` and keeps the first `limit`.
    pub fn from_groups(mut groups: Vec<SummaryGroup>, limit: u32) -> Summary {
        let total = groups.iter().map(|g| g.count).sum();
        let group_count = groups.len() as u64;
        groups.sort_by(order);
        groups.truncate(limit as usize);
        Summary {
            total,
            group_count,
            groups,
        }
    }
}

/// Count descending, then key ascending with `None` last.
fn order(a: &SummaryGroup, b: &SummaryGroup) -> std::cmp::Ordering {
    b.count.cmp(&a.count).then_with(|| match (&a.key, &b.key) {
        (Some(x), Some(y)) => x.cmp(y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => std::cmp::Ordering::Equal,
    })
}

/// The time a message counts at: when it was dead-lettered, else when it was first sent.
pub fn time_of(m: &Message) -> Timestamp {
    m.dead_letter.as_ref().map_or(m.enqueued_at, |d| d.at)
}

/// Groups messages one at a time (for engines or paths that look at whole messages).
#[derive(Debug, Default)]
pub struct Grouper {
    groups: HashMap<Option<String>, SummaryGroup>,
}

impl Grouper {
    /// Counts one message under `key`.
    pub fn add(&mut self, key: Option<String>, at: Timestamp, id: MessageId) {
        match self.groups.get_mut(&key) {
            Some(g) => g.absorb(&SummaryGroup::one(None, at, id)),
            None => {
                self.groups
                    .insert(key.clone(), SummaryGroup::one(key, at, id));
            }
        }
    }

    /// Counts `m` if it passes `req`'s filter.
    pub fn add_message(&mut self, req: &SummaryRequest, m: &Message) {
        if req.filter.matches(m) {
            self.add(req.group_by.key_of(m), time_of(m), m.id);
        }
    }

    /// Adds a whole group.
    pub fn add_group(&mut self, g: SummaryGroup) {
        match self.groups.get_mut(&g.key) {
            Some(mine) => mine.absorb(&g),
            None => {
                self.groups.insert(g.key.clone(), g);
            }
        }
    }

    /// The answer, with at most `limit` groups.
    pub fn finish(self, limit: u32) -> Summary {
        Summary::from_groups(self.groups.into_values().collect(), limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_by_parses_and_names_the_allowed_values() {
        assert_eq!("error".parse::<GroupBy>().unwrap(), GroupBy::Error);
        assert_eq!(
            "attribute:tenant".parse::<GroupBy>().unwrap(),
            GroupBy::Attribute("tenant".into())
        );
        let e = "colour".parse::<GroupBy>().unwrap_err().to_string();
        assert!(
            e.contains("error, reason, source, key or attribute:NAME"),
            "{e}"
        );
        assert!("attribute:".parse::<GroupBy>().is_err());
        for g in ["error", "reason", "source", "key", "attribute:a:b"] {
            assert_eq!(g.parse::<GroupBy>().unwrap().to_string(), g);
        }
    }

    #[test]
    fn groups_are_ordered_by_count_then_key_with_null_last_and_cut() {
        let mut g = Grouper::default();
        let t = Timestamp(5);
        g.add(None, t, MessageId(1));
        g.add(Some("b".into()), t, MessageId(2));
        g.add(Some("a".into()), Timestamp(9), MessageId(4));
        g.add(Some("a".into()), Timestamp(3), MessageId(3));
        g.add(Some("c".into()), t, MessageId(5));
        let s = g.finish(3);
        assert_eq!(s.total, 5);
        assert_eq!(s.group_count, 4);
        let keys: Vec<_> = s.groups.iter().map(|g| g.key.clone()).collect();
        assert_eq!(keys, [Some("a".into()), Some("b".into()), Some("c".into())]);
        assert_eq!(s.groups[0].first_at, Timestamp(3));
        assert_eq!(s.groups[0].last_at, Timestamp(9));
        assert_eq!(s.groups[0].sample_id, MessageId(3));
    }
}
