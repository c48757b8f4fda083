//! Before a run: the broker's health checked and the queue created and purged over HTTP.

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use sluice_wire::{ErrorEnvelope, QueueConfigRequest};

use super::args::BenchArgs;

/// Checks the broker answers, creates the queue if missing and purges it.
pub(crate) async fn prepare(
    client: &reqwest::Client,
    base: &str,
    args: &BenchArgs,
) -> anyhow::Result<()> {
    let auth = |r: reqwest::RequestBuilder| match &args.token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    check_health(client, base).await?;
    let queue_url = format!("{base}/v1/queues/{}", args.queue);
    // An empty patch creates the queue with defaults and leaves an existing one as it is.
    let resp = auth(client.put(&queue_url))
        .json(&QueueConfigRequest::default())
        .send()
        .await
        .with_context(|| format!("creating queue {}", args.queue))?;
    check(resp, &format!("creating queue {}", args.queue)).await?;
    let resp = auth(client.post(format!("{queue_url}/purge")))
        .send()
        .await
        .with_context(|| format!("purging queue {}", args.queue))?;
    check(resp, &format!("purging queue {}", args.queue)).await?;
    Ok(())
}

/// Checks the broker at `base` answers `GET /healthz` with a 2xx.
pub(crate) async fn check_health(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    let health = client
        .get(format!("{base}/healthz"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .with_context(|| {
            format!(
                "cannot reach the broker at {base}; is `sluice serve` running there? \
                 (set --url or SLUICE_URL)"
            )
        })?;
    if !health.status().is_success() {
        bail!(
            "the broker at {base} is not healthy: GET /healthz answered {}",
            health.status()
        );
    }
    Ok(())
}

/// Succeeds on a 2xx; otherwise fails with `what`, the status and the broker's error.
pub(crate) async fn check(resp: reqwest::Response, what: &str) -> anyhow::Result<()> {
    let status = resp.status();
    if status.is_success() {
        return Ok(());
    }
    let text = resp.text().await.unwrap_or_default();
    let detail = serde_json::from_str::<ErrorEnvelope>(&text)
        .map(|e| format!("{}: {}", e.error.code, e.error.message))
        .unwrap_or(text);
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        bail!("{what}: {status} {detail} (check --token / SLUICE_TOKEN)");
    }
    bail!("{what}: {status} {detail}")
}
