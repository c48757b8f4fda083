//! Queue summaries: every message of a queue (typically a DLQ) counted by one key.

use reqwest::Method;
use sluice_wire::{SummaryQuery, SummaryView};

use crate::client::{Call, Client, queue};
use crate::error::Result;
use crate::retry::Safety;

impl Client {
    /// Counts every message of a queue (any queue, typically a DLQ) by its last error,
    /// dead-letter reason, source queue or one attribute (`query.group_by`: `error`, the
    /// default, `reason`, `source` or `attribute:NAME`), with the browse's filters. The
    /// largest groups come first, at most `query.limit` of them (100 unless given, at most
    /// 1000); `more_groups` says when some were left out.
    ///
    /// # Errors
    /// `queue_not_found`; `invalid_argument` for an unknown grouping, a limit out of range,
    /// an attribute not written `key=value` or a time that is not RFC 3339.
    pub async fn summary(&self, name: &str, query: &SummaryQuery) -> Result<SummaryView> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::GET,
            format!("/v1/queues/{q}/summary"),
            Safety::Idempotent,
        );
        call.query = query.to_pairs();
        self.call_json(call).await
    }
}
