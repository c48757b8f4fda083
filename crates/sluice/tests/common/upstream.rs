//! A worker's call of an upstream simulator, as the adaptive tests' workers make it: a 429
//! is congestion with the Retry-After the upstream gave (`retry-after-ms`), any other
//! failure is transient.

use std::time::Duration;

use sluice_client::TaskError;

/// Posts to `url` and says how the call ended, as a task handler answers it.
pub async fn call(http: &reqwest::Client, url: &str) -> Result<(), TaskError> {
    let resp = http
        .post(url)
        .send()
        .await
        .map_err(|e| TaskError::transient(format!("upstream: {e}")))?;
    if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
        let wait = resp
            .headers()
            .get("retry-after-ms")
            .and_then(|v| v.to_str().ok()?.parse().ok())
            .map_or(Duration::from_secs(1), Duration::from_millis);
        return Err(TaskError::retry_after("upstream said 429", wait));
    }
    if !resp.status().is_success() {
        return Err(TaskError::transient(format!("upstream: {}", resp.status())));
    }
    Ok(())
}
