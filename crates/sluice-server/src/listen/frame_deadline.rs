//! A frame's deadline: as over HTTP (see [`crate::DeadlineLayer`]), a request not answered
//! within `request_timeout` beyond its long-poll wait is answered `unavailable`, so a store
//! that cannot commit costs a client a bounded wait and never a hang.

use std::time::Duration;

use sluice_core::ErrorCode;
use sluice_wire::frame::{FrameError, Op, Reply};

/// How long `op` may wait for messages, which its deadline allows for.
pub(crate) fn wait_of(op: &Op) -> Duration {
    match op {
        Op::Receive { wait_ms, .. }
        | Op::ReceiveTagged { wait_ms, .. }
        | Op::ReceiveTraced { wait_ms, .. } => Duration::from_millis(*wait_ms),
        _ => Duration::ZERO,
    }
}

/// `answer`, or `unavailable` once it has taken `request_timeout` beyond its long-poll `wait`,
/// as over HTTP (see [`crate::DeadlineLayer`]).
pub(crate) async fn within_deadline(
    request_timeout: Duration,
    wait: Duration,
    answer: impl Future<Output = Result<Reply, FrameError>>,
) -> Result<Reply, FrameError> {
    match tokio::time::timeout(request_timeout.saturating_add(wait), answer).await {
        Ok(r) => r,
        Err(_) => Err(FrameError::new(
            ErrorCode::Unavailable,
            format!(
                "the request was not answered within {} beyond its wait (the store is slow or \
                 unreachable); a send may or may not have been applied: retry it with the \
                 same idempotency key or dedup id",
                sluice_core::human::fmt_duration(request_timeout)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A frame's answer past `request_timeout` beyond its wait is `unavailable`; a receive's
    /// wait extends its deadline.
    #[tokio::test(start_paused = true)]
    async fn a_frame_past_its_deadline_is_unavailable_unless_its_wait_allows_it() {
        let slow = |secs| async move {
            tokio::time::sleep(Duration::from_secs(secs)).await;
            Ok(Reply::Sent(Vec::new()))
        };
        let timeout = Duration::from_secs(10);
        let late = within_deadline(timeout, Duration::ZERO, slow(11)).await;
        assert_eq!(
            late.expect_err("past the deadline").code,
            ErrorCode::Unavailable.as_str()
        );
        let waited = within_deadline(timeout, Duration::from_secs(20), slow(25)).await;
        assert!(waited.is_ok(), "{waited:?}");
    }
}
