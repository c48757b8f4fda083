//! The broker as a whole: every queue's stats at once, the caller's key, and the documents
//! the broker serves beside the API (its metrics and its OpenAPI document).

use reqwest::Method;
use sluice_wire::{Overview, OverviewRow, WhoAmI};

use crate::client::{Call, Client};
use crate::error::{Error, Result};
use crate::retry::Safety;

impl Client {
    /// Every queue the token may see whose name starts with `prefix` (all of them for
    /// `None`), by name, with its stats: one request per 1000 queues for a dashboard instead
    /// of one per queue. Follows the pages to the end, as [`Client::list_queues`] does.
    ///
    /// # Errors
    /// `invalid_argument` for a prefix no queue name can start with, and as
    /// [`Client::list_queues`].
    pub async fn overview(&self, prefix: Option<&str>) -> Result<Vec<OverviewRow>> {
        let mut rows = Vec::new();
        let mut cursor: Option<String> = None;
        loop {
            let mut call = Call::new(Method::GET, "/v1/stats".into(), Safety::Idempotent);
            if let Some(p) = prefix.filter(|p| !p.is_empty()) {
                call.query.push(("prefix", p.to_owned()));
            }
            if let Some(c) = &cursor {
                call.query.push(("cursor", c.clone()));
            }
            let page: Overview = self.call_json(call).await?;
            rows.extend(page.queues);
            match page.next_cursor {
                Some(next) if cursor.as_ref() == Some(&next) => {
                    return Err(Error::Decode(format!(
                        "the broker answered the same next_cursor ({next}) twice while reading the overview"
                    )));
                }
                Some(next) => cursor = Some(next),
                None => return Ok(rows),
            }
        }
    }

    /// The key this client uses: its name, role, queue patterns and what it may do.
    ///
    /// # Errors
    /// `unauthenticated`; transport failures.
    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.call_json(Call::new(
            Method::GET,
            "/v1/whoami".into(),
            Safety::Idempotent,
        ))
        .await
    }

    /// The broker's Prometheus metrics, as the text `/metrics` serves.
    ///
    /// # Errors
    /// `unauthenticated` or `forbidden` when the broker has keys and this one may not read
    /// stats; [`Error::Decode`] when the answer is not UTF-8; transport failures.
    pub async fn metrics_text(&self) -> Result<String> {
        let call = Call::new(Method::GET, "/metrics".into(), Safety::Idempotent);
        let (_, bytes) = self.execute(&call).await?;
        String::from_utf8(bytes.to_vec())
            .map_err(|e| Error::Decode(format!("GET /metrics: the answer is not UTF-8: {e}")))
    }

    /// The broker's OpenAPI document (`/openapi.json`), as JSON.
    ///
    /// # Errors
    /// Transport failures; [`Error::Decode`] when the answer is not JSON.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        self.call_json(Call::new(
            Method::GET,
            "/openapi.json".into(),
            Safety::Idempotent,
        ))
        .await
    }
}
