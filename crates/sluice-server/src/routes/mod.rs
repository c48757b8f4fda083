//! The routes, one module per area, and the router that assembles them.
//!
//! The web console (`/`, `crate::console`) is merged in beside them, outside the OpenAPI
//! document. The `Idempotency-Key` replay is a layer over every POST route
//! (`crate::idempotency`); requests from other origins and, without keys, for other hosts are refused
//! by another (`crate::origin`).

pub mod audit;
mod constraints;
pub mod consume;
mod document;
pub mod health;
pub mod inspect;
pub mod overview;
pub mod queues;
pub mod redrives;
pub mod schedules;
pub mod send;
pub mod summary;
pub mod tasks;

use std::sync::OnceLock;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use sluice_origin::{Hosts, OriginGuardLayer, OriginRules};
use tower::util::MapResponseLayer;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::TraceLayer;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use sluice_core::ErrorCode;

use crate::error::{ApiError, ensure_envelope};
use crate::extract::BodyLimit;
use crate::{AppState, ServerOptions};

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
struct ApiDoc;

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

fn api() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(queues::list_queues))
        .routes(routes!(
            queues::put_queue,
            queues::get_queue,
            queues::delete_queue
        ))
        .routes(routes!(queues::pause_queue))
        .routes(routes!(queues::resume_queue))
        .routes(routes!(queues::force_breaker))
        .routes(routes!(queues::purge_queue))
        .routes(routes!(send::send, inspect::browse))
        .routes(routes!(consume::receive))
        .routes(routes!(consume::ack))
        .routes(routes!(consume::nack))
        .routes(routes!(consume::reject))
        .routes(routes!(consume::release))
        .routes(routes!(consume::move_message))
        .routes(routes!(consume::extend))
        .routes(routes!(inspect::get_message, inspect::delete_message))
        .routes(routes!(inspect::stats))
        .routes(routes!(overview::overview))
        .routes(routes!(overview::whoami))
        .routes(routes!(summary::summary))
        .routes(routes!(inspect::history))
        .routes(routes!(tasks::get_task))
        .routes(routes!(tasks::cancel))
        .routes(routes!(tasks::events))
        .routes(routes!(consume::progress))
        .routes(routes!(redrives::create, redrives::list))
        .routes(routes!(redrives::get))
        .routes(routes!(redrives::cancel))
        .routes(routes!(redrives::pause))
        .routes(routes!(redrives::resume))
        .routes(routes!(schedules::list))
        .routes(routes!(schedules::put, schedules::get, schedules::delete))
        .routes(routes!(schedules::pause))
        .routes(routes!(schedules::resume))
        .routes(routes!(schedules::trigger))
        .routes(routes!(audit::list))
        .routes(routes!(tasks::scaling))
        .routes(routes!(health::healthz))
        .routes(routes!(health::readyz))
        .routes(routes!(health::openapi_json))
        .routes(routes!(health::metrics))
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
        let mut doc = api().split_for_parts().1;
        document::complete(&mut doc);
        doc
    })
}

async fn no_route() -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        "no such route; see /openapi.json for the API",
    )
}

/// Assembles every route with its layers.
///
/// The layers wrap the router once, as one service, rather than through `Router::layer`,
/// which wraps every route on its own, so that each request cloned and boxed one service
/// per layer. Counted with callgrind over one benchmark run at one message per request, the
/// broker's user-space instructions fell by 16 % (about 9,000 per request). The stack is
/// then the fallback of an empty router, so callers still get a `Router`.
pub fn router(state: AppState, options: &ServerOptions) -> Router {
    let (router, _) = api().split_for_parts();
    let idempotency = state.idempotency.clone();
    let keys = state.keys.clone();
    let routes = router
        .merge(crate::console::routes())
        .fallback(no_route)
        .with_state(state);
    let stack = tower::ServiceBuilder::new()
        .layer(TraceLayer::new_for_http())
        .layer(MapResponseLayer::new(ensure_envelope))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::SERVICE_UNAVAILABLE,
            options.request_timeout,
        ))
        .layer(CatchPanicLayer::new())
        .layer(axum::Extension(BodyLimit(options.max_body_bytes)))
        // Bodies are read by our extractors, which enforce `max_body_bytes` with a 413 in
        // the envelope; axum's own 2 MB default would answer in plain text.
        .layer(DefaultBodyLimit::disable())
        .layer(origin_guard(options))
        .layer(crate::access::AccessLayer::new(keys))
        .layer(idempotency)
        .service(routes);
    Router::new().fallback_service(stack)
}

/// The HTTP API's guard against pages of other origins and, without keys, foreign `Host`
/// names: safe methods only read, and refusals are 403s in the API's error envelope.
fn origin_guard(options: &ServerOptions) -> OriginGuardLayer {
    let hosts = if options.keys.enabled() {
        Hosts::Any
    } else {
        Hosts::loopback_and(&options.hosts)
    };
    let rules = OriginRules {
        hosts,
        safe_methods_read: true,
        instead: "use the console served by this broker, or a client that is not a browser page",
        keys: "configure API keys ([[keys]])",
    };
    OriginGuardLayer::new(rules, |_, why| ApiError::forbidden(why).into_response())
}
