//! Queue configuration and administration: `PUT/GET/DELETE /v1/queues/{q}`, `GET /v1/queues`,
//! `POST /v1/queues/{q}/pause|resume|purge|breaker`.

use reqwest::Method;
use sluice_core::adaptive::BreakerForce;
use sluice_wire::{
    BreakerRequest, FlowView, KeyFlowView, PurgeResponse, QueueConfigRequest, QueueList,
    QueueListQuery, QueueView,
};

use crate::client::{Call, Client, queue};

/// What a key must escape to be one path segment: everything but unreserved characters.
const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');
use crate::error::{Error, Result};
use crate::retry::Safety;

/// The answer to [`Client::put_queue`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuePut {
    /// True when the queue was created, false when an existing queue was updated.
    pub created: bool,
    /// The queue with its full configuration (and any `warnings`).
    pub queue: QueueView,
}

impl Client {
    /// Every queue the token may see, by name: follows the listing's pages to the end (see
    /// [`Client::list_queues_page`] for one page at a time).
    ///
    /// # Errors
    /// [`Error::Api`] (e.g. `unauthenticated`), [`Error::Transport`], [`Error::Decode`].
    pub async fn list_queues(&self) -> Result<Vec<QueueView>> {
        self.list_queues_by_prefix("").await
    }

    /// Every queue the token may see whose name starts with `prefix`, by name, following the
    /// listing's pages to the end. A queue that exists for the whole walk is listed exactly
    /// once.
    ///
    /// # Errors
    /// `invalid_argument` for a prefix no queue name can start with, and as
    /// [`Client::list_queues`].
    pub async fn list_queues_by_prefix(&self, prefix: &str) -> Result<Vec<QueueView>> {
        let mut query = QueueListQuery {
            prefix: (!prefix.is_empty()).then(|| prefix.to_owned()),
            ..QueueListQuery::default()
        };
        let mut queues = Vec::new();
        loop {
            let page = self.list_queues_page(&query).await?;
            queues.extend(page.queues);
            match page.next_cursor {
                // Pages move forward by name: a cursor handed back unchanged would never end.
                Some(next) if query.cursor.as_ref() == Some(&next) => {
                    return Err(Error::Decode(format!(
                        "the broker answered the same next_cursor ({next}) twice while listing queues"
                    )));
                }
                Some(next) => query.cursor = Some(next),
                None => return Ok(queues),
            }
        }
    }

    /// One page of the queues the token may see, by name: those starting with
    /// `query.prefix`, at most `query.limit` (1 – 1000, default 1000), after `query.cursor`.
    /// Pass the answer's `next_cursor` as `query.cursor` for the next page; it is `None` at
    /// the end.
    ///
    /// # Errors
    /// `invalid_argument` for a bad prefix, limit or cursor, and as [`Client::list_queues`].
    pub async fn list_queues_page(&self, query: &QueueListQuery) -> Result<QueueList> {
        let mut call = Call::new(Method::GET, "/v1/queues".into(), Safety::Idempotent);
        if let Some(p) = &query.prefix {
            call.query.push(("prefix", p.clone()));
        }
        if let Some(l) = query.limit {
            call.query.push(("limit", l.to_string()));
        }
        if let Some(c) = &query.cursor {
            call.query.push(("cursor", c.clone()));
        }
        self.call_json(call).await
    }

    /// One queue's configuration.
    ///
    /// # Errors
    /// `queue_not_found`, and as [`Client::list_queues`].
    pub async fn get_queue(&self, name: &str) -> Result<QueueView> {
        let q = queue(name)?;
        self.call_json(Call::new(
            Method::GET,
            format!("/v1/queues/{q}"),
            Safety::Idempotent,
        ))
        .await
    }

    /// Creates a queue, or updates the fields `config` sets on an existing one (idempotent).
    /// `QueueConfigRequest::default()` creates a queue with the defaults.
    ///
    /// # Errors
    /// `invalid_argument` for a value out of range, and as [`Client::list_queues`].
    pub async fn put_queue(&self, name: &str, config: &QueueConfigRequest) -> Result<QueuePut> {
        let q = queue(name)?;
        let call =
            Call::new(Method::PUT, format!("/v1/queues/{q}"), Safety::Idempotent).json(config)?;
        let (status, bytes) = self.execute(&call).await?;
        let view: QueueView =
            serde_json::from_slice(&bytes).map_err(|e| Error::decode("PUT queue answer", e))?;
        Ok(QueuePut {
            created: status == 201,
            queue: view,
        })
    }

    /// Creates a queue only if it does not exist (`PUT` with `If-None-Match: *`); an existing
    /// queue is left as it is. Retried only when the broker was never reached, so a
    /// `conflict` always means someone else's queue, not an unanswered first attempt.
    ///
    /// # Errors
    /// `conflict` when the queue exists; `invalid_argument` for a value out of range; and as
    /// [`Client::list_queues`].
    pub async fn create_queue(&self, name: &str, config: &QueueConfigRequest) -> Result<QueueView> {
        let q = queue(name)?;
        let mut call =
            Call::new(Method::PUT, format!("/v1/queues/{q}"), Safety::Unsafe).json(config)?;
        call.create_only = true;
        let (_, bytes) = self.execute(&call).await?;
        serde_json::from_slice(&bytes).map_err(|e| Error::decode("PUT queue answer", e))
    }

    /// Deletes a queue and every message in it. A retry that finds the queue gone after an
    /// unanswered first attempt succeeds.
    ///
    /// # Errors
    /// `queue_not_found`; `conflict` when it is another queue's DLQ.
    pub async fn delete_queue(&self, name: &str) -> Result<()> {
        let q = queue(name)?;
        let mut call = Call::new(
            Method::DELETE,
            format!("/v1/queues/{q}"),
            Safety::Idempotent,
        );
        call.gone_is_success = true;
        self.execute(&call).await.map(drop)
    }

    /// Pauses deliveries; sends are still accepted.
    ///
    /// # Errors
    /// `queue_not_found`, and as [`Client::list_queues`].
    pub async fn pause_queue(&self, name: &str) -> Result<QueueView> {
        self.queue_action(name, "pause", Safety::Idempotent).await
    }

    /// Resumes deliveries.
    ///
    /// # Errors
    /// `queue_not_found`, and as [`Client::list_queues`].
    pub async fn resume_queue(&self, name: &str) -> Result<QueueView> {
        self.queue_action(name, "resume", Safety::Idempotent).await
    }

    /// Removes every message of the queue. Not retried once the broker may have seen it: a
    /// repeat would also remove messages sent after the first attempt.
    ///
    /// # Errors
    /// `queue_not_found`, and as [`Client::list_queues`].
    pub async fn purge_queue(&self, name: &str) -> Result<PurgeResponse> {
        self.queue_action(name, "purge", Safety::Unsafe).await
    }

    /// Forces the queue's circuit breaker: [`BreakerForce::Open`] stops deliveries until it
    /// is forced closed (without probes, across restarts); [`BreakerForce::Closed`] resumes
    /// them, the breaker judging again from an empty window. Answers the queue's adaptive
    /// rate and breaker afterwards, as `flow` in its stats. Needs an `operator` or `admin`
    /// key.
    ///
    /// # Errors
    /// `conflict` when the queue has no `breaker` (set one with [`Client::put_queue`]);
    /// `queue_not_found`; and as [`Client::list_queues`].
    pub async fn force_breaker(&self, name: &str, state: BreakerForce) -> Result<FlowView> {
        let q = queue(name)?;
        let call = Call::new(
            Method::POST,
            format!("/v1/queues/{q}/breaker"),
            Safety::Idempotent,
        )
        .json(&BreakerRequest { state })?;
        self.call_json(call).await
    }

    /// Forces the breaker of one key of a queue whose breaker is per key (`"scope": "key"`):
    /// [`BreakerForce::Open`] stops that key's deliveries until it is forced closed (other
    /// keys go on); [`BreakerForce::Closed`] resumes them. Answers the key's rate and breaker.
    /// Needs an `operator` or `admin` key.
    ///
    /// # Errors
    /// `invalid_argument` for a key that is not one (empty, too long, control characters);
    /// `conflict` when the queue's breaker is not per key; `queue_not_found`; and as
    /// [`Client::list_queues`].
    pub async fn force_key_breaker(
        &self,
        name: &str,
        key: &str,
        state: BreakerForce,
    ) -> Result<KeyFlowView> {
        let q = queue(name)?;
        let key =
            sluice_core::MessageKey::new(key).map_err(|e| Error::InvalidInput(e.to_string()))?;
        let key = percent_encoding::utf8_percent_encode(key.as_str(), SEGMENT);
        let call = Call::new(
            Method::POST,
            format!("/v1/queues/{q}/keys/{key}/breaker"),
            Safety::Idempotent,
        )
        .json(&BreakerRequest { state })?;
        self.call_json(call).await
    }

    async fn queue_action<T: serde::de::DeserializeOwned>(
        &self,
        name: &str,
        action: &str,
        safety: Safety,
    ) -> Result<T> {
        let q = queue(name)?;
        self.call_json(Call::new(
            Method::POST,
            format!("/v1/queues/{q}/{action}"),
            safety,
        ))
        .await
    }
}
