//! The frame protocol's listener ([`sluice_wire::frame`]): send, receive and a worker's
//! settlements over one TCP connection, with the HTTP API's rules (validation, API keys,
//! error codes, durability, idempotency keys) and none of its per-request cost (HTTP parsing,
//! routing, JSON).
//!
//! A connection's requests are handled in order, one at a time; answers to requests that
//! arrived together go out in one write.

use std::sync::Arc;
use std::time::Duration;

use sluice_core::access::operations;
use sluice_core::config::limits::MAX_BATCH;
use sluice_core::{
    AckRequest, Body, BodyKind, ErrorCode, Failure, NewMessage, QueueName, ReceiveRequest,
    StoreError,
};
use sluice_wire::frame::{
    self, FrameAck, FrameError, FrameReceipt, GroupedFrameMessage, Op, Reply, Request, Response,
    SentMessage, TaggedFrameMessage, TracedFrameMessage,
};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::auth::Caller;
use crate::http::error::ApiError;
use crate::listen::connections::{self, Gate, Permit};
use crate::listen::frame_idempotency;
use crate::{AppState, ServerOptions};

/// Bytes buffered per connection in each direction.
const BUFFER: usize = 64 * 1024;

/// Accepts connections until shutdown begins, then waits for each to finish the request it
/// is handling (long polls return early, as over HTTP). With TLS, each connection first
/// completes its handshake, in its own task. Connections past `gate`'s cap are closed at
/// once; each is held to the timeouts of [`ServerOptions::connections`].
pub(crate) async fn serve(
    listener: TcpListener,
    state: AppState,
    options: ServerOptions,
    gate: Gate,
) {
    let options = Arc::new(options);
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    // Refused: the connection closes as it drops.
                    let Some(permit) = gate.admit() else { continue };
                    conns.spawn(connection(tcp, state.clone(), options.clone(), permit));
                }
                Err(e) => connections::accept_failed("frames", &e).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = state.shutting_down() => break,
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

async fn connection(tcp: TcpStream, state: AppState, options: Arc<ServerOptions>, _permit: Permit) {
    let accepted = Instant::now();
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "could not set TCP_NODELAY");
    }
    match &options.tls {
        None => {
            let (rd, wr) = tcp.into_split();
            answer_connection(rd, wr, &state, &options, accepted).await;
        }
        Some(tls) => {
            let deadline = accepted + options.connections.header_read_timeout;
            let handshake = tokio::select! {
                r = connections::tls_handshake(tls, tcp, deadline) => r,
                () = state.shutting_down() => return,
            };
            match handshake {
                Ok(stream) => {
                    let (rd, wr) = tokio::io::split(stream);
                    answer_connection(rd, wr, &state, &options, accepted).await;
                }
                Err(e) => tracing::debug!(error = %e, "frame protocol: TLS handshake failed"),
            }
        }
    }
}

async fn answer_connection<R, W>(
    rd: R,
    wr: W,
    state: &AppState,
    options: &ServerOptions,
    accepted: Instant,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut rd = BufReader::with_capacity(BUFFER, rd);
    let mut wr = BufWriter::with_capacity(BUFFER, wr);
    answer_requests(&mut rd, &mut wr, state, options, accepted).await;
    // However the connection ends, answers already made go out: each may report a change
    // that is durable. A client that reads nothing for the write timeout gets no more.
    let stall = options.connections.write_timeout;
    if connections::write_within(&mut wr, &[], true, stall)
        .await
        .is_ok()
    {
        let _ = tokio::time::timeout(stall, wr.shutdown()).await;
    }
}

/// Reads and answers requests until the connection ends, a frame cannot be read, a timeout
/// passes, or the broker shuts down. Answers are flushed when no further request is waiting
/// in the buffer.
///
/// Timeouts ([`ServerOptions::connections`]): the first frame must begin within the header
/// timeout of `accepted`, and each later one within the idle timeout of the last answer; a
/// frame's bytes may pause for at most the header timeout and must all arrive within the
/// request timeout; an answer the client does not read for the write timeout ends it.
async fn answer_requests<R, W>(
    rd: &mut BufReader<R>,
    wr: &mut BufWriter<W>,
    state: &AppState,
    options: &ServerOptions,
    accepted: Instant,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let limits = options.connections;
    let max_frame = options.max_body_bytes;
    let mut caller = (!state.keys.enabled()).then(Caller::anybody);
    let mut payload = Vec::new();
    let mut out = Vec::new();
    let mut next_by = accepted + limits.header_read_timeout;
    loop {
        // Between requests, shutdown closes the connection; a request already read is answered.
        tokio::select! {
            biased;
            () = state.shutting_down() => return,
            r = rd.fill_buf() => match r {
                Ok(buf) if !buf.is_empty() => {}
                _ => return,
            },
            () = tokio::time::sleep_until(next_by) => {
                tracing::debug!("frame protocol: closing a connection past its header or idle timeout");
                return;
            }
        }
        let frame_by = Instant::now() + options.request_timeout;
        let mut prefix = [0; 4];
        let stall = limits.header_read_timeout;
        if connections::read_within(rd, &mut prefix, stall, frame_by)
            .await
            .is_err()
        {
            return;
        }
        let len = u32::from_le_bytes(prefix) as usize;
        out.clear();
        if let Some(e) = oversized(len, caller.is_some(), max_frame) {
            // The rest of the frame is not read, so the stream cannot go on: answer and close.
            frame::encode_frame(
                &Response {
                    id: 0,
                    result: Err(e),
                },
                &mut out,
            );
            let _ = connections::write_within(wr, &out, false, limits.write_timeout).await;
            return;
        }
        if connections::read_vec_within(rd, &mut payload, len, stall, frame_by)
            .await
            .is_err()
        {
            return;
        }
        let response = match frame::decode_payload::<Request>(&payload) {
            Ok(req) => {
                let wait = super::frame_deadline::wait_of(&req.op);
                let answer = handle(state, &mut caller, req.op);
                Response {
                    id: req.id,
                    result: super::frame_deadline::within_deadline(
                        options.request_timeout,
                        wait,
                        answer,
                    )
                    .await,
                }
            }
            Err(e) => Response {
                id: 0,
                result: Err(e),
            },
        };
        frame::encode_frame(&response, &mut out);
        // Requests already received are answered first, so their answers share one write.
        let flush = rd.buffer().is_empty();
        if connections::write_within(wr, &out, flush, limits.write_timeout)
            .await
            .is_err()
        {
            return;
        }
        next_by = Instant::now() + limits.idle_timeout;
    }
}

/// The refusal of a frame of `len` bytes, or `None` when it may be read: at most
/// `max_frame` bytes once the connection is authenticated, and at most
/// [`frame::MAX_FRAME_BEFORE_HELLO`] before, so that a client without a key cannot make the
/// broker hold more than that.
fn oversized(len: usize, authenticated: bool, max_frame: usize) -> Option<FrameError> {
    if !authenticated && len > frame::MAX_FRAME_BEFORE_HELLO {
        return Some(FrameError::new(
            ErrorCode::Unauthenticated,
            format!(
                "a frame of {len} bytes before Hello; this broker requires an API key and reads \
                 at most {} bytes until Hello with a valid key has succeeded: send Hello first",
                frame::MAX_FRAME_BEFORE_HELLO
            ),
        ));
    }
    (len > max_frame).then(|| {
        FrameError::new(
            ErrorCode::PayloadTooLarge,
            format!("a frame of {len} bytes; this broker reads at most {max_frame}"),
        )
    })
}

// Long because it is one arm per frame operation after the one authorization; the match is
// exhaustive over `Op`, so no frame can be added without its answer here.
async fn handle(
    state: &AppState,
    caller: &mut Option<Caller>,
    op: Op,
) -> Result<Reply, FrameError> {
    if let Op::Hello { key } = op {
        return hello(state, caller, key);
    }
    let caller = &authorize(caller.as_ref(), &op)?;
    // Whether a receive answers each delivery with its group, key and priority (and trace
    // context).
    let tagged = matches!(op, Op::ReceiveTagged { .. });
    let with_trace = matches!(op, Op::ReceiveTraced { .. });
    match op {
        // Answered above: it authenticates the connection and is no operation.
        Op::Hello { .. } => Err(FrameError::new(
            ErrorCode::InvalidArgument,
            "Hello was already answered",
        )),
        Op::Send { queue, messages } => {
            let messages = messages
                .into_iter()
                .map(|m| TaggedFrameMessage::from(m).into())
                .collect();
            send(state, caller, queue, messages).await
        }
        Op::SendGrouped { queue, messages } => send(state, caller, queue, grouped(messages)).await,
        Op::SendTagged {
            idempotency_key: None,
            queue,
            messages,
        } => send(state, caller, queue, traced(messages)).await,
        Op::SendTagged {
            idempotency_key: Some(key),
            queue,
            messages,
        } => {
            let idem = frame_idempotency::Idempotent::of(key, queue, &messages);
            frame_idempotency::send_idempotent(state, caller, idem, traced(messages)).await
        }
        Op::SendTraced {
            idempotency_key: None,
            queue,
            messages,
        } => send(state, caller, queue, messages).await,
        Op::SendTraced {
            idempotency_key: Some(key),
            queue,
            messages,
        } => {
            let idem = frame_idempotency::Idempotent::of(key, queue, &messages);
            frame_idempotency::send_idempotent(state, caller, idem, messages).await
        }
        Op::Receive {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        }
        | Op::ReceiveTagged {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        }
        | Op::ReceiveTraced {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        } => {
            let req = ReceiveRequest {
                max,
                wait: Duration::from_millis(wait_ms),
                visibility: visibility_ms.map(Duration::from_millis),
                consumer,
            };
            let got = receive(state, caller, queue, req).await?;
            Ok(if with_trace {
                Reply::TracedMessages(got.into_iter().map(Into::into).collect())
            } else if tagged {
                Reply::TaggedMessages(got.into_iter().map(Into::into).collect())
            } else {
                Reply::Messages(got.into_iter().map(Into::into).collect())
            })
        }
        Op::Ack { queue, receipts } => ack(state, caller, queue, receipts).await,
        Op::Nack {
            queue,
            receipt,
            delay_ms,
            error,
            consumer,
        } => {
            let wait = delay_ms.map(Duration::from_millis);
            let q = allowed(caller, queue)?;
            nack(
                state,
                &q,
                receipt,
                wait,
                Failure {
                    error,
                    consumer,
                    retry_after: false,
                },
            )
            .await
        }
        Op::NackRetryAfter {
            queue,
            receipt,
            retry_after_ms,
            error,
            consumer,
        } => {
            let wait = Some(Duration::from_millis(retry_after_ms));
            let q = allowed(caller, queue)?;
            nack(
                state,
                &q,
                receipt,
                wait,
                Failure {
                    error,
                    consumer,
                    retry_after: true,
                },
            )
            .await
        }
        Op::AckWithResults { queue, acks } => {
            let q = allowed(caller, queue)?;
            ack_with_results(state, &q, acks).await
        }
        Op::Reject {
            queue,
            receipt,
            error,
            consumer,
        } => {
            let q = allowed(caller, queue)?;
            let failure = Failure {
                error,
                consumer,
                ..Failure::default()
            };
            let dlq = state.store.reject(&q, receipt.into(), failure).await?;
            state.metrics.settled(sluice_core::MessageId(receipt.id));
            Ok(Reply::Nacked {
                queue: dlq.to_string(),
                dead_lettered: true,
            })
        }
        Op::Release { queue, receipt } => {
            let q = allowed(caller, queue)?;
            state.store.release(&q, receipt.into()).await?;
            state.metrics.settled(sluice_core::MessageId(receipt.id));
            Ok(Reply::Nacked {
                queue: q.to_string(),
                dead_lettered: false,
            })
        }
        Op::Move {
            queue,
            receipt,
            to,
            error,
            consumer,
        } => {
            let c = caller;
            let q = allowed(c, queue)?;
            let to = allowed(c, to)?;
            let failure = Failure {
                error,
                consumer,
                ..Failure::default()
            };
            state
                .store
                .move_message(&q, receipt.into(), &to, failure)
                .await?;
            state.metrics.settled(sluice_core::MessageId(receipt.id));
            Ok(Reply::Nacked {
                queue: to.to_string(),
                dead_lettered: false,
            })
        }
        Op::Extend {
            queue,
            receipt,
            visibility_ms,
        } => {
            let q = allowed(caller, queue)?;
            let visibility = Duration::from_millis(visibility_ms);
            let lease = state.store.extend(&q, receipt.into(), visibility).await?;
            Ok(lease_reply(&lease))
        }
        Op::Progress {
            queue,
            receipt,
            pct,
            detail,
        } => {
            let q = allowed(caller, queue)?;
            let progress = sluice_core::Progress {
                pct,
                detail,
                at: sluice_core::Timestamp(0),
            };
            let lease = state.store.progress(&q, receipt.into(), progress).await?;
            Ok(lease_reply(&lease))
        }
        Op::SendIdempotent {
            key,
            queue,
            messages,
        } => {
            // The fingerprint of the request as sent, so that a key remembered by an older
            // broker still answers its retry.
            let idem = frame_idempotency::Idempotent::of(key, queue, &messages);
            frame_idempotency::send_idempotent(state, caller, idem, grouped(messages)).await
        }
    }
}

/// Grouped messages as tagged ones without key or priority.
fn grouped(messages: Vec<GroupedFrameMessage>) -> Vec<TracedFrameMessage> {
    messages
        .into_iter()
        .map(|m| {
            TaggedFrameMessage {
                group: m.group,
                ..m.message.into()
            }
            .into()
        })
        .collect()
}

/// Tagged messages as traced ones without trace context.
fn traced(messages: Vec<TaggedFrameMessage>) -> Vec<TracedFrameMessage> {
    messages.into_iter().map(Into::into).collect()
}

fn lease_reply(lease: &sluice_core::store::LeaseState) -> Reply {
    Reply::Lease {
        deadline_ms: lease.deadline.0,
        cancel_requested: lease.cancel_requested,
    }
}

pub(super) async fn send(
    state: &AppState,
    caller: &Caller,
    queue: String,
    messages: Vec<TracedFrameMessage>,
) -> Result<Reply, FrameError> {
    let q = allowed(caller, queue)?;
    batch_size("a send", "messages", messages.len())?;
    let batch = messages
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            new_message(m).map_err(|e| StoreError::invalid(format!("messages[{i}]: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let out = state.store.send(&q, batch).await?;
    Ok(Reply::Sent(
        out.iter()
            .map(|o| SentMessage {
                id: o.id.0,
                duplicate: o.duplicate,
            })
            .collect(),
    ))
}

async fn receive(
    state: &AppState,
    caller: &Caller,
    queue: String,
    req: ReceiveRequest,
) -> Result<Vec<sluice_core::Delivery>, FrameError> {
    let q = allowed(caller, queue)?;
    sluice_core::store::validate_receive(&req)?;
    let deliveries = state.lease(&q, req).await?;
    state.metrics.delivered(&q, &deliveries);
    Ok(deliveries)
}

/// A nack over frames: where the delivery went.
async fn nack(
    state: &AppState,
    q: &QueueName,
    receipt: FrameReceipt,
    delay: Option<Duration>,
    failure: Failure,
) -> Result<Reply, FrameError> {
    let out = state.store.nack(q, receipt.into(), delay, failure).await?;
    state.metrics.settled(sluice_core::MessageId(receipt.id));
    Ok(Reply::Nacked {
        queue: out.queue.to_string(),
        dead_lettered: out.state.is_none(),
    })
}

async fn ack(
    state: &AppState,
    caller: &Caller,
    queue: String,
    receipts: Vec<FrameReceipt>,
) -> Result<Reply, FrameError> {
    let q = allowed(caller, queue)?;
    batch_size("an ack", "receipts", receipts.len())?;
    let acks = receipts
        .iter()
        .map(|r| AckRequest {
            receipt: (*r).into(),
            result: None,
        })
        .collect();
    let out = state.ack(&q, acks).await?;
    Ok(Reply::Acked(
        out.into_iter()
            .map(|r| r.err().map(FrameError::from))
            .collect(),
    ))
}

/// Acknowledges with results: a result that is not a valid body gets its own outcome, as a
/// malformed receipt does over HTTP; the rest go to the store together.
async fn ack_with_results(
    state: &AppState,
    q: &QueueName,
    acks: Vec<FrameAck>,
) -> Result<Reply, FrameError> {
    batch_size("an ack", "acks", acks.len())?;
    let mut outcomes: Vec<Option<FrameError>> = Vec::with_capacity(acks.len());
    let mut valid = Vec::with_capacity(acks.len());
    let mut slots = Vec::with_capacity(acks.len());
    for (i, a) in acks.into_iter().enumerate() {
        let result = a.result.map(|b| check_body(b, "result")).transpose();
        match result.and_then(|r| check_result_depth(r.as_ref()).map(|()| r)) {
            Ok(result) => {
                valid.push(AckRequest {
                    receipt: a.receipt.into(),
                    result,
                });
                slots.push(i);
                outcomes.push(None);
            }
            Err(e) => outcomes.push(Some(e.into())),
        }
    }
    if !valid.is_empty() {
        let out = state.ack(q, valid).await?;
        for (slot, r) in slots.into_iter().zip(out) {
            outcomes[slot] = r.err().map(FrameError::from);
        }
    }
    Ok(Reply::Acked(outcomes))
}

/// The connection's caller, once it has said who it is (always, without API keys).
fn authenticated(caller: Option<&Caller>) -> Result<&Caller, FrameError> {
    caller.ok_or_else(|| {
        FrameError::new(
            ErrorCode::Unauthenticated,
            "this broker requires an API key: send Hello with one before other requests",
        )
    })
}

/// `Hello`: authenticates the connection with its key (any key; none without keys).
fn hello(
    state: &AppState,
    caller: &mut Option<Caller>,
    key: Option<String>,
) -> Result<Reply, FrameError> {
    let c = match key.as_deref() {
        _ if !state.keys.enabled() => Caller::anybody(),
        Some(secret) => {
            Caller::holder_of(&state.keys, secret).map_err(ApiError::into_frame_error)?
        }
        None => {
            return Err(FrameError::new(
                ErrorCode::Unauthenticated,
                "this broker requires an API key; send it in Hello",
            ));
        }
    };
    *caller = Some(c);
    Ok(Reply::Hello {
        version: frame::VERSION,
    })
}

/// The connection's caller, once the permission table (`sluice_core::access::operations`)
/// says what `op` does and the caller's role may do it; the queue it names is checked by
/// [`allowed`] with the same actions.
fn authorize(caller: Option<&Caller>, op: &Op) -> Result<Caller, FrameError> {
    let caller = authenticated(caller)?;
    let declared = operations::frame(op.name()).ok_or_else(|| {
        FrameError::new(
            ErrorCode::PermissionDenied,
            format!(
                "{} is not in the permission table; nothing is allowed",
                op.name()
            ),
        )
    })?;
    let caller = caller.clone().doing(declared);
    for action in declared.actions {
        caller
            .allow_role(*action)
            .map_err(ApiError::into_frame_error)?;
    }
    Ok(caller)
}

/// Checks that a request carries 1 – [`MAX_BATCH`] items.
fn batch_size(request: &str, items: &str, n: usize) -> Result<(), FrameError> {
    if n == 0 || n > MAX_BATCH {
        return Err(StoreError::invalid(format!(
            "{request} holds 1 to {MAX_BATCH} {items}, got {n}"
        ))
        .into());
    }
    Ok(())
}

/// The queue, once the caller may do what its op does on it (the permission table's
/// actions, bound by [`authorize`]).
pub(super) fn allowed(caller: &Caller, queue: String) -> Result<QueueName, FrameError> {
    let q = QueueName::new(queue)?;
    caller.allow_also(&q).map_err(ApiError::into_frame_error)?;
    Ok(q)
}

/// A message to store, checked as the HTTP API checks one: a JSON body must be JSON and a
/// text body UTF-8, since HTTP consumers receive them as such; a group and a key must be valid
/// names and a priority 0 – 9.
fn new_message(m: TracedFrameMessage) -> Result<NewMessage, StoreError> {
    let TracedFrameMessage {
        message:
            TaggedFrameMessage {
                message,
                group,
                key,
                priority,
            },
        trace,
    } = m;
    let msg = NewMessage {
        trace: trace.map(frame::FrameTrace::into_context).transpose()?,
        body: check_body(message.body, "body")?,
        attributes: message.attributes,
        delay: message.delay_ms.map(Duration::from_millis),
        dedup_id: message.dedup_id,
        group: group.map(sluice_core::GroupName::new).transpose()?,
        key: key.map(sluice_core::MessageKey::new).transpose()?,
        priority,
    };
    msg.validate()?;
    Ok(msg)
}

/// Refuses a JSON result nested too deeply ([`sluice_core::json_depth`]). A body is checked by
/// the store, with the rest of its message.
fn check_result_depth(result: Option<&Body>) -> Result<(), StoreError> {
    match result {
        Some(r) if r.kind == BodyKind::Json => sluice_core::json_depth::check("result", &r.bytes),
        _ => Ok(()),
    }
}

/// A body (or result) as HTTP consumers will read it: a JSON one must be JSON and a text one
/// UTF-8.
fn check_body(body: Body, what: &str) -> Result<Body, StoreError> {
    match body.kind {
        BodyKind::Json => {
            serde_json::from_slice::<serde::de::IgnoredAny>(&body.bytes).map_err(|e| {
                StoreError::invalid(format!(
                    "the {what} is marked JSON but is not valid JSON ({e}); send it as binary"
                ))
            })?;
        }
        BodyKind::Text => {
            std::str::from_utf8(&body.bytes).map_err(|e| {
                StoreError::invalid(format!(
                    "the {what} is marked text but is not UTF-8 ({e}); send it as binary"
                ))
            })?;
        }
        BodyKind::Binary => {}
    }
    Ok(body)
}
