//! Wire types of `GET /v1/queues/{q}/summary`: every message of a queue counted by one key.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::redrive::RedriveFilterView;
use sluice_core::error::StoreError;
use sluice_core::name::QueueName;
use sluice_core::summary::{DEFAULT_GROUP_LIMIT, GroupBy, Summary, SummaryGroup, SummaryRequest};
use sluice_core::time::rfc3339;

/// `GET /v1/queues/{q}/summary?group_by=&limit=&error_contains=&error_is=&reason=&source_queue=&key=&attribute=&dead_lettered_before=&dead_lettered_after=`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SummaryQuery {
    /// `error` (default), `reason`, `source`, `key` or `attribute:NAME`.
    pub group_by: Option<String>,
    /// Most groups to answer, 1 – 1000. Default 100.
    pub limit: Option<u32>,
    /// Only messages whose `last_error` contains this text.
    pub error_contains: Option<String>,
    /// Only messages whose `last_error` is exactly this text.
    pub error_is: Option<String>,
    /// Only messages dead-lettered for this reason: `exhausted`, `lease_expired`, `rejected`
    /// or `expired`.
    pub reason: Option<String>,
    /// Only messages dead-lettered or moved from this queue.
    pub source_queue: Option<String>,
    /// Only messages sent with this key.
    pub key: Option<String>,
    /// Only messages with this attribute value, written `key=value`; repeat the parameter for
    /// several (all must match).
    #[serde(default)]
    pub attribute: Vec<String>,
    /// Only messages dead-lettered before this time (RFC 3339).
    pub dead_lettered_before: Option<String>,
    /// Only messages dead-lettered at or after this time (RFC 3339).
    pub dead_lettered_after: Option<String>,
}

impl SummaryQuery {
    /// Reads the query string's pairs (a parameter may repeat only when it is `attribute`).
    ///
    /// # Errors
    /// `InvalidArgument` naming an unknown or repeated parameter, or a limit that is not a
    /// number.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<SummaryQuery, StoreError> {
        let mut q = SummaryQuery::default();
        for (k, v) in pairs {
            // An empty text counts as not given, as on every route; an empty number does not.
            let once = |slot: &mut Option<String>| {
                if v.is_empty() {
                    return Ok(());
                }
                if slot.replace(v.clone()).is_some() {
                    return Err(StoreError::invalid(format!(
                        "query parameter {k} is given twice; give it once"
                    )));
                }
                Ok(())
            };
            match k.as_str() {
                "group_by" => once(&mut q.group_by)?,
                "error_contains" => once(&mut q.error_contains)?,
                "error_is" => once(&mut q.error_is)?,
                "reason" => once(&mut q.reason)?,
                "source_queue" => once(&mut q.source_queue)?,
                "key" => once(&mut q.key)?,
                "dead_lettered_before" => once(&mut q.dead_lettered_before)?,
                "dead_lettered_after" => once(&mut q.dead_lettered_after)?,
                "attribute" if v.is_empty() => {}
                "attribute" => q.attribute.push(v.clone()),
                "limit" => {
                    let n = v.parse::<u32>().map_err(|_| {
                        StoreError::invalid(format!(
                            "limit must be a number of groups from 1 to 1000, got {v:?}"
                        ))
                    })?;
                    if q.limit.replace(n).is_some() {
                        return Err(StoreError::invalid(
                            "query parameter limit is given twice; give it once",
                        ));
                    }
                }
                _ => {
                    return Err(StoreError::invalid(format!(
                        "unknown query parameter {k:?}; expected group_by, limit, \
                         error_contains, error_is, reason, source_queue, key, attribute, \
                         dead_lettered_before or dead_lettered_after"
                    )));
                }
            }
        }
        Ok(q)
    }

    /// The query string's pairs, for a client.
    pub fn to_pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut put = |k: &'static str, v: &Option<String>| {
            if let Some(v) = v {
                out.push((k, v.clone()));
            }
        };
        put("group_by", &self.group_by);
        put("limit", &self.limit.map(|n| n.to_string()));
        put("error_contains", &self.error_contains);
        put("error_is", &self.error_is);
        put("reason", &self.reason);
        put("source_queue", &self.source_queue);
        put("key", &self.key);
        put("dead_lettered_before", &self.dead_lettered_before);
        put("dead_lettered_after", &self.dead_lettered_after);
        for a in &self.attribute {
            out.push(("attribute", a.clone()));
        }
        out
    }

    /// The core request, validated.
    ///
    /// # Errors
    /// `InvalidArgument` for an unknown grouping, a limit out of range, an attribute not
    /// written `key=value` or a time not RFC 3339.
    pub fn to_core(&self) -> Result<SummaryRequest, StoreError> {
        let group_by: GroupBy = self.group_by.as_deref().unwrap_or("error").parse()?;
        let mut attributes = BTreeMap::new();
        for a in &self.attribute {
            let (k, v) = a.split_once('=').ok_or_else(|| {
                StoreError::invalid(format!("attribute must be written key=value, got {a:?}"))
            })?;
            attributes.insert(k.to_string(), v.to_string());
        }
        let reason = self
            .reason
            .as_deref()
            .map(|r| r.parse::<sluice_core::message::DeadLetterReason>())
            .transpose()?;
        let filter = RedriveFilterView {
            error_contains: self.error_contains.clone(),
            error_is: self.error_is.clone(),
            reason: reason.map(Into::into),
            source_queue: self.source_queue.clone(),
            key: self.key.clone(),
            attributes,
            dead_lettered_before: self.dead_lettered_before.clone(),
            dead_lettered_after: self.dead_lettered_after.clone(),
        }
        .to_core()?;
        let req = SummaryRequest {
            group_by,
            filter,
            limit: self.limit.unwrap_or(DEFAULT_GROUP_LIMIT),
        };
        req.validate()?;
        Ok(req)
    }
}

/// One group of a summary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SummaryGroupView {
    /// The key: the error text, reason, source queue, message key or attribute value; `null`
    /// for messages without one.
    pub key: Option<String>,
    /// Messages in the group.
    pub count: u64,
    /// The earliest dead-lettering time in the group (for a message without dead-letter
    /// information, when it was sent), RFC 3339.
    pub first_at: String,
    /// The latest such time, RFC 3339.
    pub last_at: String,
    /// One message of the group (its smallest id).
    pub sample_id: String,
}

impl From<&SummaryGroup> for SummaryGroupView {
    fn from(g: &SummaryGroup) -> Self {
        SummaryGroupView {
            key: g.key.clone(),
            count: g.count,
            first_at: rfc3339(g.first_at),
            last_at: rfc3339(g.last_at),
            sample_id: g.sample_id.to_string(),
        }
    }
}

/// `GET /v1/queues/{q}/summary`: every message of the queue counted, largest groups first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SummaryView {
    /// The queue.
    pub queue: String,
    /// What was grouped by.
    pub group_by: String,
    /// Messages counted: every message passing the filters, in every group.
    pub total: u64,
    /// Distinct groups, answered or not.
    pub group_count: u64,
    /// True when more groups exist than were answered (raise `limit`, up to 1000).
    pub more_groups: bool,
    /// The groups, by count (largest first), ties by key (`null` last).
    pub groups: Vec<SummaryGroupView>,
}

impl SummaryView {
    /// The view of `s`.
    pub fn new(queue: &QueueName, group_by: &GroupBy, s: &Summary) -> Self {
        SummaryView {
            queue: queue.as_str().to_owned(),
            group_by: group_by.to_string(),
            total: s.total,
            group_count: s.group_count,
            more_groups: s.group_count > s.groups.len() as u64,
            groups: s.groups.iter().map(SummaryGroupView::from).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn pairs_round_trip_with_repeated_attributes() {
        let q = SummaryQuery::from_pairs(&pairs(&[
            ("group_by", "reason"),
            ("attribute", "a=1"),
            ("attribute", "b=2"),
            ("limit", "7"),
        ]))
        .unwrap();
        assert_eq!(q.attribute, ["a=1", "b=2"]);
        let back: Vec<(String, String)> = q
            .to_pairs()
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        assert_eq!(SummaryQuery::from_pairs(&back).unwrap(), q);
        let r = q.to_core().unwrap();
        assert_eq!(r.filter.attributes.len(), 2);
        assert_eq!(r.limit, 7);
    }

    #[test]
    fn bad_input_says_what_is_allowed() {
        let e = SummaryQuery::from_pairs(&pairs(&[("colour", "x")])).unwrap_err();
        assert!(e.to_string().contains("expected group_by"), "{e}");
        let e = SummaryQuery::from_pairs(&pairs(&[("limit", "x")])).unwrap_err();
        assert!(e.to_string().contains("1 to 1000"), "{e}");
        let q = SummaryQuery {
            limit: Some(1001),
            ..Default::default()
        };
        assert!(q.to_core().unwrap_err().to_string().contains("1 to 1000"));
        let q = SummaryQuery {
            attribute: vec!["novalue".into()],
            ..Default::default()
        };
        assert!(q.to_core().unwrap_err().to_string().contains("key=value"));
    }
}
