//! What every operation of the OpenAPI document shares, added in one pass instead of on each
//! handler: the error answers the broker's layers give whatever the route (bad input, missing
//! or refused keys, body limits, storage trouble), the formats of path parameters, and the
//! `Idempotency-Key` header of every POST. A keyless broker serves the document without
//! security requirements and without the answers only keys produce.

use utoipa::openapi::path::{Operation, Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::response::{Response, ResponseBuilder};
use utoipa::openapi::schema::{ObjectBuilder, Type};
use utoipa::openapi::{
    ContentBuilder, HeaderBuilder, OpenApi, PathItem, Ref, RefOr, Required, Schema,
};

use sluice_core::name::{NAME_PATTERN, NEW_NAME_PATTERN as NEW_QUEUE_PATTERN};

/// Message, task and redrive ids: 16 hex digits.
const ID_PATTERN: &str = "^[0-9a-fA-F]{16}$";

/// Adds the shared parts to every operation of `doc`.
pub(super) fn complete(doc: &mut OpenApi) {
    for (path, item) in &mut doc.paths.paths {
        for (method, op) in operations(item) {
            complete_operation(path, method, op);
        }
    }
}

/// The document as a broker without API keys serves it: no security requirements, and no
/// 401 answers (403 stays: the origin guard refuses cross-origin writes with or without keys).
pub(super) fn keyless(doc: &OpenApi) -> OpenApi {
    let mut doc = doc.clone();
    doc.security = None;
    if let Some(c) = doc.components.as_mut() {
        c.security_schemes.clear();
    }
    for item in doc.paths.paths.values_mut() {
        for (_, op) in operations(item) {
            op.security = None;
            op.responses.responses.remove("401");
        }
    }
    doc
}

fn operations(item: &mut PathItem) -> Vec<(&'static str, &mut Operation)> {
    let PathItem {
        get,
        put,
        post,
        delete,
        patch,
        ..
    } = item;
    [
        ("get", get.as_mut()),
        ("put", put.as_mut()),
        ("post", post.as_mut()),
        ("delete", delete.as_mut()),
        ("patch", patch.as_mut()),
    ]
    .into_iter()
    .filter_map(|(m, op)| op.map(|op| (m, op)))
    .collect()
}

fn complete_operation(path: &str, method: &str, op: &mut Operation) {
    let open = path == "/healthz" || path == "/openapi.json";
    let keyed = !op
        .security
        .as_ref()
        .is_some_and(|s| s.iter().all(is_anonymous));
    let params = op.parameters.get_or_insert_with(Vec::new);
    let mut has_input = op.request_body.is_some();
    let mut has_path = false;
    for p in params.iter_mut() {
        has_input = true;
        if p.parameter_in == ParameterIn::Path {
            has_path = true;
            if let Some(schema) = path_schema(path, &p.name) {
                p.schema = Some(schema);
            }
        }
    }
    if method == "post"
        && !params
            .iter()
            .any(|p| p.name.eq_ignore_ascii_case("idempotency-key"))
    {
        params.push(idempotency_key());
        has_input = true;
    }
    if params.is_empty() {
        op.parameters = None;
    }
    let mut add = |status: &str, response: Response| {
        op.responses
            .responses
            .entry(status.to_owned())
            .or_insert(RefOr::T(response));
    };
    if has_input {
        add(
            "400",
            error("invalid_argument: a malformed request or a value out of range"),
        );
    }
    if keyed && !open {
        add(
            "401",
            error("unauthenticated: no API key, or an unknown one"),
        );
        add(
            "403",
            error(
                "permission_denied: the key's role or queue patterns do not allow it, or a \
                 browser's cross-origin write",
            ),
        );
    }
    if has_path {
        add(
            "404",
            error("not found: the queue, message, task, redrive or schedule named"),
        );
    }
    if op.request_body.is_some() {
        add(
            "413",
            error("payload_too_large: the request body is over the broker's limit"),
        );
    }
    if method == "post" {
        add(
            "422",
            error("idempotency_mismatch: the Idempotency-Key was used with another request"),
        );
    }
    // Even the open routes: the request timeout answers 503 on any route.
    add(
        "503",
        retry_later(
            "unavailable: the store cannot answer now, or the request timed out (with \
             Retry-After)",
        ),
    );
}

/// `security(())`: the route needs no key.
fn is_anonymous(s: &utoipa::openapi::security::SecurityRequirement) -> bool {
    *s == utoipa::openapi::security::SecurityRequirement::default()
}

/// The format of path parameter `name` of `path`, when the broker checks one.
fn path_schema(path: &str, name: &str) -> Option<RefOr<Schema>> {
    let text = |pattern: &str, min: usize, max: usize| {
        RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(pattern))
                .min_length(Some(min))
                .max_length(Some(max))
                .build(),
        ))
    };
    match name {
        "q" => Some(text(
            NEW_QUEUE_PATTERN,
            1,
            sluice_core::name::MAX_QUEUE_NAME_LEN,
        )),
        "name" if path.starts_with("/v1/schedules") => {
            Some(text(NAME_PATTERN, 1, sluice_core::name::MAX_QUEUE_NAME_LEN))
        }
        "id" => Some(text(ID_PATTERN, 16, 16)),
        // A message key: no control character (`char::is_control`: C0, DEL and C1).
        "key" => Some(text(
            "^[^\\u0000-\\u001f\\u007f-\\u009f]+$",
            1,
            sluice_core::fair::MAX_KEY_CHARS,
        )),
        _ => None,
    }
}

fn idempotency_key() -> Parameter {
    ParameterBuilder::new()
        .name("Idempotency-Key")
        .parameter_in(ParameterIn::Header)
        .required(Required::False)
        .description(Some(
            "Replays the first answer to a request with this key on this route for 24 h \
             instead of acting again; the same key with another body is 422.",
        ))
        .schema(Some(RefOr::T(Schema::Object(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some("^[!-~]+$"))
                .min_length(Some(1))
                .max_length(Some(crate::http::idempotency::MAX_KEY_BYTES))
                .build(),
        ))))
        .build()
}

fn error(description: &str) -> Response {
    ResponseBuilder::new()
        .description(description)
        .content(
            "application/json",
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("ErrorEnvelope")))
                .build(),
        )
        .build()
}

fn retry_later(description: &str) -> Response {
    let mut r = error(description);
    r.headers.insert(
        "Retry-After".to_owned(),
        HeaderBuilder::new()
            .schema(
                ObjectBuilder::new()
                    .schema_type(Type::Integer)
                    .minimum(Some(1))
                    .build(),
            )
            .description(Some("Seconds to wait before retrying"))
            .build(),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::super::openapi_for;

    /// Every `$ref` string in `v`.
    fn refs(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("$ref", serde_json::Value::String(r)) => out.push(r.clone()),
                        _ => refs(x, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
            _ => {}
        }
    }

    #[test]
    fn every_reference_resolves() {
        let doc = openapi_for(true).clone();
        let mut all = Vec::new();
        refs(&doc, &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r
                .strip_prefix("#/components/schemas/")
                .unwrap_or_else(|| panic!("a reference outside the schemas: {r}"));
            assert!(
                doc["components"]["schemas"].get(name).is_some(),
                "dangling reference {r}"
            );
        }
    }

    /// Every schema that refuses a text holding U+0000 also names the type: `pattern` holds
    /// for anything that is not a string, so a bare `not: {pattern}` would refuse the `null`
    /// an optional field may be (Schemathesis sent `"timezone": null`, which the broker takes).
    #[test]
    fn the_nul_rule_refuses_only_texts() {
        fn walk(v: &serde_json::Value, seen: &mut usize) {
            match v {
                serde_json::Value::Object(m) => {
                    if let Some(rule) = m.get("not") {
                        let nul = |r: &serde_json::Value| {
                            r.get("pattern").and_then(|p| p.as_str()) == Some("\\u0000")
                        };
                        let rules = rule["anyOf"].as_array().cloned().unwrap_or_default();
                        for r in std::iter::once(rule).chain(rules.iter()).filter(|r| nul(r)) {
                            *seen += 1;
                            assert_eq!(r["type"], "string", "a NUL rule without its type: {r}");
                        }
                    }
                    m.values().for_each(|x| walk(x, seen));
                }
                serde_json::Value::Array(a) => a.iter().for_each(|x| walk(x, seen)),
                _ => {}
            }
        }
        let mut seen = 0;
        walk(&openapi_for(true).clone(), &mut seen);
        assert!(
            seen > 50,
            "the document refuses NUL in its texts ({seen} rules)"
        );
    }

    #[test]
    fn shared_answers_and_formats_are_on_every_operation() {
        let doc = openapi_for(true).clone();
        for (path, item) in doc["paths"].as_object().expect("paths") {
            for (method, op) in item.as_object().expect("item") {
                let answers = op["responses"].as_object().expect("responses");
                let open = path == "/healthz" || path == "/openapi.json";
                assert!(answers.contains_key("503"), "{method} {path}");
                if path.contains('{') {
                    assert!(answers.contains_key("404"), "{method} {path}");
                }
                let anonymous = op["security"].as_array().is_some_and(|s| {
                    s.iter()
                        .all(|r| r.as_object().is_some_and(|o| o.is_empty()))
                });
                assert_eq!(
                    answers.contains_key("401"),
                    !anonymous && !open,
                    "{method} {path}"
                );
                for p in op["parameters"].as_array().into_iter().flatten() {
                    if p["in"] == "path" {
                        assert!(p["schema"]["pattern"].is_string(), "{method} {path} {p}");
                    }
                }
                if method == "post" {
                    let names: Vec<_> = op["parameters"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|p| p["name"].as_str())
                        .collect();
                    assert!(names.contains(&"Idempotency-Key"), "{method} {path}");
                }
            }
        }
    }

    #[test]
    fn a_keyless_broker_describes_no_keys() {
        let doc = openapi_for(false).clone();
        assert!(doc.get("security").is_none_or(serde_json::Value::is_null));
        let text = doc.to_string();
        assert!(!text.contains("\"401\""));
        assert!(!text.contains("bearer"), "no security scheme is declared");
        let keyed = openapi_for(true).clone();
        assert_eq!(keyed["security"][0]["bearer"], serde_json::json!([]));
    }

    #[test]
    fn metrics_are_documented_as_served() {
        let doc = openapi_for(true).clone();
        let content = &doc["paths"]["/metrics"]["get"]["responses"]["200"]["content"];
        assert!(
            content.get("application/openmetrics-text").is_some(),
            "{content}"
        );
    }
}
