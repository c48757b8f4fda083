//! `POST /v1/queues/{q}/messages`: one message or a batch, as JSON, or one raw body.

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sluice_core::{Body, TraceContext};
use sluice_wire::{ErrorEnvelope, RawSendParams, SendBatchResponse, SendRequest, SendResponse};

use crate::AppState;
use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::http::extract::{ApiQuery, QueuePath, RawBody, is_json, media_type, parse_json};

/// Sends one message or a batch (1–1000, all or nothing).
///
/// With `Content-Type: application/json` the body is a [`SendRequest`]. With
/// `application/octet-stream` the request body is one binary message; with `text/plain`
/// (UTF-8) one text message; their options go in the query string (`delay_ms`, `dedup_id`,
/// `group`). With JSON, the query string's options are defaults for the messages that do
/// not set their own.
///
/// The W3C `traceparent` and `tracestate` headers are the trace context of every message of
/// the request that has no `trace` of its own. As W3C Trace Context asks of a receiver, an
/// invalid `traceparent` header is ignored (and an invalid `tracestate` dropped) rather than
/// refused: a malformed header added on the way must not cost the producer its message. A
/// `trace` field is checked and refused with a 400 when invalid.
#[utoipa::path(
    post, path = "/v1/queues/{q}/messages", tag = "messages",
    params(("q" = String, Path, description = "Queue name"), RawSendParams),
    request_body(content(
        (SendRequest = "application/json"),
        ("application/octet-stream"),
        ("text/plain"),
    )),
    responses(
        (status = 201, description = "Stored (one message)", body = SendResponse),
        (status = "2XX", description = "Stored (a batch, status 201)", body = SendBatchResponse),
        (status = 400, description = "invalid_argument", body = ErrorEnvelope),
        (status = 404, description = "queue_not_found", body = ErrorEnvelope),
        (status = 413, description = "payload_too_large", body = ErrorEnvelope),
        (status = 429, description = "queue_full (with Retry-After)", body = ErrorEnvelope),
    )
)]
pub async fn send(
    State(st): State<AppState>,
    _caller: Caller,
    QueuePath(q): QueuePath,
    ApiQuery(params): ApiQuery<RawSendParams>,
    raw: RawBody,
) -> Result<Response, ApiError> {
    let media = media_type(&raw.headers);
    let (mut messages, batch) = match media.as_deref() {
        Some(m) if is_json(m) => {
            let (mut messages, batch) = parse_json::<SendRequest>(&raw.bytes)?.into_messages()?;
            if !params.is_empty() {
                params.fill(&mut messages)?;
            }
            (messages, batch)
        }
        Some("application/octet-stream") => (
            vec![params.into_new_message(Body::binary(raw.bytes))?],
            false,
        ),
        Some("text/plain") => {
            let charset_ok = raw
                .headers
                .get(axum::http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| {
                    v.split(';').skip(1).map(str::trim).find_map(|p| {
                        p.strip_prefix("charset=")
                            .or_else(|| p.strip_prefix("CHARSET="))
                    })
                })
                .is_none_or(|c| c.trim_matches('"').eq_ignore_ascii_case("utf-8"));
            if !charset_ok {
                return Err(ApiError::invalid(
                    "text/plain bodies must be UTF-8 (charset=utf-8)",
                ));
            }
            let text = String::from_utf8(raw.bytes.to_vec()).map_err(|e| {
                ApiError::invalid(format!(
                    "text/plain body is not valid UTF-8 ({e}); send bytes as application/octet-stream"
                ))
            })?;
            (vec![params.into_new_message(Body::text(text))?], false)
        }
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Content-Type \"{other}\" is not accepted; use application/json, \
                 application/octet-stream or text/plain"
            )));
        }
        None => {
            return Err(ApiError::invalid(
                "Content-Type is missing; use application/json, application/octet-stream or text/plain",
            ));
        }
    };
    if let Some(t) = header_trace(&raw.headers) {
        for m in messages.iter_mut().filter(|m| m.trace.is_none()) {
            m.trace = Some(t.clone());
        }
    }
    let out = st.store.send(&q, messages).await?;
    if batch {
        let resp = SendBatchResponse {
            ids: out.iter().map(|o| o.id.to_string()).collect(),
            duplicates: out.iter().map(|o| o.duplicate).collect(),
        };
        return Ok((StatusCode::CREATED, Json(resp)).into_response());
    }
    let first = out.first().ok_or_else(|| {
        ApiError::from(sluice_core::StoreError::unavailable("store returned no id"))
    })?;
    let resp = SendResponse {
        id: first.id.to_string(),
        duplicate: first.duplicate,
    };
    Ok((StatusCode::CREATED, Json(resp)).into_response())
}

/// The trace context of a request's `traceparent` and `tracestate` headers, if valid.
fn header_trace(headers: &axum::http::HeaderMap) -> Option<TraceContext> {
    let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    TraceContext::from_headers(get("traceparent"), get("tracestate"))
}
