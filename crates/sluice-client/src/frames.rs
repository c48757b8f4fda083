//! A client of the frame protocol (`sluice serve --frames-listen`): send, receive, ack and
//! nack over one TCP connection, at a fraction of the per-message cost of HTTP and JSON.
//!
//! One [`FrameConnection`] carries one request at a time; open one per producer or consumer
//! loop, as with HTTP keep-alive connections. Every answer means what the HTTP API's does: a
//! send or ack that returned `Ok` is durable.
//!
//! ```no_run
//! # async fn run() -> Result<(), sluice_client::frames::FrameClientError> {
//! use sluice_client::frames::{Body, FrameConnection, FrameMessage};
//! use std::time::Duration;
//!
//! let mut conn = FrameConnection::connect("127.0.0.1:7879", None).await?;
//! conn.send("jobs", vec![FrameMessage::new(Body::binary(&b"resize 42"[..]))]).await?;
//! let got = conn.receive("jobs", 10, Duration::from_secs(5)).await?;
//! let receipts = got.iter().map(|d| d.receipt).collect();
//! conn.ack("jobs", receipts).await?;
//! # Ok(()) }
//! ```

use std::time::Duration;

pub use sluice_core::message::Body;
use sluice_wire::frame::{self, Request, Response};
pub use sluice_wire::frame::{
    FrameAck, FrameDelivery, FrameError, FrameMessage, FrameReceipt, FrameTrace,
    GroupedFrameMessage, Op, Reply, SentMessage, TaggedFrameDelivery, TaggedFrameMessage,
    TracedFrameDelivery, TracedFrameMessage,
};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::{TcpStream, ToSocketAddrs};

use crate::messages::ReceiveOptions;
use crate::tls::TlsOptions;

mod pool;
pub use pool::{FramePool, PooledFrameConnection};

/// The read half of a connection, plain or TLS.
type ReadHalf = Box<dyn AsyncRead + Send + Unpin>;
/// The write half of a connection, plain or TLS.
type WriteHalf = Box<dyn AsyncWrite + Send + Unpin>;

/// Largest answer read (a full receive of 1,000 messages of the largest size fits).
const MAX_ANSWER: usize = 64 * 1024 * 1024;

/// Why a frame-protocol call failed.
#[derive(Debug, thiserror::Error)]
pub enum FrameClientError {
    /// The connection failed; open a new one (a request in flight may or may not have been
    /// applied, as with any lost answer).
    #[error("frame connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The broker refused the request; the code says why (as in the HTTP API).
    #[error("the broker refused the request: {0}")]
    Refused(FrameError),
    /// The broker answered something this client does not understand: are both of the
    /// same version?
    #[error("unexpected answer from the broker: {0}")]
    Protocol(String),
    /// The TLS settings or the address cannot make a TLS connection.
    #[error("frame connection over TLS: {0}")]
    Tls(String),
}

impl FrameClientError {
    /// True when retrying later may succeed: a lost connection, or a refusal the HTTP API
    /// answers with a 429 or 503.
    pub fn is_transient(&self) -> bool {
        match self {
            FrameClientError::Io(_) => true,
            FrameClientError::Refused(e) => {
                matches!(
                    e.code.as_str(),
                    "rate_limited" | "queue_full" | "unavailable"
                )
            }
            FrameClientError::Protocol(_) | FrameClientError::Tls(_) => false,
        }
    }
}

/// One connection to a broker's frame listener.
pub struct FrameConnection {
    rd: BufReader<ReadHalf>,
    wr: BufWriter<WriteHalf>,
    next_id: u64,
    out: Vec<u8>,
    payload: Vec<u8>,
    /// A call was dropped between its request and its answer: the stream is out of step.
    broken: bool,
    /// The protocol version the broker answered `Hello` with.
    version: u32,
}

impl FrameConnection {
    /// Connects and, when `key` is given, authenticates with that API key.
    ///
    /// # Errors
    /// The connection failed, or the broker refused the key.
    pub async fn connect(
        addr: impl ToSocketAddrs,
        key: Option<&str>,
    ) -> Result<FrameConnection, FrameClientError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let (rd, wr) = tcp.into_split();
        FrameConnection::hello(Box::new(rd), Box::new(wr), key).await
    }

    /// Connects over TLS to `addr` (`host:port`, the host being the name the broker's
    /// certificate is checked against) and, when `key` is given, authenticates with it.
    ///
    /// # Errors
    /// `Tls` for settings or an address that cannot make a TLS connection; otherwise as
    /// [`FrameConnection::connect`] (a refused handshake is `Io`).
    pub async fn connect_tls(
        addr: &str,
        tls: &TlsOptions,
        key: Option<&str>,
    ) -> Result<FrameConnection, FrameClientError> {
        let host = host_of(addr).ok_or_else(|| {
            FrameClientError::Tls(format!(
                "\"{addr}\" is not host:port (e.g. broker.internal:7879 or [::1]:7879)"
            ))
        })?;
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| FrameClientError::Tls(format!("\"{host}\" is not a host name: {e}")))?;
        let config = tls
            .client_config()
            .map_err(|e| FrameClientError::Tls(e.to_string()))?;
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let stream = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await?;
        let (rd, wr) = tokio::io::split(stream);
        FrameConnection::hello(Box::new(rd), Box::new(wr), key).await
    }

    async fn hello(
        rd: ReadHalf,
        wr: WriteHalf,
        key: Option<&str>,
    ) -> Result<FrameConnection, FrameClientError> {
        let mut conn = FrameConnection {
            rd: BufReader::with_capacity(64 * 1024, rd),
            wr: BufWriter::with_capacity(64 * 1024, wr),
            next_id: 1,
            out: Vec::with_capacity(4096),
            payload: Vec::new(),
            broken: false,
            version: 1,
        };
        match conn
            .call(Op::Hello {
                key: key.map(str::to_owned),
            })
            .await?
        {
            Reply::Hello { version } => {
                conn.version = version;
                Ok(conn)
            }
            other => Err(unexpected(&other)),
        }
    }

    /// The protocol version the broker speaks ([`frame::VERSION`] of its build): version 2
    /// and later take [`FrameConnection::send_tagged`] and [`FrameConnection::receive_tagged`].
    pub fn broker_version(&self) -> u32 {
        self.version
    }

    /// Sends messages (1 – 1000, all or nothing), each with an optional group, key and
    /// priority, under an optional idempotency key (see [`FrameConnection::send_idempotent`]);
    /// returns their ids in order. Needs a broker of protocol version 2.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `invalid_argument` for a bad group, key or priority, and
    /// `Protocol` from a broker of version 1, which does not know the request.
    pub async fn send_tagged(
        &mut self,
        idempotency_key: Option<&str>,
        queue: &str,
        messages: Vec<TaggedFrameMessage>,
    ) -> Result<Vec<SentMessage>, FrameClientError> {
        self.needs_version(2, "SendTagged")?;
        self.sent(Op::SendTagged {
            idempotency_key: idempotency_key.map(str::to_owned),
            queue: queue.to_owned(),
            messages,
        })
        .await
    }

    /// Sends messages as [`FrameConnection::send_tagged`] does, each with its W3C trace
    /// context, if any. Needs a broker of protocol version 3.
    ///
    /// # Errors
    /// As [`FrameConnection::send_tagged`]; `invalid_argument` for a malformed trace context,
    /// and `Protocol` from a broker older than version 3.
    pub async fn send_traced(
        &mut self,
        idempotency_key: Option<&str>,
        queue: &str,
        messages: Vec<TracedFrameMessage>,
    ) -> Result<Vec<SentMessage>, FrameClientError> {
        self.needs_version(3, "SendTraced")?;
        self.sent(Op::SendTraced {
            idempotency_key: idempotency_key.map(str::to_owned),
            queue: queue.to_owned(),
            messages,
        })
        .await
    }

    /// Runs a send and reads its answer: the ids of the messages sent.
    async fn sent(&mut self, op: Op) -> Result<Vec<SentMessage>, FrameClientError> {
        match self.call(op).await? {
            Reply::Sent(ids) => Ok(ids),
            other => Err(unexpected(&other)),
        }
    }

    /// Leases as [`FrameConnection::receive_tagged`] does, each delivery also with its trace
    /// context. Needs a broker of protocol version 3.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `Protocol` from a broker older than version 3.
    pub async fn receive_traced(
        &mut self,
        queue: &str,
        options: &ReceiveOptions,
    ) -> Result<Vec<TracedFrameDelivery>, FrameClientError> {
        self.needs_version(3, "ReceiveTraced")?;
        match self
            .call(receive_op(queue, options, Answer::Traced))
            .await?
        {
            Reply::TracedMessages(d) => Ok(d),
            other => Err(unexpected(&other)),
        }
    }

    /// Leases as [`FrameConnection::receive_with`] does, each delivery with its group, key
    /// and priority. Needs a broker of protocol version 2.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `Protocol` from a broker of version 1.
    pub async fn receive_tagged(
        &mut self,
        queue: &str,
        options: &ReceiveOptions,
    ) -> Result<Vec<TaggedFrameDelivery>, FrameClientError> {
        self.needs_version(2, "ReceiveTagged")?;
        match self
            .call(receive_op(queue, options, Answer::Tagged))
            .await?
        {
            Reply::TaggedMessages(d) => Ok(d),
            other => Err(unexpected(&other)),
        }
    }

    /// Refuses, before anything is written, a request the broker's version does not know.
    fn needs_version(&self, version: u32, op: &str) -> Result<(), FrameClientError> {
        if self.version < version {
            return Err(FrameClientError::Protocol(format!(
                "{op} needs a broker of frame protocol version {version} or later; this one \
                 speaks version {}: upgrade the broker",
                self.version
            )));
        }
        Ok(())
    }

    /// Sends messages (1 – 1000, all or nothing); returns their ids in order.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn send(
        &mut self,
        queue: &str,
        messages: Vec<FrameMessage>,
    ) -> Result<Vec<SentMessage>, FrameClientError> {
        match self
            .call(Op::Send {
                queue: queue.to_owned(),
                messages,
            })
            .await?
        {
            Reply::Sent(ids) => Ok(ids),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends messages (1 – 1000, all or nothing), each in an optional FIFO message group;
    /// returns their ids in order.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `invalid_argument` for a bad group name.
    pub async fn send_grouped(
        &mut self,
        queue: &str,
        messages: Vec<GroupedFrameMessage>,
    ) -> Result<Vec<SentMessage>, FrameClientError> {
        match self
            .call(Op::SendGrouped {
                queue: queue.to_owned(),
                messages,
            })
            .await?
        {
            Reply::Sent(ids) => Ok(ids),
            other => Err(unexpected(&other)),
        }
    }

    /// Leases up to `max` messages, waiting up to `wait` for the first.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn receive(
        &mut self,
        queue: &str,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<FrameDelivery>, FrameClientError> {
        let options = ReceiveOptions {
            max,
            wait,
            ..ReceiveOptions::default()
        };
        self.receive_with(queue, &options).await
    }

    /// Leases as [`FrameConnection::receive`] does, with a lease length and a consumer name.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn receive_with(
        &mut self,
        queue: &str,
        options: &ReceiveOptions,
    ) -> Result<Vec<FrameDelivery>, FrameClientError> {
        match self.call(receive_op(queue, options, Answer::Plain)).await? {
            Reply::Messages(d) => Ok(d),
            other => Err(unexpected(&other)),
        }
    }

    /// Acknowledges deliveries (1 – 1000); one outcome per receipt, `None` when acknowledged
    /// (`Some` with `receipt_stale` when its lease had passed to another consumer).
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn ack(
        &mut self,
        queue: &str,
        receipts: Vec<FrameReceipt>,
    ) -> Result<Vec<Option<FrameError>>, FrameClientError> {
        match self
            .call(Op::Ack {
                queue: queue.to_owned(),
                receipts,
            })
            .await?
        {
            Reply::Acked(out) => Ok(out),
            other => Err(unexpected(&other)),
        }
    }

    /// Gives a delivery back for another attempt (after `delay`, or the queue's backoff),
    /// recording `error`; returns the queue it is in now and whether it was dead-lettered.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn nack(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        delay: Option<Duration>,
        error: Option<String>,
    ) -> Result<(String, bool), FrameClientError> {
        self.nack_as(queue, receipt, delay, error, None).await
    }

    /// [`FrameConnection::nack`], naming who reports the failure (kept in the attempt
    /// history).
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn nack_as(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        delay: Option<Duration>,
        error: Option<String>,
        consumer: Option<String>,
    ) -> Result<(String, bool), FrameClientError> {
        let reply = self
            .call(Op::Nack {
                queue: queue.to_owned(),
                receipt,
                delay_ms: delay.map(millis),
                error,
                consumer,
            })
            .await?;
        nacked(reply)
    }

    /// [`FrameConnection::nack_as`] with the dependency's own Retry-After as the wait: the
    /// delivery waits that long, and a queue with an adaptive rate counts it as congestion.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn nack_retry_after(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        wait: Duration,
        error: Option<String>,
        consumer: Option<String>,
    ) -> Result<(String, bool), FrameClientError> {
        let reply = self
            .call(Op::NackRetryAfter {
                queue: queue.to_owned(),
                receipt,
                retry_after_ms: millis(wait),
                error,
                consumer,
            })
            .await?;
        nacked(reply)
    }

    /// Sends messages (1 – 1000, all or nothing, each in an optional group) under an
    /// idempotency `key`: repeating the call with the same key and messages within 24 hours
    /// returns the first answer and stores nothing more, so a send whose answer was lost can be
    /// retried safely. The same key with other messages is refused (`idempotency_mismatch`).
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `invalid_argument` for a key that is not 1 – 255
    /// visible ASCII characters.
    pub async fn send_idempotent(
        &mut self,
        key: &str,
        queue: &str,
        messages: Vec<GroupedFrameMessage>,
    ) -> Result<Vec<SentMessage>, FrameClientError> {
        match self
            .call(Op::SendIdempotent {
                key: key.to_owned(),
                queue: queue.to_owned(),
                messages,
            })
            .await?
        {
            Reply::Sent(ids) => Ok(ids),
            other => Err(unexpected(&other)),
        }
    }

    /// Acknowledges deliveries (1 – 1000), each with an optional result kept with the
    /// completed task; one outcome per item, `None` when acknowledged.
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn ack_with_results(
        &mut self,
        queue: &str,
        acks: Vec<FrameAck>,
    ) -> Result<Vec<Option<FrameError>>, FrameClientError> {
        match self
            .call(Op::AckWithResults {
                queue: queue.to_owned(),
                acks,
            })
            .await?
        {
            Reply::Acked(out) => Ok(out),
            other => Err(unexpected(&other)),
        }
    }

    /// Dead-letters a delivery now, whatever its receive count; returns the dead-letter
    /// queue it went to.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `conflict` when the queue has no dead-letter queue.
    pub async fn reject(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        error: Option<String>,
    ) -> Result<String, FrameClientError> {
        self.placed(Op::Reject {
            queue: queue.to_owned(),
            receipt,
            error,
            consumer: None,
        })
        .await
    }

    /// Hands a delivery back without counting the attempt (visible again at once).
    ///
    /// # Errors
    /// As [`FrameConnection::call`].
    pub async fn release(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
    ) -> Result<(), FrameClientError> {
        self.placed(Op::Release {
            queue: queue.to_owned(),
            receipt,
        })
        .await
        .map(drop)
    }

    /// Moves a leased message to queue `to`, atomically, recording `reason`.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `queue_not_found` when either queue is missing.
    pub async fn move_message(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        to: &str,
        reason: Option<String>,
    ) -> Result<(), FrameClientError> {
        self.placed(Op::Move {
            queue: queue.to_owned(),
            receipt,
            to: to.to_owned(),
            error: reason,
            consumer: None,
        })
        .await
        .map(drop)
    }

    /// Sets the lease to end `visibility` from now; returns the new deadline (ms since the
    /// Unix epoch) and whether the task was cancelled.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `receipt_stale` when the lease was lost.
    pub async fn extend(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        visibility: Duration,
    ) -> Result<(i64, bool), FrameClientError> {
        self.lease(Op::Extend {
            queue: queue.to_owned(),
            receipt,
            visibility_ms: millis(visibility),
        })
        .await
    }

    /// Records a running task's progress (`pct` 0 – 100); returns the lease's deadline and
    /// whether the task was cancelled.
    ///
    /// # Errors
    /// As [`FrameConnection::call`]; `invalid_argument` for `pct` outside 0 – 100.
    pub async fn progress(
        &mut self,
        queue: &str,
        receipt: FrameReceipt,
        pct: f64,
        detail: Option<String>,
    ) -> Result<(i64, bool), FrameClientError> {
        self.lease(Op::Progress {
            queue: queue.to_owned(),
            receipt,
            pct,
            detail,
        })
        .await
    }

    /// Runs a request answered with [`Reply::Nacked`]; returns the queue named.
    async fn placed(&mut self, op: Op) -> Result<String, FrameClientError> {
        match self.call(op).await? {
            Reply::Nacked { queue, .. } => Ok(queue),
            other => Err(unexpected(&other)),
        }
    }

    /// Runs a request answered with [`Reply::Lease`].
    async fn lease(&mut self, op: Op) -> Result<(i64, bool), FrameClientError> {
        match self.call(op).await? {
            Reply::Lease {
                deadline_ms,
                cancel_requested,
            } => Ok((deadline_ms, cancel_requested)),
            other => Err(unexpected(&other)),
        }
    }

    /// Sends one request and reads its answer.
    ///
    /// # Errors
    /// `Io` when the connection fails, `Refused` when the broker answers with an error,
    /// `Protocol` for an answer that does not belong to the request.
    ///
    /// # Cancel safety
    /// Not cancel safe: a call dropped before its answer was read leaves that answer on the
    /// connection, so every later call fails with `Io`; open a new connection.
    pub async fn call(&mut self, op: Op) -> Result<Reply, FrameClientError> {
        if self.broken {
            return Err(FrameClientError::Io(std::io::Error::other(
                "an earlier call on this connection was dropped before its answer; open a new connection",
            )));
        }
        self.broken = true;
        let reply = self.exchange(op).await;
        // A failed read or write leaves the stream out of step too; a refusal does not.
        self.broken = matches!(
            reply,
            Err(FrameClientError::Io(_) | FrameClientError::Protocol(_))
        );
        reply
    }

    async fn exchange(&mut self, op: Op) -> Result<Reply, FrameClientError> {
        let id = self.next_id;
        self.next_id += 1;
        self.out.clear();
        frame::encode_frame(&Request { id, op }, &mut self.out);
        self.wr.write_all(&self.out).await?;
        self.wr.flush().await?;
        let len = self.rd.read_u32_le().await? as usize;
        if len > MAX_ANSWER {
            return Err(FrameClientError::Protocol(format!(
                "an answer of {len} bytes, more than {MAX_ANSWER}"
            )));
        }
        self.payload.resize(len, 0);
        self.rd.read_exact(&mut self.payload).await?;
        let resp: Response = frame::decode_payload(&self.payload)
            .map_err(|e| FrameClientError::Protocol(e.message))?;
        if resp.id != id {
            // An answer with id 0 is the broker refusing a frame it could not read.
            return match resp.result {
                Err(e) if resp.id == 0 => Err(FrameClientError::Refused(e)),
                _ => Err(FrameClientError::Protocol(format!(
                    "the answer to request {} arrived for request {id}",
                    resp.id
                ))),
            };
        }
        resp.result.map_err(FrameClientError::Refused)
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn unexpected(reply: &Reply) -> FrameClientError {
    FrameClientError::Protocol(format!("an answer of the wrong kind: {reply:?}"))
}

/// The host of `host:port` or `[v6]:port`.
fn host_of(addr: &str) -> Option<&str> {
    let (host, port) = addr.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    (!host.is_empty()).then_some(host)
}

/// Where a nacked delivery went: its queue now, and whether that is the dead-letter queue.
fn nacked(reply: Reply) -> Result<(String, bool), FrameClientError> {
    match reply {
        Reply::Nacked {
            queue,
            dead_lettered,
        } => Ok((queue, dead_lettered)),
        other => Err(unexpected(&other)),
    }
}

/// What a receive answers each delivery with.
#[derive(Clone, Copy)]
enum Answer {
    /// The delivery alone ([`Op::Receive`]).
    Plain,
    /// Its group, key and priority too ([`Op::ReceiveTagged`]).
    Tagged,
    /// And its trace context ([`Op::ReceiveTraced`]).
    Traced,
}

/// The receive of `queue` with `options`, answered as `answer` says.
fn receive_op(queue: &str, options: &ReceiveOptions, answer: Answer) -> Op {
    let (queue, max, wait_ms) = (queue.to_owned(), options.max, millis(options.wait));
    let (visibility_ms, consumer) = (options.visibility.map(millis), options.consumer.clone());
    match answer {
        Answer::Plain => Op::Receive {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        },
        Answer::Tagged => Op::ReceiveTagged {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        },
        Answer::Traced => Op::ReceiveTraced {
            queue,
            max,
            wait_ms,
            visibility_ms,
            consumer,
        },
    }
}
