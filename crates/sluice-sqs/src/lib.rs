//! An Amazon SQS-compatible front end for Sluice: AWS SDKs, the AWS CLI and SQS-based
//! frameworks work against a Sluice broker by changing only their endpoint URL, on the same
//! queues, messages, stats and dead-letter queues as Sluice's own API.
//!
//! It serves both of SQS's protocols on a listener of its own (`sluice serve --sqs-listen
//! ADDR`): the AWS JSON 1.0 protocol (`POST /` with `X-Amz-Target: AmazonSQS.<Action>` and
//! `Content-Type: application/x-amz-json-1.0`) of current SDKs, and the query protocol
//! (form-encoded `Action=<Action>`, to `/` or to a queue's URL, answered in XML) of older
//! ones. SDKs address the service at the root of their endpoint and queues by URL, which would
//! collide with the paths of Sluice's API. Answers carry the MD5 digests SDKs verify, and
//! errors the `__type` and `x-amzn-query-error` codes (or the XML `<Code>`) SDKs map to their
//! exception classes.

mod attributes;
mod digest;
mod error;
mod messages;
mod move_tasks;
mod query;
mod queue_url;
mod queues;
mod sigv4;
mod trace_header;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use serde::de::DeserializeOwned;
use sluice_core::QueueName;
use sluice_core::access::operations::{self, Operation};
use sluice_core::access::{Action, glob_match};
use sluice_core::store::Store;
use sluice_origin::{Hosts, OriginGuardLayer, OriginRules};

pub use error::SqsError;
pub use queue_url::Identity;
pub use sigv4::SqsKey;

/// The content type of the AWS JSON 1.0 protocol.
pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";

/// How the front end names itself, whom it answers and how long it may take.
#[derive(Debug, Clone)]
pub struct SqsOptions {
    /// Account and region in queue URLs and ARNs.
    pub identity: Identity,
    /// The listener's public URL (e.g. `https://sqs.example.com`), the base of queue URLs;
    /// without it, the listener's scheme and the request's `Host`.
    pub public_url: Option<String>,
    /// Whether the listener serves HTTPS (the scheme of queue URLs without `public_url`).
    pub tls: bool,
    /// The access keys requests must be signed with (SigV4); none leaves the endpoint open
    /// (for loopback).
    pub keys: Vec<SqsKey>,
    /// Host names besides loopback ones that the endpoint answers to without keys (the name
    /// of its listen address); the host of `public_url` is answered too.
    pub hosts: Vec<String>,
    /// Longest an action may take beyond a `ReceiveMessage`'s longest wait (20 s) before
    /// it is answered `ServiceUnavailable` (503), which SDKs retry (default 10 s, as the
    /// main API's `request_timeout`).
    pub request_timeout: Duration,
}

impl Default for SqsOptions {
    fn default() -> Self {
        SqsOptions {
            identity: Identity::default(),
            public_url: None,
            tls: false,
            keys: Vec::new(),
            hosts: Vec::new(),
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// The longest wait of a `ReceiveMessage`, which every action's deadline allows for.
const MAX_RECEIVE_WAIT: Duration = Duration::from_secs(20);

/// The front end's state: the store and how it names things.
#[derive(Clone)]
pub(crate) struct Sqs {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) identity: Identity,
    public_url: Option<String>,
    tls: bool,
    keys: Arc<Vec<SqsKey>>,
    requests: Arc<AtomicU64>,
    /// How long any action may take (see [`SqsOptions::request_timeout`]).
    deadline: Duration,
}

/// One request: its input and where it came from.
pub(crate) struct Call {
    body: Bytes,
    host: Option<String>,
    /// The key that signed the request; `None` on an endpoint without keys.
    key: Option<SqsKey>,
    /// What the action does, from the permission table (`None`: an action not served).
    op: Option<&'static Operation>,
}

impl Call {
    /// The request's input as `T`.
    pub(crate) fn input<T: DeserializeOwned>(&self) -> Result<T, SqsError> {
        let body: &[u8] = if self.body.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &self.body
        };
        serde_json::from_slice(body).map_err(|e| {
            use serde_json::error::Category;
            match e.classify() {
                Category::Data => match missing_field(&e.to_string()) {
                    Some(name) => SqsError::missing_parameter(&name),
                    None => SqsError::invalid_parameter(format!("Invalid request: {e}")),
                },
                _ => SqsError::serialization(format!("The request body is not valid JSON: {e}")),
            }
        })
    }

    /// The actions the request's operation needs (the permission table's line).
    fn actions(&self) -> &'static [Action] {
        self.op.map_or(&[], |o| o.actions)
    }

    /// Whether the request's key may do what its action does on `queue`.
    pub(crate) fn allow(&self, queue: &QueueName) -> Result<(), SqsError> {
        match self
            .actions()
            .iter()
            .find(|a| !self.may_on(**a, queue.as_str()))
        {
            None => Ok(()),
            Some(a) => Err(SqsError::access_denied(a.describe(), queue.as_str())),
        }
    }

    /// The role check of the permission table, before the action runs: the first action
    /// the key's role does not allow, if any (every key may on an endpoint without keys).
    fn refused_role(&self) -> Option<Action> {
        let key = self.key.as_ref()?;
        self.actions()
            .iter()
            .copied()
            .find(|a| !a.allowed(key.role))
    }

    /// Whether the request's key reaches every queue, whatever its name (every key does on an
    /// endpoint without keys).
    pub(crate) fn covers_all(&self) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| k.queues.iter().any(|p| p == "*"))
    }

    /// Whether the request's key may do what its action does on the queue named `queue`
    /// (every key may on an endpoint without keys).
    pub(crate) fn may(&self, queue: &str) -> bool {
        self.actions().iter().all(|a| self.may_on(*a, queue))
    }

    fn may_on(&self, action: Action, queue: &str) -> bool {
        self.key
            .as_ref()
            .is_none_or(|k| action.allowed(k.role) && k.queues.iter().any(|p| glob_match(p, queue)))
    }

    /// Records what the request changed in the audit log, by the key that signed it
    /// (`sqs:<access key id>`, or `sqs:anonymous` on an endpoint without keys). The change
    /// already happened, so a failure to record it is logged, not answered.
    pub(crate) async fn audit(
        &self,
        sqs: &Sqs,
        action: &str,
        queue: &QueueName,
        details: Vec<(&str, String)>,
    ) {
        use sluice_core::Clock as _;
        debug_assert!(
            self.op.is_none_or(|o| o.audit.contains(&action)),
            "{action} is not among the audit actions the permission table declares for {:?}",
            self.op.map(|o| o.name)
        );
        let mut event = sluice_core::AuditEvent::by_broker(sluice_core::SystemClock.now(), action);
        event.actor = format!(
            "sqs:{}",
            self.key
                .as_ref()
                .map_or("anonymous", |k| k.access_key_id.as_str())
        );
        event.queue = Some(queue.to_string());
        event.details = details
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        if let Err(e) = sqs.store.audit_append(vec![event]).await {
            tracing::error!(error = %e, action, "could not write the audit log");
        }
    }

    /// The URL of `queue` as this request should see it.
    pub(crate) fn url(&self, sqs: &Sqs, queue: &str) -> String {
        let base = match (&sqs.public_url, &self.host) {
            (Some(base), _) => base.trim_end_matches('/').to_owned(),
            (None, host) => format!(
                "{}://{}",
                if sqs.tls { "https" } else { "http" },
                host.as_deref().unwrap_or("localhost")
            ),
        };
        sqs.identity.url(&base, queue)
    }
}

/// The field serde names in "missing field `X`", as SQS names it (PascalCase already).
fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// The SQS front end over `store`, as a router serving `POST /`.
///
/// Requests from browser pages of other origins are refused, and without keys so are requests
/// for hosts other than loopback names, the listen address's name and the public URL's
/// (`sluice_origin`), with SQS errors.
pub fn router(store: Arc<dyn Store>, options: SqsOptions) -> Router {
    let hosts = if options.keys.is_empty() {
        Hosts::loopback_and(options.hosts.iter().chain(&options.public_url))
    } else {
        Hosts::Any
    };
    let guard = OriginGuardLayer::new(
        OriginRules {
            hosts,
            safe_methods_read: false,
            instead: "use an AWS SDK or the AWS CLI, not a browser page",
            keys: "configure access keys ([[sqs_keys]])",
        },
        refuse,
    );
    let sqs = Sqs {
        store,
        identity: options.identity,
        public_url: options.public_url,
        tls: options.tls,
        keys: Arc::new(options.keys),
        requests: Arc::new(AtomicU64::new(0)),
        deadline: options.request_timeout.saturating_add(MAX_RECEIVE_WAIT),
    };
    Router::new()
        .route("/", any(handle))
        .fallback(handle)
        .with_state(sqs)
        .layer(guard)
}

/// The answer to a request the origin guard refuses: an `AccessDenied` error in the request's
/// protocol (JSON for the AWS JSON protocol, XML otherwise).
fn refuse(headers: &HeaderMap, why: String) -> Response {
    let e = SqsError::refused_origin(why);
    let id = request_id(0);
    let mut resp = if is_json(headers) {
        e.into_response()
    } else {
        query::error(&e, &id)
    };
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-amzn-requestid", v);
    }
    resp
}

/// Whether the request speaks the AWS JSON protocol (else the query protocol).
fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-amz-json"))
}

/// A request id: the time in nanoseconds and the request's number.
fn request_id(n: u64) -> String {
    format!(
        "{:016x}-{n:08x}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    )
}

async fn handle(State(sqs): State<Sqs>, req: Request) -> Response {
    let request_id = request_id(sqs.requests.fetch_add(1, Ordering::Relaxed));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let (method, uri, headers) = (
        req.method().clone(),
        req.uri().clone(),
        req.headers().clone(),
    );
    // What the headers say of the signature is checked before the body is read: a request
    // that no key signed costs the broker its headers only, and is answered as before, with
    // the refusal in its protocol.
    let early = if sqs.keys.is_empty() {
        Ok(())
    } else {
        sigv4::check_headers(&sqs.keys, &headers, now)
    };
    let body = match early {
        Ok(()) => match Bytes::from_request(req, &sqs).await {
            Ok(body) => body,
            Err(rejection) => return rejection.into_response(),
        },
        Err(_) => Bytes::new(),
    };
    let key = match early {
        Err(e) => Err(e),
        Ok(()) if sqs.keys.is_empty() => Ok(None),
        Ok(()) => {
            let signed = sigv4::Signed {
                method: method.as_str(),
                path: uri.path(),
                query: uri.query().unwrap_or_default(),
                headers: &headers,
                body: &body,
            };
            sigv4::verify(&sqs.keys, &signed, now).map(|k| Some(k.clone()))
        }
    };
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .map(str::to_owned);
    if !is_json(&headers) {
        return handle_query(&sqs, &uri, body, host, key, &request_id).await;
    }
    let target = headers
        .get("x-amz-target")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let outcome = match key {
        Err(e) => Err(e),
        Ok(key) => match target.strip_prefix("AmazonSQS.") {
            Some(action) => {
                let op = operations::sqs(action);
                dispatch(
                    &sqs,
                    action,
                    &Call {
                        body,
                        host,
                        key,
                        op,
                    },
                )
                .await
            }
            None => Err(SqsError::invalid_action(target)),
        },
    };
    finish(outcome, target, &request_id)
}

/// A query-protocol request: parameters from the URL and the form body, answered in XML.
async fn handle_query(
    sqs: &Sqs,
    uri: &Uri,
    body: Bytes,
    host: Option<String>,
    key: Result<Option<SqsKey>, SqsError>,
    request_id: &str,
) -> Response {
    let mut params: Vec<(String, String)> =
        form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    params.extend(form_urlencoded::parse(&body).into_owned());
    let request = key.and_then(|key| query::read(&params, uri.path()).map(|q| (key, q)));
    let mut resp = match request {
        Err(e) => query::error(&e, request_id),
        Ok((key, request)) => {
            let call = Call {
                body: Bytes::from(request.input.to_string()),
                host,
                key,
                op: operations::sqs(&request.action),
            };
            match dispatch(sqs, &request.action, &call).await {
                Ok(value) => query::answer(&request.action, &value, request_id),
                Err(e) => {
                    tracing::debug!(action = %request.action, error = %e, "sqs request refused");
                    query::error(&e, request_id)
                }
            }
        }
    };
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert("x-amzn-requestid", v);
    }
    resp
}

/// The answer to a request: its JSON or its error, with the request id.
fn finish(
    outcome: Result<serde_json::Value, SqsError>,
    target: &str,
    request_id: &str,
) -> Response {
    let mut resp = match outcome {
        Ok(value) => {
            let mut r = value.to_string().into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            );
            r
        }
        Err(e) => {
            tracing::debug!(action = target, error = %e, "sqs request refused");
            e.into_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(request_id) {
        resp.headers_mut().insert("x-amzn-requestid", v);
    }
    resp
}

/// Runs the action, or answers `ServiceUnavailable` once it outlives its deadline: a store
/// that cannot commit costs a client a bounded wait, never a hang. A write so answered may
/// still have been applied; SQS clients retry it, and a FIFO queue's deduplication id makes
/// that retry safe.
async fn dispatch(sqs: &Sqs, action: &str, call: &Call) -> Result<serde_json::Value, SqsError> {
    match tokio::time::timeout(sqs.deadline, dispatch_now(sqs, action, call)).await {
        Ok(answer) => answer,
        Err(_) => {
            tracing::warn!(action, "an SQS action was not answered within its deadline");
            Err(SqsError::from(sluice_core::StoreError::unavailable(
                format!(
                    "the action was not answered within {} (the store is slow or unreachable); \
                 a write may or may not have been applied: retry it",
                    sluice_core::human::fmt_duration(sqs.deadline)
                ),
            )))
        }
    }
}

async fn dispatch_now(sqs: &Sqs, action: &str, call: &Call) -> Result<serde_json::Value, SqsError> {
    // The permission table first: an action it does not declare is not served, and a key
    // whose role may not do it learns nothing more (not even whether its input parses).
    if call.op.is_none() {
        return Err(SqsError::invalid_action(action));
    }
    if let Some(refused) = call.refused_role() {
        return Err(SqsError::access_denied_role(refused.describe()));
    }
    match action {
        "CreateQueue" => queues::create_queue(sqs, call).await,
        "GetQueueUrl" => queues::get_queue_url(sqs, call).await,
        "ListQueues" => queues::list_queues(sqs, call).await,
        "DeleteQueue" => queues::delete_queue(sqs, call).await,
        "PurgeQueue" => queues::purge_queue(sqs, call).await,
        "ListDeadLetterSourceQueues" => queues::list_dead_letter_source_queues(sqs, call).await,
        "GetQueueAttributes" => queues::get_queue_attributes(sqs, call).await,
        "SetQueueAttributes" => queues::set_queue_attributes(sqs, call).await,
        "SendMessage" => messages::send_message(sqs, call).await,
        "SendMessageBatch" => messages::send_message_batch(sqs, call).await,
        "ReceiveMessage" => messages::receive_message(sqs, call).await,
        "DeleteMessage" => messages::delete_message(sqs, call).await,
        "DeleteMessageBatch" => messages::delete_message_batch(sqs, call).await,
        "ChangeMessageVisibility" => messages::change_message_visibility(sqs, call).await,
        "ChangeMessageVisibilityBatch" => {
            messages::change_message_visibility_batch(sqs, call).await
        }
        "TagQueue" => queues::tag_queue(sqs, call).await,
        "UntagQueue" => queues::untag_queue(sqs, call).await,
        "ListQueueTags" => queues::list_queue_tags(sqs, call).await,
        "StartMessageMoveTask" => move_tasks::start(sqs, call).await,
        "ListMessageMoveTasks" => move_tasks::list(sqs, call).await,
        "CancelMessageMoveTask" => move_tasks::cancel(sqs, call).await,
        other => Err(SqsError::invalid_action(other)),
    }
}
