//! Connection hygiene for every listener: a cap on open connections, a deadline for a
//! request's head (HTTP headers, a whole frame), and an idle timeout between requests.
//!
//! Without these a client can hold the broker's file descriptors with connections that never
//! finish a request, until no one else can connect. The rules, the same on every listener:
//!
//! - A new connection must deliver its first complete request head (HTTP headers, or a
//!   frame's first bytes; a TLS handshake included) within [`ConnectionLimits::header_read_timeout`].
//! - Once the first byte of a later request arrives, its headers must be complete within the
//!   same time (frames: the frame's bytes must not stop arriving for that long).
//! - A connection with no request in progress for [`ConnectionLimits::idle_timeout`] is
//!   closed. A request in progress (a long poll waiting for messages, an event stream still
//!   sending) keeps its connection however long it lasts.
//! - An answer that the client stops reading (an event stream, a long poll's answer, a large
//!   page) is bounded by [`ConnectionLimits::write_timeout`]: once a write to the connection
//!   has made no progress for that long, the connection is closed. A client that reads, however
//!   slowly, is never cut; one that stops reading cannot hold a connection, its buffers and the
//!   handler feeding it forever.
//! - Past [`ConnectionLimits::max_connections`] open connections on one listener, a new one
//!   is accepted and closed at once, counted in `sluice_connections_refused_total` and logged
//!   at most every ten seconds. Accepting and closing, rather than leaving connections in the
//!   kernel's backlog, gives a client an immediate error it can retry elsewhere or later
//!   instead of a silent hang until its connect timeout, and lets the broker count what it
//!   turned away.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, HttpBody};
use bytes::Bytes;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::listen::tls::TlsConfig;

/// Default [`ConnectionLimits::header_read_timeout`].
pub const DEFAULT_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Default [`ConnectionLimits::idle_timeout`]: longer than the 60 s for which Sluice's own
/// clients keep an idle connection, so the client, not the broker, closes it first and no
/// request is sent on a connection the broker is closing.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(75);
/// Default [`ConnectionLimits::write_timeout`]: far longer than any pause of a client that is
/// reading (a garbage-collection pause, a busy event loop), short enough that a client which
/// stopped reading gives its connection back within a minute.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`ConnectionLimits::max_connections`] (the binary lowers it to fit the process's
/// open-file limit).
pub const DEFAULT_MAX_CONNECTIONS: usize = 4096;

/// Refusals are logged at most this often per listener.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(10);

/// The limits every listener applies to its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a connection may take to deliver a request's head once it began (for a new
    /// connection: from accept, TLS handshake included). HTTP: the request line and headers;
    /// frames: the most a frame's bytes may pause.
    pub header_read_timeout: Duration,
    /// How long a connection may stay open with no request in progress.
    pub idle_timeout: Duration,
    /// How long a write of an answer may make no progress (the client reads none of it)
    /// before the connection is closed.
    pub write_timeout: Duration,
    /// Most connections open at once on each listener; more are closed at once.
    pub max_connections: usize,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Admission to one listener: counts open connections against the cap and reports them as
/// `sluice_connections_open` and `sluice_connections_refused_total`.
#[derive(Clone)]
pub struct Gate {
    inner: Arc<GateInner>,
}

struct GateInner {
    listener: &'static str,
    max: usize,
    open: AtomicUsize,
    open_gauge: Gauge,
    refused: Counter,
    /// Refusals since the last log line, and when that line was written.
    unlogged: AtomicU64,
    logged_at: Mutex<Option<Instant>>,
}

impl Gate {
    /// A gate of at most `max` connections, reporting under `listener`.
    pub(crate) fn new(listener: &'static str, max: usize, open: Gauge, refused: Counter) -> Gate {
        Gate {
            inner: Arc::new(GateInner {
                listener,
                max,
                open: AtomicUsize::new(0),
                open_gauge: open,
                refused,
                unlogged: AtomicU64::new(0),
                logged_at: Mutex::new(None),
            }),
        }
    }

    /// A place for one more connection, or `None` (counted and logged) when the listener is
    /// full. The place is freed when the [`Permit`] drops.
    pub fn admit(&self) -> Option<Permit> {
        let g = &self.inner;
        let taken = g
            .open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < g.max).then_some(n + 1)
            })
            .is_ok();
        if taken {
            g.open_gauge.inc();
            return Some(Permit {
                gate: self.inner.clone(),
            });
        }
        g.refused.inc();
        g.unlogged.fetch_add(1, Ordering::Relaxed);
        let mut at = g.logged_at.lock().unwrap_or_else(|p| p.into_inner());
        if at.is_none_or(|t| t.elapsed() >= REFUSAL_LOG_INTERVAL) {
            *at = Some(Instant::now());
            tracing::warn!(
                listener = g.listener,
                max_connections = g.max,
                refused = g.unlogged.swap(0, Ordering::Relaxed),
                "connection limit reached: closing new connections until some close \
                 (max_connections)"
            );
        }
        None
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.inner.open.load(Ordering::Acquire)
    }
}

/// One admitted connection's place; dropping it frees the place.
pub struct Permit {
    gate: Arc<GateInner>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.gate.open.fetch_sub(1, Ordering::AcqRel);
        self.gate.open_gauge.dec();
    }
}

/// Where a connection is between requests, for its deadlines.
#[derive(Debug, Clone, Copy)]
enum Phase {
    /// No byte of a request yet, since `since`; `first` for a connection that has had none.
    Waiting { since: Instant, first: bool },
    /// A request's head began arriving at `since`.
    Reading { since: Instant },
    /// Requests in progress (their handler running or their answer still streaming).
    Busy(usize),
}

/// What one HTTP connection is doing, shared by its byte stream (which sees a request
/// begin), its service (which sees it dispatched and answered) and its watchdog.
struct Activity {
    phase: Mutex<Phase>,
    /// When the connection was accepted: the origin of `write_blocked`.
    accepted: Instant,
    /// Since when a write to the connection has been waiting for the client to read, as
    /// milliseconds after `accepted` plus one; 0 while writes make progress. An atomic, not
    /// the mutex: it is touched on every write.
    write_blocked: AtomicU64,
    /// Told when a write becomes blocked, so the watchdog starts the write timeout's clock
    /// from then rather than from its next routine check.
    write_stalled: tokio::sync::Notify,
}

impl Activity {
    fn new(accepted: Instant) -> Arc<Activity> {
        Arc::new(Activity {
            phase: Mutex::new(Phase::Waiting {
                since: accepted,
                first: true,
            }),
            accepted,
            write_blocked: AtomicU64::new(0),
            write_stalled: tokio::sync::Notify::new(),
        })
    }

    /// Notes the outcome of a write (or flush) to the connection: `Pending` means the
    /// client's receive window is full, so the write waits on it; anything else is progress
    /// (or an error that ends the connection anyway).
    fn wrote<T>(&self, r: &Poll<T>) {
        if r.is_pending() {
            // Only the first of a run of blocked writes sets the time.
            let at = u64::try_from(self.accepted.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
            if self
                .write_blocked
                .compare_exchange(0, at + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
            {
                self.write_stalled.notify_one();
            }
        } else if self.write_blocked.load(Ordering::Relaxed) != 0 {
            self.write_blocked.store(0, Ordering::Relaxed);
        }
    }

    /// When the connection must be closed because a write has been blocked since long
    /// enough, or `None` while writes make progress.
    fn write_deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match self.write_blocked.load(Ordering::Relaxed) {
            0 => None,
            at => Some(self.accepted + Duration::from_millis(at - 1) + limits.write_timeout),
        }
    }

    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes arrived: between requests, a request's head has begun.
    fn read(&self) {
        let mut p = self.phase();
        if let Phase::Waiting { first: false, .. } = *p {
            *p = Phase::Reading {
                since: Instant::now(),
            };
        }
    }

    /// A request was dispatched; the returned guard ends it when dropped.
    fn begin(self: &Arc<Self>) -> InFlight {
        let mut p = self.phase();
        *p = match *p {
            Phase::Busy(n) => Phase::Busy(n + 1),
            _ => Phase::Busy(1),
        };
        InFlight {
            activity: self.clone(),
        }
    }

    /// When the connection must be closed if nothing changes, or `None` while busy.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        match *self.phase() {
            Phase::Waiting { since, first: true } | Phase::Reading { since } => {
                Some(since + limits.header_read_timeout)
            }
            Phase::Waiting {
                since,
                first: false,
            } => Some(since + limits.idle_timeout),
            Phase::Busy(_) => None,
        }
    }
}

/// A request in progress; dropping it (the answer sent or abandoned) ends it.
struct InFlight {
    activity: Arc<Activity>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut p = self.activity.phase();
        *p = match *p {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Waiting {
                since: Instant::now(),
                first: false,
            },
        };
    }
}

/// A byte stream that tells its connection's [`Activity`] when bytes arrive.
struct Watched<T> {
    io: T,
    activity: Arc<Activity>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        r
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        self.activity.wrote(&r);
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        // A TLS stream's flush writes the records it holds: it blocks as a write does.
        let r = Pin::new(&mut self.io).poll_flush(cx);
        self.activity.wrote(&r);
        r
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_shutdown(cx);
        self.activity.wrote(&r);
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.activity.wrote(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// An answer's body that keeps its request in progress until it is sent (or dropped): an
/// event stream is a request in progress for as long as it streams.
struct TrackedBody {
    body: Body,
    _in_flight: InFlight,
}

impl HttpBody for TrackedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// Serves `router` over HTTP/1.1 on `listener` (TLS first, with `tls`) under `limits`,
/// admitting connections through `gate`, until `stop` turns true: then stops accepting, lets
/// every request in progress finish, closes idle connections and returns.
pub(crate) async fn serve_http(
    listener: TcpListener,
    router: Router,
    tls: Option<TlsConfig>,
    limits: ConnectionLimits,
    gate: Gate,
    stop: watch::Receiver<bool>,
) {
    let mut conns = JoinSet::new();
    let mut stopped = stop.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((tcp, peer)) => {
                    // Refused: the connection closes as it drops.
                    let Some(permit) = gate.admit() else { continue };
                    let conn = HttpConnection {
                        router: router.clone(),
                        tls: tls.clone(),
                        limits,
                        stop: stop.clone(),
                        peer,
                    };
                    conns.spawn(conn.run(tcp, permit));
                }
                Err(e) => accept_failed(gate.inner.listener, &e).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            () = stopped_at(&mut stopped) => break,
        }
    }
    drop(listener);
    while conns.join_next().await.is_some() {}
}

/// Resolves once `stop` turns true, or its sender is gone.
async fn stopped_at(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

/// An accept that failed (out of descriptors, or a connection reset before it was
/// accepted): logged, and the loop pauses briefly so that a lack of descriptors does not
/// spin it.
pub(crate) async fn accept_failed(listener: &'static str, e: &std::io::Error) {
    tracing::warn!(listener, error = %e, "accept failed");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

/// Completes the server side of a TLS handshake on `tcp` by `deadline`.
///
/// # Errors
/// The handshake failed (e.g. a plain-text client, or no acceptable client certificate) or
/// was not complete by `deadline`.
pub(crate) async fn tls_handshake(
    tls: &TlsConfig,
    tcp: TcpStream,
    deadline: Instant,
) -> std::io::Result<tokio_rustls::server::TlsStream<TcpStream>> {
    match tokio::time::timeout_at(deadline, tls.acceptor().accept(tcp)).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "TLS handshake not complete within header_read_timeout",
        )),
    }
}

/// One HTTP connection's settings.
struct HttpConnection {
    router: Router,
    tls: Option<TlsConfig>,
    limits: ConnectionLimits,
    stop: watch::Receiver<bool>,
    peer: SocketAddr,
}

impl HttpConnection {
    async fn run(mut self, tcp: TcpStream, _permit: Permit) {
        let accepted = Instant::now();
        // Answers go out at once: a request/response protocol gains nothing from Nagle's
        // algorithm, and a large answer's last segment would wait for the client's delayed
        // ACK.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "could not set TCP_NODELAY");
        }
        let activity = Activity::new(accepted);
        match self.tls.take() {
            None => self.http(tcp, activity).await,
            Some(tls) => {
                let deadline = accepted + self.limits.header_read_timeout;
                let handshake = tokio::select! {
                    r = tls_handshake(&tls, tcp, deadline) => r,
                    () = stopped_at(&mut self.stop) => return,
                };
                match handshake {
                    Ok(stream) => self.http(stream, activity).await,
                    Err(e) => {
                        tracing::debug!(peer = %self.peer, error = %e, "TLS handshake failed");
                    }
                }
            }
        }
    }

    /// Serves requests on `io` until the client closes, a deadline passes or shutdown.
    async fn http<T>(self, io: T, activity: Arc<Activity>)
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let router = self.router.clone();
        let tracked = activity.clone();
        let service = hyper::service::service_fn(move |req: hyper::Request<Incoming>| {
            // Counted when dispatched, not when first polled: no moment between the two
            // looks idle to the watchdog.
            let in_flight = tracked.begin();
            let router = router.clone();
            async move {
                let resp = tower::ServiceExt::oneshot(router, req).await;
                let resp = match resp {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                Ok::<_, Infallible>(resp.map(|body| {
                    Body::new(TrackedBody {
                        body,
                        _in_flight: in_flight,
                    })
                }))
            }
        });
        let io = TokioIo::new(Watched {
            io,
            activity: activity.clone(),
        });
        let conn = hyper::server::conn::http1::Builder::new()
            // The watchdog below times headers: hyper's own timer would also run while a
            // keep-alive connection waits for its next request, cutting idle connections at
            // the header timeout.
            .header_read_timeout(None)
            .serve_connection(io, service)
            .with_upgrades();
        tokio::pin!(conn);
        let mut stop = self.stop.clone();
        let mut stopping = false;
        loop {
            // Re-checked at least every header_read_timeout: a request's head may begin, or
            // a request end, while the watchdog sleeps.
            let recheck = Instant::now() + self.limits.header_read_timeout;
            let wake = [
                activity.deadline(&self.limits),
                activity.write_deadline(&self.limits),
            ]
            .into_iter()
            .flatten()
            .fold(recheck, Instant::min);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(peer = %self.peer, error = %e, "HTTP connection ended");
                    }
                    return;
                }
                () = tokio::time::sleep_until(wake) => {
                    if activity.deadline(&self.limits).is_some_and(|d| d <= Instant::now()) {
                        // No request is in progress, so dropping the connection loses no
                        // answer.
                        tracing::debug!(peer = %self.peer, "closing a connection past its header or idle timeout");
                        return;
                    }
                    if activity.write_deadline(&self.limits).is_some_and(|d| d <= Instant::now()) {
                        // The client stopped reading its answer: the answer is lost either
                        // way, and dropping the connection frees its buffers and ends the
                        // handler (an event stream) that feeds it.
                        tracing::debug!(peer = %self.peer, "closing a connection whose client has not read its answer within the write timeout");
                        return;
                    }
                }
                // A write became blocked: sleep until its deadline instead.
                () = activity.write_stalled.notified() => {}
                () = stopped_at(&mut stop), if !stopping => {
                    // Idle connections close now; a request in progress finishes first.
                    stopping = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

/// Fills `buf` from `rd`, failing when no byte arrives for `stall` or the whole has not
/// arrived by `deadline` (and at the end of the stream).
pub(crate) async fn read_within<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut [u8],
    stall: Duration,
    deadline: Instant,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt as _;
    let mut filled = 0;
    while filled < buf.len() {
        let by = (Instant::now() + stall).min(deadline);
        match tokio::time::timeout_at(by, rd.read(&mut buf[filled..])).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(n)) => filled += n,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
    Ok(())
}

/// The most a buffer grows by before the bytes that fill it have arrived.
const GROW_STEP: usize = 64 * 1024;

/// Replaces `buf`'s contents with the next `len` bytes of `rd`, with [`read_within`]'s
/// deadlines. The buffer grows with the bytes that arrive (at most [`GROW_STEP`], or
/// doubling, ahead of them, never past `len`), not with the length announced: a client that
/// announces a large request and sends it slowly, or never, holds little memory.
pub(crate) async fn read_vec_within<R: AsyncRead + Unpin>(
    rd: &mut R,
    buf: &mut Vec<u8>,
    len: usize,
    stall: Duration,
    deadline: Instant,
) -> std::io::Result<()> {
    use tokio::io::AsyncReadExt as _;
    buf.clear();
    while buf.len() < len {
        if buf.len() == buf.capacity() {
            let target = (buf.len() + GROW_STEP).max(buf.capacity() * 2).min(len);
            buf.reserve_exact(target - buf.len());
        }
        let want = (len - buf.len()) as u64;
        let by = (Instant::now() + stall).min(deadline);
        let mut rest = (&mut *rd).take(want);
        match tokio::time::timeout_at(by, rest.read_buf(buf)).await {
            Ok(Ok(0)) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
        }
    }
    Ok(())
}

/// Writes all of `buf` to `wr` and flushes it, failing when the client reads nothing for
/// `stall` (the write timeout): a client that reads slowly is waited for, one that stopped
/// reading is not.
pub(crate) async fn write_within<W: AsyncWrite + Unpin>(
    wr: &mut W,
    buf: &[u8],
    flush: bool,
    stall: Duration,
) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt as _;
    let timed_out = |_| std::io::Error::from(std::io::ErrorKind::TimedOut);
    let mut written = 0;
    while written < buf.len() {
        match tokio::time::timeout(stall, wr.write(&buf[written..]))
            .await
            .map_err(timed_out)?
        {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => written += n,
            Err(e) => return Err(e),
        }
    }
    if flush {
        tokio::time::timeout(stall, wr.flush())
            .await
            .map_err(timed_out)??;
    }
    Ok(())
}
