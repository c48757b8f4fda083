//! The [`Client`] and its builder, and the one request loop every call goes through:
//! build, send, map the answer (or error envelope), retry by the rules of [`crate::retry`].

use std::time::Duration;

use bytes::Bytes;
use rand::RngCore;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sluice_core::{ErrorCode, MessageId, QueueName};
use sluice_wire::ErrorEnvelope;

use crate::error::{Error, Result, code_for_status};
use crate::retry::{RetryPolicy, Safety, parse_retry_after};
use crate::tls::TlsOptions;

/// The header that makes a POST replay its first answer instead of acting twice.
pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

/// A client of one Sluice broker.
///
/// Cheap to clone: clones share one connection pool. Every call has a timeout (the long-poll
/// wait of a receive is added to it) and is retried by the rules of [`crate::retry`].
///
/// ```no_run
/// # async fn f() -> Result<(), sluice_client::Error> {
/// let client = sluice_client::Client::new("http://127.0.0.1:7878")?.with_token("sluice_...");
/// client.put_queue("jobs", &Default::default()).await?;
/// let sent = client.send_json("jobs", &serde_json::json!({"task": "resize"})).await?;
/// # let _ = sent; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base: String,
    /// `base` parsed once: a request's URL is this with the route's path, so no request
    /// parses a URL (host parsing showed up as a tenth of a client's CPU at one message per
    /// request).
    base_url: reqwest::Url,
    token: Option<String>,
    retry: RetryPolicy,
    timeout: Duration,
    idempotent_sends: bool,
}

/// Settings of a [`Client`]; see [`Client::builder`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    base: String,
    token: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
    retry: RetryPolicy,
    idempotent_sends: bool,
    user_agent: String,
    tls: TlsOptions,
}

impl ClientBuilder {
    /// CA certificates to trust and a client certificate to present over `https://`
    /// (default: the public web roots, no client certificate).
    pub fn tls(mut self, tls: TlsOptions) -> Self {
        self.tls = tls;
        self
    }

    /// The bearer token (an API key secret) sent with every call.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// How long one attempt may take, excluding a receive's long-poll wait, which is added.
    /// Default 30 s.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// How long connecting may take. Default 5 s.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How calls are retried. Default [`RetryPolicy::default`]; [`RetryPolicy::none`] turns
    /// retries off.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// When true, every send without a caller-given key gets a fresh `Idempotency-Key`, which
    /// makes it safe to retry (the broker replays the first answer). Default false: the broker
    /// keeps each key's answer for 24 h, a cost worth paying only when duplicates matter.
    pub fn idempotent_sends(mut self, on: bool) -> Self {
        self.idempotent_sends = on;
        self
    }

    /// The `User-Agent` header. Default `sluice-client/<version>`.
    pub fn user_agent(mut self, agent: impl Into<String>) -> Self {
        self.user_agent = agent.into();
        self
    }

    /// Builds the client.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a base URL that is not `http://` or `https://`;
    /// [`Error::Transport`] when the TLS backend cannot start.
    pub fn build(self) -> Result<Client> {
        let base = self.base.trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base).map_err(|e| {
            Error::InvalidInput(format!(
                "broker URL \"{base}\" is not a URL ({e}); give one like http://127.0.0.1:7878"
            ))
        })?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(Error::InvalidInput(format!(
                "broker URL \"{base}\" must start with http:// or https:// and name a host, \
                 like http://127.0.0.1:7878"
            )));
        }
        let http = reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .user_agent(self.user_agent)
            .pool_idle_timeout(Duration::from_secs(60));
        let http = self.tls.apply_to(http)?.build().map_err(Error::Transport)?;
        Ok(Client {
            http,
            base,
            base_url: parsed,
            token: self.token,
            retry: self.retry,
            timeout: self.timeout,
            idempotent_sends: self.idempotent_sends,
        })
    }
}

/// A request body.
#[derive(Debug, Clone)]
pub(crate) enum ReqBody {
    Json(Bytes),
    Raw {
        bytes: Bytes,
        content_type: &'static str,
    },
}

/// One logical call, possibly attempted several times.
#[derive(Debug)]
pub(crate) struct Call {
    pub method: Method,
    pub path: String,
    pub query: Vec<(&'static str, String)>,
    pub body: Option<ReqBody>,
    pub safety: Safety,
    /// Added to the client's timeout (a receive's long-poll wait).
    pub extra_timeout: Duration,
    pub idempotency_key: Option<String>,
    /// A retried delete that finds the thing gone succeeded the first time.
    pub gone_is_success: bool,
    /// Sends `If-None-Match: *`: create only.
    pub create_only: bool,
    /// W3C trace context headers (`traceparent`, `tracestate`) of a raw send.
    pub trace: Option<sluice_wire::TraceView>,
}

impl Call {
    pub fn new(method: Method, path: String, safety: Safety) -> Self {
        Call {
            method,
            path,
            query: Vec::new(),
            body: None,
            safety,
            extra_timeout: Duration::ZERO,
            idempotency_key: None,
            gone_is_success: false,
            create_only: false,
            trace: None,
        }
    }

    pub fn json<T: Serialize + ?Sized>(mut self, body: &T) -> Result<Self> {
        let bytes = serde_json::to_vec(body).map_err(|e| {
            Error::InvalidInput(format!("request cannot be serialized as JSON: {e}"))
        })?;
        self.body = Some(ReqBody::Json(Bytes::from(bytes)));
        Ok(self)
    }
}

impl Client {
    /// A client of the broker at `base_url` (e.g. `http://127.0.0.1:7878`) with the default
    /// settings.
    ///
    /// # Errors
    /// As [`ClientBuilder::build`].
    pub fn new(base_url: impl Into<String>) -> Result<Client> {
        Client::builder(base_url).build()
    }

    /// A builder for a client of the broker at `base_url`.
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder {
            base: base_url.into(),
            token: None,
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            retry: RetryPolicy::default(),
            idempotent_sends: false,
            user_agent: format!("sluice-client/{}", env!("CARGO_PKG_VERSION")),
            tls: TlsOptions::default(),
        }
    }

    /// The same client (sharing its pool) sending `token` as `Authorization: Bearer`.
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// The broker's base URL.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    pub(crate) fn idempotent_sends(&self) -> bool {
        self.idempotent_sends
    }

    /// Runs `call` and parses its JSON answer.
    pub(crate) async fn call_json<T: DeserializeOwned>(&self, call: Call) -> Result<T> {
        let (_, bytes) = self.execute(&call).await?;
        serde_json::from_slice(&bytes).map_err(|e| {
            Error::decode(
                &format!("{} {}", call.method, call.path),
                format!("{e} in {}", snippet(&bytes)),
            )
        })
    }

    /// Runs `call` and returns the status and the raw answer of a success.
    pub(crate) async fn execute(&self, call: &Call) -> Result<(u16, Bytes)> {
        let mut attempt = 0u32;
        let mut ambiguous = false;
        loop {
            attempt += 1;
            let err = match self.attempt(call).await {
                Ok(ok) => return Ok(ok),
                Err(e) => e,
            };
            if call.gone_is_success && ambiguous && err.is_not_found() {
                return Ok((204, Bytes::new()));
            }
            match self.retry.next_wait(attempt, call.safety, &err) {
                Some(wait) => {
                    ambiguous |= !err.is_connect();
                    tokio::time::sleep(wait).await;
                }
                None => return Err(err),
            }
        }
    }

    /// The URL of a route (`path` starts with `/`) under the base URL, which may have a path
    /// of its own.
    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.base_url.clone();
        let full = format!("{}{path}", self.base_url.path().trim_end_matches('/'));
        url.set_path(&full);
        url
    }

    async fn attempt(&self, call: &Call) -> Result<(u16, Bytes)> {
        let url = self.url(&call.path);
        let mut req = self
            .http
            .request(call.method.clone(), url)
            .timeout(self.timeout.saturating_add(call.extra_timeout));
        if !call.query.is_empty() {
            req = req.query(&call.query);
        }
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        if let Some(k) = &call.idempotency_key {
            req = req.header(IDEMPOTENCY_KEY, k);
        }
        if call.create_only {
            req = req.header(reqwest::header::IF_NONE_MATCH, "*");
        }
        if let Some(t) = &call.trace {
            req = req.header("traceparent", &t.traceparent);
            if let Some(s) = &t.tracestate {
                req = req.header("tracestate", s);
            }
        }
        req = match &call.body {
            Some(ReqBody::Json(b)) => req
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(b.clone()),
            Some(ReqBody::Raw {
                bytes,
                content_type,
            }) => req
                .header(CONTENT_TYPE, HeaderValue::from_static(content_type))
                .body(bytes.clone()),
            None => req,
        };
        let resp = req.send().await.map_err(Error::Transport)?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let bytes = resp.bytes().await.map_err(Error::Transport)?;
        if (200..300).contains(&status) {
            return Ok((status, bytes));
        }
        Err(api_error(status, retry_after, &bytes))
    }
}

impl Client {
    /// Opens a streaming `GET` (server-sent events): the client's timeout bounds the wait for
    /// the answer's headers only, never the stream itself. Retried like any read until the
    /// headers arrive.
    pub(crate) async fn open_stream(&self, path: &str) -> Result<reqwest::Response> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let err = match self.open_stream_once(path).await {
                Ok(resp) => return Ok(resp),
                Err(e) => e,
            };
            match self.retry.next_wait(attempt, Safety::Idempotent, &err) {
                Some(wait) => tokio::time::sleep(wait).await,
                None => return Err(err),
            }
        }
    }

    async fn open_stream_once(&self, path: &str) -> Result<reqwest::Response> {
        let mut req = self
            .http
            .get(self.url(path))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = match tokio::time::timeout(self.timeout, req.send()).await {
            Ok(r) => r.map_err(Error::Transport)?,
            Err(_) => {
                return Err(Error::Api {
                    status: 503,
                    code: ErrorCode::Unavailable,
                    message: format!(
                        "the broker did not answer GET {path} within {}",
                        sluice_core::human::fmt_duration(self.timeout)
                    ),
                    retry_after: None,
                });
            }
        };
        let status = resp.status().as_u16();
        if (200..300).contains(&status) {
            return Ok(resp);
        }
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let bytes = resp.bytes().await.map_err(Error::Transport)?;
        Err(api_error(status, retry_after, &bytes))
    }
}

/// The error an error answer stands for.
fn api_error(status: u16, retry_after: Option<Duration>, bytes: &[u8]) -> Error {
    match serde_json::from_slice::<ErrorEnvelope>(bytes) {
        Ok(env) => Error::Api {
            status,
            code: ErrorCode::parse(&env.error.code).unwrap_or_else(|| code_for_status(status)),
            message: env.error.message,
            retry_after,
        },
        Err(_) => Error::Api {
            status,
            code: code_for_status(status),
            message: if bytes.is_empty() {
                format!("HTTP {status} with no body")
            } else {
                format!("HTTP {status}: {}", snippet(bytes))
            },
            retry_after,
        },
    }
}

fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let mut s: String = text.chars().take(200).collect();
    if text.chars().count() > 200 {
        s.push('…');
    }
    s
}

/// A duration as whole milliseconds for a `*_ms` field, saturating.
pub(crate) fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// Validates a queue name before it goes into a path.
pub(crate) fn queue(name: &str) -> Result<QueueName> {
    QueueName::new(name).map_err(|e| Error::InvalidInput(e.to_string()))
}

/// Validates a message id before it goes into a path.
pub(crate) fn message_id(id: &str) -> Result<MessageId> {
    id.parse::<MessageId>()
        .map_err(|e| Error::InvalidInput(format!("{e}; pass the id a send returned")))
}

/// A fresh idempotency key: 128 random bits in hex.
pub(crate) fn new_idempotency_key() -> String {
    let mut raw = [0u8; 16];
    rand::thread_rng().fill_bytes(&mut raw);
    raw.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::Client;

    #[test]
    fn route_urls_keep_the_base_path() {
        let c = Client::new("http://127.0.0.1:7878/").expect("a valid base");
        assert_eq!(
            c.url("/v1/queues/jobs/receive").as_str(),
            "http://127.0.0.1:7878/v1/queues/jobs/receive"
        );
        let c = Client::new("https://broker.example:8443/sluice/").expect("a valid base");
        assert_eq!(
            c.url("/v1/queues/jobs").as_str(),
            "https://broker.example:8443/sluice/v1/queues/jobs"
        );
    }
}
