//! Sends under an idempotency key over the frame protocol, with the HTTP layer's rules
//! (`crate::http::idempotency`): one effect per caller, queue and key for 24 hours, and the
//! first answer replayed.

use sha2::{Digest, Sha256};
use sluice_core::store::IdempotentResponse;
use sluice_core::{Clock, ErrorCode};
use sluice_wire::frame::{self, FrameError, Reply, SentMessage, TracedFrameMessage};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;

/// A send under an idempotency key, with the HTTP layer's rules (`crate::http::idempotency`): the
/// answer to the first request is remembered for 24 hours, per caller, queue and key. Only
/// stored sends are remembered: a refused send stored nothing, so running it again is safe;
/// a caller not allowed to send to the queue is refused before its key claims anything.
pub(super) async fn send_idempotent(
    state: &AppState,
    caller: &Caller,
    idem: Idempotent,
    messages: Vec<TracedFrameMessage>,
) -> Result<Reply, FrameError> {
    use crate::http::idempotency::Turn;
    let Idempotent {
        key,
        queue,
        request,
    } = idem;
    crate::http::idempotency::check_key(&key).map_err(ApiError::into_frame_error)?;
    // A caller that may not send claims no key: only authorised requests write records.
    super::frames::allowed(caller, queue.clone())?;
    let fingerprint: [u8; 32] = Sha256::digest(&request).into();
    let who = caller
        .name()
        .map_or_else(|| "anonymous".to_owned(), |n| format!("key:{n}"));
    let scope = crate::http::idempotency::scope_key(format!("{who}|FRAME SEND {queue}|{key}"));
    let held = match state
        .idempotency
        .take_turn(scope, fingerprint)
        .await
        .map_err(ApiError::into_frame_error)?
    {
        Turn::Run(held) => held,
        Turn::Replay(kept) => return replay(&kept, &fingerprint),
        Turn::Mismatch => return Err(mismatch()),
    };
    let reply = match super::frames::send(state, caller, queue, messages).await {
        Ok(Reply::Sent(sent)) => sent,
        // Refused, or not known to be stored: the key is free for a retry.
        other => {
            held.release().await;
            return other;
        }
    };
    let mut body = Vec::new();
    frame::encode_frame(&reply, &mut body);
    let remembered = IdempotentResponse {
        fingerprint,
        status: 200,
        body: body.into(),
        created_at: sluice_core::SystemClock.now(),
    };
    match held.answer(remembered).await {
        // Another request answered the key first (it took the claim over): answer as it did.
        Ok(Some(kept)) => replay(&kept, &fingerprint),
        Ok(None) => Ok(Reply::Sent(reply)),
        Err(e) => {
            tracing::warn!(error = %e, "could not remember a frame send under its idempotency key; a retry will send again");
            Ok(Reply::Sent(reply))
        }
    }
}

/// A send under an idempotency key: the key, the queue and the request's encoding (what its
/// fingerprint is taken of).
pub(super) struct Idempotent {
    key: String,
    queue: String,
    request: Vec<u8>,
}

impl Idempotent {
    /// A send of `messages` to `queue` under `key`, fingerprinted by its encoding.
    pub(super) fn of<M: serde::Serialize>(key: String, queue: String, messages: &M) -> Self {
        let mut request = Vec::new();
        frame::encode_frame(&(&queue, messages), &mut request);
        Idempotent {
            key,
            queue,
            request,
        }
    }
}

/// The refusal of a key used with another send.
fn mismatch() -> FrameError {
    FrameError::new(
        ErrorCode::IdempotencyMismatch,
        "this idempotency key was used with a different send to this queue in the last 24 \
         hours; use a new key for a new request",
    )
}

/// The remembered answer, or `idempotency_mismatch` when the key came with another request.
fn replay(kept: &IdempotentResponse, fingerprint: &[u8; 32]) -> Result<Reply, FrameError> {
    if &kept.fingerprint != fingerprint {
        return Err(mismatch());
    }
    let body = kept.body.get(frame::LENGTH_BYTES..).unwrap_or_default();
    let sent: Vec<SentMessage> = frame::decode_payload(body)?;
    Ok(Reply::Sent(sent))
}
