//! The OpenAPI document: what utoipa derives from the handlers, completed with what every
//! operation shares (`document`) and with the exact input rules of the API (`constraints`),
//! so that generated clients and fuzzers know what the broker accepts.

mod constraints;
mod document;
mod fields;

use std::sync::OnceLock;

use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};

/// The document's fixed parts; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sluice",
        description = "A durable task queue for work that fails. Durations are integer \
                       milliseconds in fields ending `_ms`; times are RFC 3339; unknown fields \
                       are refused with 400; every error is `{\"error\": {\"code\", \"message\"}}`."
    ),
    components(schemas(sluice_wire::ErrorEnvelope, sluice_wire::ErrorBody)),
    modifiers(&BearerAuth),
    tags(
        (name = "queues", description = "Queue configuration and administration"),
        (name = "messages", description = "Send, receive and settle messages"),
        (name = "inspect", description = "Browse, look up and delete messages; stats"),
        (name = "tasks", description = "Task status, request/reply and autoscaling hints"),
        (name = "redrives", description = "Rate-limited jobs moving dead letters back to work"),
        (name = "schedules", description = "Messages enqueued on a cron expression or an interval"),
        (name = "health", description = "Liveness, readiness and this document"),
    )
)]
pub(crate) struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
            "bearer",
            Vec::<String>::new(),
        )]);
    }
}

/// The OpenAPI document (built once), as a broker with API keys serves it.
pub fn openapi() -> serde_json::Value {
    openapi_for(true).clone()
}

/// The OpenAPI document a broker serves, as JSON: without security requirements (and the
/// answers only keys give) when it has no keys.
pub fn openapi_for(keys: bool) -> &'static serde_json::Value {
    static KEYED: OnceLock<serde_json::Value> = OnceLock::new();
    static KEYLESS: OnceLock<serde_json::Value> = OnceLock::new();
    let exact = |doc: &utoipa::openapi::OpenApi| {
        let mut doc = serde_json::to_value(doc).expect("the document serializes");
        constraints::apply(&mut doc);
        doc
    };
    if keys {
        KEYED.get_or_init(|| exact(typed()))
    } else {
        KEYLESS.get_or_init(|| exact(&document::keyless(typed())))
    }
}

/// The document as utoipa derives it, with what every operation shares.
fn typed() -> &'static utoipa::openapi::OpenApi {
    static DOC: OnceLock<utoipa::openapi::OpenApi> = OnceLock::new();
    DOC.get_or_init(|| {
        let mut doc = crate::routes::api().split_for_parts().1;
        document::complete(&mut doc);
        doc
    })
}
