//! The HTTP API's operations: the table, and the test that tries each with every key.

use std::collections::{BTreeMap, BTreeSet};

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sluice_server::auth::Action::{self, *};

use crate::Reach::{self, *};
use crate::{Broker, Expect, Fixture, Side, cases, refused_by_role};

/// The answer of an id route for an id that does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unknown {
    /// 404 with this error code.
    NotFound(&'static str),
    /// 200 with the task status `UNKNOWN`.
    TaskUnknown,
}

const MESSAGE: Reach<Unknown> = Id(Unknown::NotFound("message_not_found"));
const TASK: Reach<Unknown> = Id(Unknown::TaskUnknown);
const SCHEDULE: Reach<Unknown> = Id(Unknown::NotFound("not_found"));

/// Builds a request body from the case's fixture and the one inside the patterns.
type BodyFn = fn(&Fixture, &Fixture) -> Value;

/// One operation of the OpenAPI document (or one form of it).
#[derive(Clone)]
pub struct Route {
    /// `GET`, `POST`, ….
    pub method: &'static str,
    /// As the OpenAPI document writes it: `{q}` a queue, `{id}` a message, task or redrive
    /// job, `{name}` a schedule.
    pub path: &'static str,
    /// Where the request names the queue in question, for an operation listed in more than
    /// one form.
    pub form: &'static str,
    /// The actions it needs.
    pub needs: &'static [Action],
    /// What it reaches.
    pub reach: Reach<Unknown>,
    /// The query string (with `{q}`).
    query: &'static str,
    /// True when the path names the queue inside the patterns, and only the body names the
    /// case's queue.
    at_home: bool,
    body: Option<BodyFn>,
    /// False for the web console, which the OpenAPI document leaves out.
    documented: bool,
}

fn r(
    method: &'static str,
    path: &'static str,
    needs: &'static [Action],
    reach: Reach<Unknown>,
) -> Route {
    Route {
        method,
        path,
        form: "",
        needs,
        reach,
        query: "",
        at_home: false,
        body: None,
        documented: true,
    }
}

impl Route {
    fn body(mut self, body: BodyFn) -> Self {
        self.body = Some(body);
        self
    }

    fn form(mut self, form: &'static str) -> Self {
        self.form = form;
        self
    }

    fn query(mut self, query: &'static str) -> Self {
        self.query = query;
        self
    }

    fn console(mut self) -> Self {
        self.documented = false;
        self
    }

    fn at_home(mut self) -> Self {
        self.at_home = true;
        self
    }

    /// The request's path and query for a case on `f`, with `home` inside the patterns.
    fn target(&self, f: &Fixture, home: &Fixture) -> String {
        let on = if self.at_home { home } else { f };
        let id = if self.path.starts_with("/v1/redrives") {
            &on.job
        } else {
            &on.message
        };
        let mut t = self
            .path
            .replace("{q}", &on.queue)
            .replace("{id}", id)
            .replace("{name}", &on.schedule)
            .replace("{key}", "tenant-a")
            .replace("{*path}", "app.js");
        if !self.query.is_empty() {
            t = format!("{t}?{}", self.query.replace("{q}", &f.queue));
        }
        t
    }
}

fn receipt(f: &Fixture) -> Value {
    json!({ "receipt": f.receipt })
}

fn schedule(queue: &str) -> Value {
    json!({ "queue": queue, "every_ms": 3_600_000, "body": 1, "paused": true })
}

/// Every operation of the HTTP API (and the web console, which the OpenAPI document leaves
/// out): what it needs and what it reaches.
pub fn routes() -> Vec<Route> {
    vec![
        r("GET", "/healthz", &[], Public),
        r("GET", "/readyz", &[], Public),
        r("GET", "/openapi.json", &[], Public),
        r("GET", "/", &[], Public).console(),
        r("GET", "/console/{*path}", &[], Public).console(),
        r("GET", "/metrics", &[Stats], Global),
        r("GET", "/v1/whoami", &[], Global),
        // Queues.
        r("GET", "/v1/queues", &[ReadQueue], Global),
        r("PUT", "/v1/queues/{q}", &[ManageQueue], Queue).body(|_, _| json!({})),
        r("PUT", "/v1/queues/{q}", &[ManageQueue], Queue)
            .form("naming it as `dead_letter_queue`")
            .at_home()
            .body(|f, _| json!({ "dead_letter_queue": f.dlq })),
        r("GET", "/v1/queues/{q}", &[ReadQueue], Queue),
        r("DELETE", "/v1/queues/{q}", &[ManageQueue], Queue),
        r("POST", "/v1/queues/{q}/pause", &[ManageQueue], Queue),
        r("POST", "/v1/queues/{q}/resume", &[ManageQueue], Queue),
        r("POST", "/v1/queues/{q}/breaker", &[ManageQueue], Queue)
            .body(|_, _| json!({ "state": "closed" })),
        r(
            "POST",
            "/v1/queues/{q}/keys/{key}/breaker",
            &[ManageQueue],
            Queue,
        )
        .body(|_, _| json!({ "state": "closed" })),
        r("POST", "/v1/queues/{q}/purge", &[ManageQueue], Queue),
        // Messages.
        r("POST", "/v1/queues/{q}/messages", &[Send], Queue).body(|_, _| json!({ "body": 1 })),
        r("POST", "/v1/queues/{q}/receive", &[Consume], Queue).body(|_, _| json!({ "wait_ms": 0 })),
        r("POST", "/v1/queues/{q}/ack", &[Consume], Queue).body(|f, _| receipt(f)),
        r("POST", "/v1/queues/{q}/nack", &[Consume], Queue).body(|f, _| receipt(f)),
        r("POST", "/v1/queues/{q}/reject", &[Consume], Queue).body(|f, _| receipt(f)),
        r("POST", "/v1/queues/{q}/release", &[Consume], Queue).body(|f, _| receipt(f)),
        r("POST", "/v1/queues/{q}/move", &[Consume], Queue)
            .body(|f, _| json!({ "receipt": f.receipt, "to": f.dlq })),
        r("POST", "/v1/queues/{q}/move", &[Consume], Queue)
            .form("naming it as `to`")
            .at_home()
            .body(|f, home| json!({ "receipt": home.receipt, "to": f.queue })),
        r("POST", "/v1/queues/{q}/extend", &[Consume], Queue)
            .body(|f, _| json!({ "receipt": f.receipt, "visibility_timeout_ms": 30_000 })),
        // Inspection.
        r("GET", "/v1/queues/{q}/messages", &[Inspect], Queue),
        r("GET", "/v1/messages/{id}", &[Inspect], MESSAGE),
        r("DELETE", "/v1/messages/{id}", &[Inspect], MESSAGE),
        r("GET", "/v1/queues/{q}/summary", &[Inspect], Queue),
        r("GET", "/v1/queues/{q}/stats", &[Stats], Queue),
        r("GET", "/v1/queues/{q}/stats/history", &[Stats], Queue),
        r("GET", "/v1/queues/{q}/keys", &[Stats], Queue),
        r("GET", "/v1/stats", &[Stats], Global),
        r("GET", "/v1/audit", &[Inspect], Global),
        r("GET", "/v1/audit", &[Inspect], Queue)
            .form("naming it as `queue`")
            .query("queue={q}"),
        // Tasks.
        r("GET", "/v1/tasks/{id}", &[ReadTask], TASK),
        r("GET", "/v1/tasks/{id}/events", &[ReadTask], TASK),
        r("POST", "/v1/tasks/{id}/cancel", &[CancelTask], MESSAGE),
        r("POST", "/v1/queues/{q}/progress", &[Consume], Queue)
            .body(|f, _| json!({ "receipt": f.receipt, "pct": 50.0 })),
        r("GET", "/v1/queues/{q}/scaling", &[Stats], Queue),
        // Redrives.
        r("POST", "/v1/redrives", &[Redrive], Queue)
            .body(|f, _| json!({ "source": f.dlq, "destination": f.queue })),
        r("POST", "/v1/redrives", &[Redrive], Queue)
            .form("naming it as `source`")
            .body(|f, home| json!({ "source": f.dlq, "destination": home.queue })),
        r("POST", "/v1/redrives", &[Redrive], Queue)
            .form("naming it as `destination`")
            .body(|f, home| json!({ "source": home.dlq, "destination": f.queue })),
        r("POST", "/v1/redrives", &[Redrive], Queue)
            .form("naming it as `filter.source_queue`")
            .body(|f, home| json!({ "source": home.dlq, "filter": { "source_queue": f.queue } })),
        r("POST", "/v1/redrives", &[Redrive], EveryQueue)
            .form("without `destination` or `filter.source_queue`")
            .body(|f, _| json!({ "source": f.dlq })),
        r("GET", "/v1/redrives", &[Redrive], Global),
        r("GET", "/v1/redrives/{id}", &[Redrive], MESSAGE),
        r("POST", "/v1/redrives/{id}/pause", &[Redrive], MESSAGE),
        r("POST", "/v1/redrives/{id}/resume", &[Redrive], MESSAGE),
        r("POST", "/v1/redrives/{id}/cancel", &[Redrive], MESSAGE),
        // Schedules: a standing send, so changing one needs both roles.
        r("GET", "/v1/schedules", &[Inspect], Global),
        r("PUT", "/v1/schedules/{name}", &[ManageQueue, Send], Queue)
            .form("naming it as `queue`")
            .body(|f, _| schedule(&f.queue)),
        r(
            "PUT",
            "/v1/schedules/{name}",
            &[ManageQueue, Send],
            SCHEDULE,
        )
        .form("replacing a schedule of it")
        .body(|_, home| schedule(&home.queue)),
        r("GET", "/v1/schedules/{name}", &[Inspect], SCHEDULE),
        r(
            "DELETE",
            "/v1/schedules/{name}",
            &[ManageQueue, Send],
            SCHEDULE,
        ),
        r(
            "POST",
            "/v1/schedules/{name}/pause",
            &[ManageQueue, Send],
            SCHEDULE,
        ),
        r(
            "POST",
            "/v1/schedules/{name}/resume",
            &[ManageQueue, Send],
            SCHEDULE,
        ),
        r(
            "POST",
            "/v1/schedules/{name}/trigger",
            &[ManageQueue, Send],
            SCHEDULE,
        ),
    ]
}

/// An answer: status, its JSON (or its text as a string; for an event stream, the data of
/// the first event) and its raw text.
struct Answer {
    status: StatusCode,
    json: Value,
    text: String,
}

async fn call(
    b: &Broker,
    secret: Option<&str>,
    route: &Route,
    target: &str,
    body: Option<Value>,
) -> Answer {
    let method = Method::from_bytes(route.method.as_bytes()).expect("method");
    let mut req = b.client.request(method, format!("{}{target}", b.http));
    if let Some(s) = secret {
        req = req.bearer_auth(s);
    }
    if let Some(body) = body {
        req = req.json(&body);
    }
    let mut resp = req.send().await.expect("request");
    let status = resp.status();
    let stream = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    let text = if stream {
        // A task's events go on until it is final: read the first one, then hang up.
        let mut buf = Vec::new();
        while !buf.windows(2).any(|w| w == b"\n\n") {
            match resp.chunk().await.expect("event stream") {
                Some(chunk) => buf.extend_from_slice(&chunk),
                None => break,
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        let data = text
            .lines()
            .find_map(|l| l.strip_prefix("data:"))
            .unwrap_or_default()
            .trim()
            .to_owned();
        return Answer {
            status,
            json: serde_json::from_str(&data).unwrap_or(Value::Null),
            text,
        };
    } else {
        resp.text().await.expect("answer")
    };
    Answer {
        status,
        json: serde_json::from_str(&text).unwrap_or_else(|_| Value::String(text.clone())),
        text,
    }
}

fn is_unknown(a: &Answer, unknown: Unknown) -> bool {
    match unknown {
        Unknown::NotFound(code) => {
            a.status == StatusCode::NOT_FOUND && a.json["error"]["code"] == code
        }
        Unknown::TaskUnknown => a.status == StatusCode::OK && a.json["status"] == "UNKNOWN",
    }
}

fn label(route: &Route) -> String {
    if route.form.is_empty() {
        format!("{} {}", route.method, route.path)
    } else {
        format!("{} {} ({})", route.method, route.path, route.form)
    }
}

/// Every operation of the OpenAPI document is in the table, and the table has no other (but
/// the console's).
async fn the_table_lists_every_operation(b: &Broker) {
    let doc: Value = b
        .client
        .get(format!("{}/openapi.json", b.http))
        .send()
        .await
        .expect("openapi")
        .json()
        .await
        .expect("JSON");
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "put", "post", "delete", "patch", "head", "options"] {
            if item.get(method).is_some() {
                documented.insert(format!("{} {path}", method.to_uppercase()));
            }
        }
    }
    let listed: BTreeSet<String> = routes()
        .iter()
        .filter(|r| r.documented)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    let missing: Vec<_> = documented.difference(&listed).collect();
    assert!(
        missing.is_empty(),
        "operations of the OpenAPI document the permission table does not list (add them to \
         routes() in tests/permissions/http.rs): {missing:?}"
    );
    let extra: Vec<_> = listed.difference(&documented).collect();
    assert!(
        extra.is_empty(),
        "the table lists operations the API does not have: {extra:?}"
    );
}

/// The audit log's entries, oldest first.
async fn audit_log(b: &Broker) -> Vec<Value> {
    let v = b
        .setup(Method::GET, "/v1/audit?limit=10000", Value::Null)
        .await;
    v["entries"].as_array().cloned().unwrap_or_default()
}

/// Every HTTP operation × every key × a queue inside and outside its patterns, and without a
/// key or with a wrong one. Each allowed call records in the audit log, under its key's name,
/// only what the permission table declares for its operation, and every operation that
/// declares audit actions records one when it succeeds.
pub async fn run(b: &Broker) {
    the_table_lists_every_operation(b).await;
    let mut audited: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut succeeded = BTreeSet::new();
    for route in routes() {
        let op =
            sluice_core::access::operations::http(route.method, route.path).unwrap_or_else(|| {
                panic!(
                    "{} {} is not in the permission table",
                    route.method, route.path
                )
            });
        let fx = b.fixtures().await;
        let what = label(&route);
        let request = |f: &Fixture| {
            (
                route.target(f, &fx.inside),
                route.body.map(|body| body(f, &fx.inside)),
            )
        };
        if route.reach != Public {
            let (target, body) = request(&fx.inside);
            for secret in [None, Some("not a key")] {
                let a = call(b, secret, &route, &target, body.clone()).await;
                assert_eq!(
                    (a.status, &a.json["error"]["code"]),
                    (StatusCode::UNAUTHORIZED, &json!("unauthenticated")),
                    "{what} with {secret:?} must be 401: {}",
                    a.text
                );
            }
        } else {
            let (target, body) = request(&fx.inside);
            let a = call(b, None, &route, &target, body).await;
            assert!(
                a.status.is_success(),
                "{what} needs no key: {} {}",
                a.status,
                a.text
            );
        }
        // A role that may not act on ids is refused alike whether the id exists or not.
        if let Id(_) = route.reach {
            let (target, body) = request(&fx.inside.missing());
            for key in refused_by_role(route.needs) {
                let a = call(b, Some(&key.secret()), &route, &target, body.clone()).await;
                assert!(
                    a.status == StatusCode::FORBIDDEN
                        && a.json["error"]["code"] == "permission_denied",
                    "{what} as {} for an id that does not exist must be refused as for one that \
                     does, got {} {}",
                    key.name(),
                    a.status,
                    a.text
                );
            }
        }
        // The first allowed request on each side meets its fixture as it was set up: an id
        // there must be found, not answered as unknown.
        let mut fresh = [true, true];
        for (key, side, expect) in cases(route.needs, route.reach) {
            let f = fx.on(side);
            let (target, body) = request(f);
            let logged = audit_log(b).await.len();
            let a = call(b, Some(&key.secret()), &route, &target, body).await;
            let case = format!("{what} as {} on {side:?} ({target})", key.name());
            for e in audit_log(b).await.iter().skip(logged) {
                if e["actor"] != key.name().as_str() {
                    continue;
                }
                let action = e["action"].as_str().unwrap_or_default();
                assert!(
                    op.audit.contains(&action),
                    "{case} recorded {action} in the audit log, which the permission table does \
                     not declare for {} (declared: {:?})",
                    op.name,
                    op.audit
                );
                audited
                    .entry(op.name)
                    .or_default()
                    .insert(action.to_owned());
            }
            if a.status.is_success() {
                succeeded.insert(op.name);
            }
            match expect {
                Expect::Refused => assert!(
                    a.status == StatusCode::FORBIDDEN
                        && a.json["error"]["code"] == "permission_denied",
                    "{case} must be refused with 403 permission_denied, got {} {}",
                    a.status,
                    a.text
                ),
                Expect::Unknown(unknown) => assert!(
                    is_unknown(&a, unknown),
                    "{case} must answer as for an id that does not exist ({unknown:?}), got {} {}",
                    a.status,
                    a.text
                ),
                Expect::Allowed => {
                    assert!(
                        a.status != StatusCode::FORBIDDEN && a.status != StatusCode::UNAUTHORIZED,
                        "{case} must be allowed, got {} {}",
                        a.status,
                        a.text
                    );
                    let i = usize::from(side == Side::Outside);
                    if let (Id(unknown), true) = (route.reach, fresh[i]) {
                        assert!(
                            !is_unknown(&a, unknown),
                            "{case} must find what it names, got {} {}",
                            a.status,
                            a.text
                        );
                    }
                    fresh[i] = false;
                }
            }
            // Every queue outside the scoped keys' patterns is `billing-*`: no answer to such a
            // key names one, but a refusal of the very queue it asked for (a redrive job that
            // names one, as destination or in its filter, is not listed to it).
            if key.scoped && expect != Expect::Refused {
                assert!(
                    !a.text.contains("billing"),
                    "{case} answered with a queue outside the key's patterns: {}",
                    a.text
                );
            }
        }
    }
    let silent: Vec<&str> = sluice_core::access::operations::OPERATIONS
        .iter()
        .filter(|op| succeeded.contains(op.name) && !op.audit.is_empty())
        // A job's controls answer a job that finished before the call as it is, and record
        // nothing: whether the fixture's job is still running then is the runner's timing.
        .filter(|op| {
            !matches!(
                op.name,
                "redrive.cancel" | "redrive.pause" | "redrive.resume"
            )
        })
        .filter(|op| !audited.contains_key(op.name))
        .map(|op| op.name)
        .collect();
    assert!(
        silent.is_empty(),
        "operations that declare audit actions but recorded none in any call that succeeded: \
         {silent:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_http_operation_by_every_role_inside_and_outside_its_patterns() {
    let b = Broker::start().await;
    run(&b).await;
    b.stop().await;
}
