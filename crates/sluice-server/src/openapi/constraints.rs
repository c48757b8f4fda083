//! The rules the broker enforces on input that the derived schemas leave out, written into the
//! OpenAPI document so that what it calls valid is what the broker accepts: ranges taken from
//! the same limits the checks use, the formats of names, receipts, times and base64, and the
//! "exactly one of" forms of requests (`oneOf`). A client generated from the document, or a
//! tester fuzzing it, meets no 400 for input the document allows.
//!
//! Rules that no JSON Schema keyword states are named by a `format` the document explains:
//! `cron` (a cron expression the broker can fire). Rules between a request and the resource it
//! names (a queue as its own dead-letter queue, a redrive into its source, a move into the
//! queue a message is in) answer 409 `conflict`, not 400.

use serde_json::{Map, Value, json};
use sluice_core::config::limits;

use sluice_core::name::NEW_NAME_PATTERN as NEW_QUEUE_PATTERN;
use sluice_core::receipt::RECEIPT_PATTERN;

use super::fields::{
    adaptive, attributes, breaker, dedup_id, delay, group, key_limits, key_weights, ms, name,
    range, rate, time,
};
/// Standard base64 with padding, canonical (unused bits zero), as the broker decodes it.
const BASE64_PATTERN: &str =
    "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$";

/// Adds the rules to `doc` (the document as JSON).
///
/// Long because it states every limit the document carries, one `set` per field of each request
/// schema; as one list it can be read against `limits` field by field.
///
/// # Panics
/// When a schema or property named here is missing from the document: a rename in the wire
/// types must be followed here, and the unit tests build the document.
pub(super) fn apply(doc: &mut Value) {
    let schemas = doc["components"]["schemas"]
        .as_object_mut()
        .expect("the document has component schemas");
    let mut set = |schema: &str, field: &str, rules: Value| {
        let target = schemas
            .get_mut(schema)
            .and_then(|s| s["properties"].get_mut(field))
            .unwrap_or_else(|| panic!("no property {schema}.{field} in the document"));
        merge(target, rules);
    };

    for schema in [
        "ReceiveRequest",
        "NackRequest",
        "RejectRequest",
        "MoveRequest",
    ] {
        set(
            schema,
            "consumer",
            json!({"maxLength": limits::MAX_CONSUMER_CHARS}),
        );
    }
    set(
        "QueueConfigRequest",
        "visibility_timeout_ms",
        range(0, ms(limits::MAX_VISIBILITY)),
    );
    set(
        "QueueConfigRequest",
        "max_receive_count",
        range(0, limits::MAX_RECEIVE_COUNT.into()),
    );
    set(
        "QueueConfigRequest",
        "dead_letter_queue",
        json!({"pattern": NEW_QUEUE_PATTERN, "minLength": 1,
            "maxLength": sluice_core::name::MAX_QUEUE_NAME_LEN}),
    );
    set(
        "QueueConfigRequest",
        "backoff_base_ms",
        range(0, ms(limits::MAX_BACKOFF)),
    );
    set(
        "QueueConfigRequest",
        "backoff_max_ms",
        range(0, ms(limits::MAX_BACKOFF)),
    );
    set("QueueConfigRequest", "delay_ms", delay());
    set(
        "QueueConfigRequest",
        "retention_ms",
        range(ms(limits::MIN_RETENTION), ms(limits::MAX_RETENTION)),
    );
    set(
        "QueueConfigRequest",
        "max_message_bytes",
        range(1, limits::MAX_MESSAGE_BYTES.into()),
    );
    set(
        "QueueConfigRequest",
        "dedup_window_ms",
        range(0, ms(limits::MAX_DEDUP_WINDOW)),
    );
    set(
        "QueueConfigRequest",
        "max_in_flight",
        range(1, limits::MAX_IN_FLIGHT.into()),
    );
    set(
        "QueueConfigRequest",
        "max_depth",
        range(1, limits::MAX_DEPTH),
    );
    set(
        "QueueConfigRequest",
        "result_ttl_ms",
        range(0, ms(limits::MAX_RESULT_TTL)),
    );
    set(
        "QueueConfigRequest",
        "receive_wait_ms",
        range(0, ms(limits::MAX_WAIT)),
    );
    set(
        "QueueConfigRequest",
        "tags",
        json!({
            "maxProperties": limits::MAX_TAGS,
            "propertyNames": {"minLength": 1, "maxLength": limits::MAX_TAG_KEY_CHARS},
            "additionalProperties": {"type": "string", "maxLength": limits::MAX_TAG_VALUE_CHARS},
        }),
    );
    // `RateLimitWire` is also how views show rates, so each request gets its own ranges.
    set(
        "QueueConfigRequest",
        "rate_limit",
        rate(
            "Delivery rate limit across all consumers, or `null` for none.",
            limits::MAX_RATE_LIMIT,
            ms(limits::MIN_RATE_PERIOD),
        ),
    );
    push_target(&mut set);
    set("QueueConfigRequest", "adaptive", adaptive());
    set("QueueConfigRequest", "key_weights", key_weights());
    set("QueueConfigRequest", "key_limits", key_limits());
    set("QueueConfigRequest", "breaker", breaker());

    for schema in ["SendRequest", "SendMessage"] {
        set(schema, "body_base64", json!({"pattern": BASE64_PATTERN}));
        set(schema, "attributes", attributes());
        set(schema, "delay_ms", delay());
        set(schema, "dedup_id", dedup_id());
        set(schema, "group", group());
        // A key follows the group rule.
        set(schema, "key", group());
    }
    set(
        "SendRequest",
        "messages",
        json!({"minItems": 1, "maxItems": limits::MAX_BATCH}),
    );
    set(
        "ScheduleRequest",
        "body_base64",
        json!({"pattern": BASE64_PATTERN}),
    );
    let mut schedule_attributes = attributes();
    // Neither a name the firing sets itself nor one holding U+0000 (the walk that refuses
    // U+0000 everywhere leaves a schema that already has a `not` alone).
    schedule_attributes["propertyNames"]["not"] = json!({"anyOf": [
        {"enum": ["schedule", "scheduled_for"]},
        {"type": "string", "pattern": "\\u0000"},
    ]});
    set("ScheduleRequest", "attributes", schedule_attributes);
    set("ScheduleRequest", "key", group());
    set(
        "ScheduleRequest",
        "every_ms",
        range(
            sluice_core::schedule::MIN_EVERY_MS,
            sluice_core::schedule::MAX_EVERY_MS,
        ),
    );
    set(
        "ScheduleRequest",
        "cron",
        json!({"format": "cron", "description": "A cron expression the broker can fire: 5 fields \
            (minute hour day-of-month month day-of-week), or 6 with seconds first, e.g. \
            `*/5 * * * *`; it must name a time that exists (not 30 February). Format `cron`."}),
    );
    let mut zones: Vec<Value> = vec![Value::Null];
    zones.extend(time_zones(true).into_iter().map(Value::from));
    set("ScheduleRequest", "timezone", json!({ "enum": zones }));

    // Receipts and queue names where a request gives one on its own; the batch forms' items
    // are checked one by one (see below).
    for schema in [
        "AckRequest",
        "NackRequest",
        "RejectRequest",
        "ReleaseRequest",
        "MoveRequest",
        "ExtendRequest",
        "ProgressRequest",
    ] {
        set(schema, "receipt", json!({"pattern": RECEIPT_PATTERN}));
    }
    // W3C trace context, as `sluice_core::trace` checks it.
    set(
        "TraceView",
        "traceparent",
        json!({"pattern": sluice_core::trace::TRACEPARENT_PATTERN}),
    );
    set(
        "TraceView",
        "tracestate",
        json!({"pattern": sluice_core::trace::TRACESTATE_PATTERN}),
    );
    for (schema, field) in [
        ("MoveRequest", "to"),
        ("RedriveRequest", "source"),
        ("RedriveRequest", "destination"),
        ("ScheduleRequest", "queue"),
    ] {
        set(schema, field, name());
    }
    set(
        "AckRequest",
        "result_base64",
        json!({"pattern": BASE64_PATTERN}),
    );
    // A batch's receipts and results are checked one by one: a malformed one is that item's
    // outcome in the 200 answer, not a 400, so the items carry no format.
    set(
        "AckRequest",
        "receipts",
        json!({"minItems": 1, "maxItems": limits::MAX_BATCH}),
    );
    set(
        "AckRequest",
        "acks",
        json!({"minItems": 1, "maxItems": limits::MAX_BATCH}),
    );
    set(
        "ReceiveRequest",
        "ack",
        json!({"maxItems": limits::MAX_BATCH}),
    );
    set("ProgressRequest", "detail", json!({"maxLength": 1024}));

    set(
        "RedriveRequest",
        "limit",
        json!({"minimum": 1, "maximum": u64::MAX}),
    );
    set(
        "RedriveRequest",
        "rate_per_second",
        range(1, sluice_core::redrive::MAX_RATE_PER_SECOND.into()),
    );
    set(
        "RedriveRequest",
        "rate",
        rate(
            "Never more than `limit` moves in any sliding `period_ms`, spread evenly; a rate \
             faster than 100,000 a second is taken as 100,000 a second.",
            u32::MAX,
            1,
        ),
    );
    set("RedriveGuardView", "percent", range(1, 100));
    set("RedriveGuardView", "window", range(1, 10_000));
    set("RedriveFilterView", "source_queue", name());
    set("RedriveFilterView", "key", group());
    set("RedriveFilterView", "dead_lettered_before", time());
    set("RedriveFilterView", "dead_lettered_after", time());

    forms(schemas);
    parameters(doc);
    task_events(doc);
    one_status_two_forms(doc);
    // These routes read an empty body as `{}`.
    for (path, method) in [
        ("/v1/queues/{q}", "put"),
        ("/v1/queues/{q}/receive", "post"),
    ] {
        let body = doc["paths"][path][method]
            .get_mut("requestBody")
            .unwrap_or_else(|| panic!("{method} {path} takes a body"));
        body["required"] = json!(false);
    }
    no_nul(doc);
}

/// No text a request carries may hold U+0000 (`sluice_core::text`; query strings alike):
/// every string of a request body's schemas, and every query parameter, says so. Response
/// schemas are left as they are: an error message may quote what it refused.
fn no_nul(doc: &mut Value) {
    fn is_string(s: &Map<String, Value>) -> bool {
        match s.get("type") {
            Some(Value::String(t)) => t == "string",
            Some(Value::Array(ts)) => ts.iter().any(|t| t == "string"),
            _ => false,
        }
    }
    fn walk(v: &mut Value, names: bool) {
        match v {
            Value::Object(s) => {
                // `pattern` holds for any value that is not a string, so the rule names the
                // type: alone, `not` would refuse the `null` an optional field may be.
                if (names || is_string(s)) && !s.contains_key("not") {
                    s.insert(
                        "not".to_owned(),
                        json!({"type": "string", "pattern": "\\u0000"}),
                    );
                }
                // A map of texts (attributes, tags): its names are texts too.
                if s.get("additionalProperties").is_some_and(Value::is_object)
                    && !s.contains_key("propertyNames")
                {
                    s.insert("propertyNames".to_owned(), json!({}));
                }
                for (k, child) in s.iter_mut() {
                    if k != "not" {
                        walk(child, k == "propertyNames");
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| walk(i, false)),
            _ => {}
        }
    }
    fn refs(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref")
                    && let Some(name) = r.strip_prefix("#/components/schemas/")
                {
                    out.push(name.to_owned());
                }
                m.values().for_each(|c| refs(c, out));
            }
            Value::Array(items) => items.iter().for_each(|c| refs(c, out)),
            _ => {}
        }
    }
    // The component schemas a request body reaches, through references.
    let mut todo = Vec::new();
    for op in operations_of(doc, None) {
        // JSON bodies only: a raw body (text or bytes) is a message body, which may hold
        // anything.
        if let Some(body) = op
            .get_mut("requestBody")
            .and_then(|b| b["content"].get_mut("application/json"))
        {
            refs(body, &mut todo);
            walk(body, false);
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        if let Some(schema) = doc["components"]["schemas"].get_mut(&name) {
            refs(schema, &mut todo);
            walk(schema, false);
        }
    }
    for p in query_parameters(doc, None) {
        walk(&mut p["schema"], false);
    }
}

/// A route that answers one status with two shapes (a single form and a batch form) is
/// written with the batch form under `2XX` by its handler; a client, or a tester, reads the
/// exact status first, so the exact status gets both shapes as `oneOf`.
fn one_status_two_forms(doc: &mut Value) {
    let mut merged = 0;
    for op in operations_of(doc, None) {
        let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else {
            continue;
        };
        let Some(batch) = responses.remove("2XX") else {
            continue;
        };
        let exact = responses
            .iter_mut()
            .find(|(status, _)| status.starts_with('2'))
            .map(|(_, r)| r)
            .expect("a 2XX answer beside an exact success status");
        let single = exact["content"]["application/json"]["schema"].take();
        let other = batch["content"]["application/json"]["schema"].clone();
        exact["content"]["application/json"]["schema"] = json!({"oneOf": [single, other]});
        let both = format!(
            "{}; {}",
            exact["description"].as_str().unwrap_or_default(),
            batch["description"].as_str().unwrap_or_default()
        );
        exact["description"] = json!(both);
        merged += 1;
    }
    assert!(merged > 0, "the single and batch answers are documented");
}

/// An event stream is described by the schema of one event (its fields as the SSE format
/// names them), not by the schema of the JSON its `data` holds.
fn task_events(doc: &mut Value) {
    let content = &mut doc["paths"]["/v1/tasks/{id}/events"]["get"]["responses"]["200"]["content"];
    assert!(
        content.get("text/event-stream").is_some(),
        "task events are an event stream"
    );
    content["text/event-stream"] = json!({"schema": {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"type": "string", "enum": ["status", "error"],
                "description": "`status`: `data` is the task's status as a TaskView in JSON; \
                    `error`: `data` says why the stream ends."},
            "data": {"type": "string", "contentMediaType": "application/json"},
            "id": {"type": "string"},
            "retry": {"type": "integer", "minimum": 0},
        },
    }});
}

/// A push target's URL and headers. The URL pattern is what the broker accepts with any
/// `push_allow`: `https` to a host name or IPv4 address, or `http` to `localhost`,
/// `127.0.0.0/8` or `[::1]`, with an optional port (a broker started with `--push-allow-http`
/// accepts more, and so do URLs with IPv6 or international host names, which the pattern
/// leaves out). Which addresses a broker calls is its operator's setting: without
/// `push_allow` a URL at an address that is not public is refused, and the broker's own
/// listeners always are.
fn push_target(set: &mut impl FnMut(&str, &str, Value)) {
    use sluice_core::push::{HEADER_PREFIX, RESERVED_HEADERS, limits as push};
    // Labels start with a letter (so the last is never read as a number) and are not
    // punycode (`xn--`, which the URL parser checks).
    let label = "(?![Xx][Nn]--)[A-Za-z][A-Za-z0-9-]*";
    let octet = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])";
    let port = "(?::(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[1-9][0-9]{0,3}|0))?";
    let url = format!(
        "^(?:{https}://(?:{label}(?:\\.{label})*|{octet}(?:\\.{octet}){{3}}|\\[::1\\])\
         |{http}://(?:{localhost}|127(?:\\.{octet}){{3}}|\\[::1\\])){port}(?:[/?#][!-~]*)?$",
        https = any_case("https"),
        http = any_case("http"),
        localhost = any_case("localhost"),
    );
    set("PushTargetRequest", "url", json!({"pattern": url}));
    let reserved: Vec<String> = RESERVED_HEADERS.iter().map(|h| any_case(h)).collect();
    let reserved = format!(
        "^(?:(?:{})$|{})",
        reserved.join("|"),
        any_case(HEADER_PREFIX)
    );
    set(
        "PushTargetRequest",
        "headers",
        json!({
            "maxProperties": push::MAX_HEADERS,
            "propertyNames": {
                "pattern": "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$",
                "not": {"pattern": reserved},
            },
            "additionalProperties": {
                "type": "string",
                "pattern": "^[\\t -~]*$",
                "maxLength": push::MAX_HEADER_VALUE_BYTES,
            },
        }),
    );
}

/// A pattern matching `word` in any case (JSON Schema patterns have no flags).
fn any_case(word: &str) -> String {
    word.chars()
        .map(|c| {
            if c.is_ascii_alphabetic() {
                format!("[{}{}]", c.to_ascii_uppercase(), c.to_ascii_lowercase())
            } else if c.is_ascii_digit() || c == '-' {
                c.to_string()
            } else {
                format!("\\{c}")
            }
        })
        .collect()
}

/// The forms a request takes, as `oneOf`: which fields make a form, and which it leaves out
/// (absent or `null`). A `body` (or `result`) set to `null` is the JSON value null, so a form
/// without one requires it to be absent.
fn forms(schemas: &mut Map<String, Value>) {
    // An item of a batch ack is checked on its own (see `apply`).
    schemas
        .get_mut("AckItem")
        .and_then(|s| s["properties"]["receipt"].as_object_mut())
        .expect("AckItem has a receipt")
        .remove("pattern");
    let absent = |f: &str| json!({"not": {"required": [f]}});
    let null_only = || json!({"type": "null"});
    let given = |f: &str| json!({"required": [f], "properties": {f: {"not": {"type": "null"}}}});
    let body_forms = |body: &str, b64: &str| {
        json!({"oneOf": [
            {"required": [body], "properties": {b64: null_only()}},
            {"allOf": [given(b64), absent(body)]},
        ]})
    };
    let mut add = |schema: &str, rule: Value| {
        let s = schemas
            .get_mut(schema)
            .unwrap_or_else(|| panic!("no schema {schema} in the document"));
        let all = s
            .as_object_mut()
            .expect("an object schema")
            .entry("allOf")
            .or_insert_with(|| json!([]));
        all.as_array_mut().expect("allOf is a list").push(rule);
    };
    let single_only = [
        "attributes",
        "delay_ms",
        "dedup_id",
        "group",
        "key",
        "priority",
    ];
    let mut batch = json!({"required": ["messages"], "properties": {"body_base64": null_only(), "messages": {"not": {"type": "null"}}}});
    for f in single_only {
        batch["properties"][f] = null_only();
    }
    add(
        "SendRequest",
        json!({"oneOf": [
            {"allOf": [body_forms("body", "body_base64"), {"properties": {"messages": null_only()}}]},
            {"allOf": [batch, absent("body")]},
        ]}),
    );
    add("SendMessage", body_forms("body", "body_base64"));
    // No dead-letter queue only for a queue that never dead-letters, when a request gives
    // both (given one, the other is the queue's own: a clash with it is a 409).
    add(
        "QueueConfigRequest",
        json!({"not": {
            "required": ["dead_letter_queue", "max_receive_count"],
            "properties": {"dead_letter_queue": null_only(), "max_receive_count": {"minimum": 1}},
        }}),
    );
    add(
        "ScheduleRequest",
        json!({"oneOf": [
            {"allOf": [given("cron"), {"properties": {"every_ms": null_only()}}]},
            {"allOf": [given("every_ms"), {"properties": {"cron": null_only(), "timezone": null_only()}}]},
        ]}),
    );
    add("ScheduleRequest", body_forms("body", "body_base64"));
    let single_result = json!({"not": {"allOf": [
        {"required": ["result"]},
        given("result_base64"),
    ]}});
    add(
        "AckRequest",
        json!({"oneOf": [
            {"allOf": [given("receipt"), single_result,
                {"properties": {"receipts": null_only(), "acks": null_only()}}]},
            {"allOf": [given("receipts"), absent("result"),
                {"properties": {"receipt": null_only(), "result_base64": null_only(), "acks": null_only()}}]},
            {"allOf": [given("acks"), absent("result"),
                {"properties": {"receipt": null_only(), "result_base64": null_only(), "receipts": null_only()}}]},
        ]}),
    );
    // The dependency's Retry-After is the nack's wait, instead of `delay_ms`.
    add(
        "NackRequest",
        json!({"not": {"allOf": [given("delay_ms"), given("retry_after_ms")]}}),
    );
    add(
        "RedriveRequest",
        json!({"not": {"allOf": [given("rate"), given("rate_per_second")]}}),
    );
}

/// Query parameters, by route and name.
fn parameters(doc: &mut Value) {
    let prefix = || json!({"pattern": sluice_core::name::PREFIX_PATTERN, "maxLength": sluice_core::name::MAX_QUEUE_NAME_LEN});
    let queue_cursor = || json!({"pattern": sluice_core::store::QUEUE_CURSOR_PATTERN});
    let rules: [(&str, &str, Value); 21] = [
        ("/v1/audit", "queue", name()),
        ("/v1/queues", "prefix", prefix()),
        ("/v1/queues", "cursor", queue_cursor()),
        ("/v1/stats", "prefix", prefix()),
        ("/v1/stats", "cursor", queue_cursor()),
        (
            "/v1/audit",
            "cursor",
            json!({"pattern": "^-?[0-9]{1,18}\\.[0-9]{1,9}$"}),
        ),
        (
            "/v1/queues/{q}/messages",
            "cursor",
            json!({"pattern": "^[0-2]\\.-?[0-9]{1,18}\\.[0-9a-fA-F]{1,16}$"}),
        ),
        ("/v1/audit", "since", time()),
        ("/v1/queues/{q}/messages", "source_queue", name()),
        (
            "/v1/queues/{q}/messages",
            "attribute",
            json!({"pattern": "="}),
        ),
        ("/v1/queues/{q}/messages", "delay_ms", delay()),
        ("/v1/queues/{q}/messages", "dedup_id", dedup_id()),
        ("/v1/queues/{q}/messages", "group", group()),
        ("/v1/queues/{q}/messages", "key", group()),
        ("/v1/queues/{q}/stats/history", "since", time()),
        (
            "/v1/queues/{q}/summary",
            "group_by",
            json!({"pattern": "^(?:error|reason|source|key|attribute:[\\s\\S]+)$"}),
        ),
        ("/v1/queues/{q}/summary", "limit", range(1, 1000)),
        ("/v1/queues/{q}/summary", "source_queue", name()),
        ("/v1/queues/{q}/summary", "key", group()),
        (
            "/v1/queues/{q}/summary",
            "attribute",
            json!({"items": {"type": "string", "pattern": "="}}),
        ),
        (
            "/v1/queues/{q}/summary",
            "reason",
            // A text the route reads itself (so empty is no filter), hence a pattern.
            json!({"pattern": "^(?:exhausted|lease_expired|rejected|expired)$"}),
        ),
    ];
    let times = ["/v1/queues/{q}/messages", "/v1/queues/{q}/summary"]
        .into_iter()
        .flat_map(|path| {
            ["dead_lettered_before", "dead_lettered_after"].map(|param| (path, param, time()))
        });
    for (path, param, rule) in rules.into_iter().chain(times) {
        let mut found = false;
        for p in query_parameters(doc, Some(path)) {
            if p["name"] == param {
                merge(&mut p["schema"], rule.clone());
                found = true;
            }
        }
        assert!(found, "no query parameter {param} on {path}");
    }
    let if_none_match = doc["paths"]["/v1/queues/{q}"]["put"]["parameters"]
        .as_array_mut()
        .and_then(|ps| ps.iter_mut().find(|p| p["name"] == "If-None-Match"))
        .expect("PUT /v1/queues/{q} takes If-None-Match");
    if_none_match["schema"] = json!({"type": "string", "enum": ["*"]});
    empty_is_absent(doc);
}

/// A query parameter with an empty value counts as not given (`?since=` is no `since`), so
/// where a rule would refuse the empty string, the document allows it beside the rule.
fn empty_is_absent(doc: &mut Value) {
    // Not `enum`: a choice (`?state=`) is parsed as one, and empty is none of its values.
    const RULES: [&str; 4] = ["pattern", "minLength", "format", "anyOf"];
    fn widen(schema: &mut Value) {
        let Some(s) = schema.as_object_mut() else {
            return;
        };
        if !RULES.iter().any(|r| s.contains_key(*r)) {
            return;
        }
        let description = s.remove("description");
        let rule = Value::Object(std::mem::take(s));
        s.insert(
            "anyOf".to_owned(),
            json!([rule, {"type": "string", "maxLength": 0}]),
        );
        if let Some(d) = description {
            s.insert("description".to_owned(), d);
        }
    }
    for p in query_parameters(doc, None) {
        let schema = &mut p["schema"];
        if schema["type"] == "array" {
            widen(&mut schema["items"]);
        } else if schema["type"] == "string" {
            widen(schema);
        }
    }
}

/// Every operation of the document, or of `path` alone.
fn operations_of<'a>(
    doc: &'a mut Value,
    path: Option<&'a str>,
) -> impl Iterator<Item = &'a mut Value> + 'a {
    doc["paths"]
        .as_object_mut()
        .into_iter()
        .flat_map(|paths| paths.iter_mut())
        .filter(move |(p, _)| path.is_none_or(|want| p.as_str() == want))
        .flat_map(|(_, item)| {
            item.as_object_mut()
                .into_iter()
                .flat_map(|i| i.values_mut())
        })
}

/// The query parameters of [`operations_of`] `doc` and `path`.
fn query_parameters<'a>(
    doc: &'a mut Value,
    path: Option<&'a str>,
) -> impl Iterator<Item = &'a mut Value> + 'a {
    operations_of(doc, path)
        .flat_map(|op| {
            op.get_mut("parameters")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
        })
        .filter(|p| p["in"] == "query")
}

/// Every IANA time zone name the broker knows, sorted; with `utc_first`, `UTC` leads so that
/// generators pick it first.
fn time_zones(utc_first: bool) -> Vec<&'static str> {
    let mut names = sluice_core::schedule::time_zone_names();
    names.sort_unstable();
    if utc_first && let Some(i) = names.iter().position(|n| *n == "UTC") {
        let utc = names.remove(i);
        names.insert(0, utc);
    }
    names
}

/// Sets every key of `rules` on `target` (a schema object).
fn merge(target: &mut Value, rules: Value) {
    if let (Some(t), Value::Object(r)) = (target.as_object_mut(), rules) {
        for (k, v) in r {
            t.insert(k, v);
        }
    }
}
