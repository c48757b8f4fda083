//! Queue configuration and administration: `PUT/GET/DELETE /v1/queues/{q}`, `GET /v1/queues`,
//! `POST /v1/queues/{q}/pause|resume|purge`.

use reqwest::Method;
use sluice_wire::{PurgeResponse, QueueConfigRequest, QueueList, QueueView};

use crate::client::{Call, Client, queue};
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
    /// Every queue the token may see, by name.
    ///
    /// # Errors
    /// [`Error::Api`] (e.g. `unauthenticated`), [`Error::Transport`], [`Error::Decode`].
    pub async fn list_queues(&self) -> Result<Vec<QueueView>> {
        let list: QueueList = self
            .call_json(Call::new(
                Method::GET,
                "/v1/queues".into(),
                Safety::Idempotent,
            ))
            .await?;
        Ok(list.queues)
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
